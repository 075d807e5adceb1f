package engine

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
)

// recSink records what a watch delivers.
type recSink struct {
	id      string
	mu      sync.Mutex
	batches []drift.Batch
	stops   int
	got     chan struct{}
}

func (s *recSink) Batch(b drift.Batch) {
	s.mu.Lock()
	s.batches = append(s.batches, b)
	s.mu.Unlock()
	select {
	case s.got <- struct{}{}:
	default:
	}
}

func (s *recSink) Stop(time.Duration) {
	s.mu.Lock()
	s.stops++
	s.mu.Unlock()
}

func (s *recSink) stopped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stops
}

// watched saves a checkpoint of src's sources and returns its ref and manifest.
func watched(t *testing.T, e *Engine, st store.Backend, src, id string) (store.ManifestRef, *drift.Manifest) {
	t.Helper()
	ctx := context.Background()
	spec, err := CheckSources("sources", drift.Spec{Root: src})
	require.NoError(t, err)
	_, _, err = e.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: id, StateType: store.StateNone}, &spec, nil)
	require.NoError(t, err)
	ref, err := st.CheckpointManifestRef(ctx, id)
	require.NoError(t, err)
	base, err := e.Manifest(ctx, ref)
	require.NoError(t, err)
	return ref, base
}

// TestWatches: ids count up, a watched checkpoint's drift is answered from its watcher, a
// watch that cannot start stops its sink, Unwatch and CloseWatches end watches once, and no
// watch starts after CloseWatches.
func TestWatches(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	e := New(st, nil)
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "a.txt"), []byte("a"), 0o644))
	ref, base := watched(t, e, st, src, "c-1")

	var sinks []*recSink
	newSink := func(id string) WatchSink {
		s := &recSink{id: id, got: make(chan struct{}, 1)}
		sinks = append(sinks, s)
		return s
	}
	w1, err := e.Watch(ctx, ref, base, nil, 5*time.Millisecond, newSink)
	require.NoError(t, err)
	assert.Equal(t, "w-1", w1.ID)
	assert.Equal(t, "w-1", sinks[0].id)
	assert.Equal(t, src, w1.Root)

	st1, err := e.DriftStatus(ctx, ref, base, nil)
	require.NoError(t, err)
	assert.True(t, st1.Watched)
	assert.False(t, st1.Drifted)

	require.NoError(t, os.WriteFile(filepath.Join(src, "b.txt"), []byte("b"), 0o644))
	deadline := time.After(10 * time.Second)
	for drifted := false; !drifted; {
		select {
		case <-sinks[0].got:
		case <-deadline:
			t.Fatal("no drifted batch from the watch")
		}
		sinks[0].mu.Lock()
		for _, b := range sinks[0].batches {
			drifted = drifted || b.Drifted
		}
		sinks[0].mu.Unlock()
	}
	st1, err = e.DriftStatus(ctx, ref, base, nil)
	require.NoError(t, err)
	assert.True(t, st1.Watched)
	assert.True(t, st1.Drifted)
	require.Len(t, st1.Added, 1)
	assert.Equal(t, "b.txt", st1.Added[0].Path)

	// a tree that cannot be watched: its sink is stopped, the id is used up
	gone := t.TempDir()
	ref2, base2 := watched(t, e, st, gone, "c-2")
	require.NoError(t, os.RemoveAll(gone))
	_, err = e.Watch(ctx, ref2, base2, nil, 5*time.Millisecond, newSink)
	var se *SourcesError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "sources.root", se.Field)
	assert.Equal(t, 1, sinks[1].stopped())

	w3, err := e.Watch(ctx, ref, base, nil, 5*time.Millisecond, newSink)
	require.NoError(t, err)
	assert.Equal(t, "w-3", w3.ID)

	assert.True(t, e.Unwatch("w-1", time.Second))
	assert.False(t, e.Unwatch("w-1", time.Second), "already unwatched")
	assert.False(t, e.Unwatch("w-9", time.Second), "unknown")
	assert.Equal(t, 1, sinks[0].stopped())

	e.CloseWatches(time.Second)
	assert.Equal(t, 1, sinks[2].stopped())
	assert.Equal(t, 1, sinks[0].stopped(), "ended once")
	st1, err = e.DriftStatus(ctx, ref, base, nil)
	require.NoError(t, err)
	assert.False(t, st1.Watched, "no watch left: checked instead")
	_, err = e.Watch(ctx, ref, base, nil, 5*time.Millisecond, newSink)
	assert.ErrorIs(t, err, ErrWatchesClosed)
	assert.Len(t, sinks, 3, "no sink for a refused watch")
}

func TestTooManyWatchesError(t *testing.T) {
	err := &TooManyWatchesError{Active: 16, Limit: 16}
	assert.Equal(t, "too many drift watches: 16 active, at most 16 per ckptd process (drift/unwatch one first)", err.Error())
}
