package engine

// Drift watches: a drift.Watcher per watched checkpoint, at most maxDriftWatches per process,
// registered so that drift checks of a watched checkpoint are answered from its watcher. Where
// a watch's batches go (drift/changed notifications) is the caller's: a WatchSink.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
)

const (
	// maxDriftWatches bounds the watches of one ckptd process: each is an inotify instance, and
	// Linux allows 128 per user by default (fs.inotify.max_user_instances).
	maxDriftWatches = 16
)

// ErrWatchesClosed: CloseWatches was called, no new watches start.
var ErrWatchesClosed = errors.New("shutting down: no new watches")

// TooManyWatchesError says the process already has as many watches as it may.
type TooManyWatchesError struct {
	Active int // watches active or being set up
	Limit  int
}

func (e *TooManyWatchesError) Error() string {
	return fmt.Sprintf("too many drift watches: %d active, at most %d per ckptd process (drift/unwatch one first)", e.Active, e.Limit)
}

// WatchSink is where one watch's batches go.
type WatchSink interface {
	// Batch receives a batch on the watcher's goroutine; it must not block.
	Batch(b drift.Batch)
	// Stop is called once, when the watch ends or fails to start; its watcher is closed first,
	// so no Batch follows. It waits at most wait for batches still being delivered.
	Stop(wait time.Duration)
}

// Watch is one active drift watch.
type Watch struct {
	ID   string // "w-1", "w-2", ... in the order watches were started
	Ref  store.ManifestRef
	Root string
	w    *drift.Watcher
	sink WatchSink
}

// Watch starts watching ref's checkpoint's recorded sources (base: its manifest, which the
// watcher reports drift against). sink is called with the new watch's id before its watcher
// starts, and returns where its batches go. Errors: ErrWatchesClosed, *TooManyWatchesError,
// *SourcesError (the tree cannot be watched: gone, not a directory, bad spec) and
// *UnavailableError. The watch's scans are bounded by lim (nil: the limits of the workflow's
// configured sources on the same root, else the defaults).
func (e *Engine) Watch(ctx context.Context, ref store.ManifestRef, base *drift.Manifest, lim *drift.Limits, debounce time.Duration, sink func(id string) WatchSink) (*Watch, error) {
	d := &e.drift
	d.mu.Lock()
	switch {
	case d.closed:
		d.mu.Unlock()
		return nil, ErrWatchesClosed
	case len(d.watches)+d.pending >= maxDriftWatches:
		n := len(d.watches) + d.pending
		d.mu.Unlock()
		return nil, &TooManyWatchesError{Active: n, Limit: maxDriftWatches}
	}
	d.pending++
	d.nextID++
	id := "w-" + strconv.FormatUint(d.nextID, 10)
	d.mu.Unlock()
	unreserve := func() {
		d.mu.Lock()
		d.pending--
		d.mu.Unlock()
	}

	wt := &Watch{ID: id, Ref: ref, Root: base.Spec.Root, sink: sink(id)}
	spec := base.Spec
	spec.Limits = e.checkLimits(ctx, ref.WorkflowID, spec.Root, lim)
	w, err := drift.Watch(ctx, spec, base, drift.WatchOptions{Debounce: debounce, Logger: e.log}, wt.sink.Batch)
	if err != nil {
		unreserve()
		wt.sink.Stop(time.Second)
		if errors.Is(err, drift.ErrRootNotFound) || errors.Is(err, drift.ErrRootNotDir) || errors.Is(err, drift.ErrInvalidSpec) {
			return nil, &SourcesError{"sources.root", fmt.Sprintf("the sources of checkpoint %s cannot be watched: %v", ref.CheckpointID, err)}
		}
		if errors.Is(err, drift.ErrLimit) {
			return nil, fingerprintError("sources", limitsField(lim), spec.Root, err)
		}
		// The error says which limit ran out (open files, inotify instances or watches).
		return nil, &UnavailableError{Msg: fmt.Sprintf("cannot watch %s: %v", base.Spec.Root, err), Err: err}
	}
	wt.w = w

	d.mu.Lock()
	d.pending--
	if d.closed {
		d.mu.Unlock()
		wt.end(time.Second)
		return nil, ErrWatchesClosed
	}
	if d.watches == nil {
		d.watches = map[string]*Watch{}
	}
	d.watches[id] = wt
	d.mu.Unlock()
	return wt, nil
}

// end closes the watcher, then stops the sink: nothing is delivered for the watch once end
// returns (unless the sink's wait expires).
func (wt *Watch) end(wait time.Duration) {
	_ = wt.w.Close() // no Batch after this
	wt.sink.Stop(wait)
}

// Unwatch ends watch id, waiting at most wait for its sink; false when there is no such watch
// (unknown, or already unwatched).
func (e *Engine) Unwatch(id string, wait time.Duration) bool {
	e.drift.mu.Lock()
	wt := e.drift.watches[id]
	delete(e.drift.watches, id)
	e.drift.mu.Unlock()
	if wt == nil {
		return false
	}
	wt.end(wait)
	return true
}

// CloseWatches ends every watch (the connection is closing), each waiting at most wait for its
// sink, and refuses new ones.
func (e *Engine) CloseWatches(wait time.Duration) {
	e.drift.mu.Lock()
	e.drift.closed = true
	ws := e.drift.watches
	e.drift.watches = nil
	e.drift.mu.Unlock()
	for _, wt := range ws {
		wt.end(wait)
	}
}

// watchOn returns an active watch on checkpoint rowid, if any.
func (e *Engine) watchOn(rowid int64) *Watch {
	e.drift.mu.Lock()
	defer e.drift.mu.Unlock()
	for _, w := range e.drift.watches {
		if w.Ref.Key == rowid {
			return w
		}
	}
	return nil
}
