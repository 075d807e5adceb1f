package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadsWhileTheReadPoolWarms: reads that take the read connections while the store is
// still opening the rest of them in the background (warmReadPool) neither wait for each other
// nor keep Close from returning (the warm-up once held three connections of the read pool's
// database while waiting for a fourth that the reads had pinned: every read and Close hung).
func TestReadsWhileTheReadPoolWarms(t *testing.T) {
	dir := t.TempDir()
	for round := 0; round < 20; round++ {
		path := filepath.Join(dir, fmt.Sprintf("r%d.db", round))
		s, err := open(context.Background(), options(path))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var wg sync.WaitGroup
		errs := make(chan error, 2*readPoolSize)
		for g := 0; g < 2*readPoolSize; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- s.readTx(ctx, func(tx *rtx) error {
					var n int
					err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n)
					time.Sleep(2 * time.Millisecond) // hold the connection a while
					return err
				})
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "round %d", round)
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatalf("round %d: Close did not return", round)
		}
		cancel()
	}
}
