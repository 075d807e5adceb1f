package sqlite

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
)

// New content (a state that is not an edit of the workflow's previous one) is saved whole and
// raw, and cut into chunks by the compactor; an edit saved before that is cut at once, and the
// compactor then only counts the chunks the edit stored already.
func TestNewContentChunkedLater(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	w := testgen.NewWorkload(2, 200<<10)
	v0 := w.State()
	first := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: v0})
	require.Equal(t, first.SizeBytes, first.StoredBytes, "saved whole and raw")
	require.Equal(t, "raw (compression pending)", encodingOf(t, s, first.CheckpointID))
	require.Equal(t, 1, s.CompactionStats().PendingStates)
	w.Advance()
	v1 := w.State()
	second := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: v1})
	require.Equal(t, "chunked", encodingOf(t, s, second.CheckpointID), "an edit of the previous state is cut at once")
	require.Less(t, second.StoredBytes, second.SizeBytes)

	require.NoError(t, s.Compact(ctx))
	require.Equal(t, "chunked", encodingOf(t, s, first.CheckpointID))
	cp, err := s.Load(ctx, first.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, v0, cp.State)
	require.Less(t, cp.StoredBytes, int64(16<<10), "its chunks were stored by the edit already: it adds little")
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, bad)
	require.Equal(t, int64(1), s.CompactionStats().Compacted)

	// deleted before the compactor gets to it: nothing to do, nothing left behind
	r := testgen.New(9)
	gone := mustSave(t, s, store.SaveRequest{WorkflowID: "x", State: r.Bytes(50 << 10), StateType: store.StateBytes})
	require.Equal(t, "raw (compression pending)", encodingOf(t, s, gone.CheckpointID))
	_, err = s.Delete(ctx, gone.CheckpointID)
	require.NoError(t, err)
	require.NoError(t, s.Compact(ctx))
	bad, err = s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, bad)
}
