package store

import "context"

// Pending is an accepted save; Wait returns its result once it is committed.
type Pending struct {
	done   <-chan struct{}
	result func() (SaveResult, error)
}

// NewPending is for backends: done is closed once the save is committed or failed, and result
// then reports it.
func NewPending(done <-chan struct{}, result func() (SaveResult, error)) *Pending {
	return &Pending{done: done, result: result}
}

// Wait blocks until the save is committed (or failed) or ctx ends. A save whose Wait gave up on
// ctx is still committed.
func (p *Pending) Wait(ctx context.Context) (SaveResult, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		select {
		case <-p.done:
		default:
			return SaveResult{}, ctx.Err()
		}
	}
	return p.result()
}

// Done is closed once the save is committed or failed.
func (p *Pending) Done() <-chan struct{} { return p.done }

// LGPending is an accepted LangGraph mutation; Wait returns once it is committed.
type LGPending struct {
	done   <-chan struct{}
	result func() error
	err    error
}

// NewLGPending is for backends: done is closed once the mutation is committed or failed, and
// result then reports it.
func NewLGPending(done <-chan struct{}, result func() error) *LGPending {
	return &LGPending{done: done, result: result}
}

// FailedLGPending is a mutation refused before it was queued.
func FailedLGPending(err error) *LGPending { return &LGPending{err: err} }

// Wait blocks until the mutation is committed (or failed) or ctx ends (the mutation still commits).
func (p *LGPending) Wait(ctx context.Context) error {
	if p.err != nil {
		return p.err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		select {
		case <-p.done:
		default:
			return ctx.Err()
		}
	}
	return p.result()
}
