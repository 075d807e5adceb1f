package engine

import (
	"context"
	"fmt"

	"github.com/ckptd/ckptd/jsonvalid"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk/delta"
)

// StateDelta is a state sent as a wire delta (checkpoint/save stateDelta, docs/protocol.md):
// the state of BaseCheckpointID with everything between its first KeepPrefix and its last
// KeepSuffix bytes replaced by the frame's attachment; SHA256 names the result.
type StateDelta struct {
	BaseCheckpointID string
	KeepPrefix       int64
	KeepSuffix       int64
	SHA256           string
}

// RebuiltState is a state rebuilt from a wire delta (ApplyStateDelta).
type RebuiltState struct {
	State []byte
	// Marks go with the save (store.SaveRequest.Marks): the rebuilt state's SHA-256 marks, and
	// its JSON marks once ValidJSON passed.
	Marks *store.ValueMarks

	base     []byte
	baseJSON *jsonvalid.Marks
	kp, ks   int
	verify   func() (*delta.HashMarks, error)
}

// Verify checks that the rebuilt state's SHA-256 is the one the delta names (a *delta.Error
// naming stateDelta.sha256 if not) and records its hash marks. ApplyStateDelta leaves it to the
// caller, who may run it concurrently with the save (store.SaveRequest.Check): the state is
// only what the client claims until it passed.
func (r *RebuiltState) Verify() error {
	m, err := r.verify()
	if err == nil {
		r.Marks.Hash = m
	}
	return err
}

// ValidJSON reports whether the rebuilt state is UTF-8 JSON (jsonvalid.Valid), parsing only
// around the change when the base's JSON marks are known, and records the state's own marks.
func (r *RebuiltState) ValidJSON() bool {
	ok, m := jsonvalid.ValidEdit(r.base, r.baseJSON, r.State, r.kp, r.ks)
	if ok {
		r.Marks.JSON = m
	}
	return ok
}

// ApplyStateDelta rebuilds the state d describes, with middle (the attachment) between the kept
// bytes of its base, checking in this order (docs/storage.md, "Wire deltas"): that the base
// checkpoint exists (store.ErrNotFound: missing or pruned; a *store.CorruptError if its state
// fails verification), keepPrefix and keepSuffix against the base and sha256's form
// (*delta.Error), and the rebuilt size against maxBytes (*store.TooLargeError); the rebuilt
// state's SHA-256 (*delta.Error naming stateDelta.sha256) is RebuiltState.Verify's, which the
// caller runs. The base usually comes from the store's cache of each workflow's last state
// (store.StateCache), not from a read, with the marks of its last check: the SHA-256 is then
// computed from the last mark before the change on.
func (e *Engine) ApplyStateDelta(ctx context.Context, d StateDelta, middle []byte, maxBytes int64) (*RebuiltState, error) {
	base, err := e.store.StateBase(ctx, d.BaseCheckpointID)
	if err != nil {
		return nil, err
	}
	const maxInt = int64(^uint(0) >> 1)
	kp, ks := int(min(max(d.KeepPrefix, -1), maxInt)), int(min(max(d.KeepSuffix, -1), maxInt))
	if err := delta.Check(len(base.Value), kp, ks, d.SHA256); err != nil {
		return nil, err
	}
	if n := int64(kp) + int64(len(middle)) + int64(ks); n > maxBytes {
		return nil, fmt.Errorf("state rebuilt from stateDelta: %w", &store.TooLargeError{Limit: maxBytes, Size: n})
	}
	r := &RebuiltState{base: base.Value, kp: kp, ks: ks, Marks: &store.ValueMarks{}}
	var hm *delta.HashMarks
	if base.Marks != nil {
		hm, r.baseJSON = base.Marks.Hash, base.Marks.JSON
	}
	if r.State, r.verify, err = delta.Rebuild(base.Value, hm, kp, ks, middle, d.SHA256); err != nil {
		return nil, err
	}
	return r, nil
}
