package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
)

// refLogRows counts the rows of ref_log through a connection of its own.
func refLogRows(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT count(*) FROM ref_log`).Scan(&n))
	return n
}

// checkCounts: every count plus its listings waiting in ref_log is the number of listings
// (ChunkRows), and verify agrees.
func checkCounts(t *testing.T, s *Store) {
	t.Helper()
	(&testBackend{s}).ChunkRows(t)
	bad, err := s.Verify(context.Background(), nil)
	require.NoError(t, err)
	require.Empty(t, bad)
}

// TestRefLog: the listings of stored runs and chunks a save makes wait in ref_log; a release
// takes them all into its count changes first (nothing still listed is freed, whichever
// process logged it), a job raises them once the log is long, and so does the idle writer.
func TestRefLog(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/ckptd.db"
	a := openPath(t, path)
	b := openPath(t, path)
	w := testgen.NewWorkload(11, 200<<10)
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, mustSave(t, a, store.SaveRequest{WorkflowID: "w", State: w.State()}).CheckpointID)
		w.Advance()
	}
	require.Positive(t, refLogRows(t, a), "the edits' listings of stored runs wait in ref_log")
	checkCounts(t, a)

	// another process releases: it takes a's listings into its count changes first
	for _, id := range ids[:5] {
		_, err := b.Delete(ctx, id)
		require.NoError(t, err)
	}
	require.Zero(t, refLogRows(t, a))
	checkCounts(t, b)
	cp, err := a.Load(ctx, ids[5])
	require.NoError(t, err)
	require.Equal(t, int64(len(cp.State)), cp.SizeBytes)

	// a long log is raised by the job that finds it so
	for i := 0; refLogRows(t, a) < refLogApplyRows/2 && i < refLogApplyRows; i++ {
		mustSave(t, a, store.SaveRequest{WorkflowID: "w", State: w.State()})
		w.Advance()
	}
	before := refLogRows(t, a)
	for i := 0; i < refLogApplyRows && refLogRows(t, a) >= before; i++ {
		mustSave(t, a, store.SaveRequest{WorkflowID: "w", State: w.State()})
		w.Advance()
	}
	require.Less(t, refLogRows(t, a), before, "raised once the log was long")
	checkCounts(t, a)
}

// TestRefLogIdle: the idle writer raises the logged counts, also those a crash left behind
// (found when the database opens).
func TestRefLogIdle(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/ckptd.db"
	s, err := open(ctx, options(path))
	require.NoError(t, err)
	w := testgen.NewWorkload(12, 200<<10)
	for i := 0; i < 4; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: w.State()})
		w.Advance()
	}
	require.Positive(t, refLogRows(t, s))
	require.NoError(t, s.Close()) // without background work: the rows stay, as after a crash

	s2, err := open(ctx, Options{Options: store.Options{Path: path}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s2.Close() })
	require.Eventually(t, func() bool { return refLogRows(t, s2) == 0 }, 10*time.Second, 10*time.Millisecond)
	checkCounts(t, s2)
	mustSave(t, s2, store.SaveRequest{WorkflowID: "w", State: w.State()})
	require.Eventually(t, func() bool { return refLogRows(t, s2) == 0 }, 10*time.Second, 10*time.Millisecond,
		"raised once the writer is idle")
	checkCounts(t, s2)
}
