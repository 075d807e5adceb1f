package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

func encodingOf(t *testing.T, s *Store, checkpointID string) string {
	t.Helper()
	in, err := s.Inspect(context.Background(), checkpointID)
	require.NoError(t, err)
	require.Empty(t, in.Corrupt)
	return in.Encoding
}

// Deferred compression applies to states stored whole: those over the compression threshold
// and at most chunk.InlineMax bytes (larger ones are stored as chunks, compressed one by one
// before the save reaches the writer). The tests lower the threshold to have such states.
func deferredOpts(o *Options) { o.CompressThreshold = 512 }

// wholeState is a compressible state stored whole (not chunked).
func wholeState(rng *rand.Rand) []byte {
	for {
		if s := checkpointJSON(rng, 3<<10); !chunk.Inline(len(s)) {
			continue
		} else {
			return s
		}
	}
}

func TestDeferredCompression(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	big := wholeState(rng)
	small := []byte(`{"a":1}`)
	noise := randBytes(rng, 3<<10)

	for _, tc := range []struct {
		name      string
		state     []byte
		stateType store.StateType
		pending   bool   // stored raw-pending at save time
		final     string // encoding once compacted
	}{
		{"large json", big, store.StateJSON, true, "zstd"},
		{"small json under the threshold", small, store.StateJSON, false, "raw"},
		{"incompressible bytes", noise, store.StateBytes, true, "raw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, deferredOpts)
			res := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: tc.state, StateType: tc.stateType})
			require.Equal(t, res.SizeBytes, res.StoredBytes, "the save stores the bytes as sent")
			if tc.pending {
				require.Equal(t, "raw (compression pending)", encodingOf(t, s, res.CheckpointID))
				require.Equal(t, 1, s.CompactionStats().PendingStates)
			} else {
				require.Equal(t, "raw", encodingOf(t, s, res.CheckpointID))
				require.Zero(t, s.CompactionStats().PendingStates)
			}
			// pending states load like any other
			cp, err := s.Load(ctx, res.CheckpointID)
			require.NoError(t, err)
			require.Equal(t, tc.state, cp.State)

			require.NoError(t, s.Compact(ctx))
			require.Equal(t, tc.final, encodingOf(t, s, res.CheckpointID))
			st := s.CompactionStats()
			require.Zero(t, st.PendingStates)
			require.Zero(t, st.PendingBytes)
			cp, err = s.Load(ctx, res.CheckpointID)
			require.NoError(t, err)
			require.Equal(t, tc.state, cp.State)
			if tc.final == "raw" {
				require.Equal(t, cp.SizeBytes, cp.StoredBytes)
				require.Zero(t, st.Compacted)
			} else {
				require.Less(t, cp.StoredBytes, cp.SizeBytes/2, "the checkpoint's storedBytes follows the compaction")
				require.Equal(t, int64(1), st.Compacted)
				require.Equal(t, cp.SizeBytes-cp.StoredBytes, st.SavedBytes)
				l, err := s.List(ctx, store.ListFilter{WorkflowID: "w"})
				require.NoError(t, err)
				require.Equal(t, cp.StoredBytes, l[0].StoredBytes)
			}
		})
	}
}

func TestDeferredCompressionInline(t *testing.T) {
	s := openTest(t, deferredOpts, func(o *Options) { o.CompressInline = true })
	state := wholeState(rand.New(rand.NewPCG(1, 1)))
	res := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: state})
	require.Less(t, res.StoredBytes, res.SizeBytes)
	require.Equal(t, "zstd", encodingOf(t, s, res.CheckpointID))
	require.Zero(t, s.CompactionStats().PendingStates)
}

// States left pending by a stop (or a crash, or another process) are found again at Open.
func TestDeferredCompressionAfterRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ckptd.db")
	open := func() *Store {
		s, err := open(ctx, options(path, deferredOpts))
		require.NoError(t, err)
		return s
	}
	s := open()
	rng := rand.New(rand.NewPCG(3, 3))
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: wholeState(rng)}).CheckpointID)
	}
	require.Equal(t, 3, s.CompactionStats().PendingStates)
	var states [][]byte
	for _, id := range ids {
		cp, err := s.Load(ctx, id)
		require.NoError(t, err)
		states = append(states, cp.State)
	}
	require.NoError(t, s.Close()) // a clean close compresses what is pending
	for _, id := range ids {
		require.Equal(t, "zstd", encodingOf(t, reopenRead(t, path), id))
	}
	// what a crash leaves behind: rows still raw and pending
	db := rawDB(t, path)
	for _, st := range states {
		sum := sha256.Sum256(st)
		_, err := db.Exec(`UPDATE states SET encoding = 3, stored_size = ?, data = ? WHERE hash = ?`, len(st), st, sum[:])
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())

	s = open()
	defer s.Close()
	require.Equal(t, 3, s.CompactionStats().PendingStates)
	require.NoError(t, s.Compact(ctx))
	for _, id := range ids {
		require.Equal(t, "zstd", encodingOf(t, s, id))
	}
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, bad)
}

// The background compactor runs once the writer is idle.
func TestCompactorRunsWhenIdle(t *testing.T) {
	s, err := open(context.Background(), options(filepath.Join(t.TempDir(), "ckptd.db"), deferredOpts, func(o *Options) { o.noBackground = false }))
	require.NoError(t, err)
	defer s.Close()
	res := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: wholeState(rand.New(rand.NewPCG(5, 5)))})
	require.Eventually(t, func() bool { return encodingOf(t, s, res.CheckpointID) == "zstd" }, 10*time.Second, 10*time.Millisecond)
	// the counter moves just after the commit a reader may already see
	require.Eventually(t, func() bool { return s.CompactionStats().Compacted == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(1), s.CompactionStats().Compacted)
}

// Retention may delete a pending state before the compactor gets to it; deduplicated saves of
// a pending state share one row.
func TestCompactionRacesRetentionAndDedup(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, deferredOpts, func(o *Options) { o.DefaultRetention = store.Retention{KeepLast: 1} })
	rng := rand.New(rand.NewPCG(9, 9))
	a, b := wholeState(rng), wholeState(rng)
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: a})
	r1 := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: b}) // deletes a's checkpoint and state
	r2 := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: b}) // dedup, then deletes r1
	require.True(t, r2.Deduplicated)
	require.NoError(t, s.Compact(ctx))
	require.Equal(t, "zstd", encodingOf(t, s, r2.CheckpointID))
	_, err := s.Load(ctx, r1.CheckpointID)
	require.ErrorIs(t, err, store.ErrNotFound)
	cp, err := s.Load(ctx, r2.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, b, cp.State)
	var n int
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT count(*) FROM states`).Scan(&n))
	require.Equal(t, 1, n)
}

// A pending state whose bytes no longer match their hash is left alone (and stays corrupt),
// never compressed into something that looks intact.
func TestCompactionSkipsCorruptState(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, deferredOpts)
	state := wholeState(rand.New(rand.NewPCG(2, 2)))
	res := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: state})
	flipped := bytes.Clone(state)
	flipped[100] ^= 1
	corruptState(t, s, res.CheckpointID, flipped)
	require.NoError(t, s.Compact(ctx))
	_, err := s.Load(ctx, res.CheckpointID)
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Reason, "SHA-256")
	in, err := s.Inspect(ctx, res.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, "raw", in.Encoding)
}

// reopenRead opens path for a quick look and closes it when the test ends.
func reopenRead(t *testing.T, path string) *Store {
	t.Helper()
	s, err := open(context.Background(), options(path))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A short-lived tool (NoCompactor) compresses its own saves inline and leaves states that a
// daemon saved raw for the daemon.
func TestNoCompactor(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ckptd.db")
	daemon, err := open(ctx, options(path, deferredOpts))
	require.NoError(t, err)
	defer daemon.Close()
	rng := rand.New(rand.NewPCG(6, 6))
	raw := mustSave(t, daemon, store.SaveRequest{WorkflowID: "w", State: wholeState(rng)})

	tool, err := open(ctx, options(path, deferredOpts, func(o *Options) { o.NoCompactor = true; o.noBackground = false }))
	require.NoError(t, err)
	own := mustSave(t, tool, store.SaveRequest{WorkflowID: "w", State: wholeState(rng)})
	require.Less(t, own.StoredBytes, own.SizeBytes, "compressed inline")
	require.Zero(t, tool.CompactionStats().PendingStates)
	require.NoError(t, tool.Close())
	require.Equal(t, "raw (compression pending)", encodingOf(t, daemon, raw.CheckpointID))
}
