package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
)

// TestKnownIDsOtherConnection: ids the writer remembers stop counting once another connection
// (another process) has committed. Store a deletes a grown state's checkpoints, so the runs and
// chunks it remembered go, store b stores other values (SQLite hands their rows the freed ids
// again), and a saves the grown state again: its counts must go to its own rows, not to the
// ids it remembered. Verify's reference audit compares every count with the listings.
func TestKnownIDsOtherConnection(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/ckptd.db"
	a := openPath(t, path)
	b := openPath(t, path)
	w := testgen.NewWorkload(4, 300<<10)
	mustSave(t, a, store.SaveRequest{WorkflowID: "w", State: w.State()})
	w.Advance()
	grown := w.State()
	mustSave(t, a, store.SaveRequest{WorkflowID: "w", State: grown}) // an edit: chunked, ids remembered
	require.NotEmpty(t, a.known.runs, "the writer remembers the runs it counted")
	for _, c := range mustList(t, b, "w") {
		_, err := b.Delete(ctx, c)
		require.NoError(t, err)
	}
	r := testgen.New(5)
	for i := 0; i < 3; i++ { // new content, chunked by b's compactor: new rows on the freed ids
		mustSave(t, b, store.SaveRequest{WorkflowID: "other", State: r.Bytes(200 << 10), StateType: store.StateBytes})
	}
	require.NoError(t, b.Compact(ctx))
	w.Advance()
	again := w.State()
	res := mustSave(t, a, store.SaveRequest{WorkflowID: "w", State: again})
	require.Equal(t, "chunked", encodingOf(t, a, res.CheckpointID))
	for _, s := range []*Store{a, b} {
		bad, err := s.Verify(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, bad)
	}
	cp, err := b.Load(ctx, res.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, again, cp.State)
}

// TestKnownIDsRolledBack: a save that stored new runs and chunks and was then rolled back (its
// check failed) leaves nothing remembered: the same state saved again stores them again.
func TestKnownIDsRolledBack(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	w := testgen.NewWorkload(6, 300<<10)
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: w.State()})
	w.Advance()
	grown := w.State()
	refused := errors.New("refused by its check")
	_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: grown, Check: func() error { return refused }})
	require.ErrorIs(t, err, refused)
	res := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: grown})
	require.Equal(t, "chunked", encodingOf(t, s, res.CheckpointID))
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, bad)
	cp, err := s.Load(ctx, res.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, grown, cp.State)
}

// TestKnownIDsBatchJobRolledBack: the same within a batch, where only the failing job's
// savepoint is rolled back and the others commit. Another edit stored right after takes the
// row ids the rolled-back job had used (SQLite hands out max(id)+1 again): ids remembered from
// that job would count the other edit's rows.
func TestKnownIDsBatchJobRolledBack(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	w := testgen.NewWorkload(7, 300<<10)
	base := w.State()
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: base, StateType: store.StateBytes})
	w.Advance()
	grown := w.State()
	other := append(append([]byte{}, base[:len(base)/2]...), []byte("an edit in the middle, not the workload's")...)
	other = append(other, base[len(base)/2:]...)
	refused := errors.New("refused by its check")
	r := testgen.New(8)
	for attempt := 0; ; attempt++ {
		// one batch of three jobs (the writer is held while they queue), the middle one fails
		// after storing its rows
		release := holdWriter(t, s)
		p1 := s.Enqueue(store.SaveRequest{WorkflowID: "x", State: r.Bytes(100), StateType: store.StateBytes})
		p2 := s.Enqueue(store.SaveRequest{WorkflowID: "w", State: grown, StateType: store.StateBytes, Check: func() error { return refused }})
		p3 := s.Enqueue(store.SaveRequest{WorkflowID: "y", State: r.Bytes(100), StateType: store.StateBytes})
		time.Sleep(50 * time.Millisecond) // their preparation (the middle one's on a goroutine)
		batches := s.writes.Load()
		release()
		_, err := p1.Wait(ctx)
		require.NoError(t, err)
		_, err = p2.Wait(ctx)
		require.ErrorIs(t, err, refused)
		_, err = p3.Wait(ctx)
		require.NoError(t, err)
		if s.writes.Load()-batches == 2 || attempt == 20 { // the held job's and the three's
			require.Less(t, attempt, 20, "the three saves never went in one batch")
			break
		}
	}
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: other, StateType: store.StateBytes})
	res := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: grown, StateType: store.StateBytes})
	require.Equal(t, "chunked", encodingOf(t, s, res.CheckpointID))
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, bad)
	cp, err := s.Load(ctx, res.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, grown, cp.State)
}

// holdWriter keeps the writer busy with a job that waits until the returned func is called.
func holdWriter(t *testing.T, s *Store) func() {
	t.Helper()
	running, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.do(context.Background(), func(context.Context, *wtx) error {
			close(running)
			<-release
			return nil
		})
	}()
	<-running
	return func() {
		close(release)
		require.NoError(t, <-done)
	}
}

func mustList(t *testing.T, s *Store, wf string) []string {
	t.Helper()
	sums, err := s.List(context.Background(), store.ListFilter{WorkflowID: wf, Limit: 1000})
	require.NoError(t, err)
	var ids []string
	for _, c := range sums {
		ids = append(ids, c.CheckpointID)
	}
	return ids
}
