package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// TestPragmasPerDurability checks that each --durability level is really applied to the writer
// connection (every save commits through it), on a new database and on reopening an existing one
// (auto_vacuum can only be set at creation and must persist), and that the checkpointer
// connection syncs as hard as the writer.
func TestPragmasPerDurability(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		durability          string
		synchronous, fullfs string
	}{
		{"", "2", "1"}, // default: full
		{store.DurabilityFull, "2", "1"},
		{store.DurabilityNormal, "1", "0"},
	} {
		name := tc.durability
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.db")
			for _, phase := range []string{"created", "reopened"} {
				s, err := open(ctx, options(path, func(o *Options) { o.Durability = tc.durability }))
				require.NoError(t, err)
				mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":1}`)})
				p, err := s.Pragmas(ctx)
				require.NoError(t, err)
				want := map[string]string{
					"journal_mode":       "wal",
					"synchronous":        tc.synchronous,
					"fullfsync":          tc.fullfs,
					"busy_timeout":       "5000",
					"auto_vacuum":        "2", // INCREMENTAL
					"wal_autocheckpoint": "0",
					"journal_size_limit": "67108864",
					"foreign_keys":       "0",
				}
				assert.Equal(t, want, p, phase)
				assert.Len(t, p, len(PragmaNames))

				var sync, fullfs string
				require.NoError(t, s.cdb.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync))
				require.NoError(t, s.cdb.QueryRowContext(ctx, "PRAGMA fullfsync").Scan(&fullfs))
				assert.Equal(t, tc.synchronous, sync, "%s: checkpointer synchronous", phase)
				assert.Equal(t, tc.fullfs, fullfs, "%s: checkpointer fullfsync", phase)
				var ro string
				require.NoError(t, s.rdb.QueryRowContext(ctx, "PRAGMA query_only").Scan(&ro))
				assert.Equal(t, "1", ro, "%s: read pool is query_only", phase)
				require.NoError(t, s.Close())
			}
		})
	}
}

func TestPragmasAfterClose(t *testing.T) {
	s := openTest(t)
	require.NoError(t, s.Close())
	_, err := s.Pragmas(context.Background())
	require.ErrorIs(t, err, store.ErrClosed)
}

// TestPragmasDuringSaves reads the pragmas while saves commit on the same connection.
func TestPragmasDuringSaves(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			s.Enqueue(store.SaveRequest{WorkflowID: "w", Step: int64(i), State: []byte(`{"i":1}`)})
		}
		_, _ = s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: []byte(`{"last":1}`)})
	}()
	for i := 0; i < 100; i++ {
		p, err := s.Pragmas(ctx)
		require.NoError(t, err)
		require.Equal(t, "2", p["synchronous"])
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
		}
	}
	<-done
}
