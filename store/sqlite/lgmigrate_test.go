package sqlite

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/storetest"
)

// TestLGMigrateVariants: a database of schema 8 (one value per version, no thread rows) reads as
// before after the migration: every value variant 0, every thread with a row dated by its newest
// checkpoint; a replayed branch after it gets a variant of its own.
func TestLGMigrateVariants(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := open(ctx, options(path, func(o *Options) { o.maxSchema = 8 }))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	db := rawDB(t, path)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sum := func(b string) []byte { h := sha256.Sum256([]byte(b)); return h[:] }
	for i, id := range []string{"c1", "c2"} {
		parent := any(nil)
		if i > 0 {
			parent = "c1"
		}
		_, err := db.Exec(`INSERT INTO lg_checkpoints(thread_id, namespace, checkpoint_id, parent_id, created_at, channel_versions,
			metadata, type, encoding, size, sha256, data) VALUES ('t', '', ?, ?, ?, '{"a":"1"}', NULL, 'json', 0, 2, ?, '{}')`,
			id, parent, created.Add(time.Duration(i)*time.Second).UnixMicro(), sum("{}"))
		require.NoError(t, err)
	}
	_, err = db.Exec(`INSERT INTO lg_blobs(thread_id, namespace, channel, version, type, encoding, size, sha256, data)
		VALUES ('t', '', 'a', '"1"', 'json', 0, 5, ?, '"old"')`, sum(`"old"`))
	require.NoError(t, err)
	require.NoError(t, db.Close())

	s = openPath(t, path)
	for _, id := range []string{"c1", "c2"} {
		got, err := s.LGGet(ctx, "t", "", id)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"a": `"old"`}, storetest.BlobMap(got))
	}
	idle, err := s.LGIdleThreads(ctx, time.Now(), 0)
	require.NoError(t, err)
	require.Len(t, idle, 1)
	require.Equal(t, created.Add(time.Second), idle[0].UpdatedAt)
	// a branch from c1 that stores other bytes under "1"
	storetest.PutLG(t, s, "t", "", "c3", "c1", map[string]any{"a": "1"}, map[string]string{"a": `"new"`}, "")
	storetest.PutLG(t, s, "t", "", "c4", "c3", map[string]any{"a": "1"}, nil, "")
	for id, want := range map[string]string{"c1": `"old"`, "c2": `"old"`, "c3": `"new"`, "c4": `"new"`} {
		got, err := s.LGGet(ctx, "t", "", id)
		require.NoError(t, err)
		require.Equal(t, want, storetest.BlobMap(got)["a"], id)
	}
	var refs *string
	require.NoError(t, rawDB(t, path).QueryRow(`SELECT value_refs FROM lg_checkpoints WHERE checkpoint_id = 'c4'`).Scan(&refs))
	require.Equal(t, `{"a":1}`, *refs)
	_, values, _, _ := (&testBackend{Store: s}).LGRows(t)
	require.Equal(t, 2, values)
	_ = store.LGMatchJSON
}
