package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func fileSize(t *testing.T, path string) int64 {
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

// TestPruneVacuum: the pages a prune frees are counted in FreedBytes (a dry run counts the same)
// and returned to the file system: the file shrinks.
func TestPruneVacuum(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 40; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("w%d", i%2), State: randBytes(rng, 64<<10), StateType: store.StateBytes})
	}
	_, err := s.wconn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	require.NoError(t, err)
	before := fileSize(t, s.Path())
	dry, err := s.Prune(ctx, store.PruneRequest{WorkflowID: "w0", KeepLast: 5, DryRun: true})
	require.NoError(t, err)
	require.Greater(t, dry.FreedBytes, int64(15*60<<10))
	require.Equal(t, before, fileSize(t, s.Path()), "a dry run changes nothing")
	real, err := s.Prune(ctx, store.PruneRequest{WorkflowID: "w0", KeepLast: 5})
	require.NoError(t, err)
	require.Equal(t, dry.FreedBytes, real.FreedBytes)
	after := fileSize(t, s.Path())
	require.Less(t, after, before-real.FreedBytes/2, "file shrank: %d -> %d", before, after)
	h, err := s.Health(ctx)
	require.NoError(t, err)
	require.Less(t, h.Figure("freeBytes"), real.FreedBytes/2, "freed pages went back to the file system")
}

// TestKeepLastFastPath checks the save path's keepLast shortcut against SelectExpired.
func TestKeepLastFastPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for round := 0; round < 40; round++ {
		r := store.Retention{KeepLast: 1 + rng.IntN(5), KeepFirst: rng.IntN(2) == 0}
		s := openTest(t)
		ctx := context.Background()
		var items []store.RetentionItem
		n := rng.IntN(12)
		for i := 0; i < n; i++ {
			res := mustSave(t, s, store.SaveRequest{WorkflowID: "w"})
			items = append(items, store.RetentionItem{Seq: res.Seq, ID: res.CheckpointID, CreatedAt: res.CreatedAt})
		}
		want := store.SelectExpired(items, r, time.Now())
		var got []string
		err := s.do(ctx, func(ctx context.Context, w *wtx) error {
			var err error
			got, _, err = s.applyKeepLast(ctx, w, "w", "", r)
			return err
		})
		require.NoError(t, err)
		if len(want) == 0 {
			want = []string{}
		}
		require.Equal(t, want, got, "round %d: %+v over %d", round, r, n)
		require.NoError(t, s.Close())
	}
}
