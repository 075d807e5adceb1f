package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// TestMigrateToManifests: a database at schema 3 (before source manifests) with checkpoints
// migrates, and its checkpoints get manifests afterwards like new ones.
func TestMigrateToManifests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckptd.db")
	ctx := context.Background()
	s, err := open(ctx, options(path, func(o *Options) { o.maxSchema = 3 }))
	require.NoError(t, err)
	var n int
	require.NoError(t, s.rdb.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name LIKE 'drift_%'`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, s.Close())
	require.Equal(t, 3, userVersion(t, path))
	// write a v3 checkpoint by hand (the store is read-mostly below its schema version)
	_, err = rawDB(t, path).Exec(`INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at) VALUES ('wf', 2, 1, 1);
		INSERT INTO checkpoints(checkpoint_id, workflow_id, namespace, seq, phase, step, state_type, size, stored_size, dedup,
		completed_count, pending_count, created_at, format_version, content_hash) VALUES ('old', 'wf', '', 1, 'completed', 0,
		'none', 0, 0, 0, 0, 0, 1, 1, X'00')`)
	require.NoError(t, err)

	s = openPath(t, path)
	require.Equal(t, SchemaVersion, userVersion(t, path))
	require.NoError(t, s.rdb.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name IN ('drift_manifests', 'drift_entries')`).Scan(&n))
	require.Equal(t, 2, n)
	ref, err := s.CheckpointManifestRef(ctx, "old")
	require.NoError(t, err)
	require.False(t, ref.HasManifest)
	key := []byte("0123456789abcdef")
	rec := &store.ManifestRecord{Root: "/src", Files: 1, Header: []byte("header"),
		Chunks: []store.ManifestChunk{{ID: []byte("fedcba9876543210"), Keys: key, Entries: [][]byte{[]byte("entry")}}}}
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "new", Manifest: rec})
	ref, err = s.CheckpointManifestRef(ctx, "new")
	require.NoError(t, err)
	got, err := s.Manifest(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, *rec, got)
	_, err = s.Delete(ctx, "old")
	require.NoError(t, err)
	_, err = s.Delete(ctx, "new")
	require.NoError(t, err)
	mf, chunks, entries := (&testBackend{s}).ManifestRows(t)
	require.Zero(t, mf+chunks+entries)
}
