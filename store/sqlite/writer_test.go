package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A batch runs its jobs without savepoints; when one fails, the batch is rolled back and run
// again with a savepoint per job, so that only the failing job is undone: the others commit,
// the failing one leaves nothing. A batch without failure runs each job once.
func TestBatchJobFailure(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	refused := errors.New("refused")
	runs := map[string]int{}
	job := func(name string, fail bool) func(context.Context, *wtx) error {
		return func(ctx context.Context, w *wtx) error {
			runs[name]++ // the writer goroutine only
			if _, err := w.exec(ctx, `INSERT INTO lg_config(name, value) VALUES (?, 'x')`, name); err != nil {
				return err
			}
			if fail {
				return refused
			}
			return nil
		}
	}
	inBatch := func(fns ...func(context.Context, *wtx) error) []error {
		for attempt := 0; ; attempt++ {
			clear(runs)
			release := holdWriter(t, s)
			errs := make([]chan error, len(fns))
			for i, fn := range fns { // queued in this order
				errs[i] = make(chan error, 1)
				go func() { errs[i] <- s.do(ctx, fn) }()
				require.Eventually(t, func() bool {
					s.mu.Lock()
					defer s.mu.Unlock()
					return len(s.queue) == i+1
				}, 5*time.Second, time.Millisecond)
			}
			batches := s.writes.Load()
			release()
			out := make([]error, len(fns))
			for i := range errs {
				out[i] = <-errs[i]
			}
			if s.writes.Load()-batches == 2 || attempt == 20 { // the held job's and theirs
				require.Less(t, attempt, 20, "never one batch")
				return out
			}
			require.NoError(t, s.do(ctx, func(ctx context.Context, w *wtx) error {
				_, err := w.exec(ctx, `DELETE FROM lg_config`)
				return err
			}))
		}
	}
	stored := func() []string {
		var names []string
		require.NoError(t, s.readAuto(ctx, func(tx *rtx) error {
			return scanRows(ctx, tx, `SELECT name FROM lg_config ORDER BY name`, func(rows *sql.Rows) error {
				var n string
				if err := rows.Scan(&n); err != nil {
					return err
				}
				names = append(names, n)
				return nil
			})
		}))
		return names
	}

	errs := inBatch(job("a", false), job("b", true), job("c", false))
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], refused)
	require.NoError(t, errs[2])
	require.Equal(t, []string{"a", "c"}, stored())
	require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 1}, runs, "run again with savepoints after b failed")

	errs = inBatch(job("d", false), job("e", false))
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, map[string]int{"d": 1, "e": 1}, runs, "no failure: each job once")
}
