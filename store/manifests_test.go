package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
)

// srcTree writes n small files (and a symlink, a .gitignore'd file) under a new directory.
func srcTree(t *testing.T, n int) string {
	t.Helper()
	root := t.TempDir()
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("pkg%d", i%3), fmt.Sprintf("f%03d.go", i))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf("package p\n// file %d\n", i)), 0o644))
	}
	require.NoError(t, os.Symlink("pkg0", filepath.Join(root, "link")))
	require.NoError(t, os.WriteFile(filepath.Join(root, ".gitignore"), []byte("*.log\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "debug.log"), []byte("ignored"), 0o644))
	return root
}

func scanTree(t *testing.T, root string, prev *drift.Manifest) *drift.Manifest {
	t.Helper()
	m, err := drift.Scan(context.Background(), drift.Spec{Root: root, Gitignore: true}, prev, drift.ScanOptions{})
	require.NoError(t, err)
	return m
}

func saveWithManifest(t *testing.T, s *Store, wf, id string, m *drift.Manifest, prev *EncodedManifest) *EncodedManifest {
	t.Helper()
	em, err := EncodeManifest(m, prev)
	require.NoError(t, err)
	mustSave(t, s, SaveRequest{WorkflowID: wf, CheckpointID: id, State: []byte(`{}`), Manifest: em})
	return em
}

func manifestBytes(t *testing.T, m *drift.Manifest) []byte {
	t.Helper()
	b, err := drift.MarshalManifest(m)
	require.NoError(t, err)
	return b
}

func loadManifestOf(t *testing.T, s *Store, checkpointID string) (*drift.Manifest, error) {
	t.Helper()
	ref, err := s.CheckpointManifestRef(context.Background(), checkpointID)
	require.NoError(t, err)
	s.manifests = manifestCache{} // read the rows, not the cache
	return s.Manifest(context.Background(), ref)
}

// driftRows checks the reference counts of the manifest tables against a recount from scratch
// (every chunk listed by a manifest exists and counts them, every entry listed by a chunk exists
// and counts them, nothing unlisted is left) and returns the row counts.
func driftRows(t *testing.T, s *Store) (manifests, chunks, entries int) {
	t.Helper()
	db := s.rdb
	chunkRefs := map[string]int{}
	rows, err := db.Query(`SELECT chunks FROM drift_manifests`)
	require.NoError(t, err)
	for rows.Next() {
		var ids []byte
		require.NoError(t, rows.Scan(&ids))
		require.Zero(t, len(ids)%chunkIDLen)
		for off := 0; off < len(ids); off += chunkIDLen {
			chunkRefs[string(ids[off:off+chunkIDLen])]++
		}
		manifests++
	}
	require.NoError(t, rows.Err())
	entryRefs := map[string]int{}
	rows, err = db.Query(`SELECT id, refs, keys FROM drift_chunks`)
	require.NoError(t, err)
	for rows.Next() {
		var id, keys []byte
		var refs int
		require.NoError(t, rows.Scan(&id, &refs, &keys))
		require.Equal(t, chunkRefs[string(id)], refs, "refs of chunk %x", id)
		delete(chunkRefs, string(id))
		for off := 0; off < len(keys); off += entryKeyLen {
			entryRefs[string(keys[off:off+entryKeyLen])]++
		}
		chunks++
	}
	require.NoError(t, rows.Err())
	require.Empty(t, chunkRefs, "chunks listed by manifests but missing")
	rows, err = db.Query(`SELECT key, refs, data FROM drift_entries`)
	require.NoError(t, err)
	for rows.Next() {
		var key, data []byte
		var refs int
		require.NoError(t, rows.Scan(&key, &refs, &data))
		require.Equal(t, entryRefs[string(key)], refs, "refs of entry %x", key)
		delete(entryRefs, string(key))
		e, err := drift.DecodeEntry(data)
		require.NoError(t, err)
		require.Equal(t, key, drift.EntryKey(e))
		entries++
	}
	require.NoError(t, rows.Err())
	require.Empty(t, entryRefs, "entries listed by chunks but missing")
	return manifests, chunks, entries
}

func TestManifestSaveLoad(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	root := srcTree(t, 20)
	m := scanTree(t, root, nil)
	require.Len(t, m.Entries, 22) // 20 files, .gitignore, the symlink; debug.log ignored
	saveWithManifest(t, s, "wf", "c-1", m, nil)

	got, err := loadManifestOf(t, s, "c-1")
	require.NoError(t, err)
	require.Equal(t, manifestBytes(t, m), manifestBytes(t, got), "the loaded manifest encodes like the saved one")
	require.Equal(t, m.Entries, got.Entries)

	ref, err := s.CheckpointManifestRef(ctx, "c-1")
	require.NoError(t, err)
	require.True(t, ref.HasManifest)
	require.Equal(t, m.Spec.Root, ref.Root)
	require.Equal(t, 22, ref.Files)
	latest, err := s.LatestManifestRef(ctx, "wf", "")
	require.NoError(t, err)
	require.Equal(t, ref, latest)

	// a checkpoint without sources
	mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "c-2"})
	ref, err = s.CheckpointManifestRef(ctx, "c-2")
	require.NoError(t, err)
	require.False(t, ref.HasManifest)
	_, err = s.Manifest(ctx, ref)
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), "no sources recorded for checkpoint \"c-2\"")
	_, err = s.CheckpointManifestRef(ctx, "nope")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.LatestManifestRef(ctx, "wf", "other-ns")
	require.ErrorIs(t, err, ErrNotFound)

	// the newest manifest of the workflow for that root, past checkpoints without one
	prev, err := s.LatestWorkflowManifest(ctx, "wf", m.Spec.Root)
	require.NoError(t, err)
	require.Equal(t, m.Entries, prev.Entries)
	none, err := s.LatestWorkflowManifest(ctx, "wf", "/elsewhere")
	require.NoError(t, err)
	require.Nil(t, none)

	// an empty tree is a manifest too
	empty := scanTree(t, t.TempDir(), nil)
	saveWithManifest(t, s, "wf", "c-3", empty, nil)
	got, err = loadManifestOf(t, s, "c-3")
	require.NoError(t, err)
	require.Empty(t, got.Entries)
}

func TestManifestDedupAndGC(t *testing.T) {
	s := openTest(t, func(o *Options) { o.DefaultRetention = Retention{KeepLast: 3} })
	ctx := context.Background()
	root := srcTree(t, 300)
	m1 := scanTree(t, root, nil)
	n := len(m1.Entries)
	e1 := saveWithManifest(t, s, "wf", "c-1", m1, nil)
	mf, chunks, entries := driftRows(t, s)
	require.Equal(t, 1, mf)
	require.Equal(t, n, entries)
	require.Greater(t, chunks, 3, "a 300-file manifest is cut into chunks")
	require.Less(t, chunks, 40)

	// same tree again: no new row but the manifest's own
	m2 := scanTree(t, root, m1)
	e2 := saveWithManifest(t, s, "wf", "c-2", m2, e1)
	mf, chunks2, entries2 := driftRows(t, s)
	require.Equal(t, 2, mf)
	require.Equal(t, chunks, chunks2)
	require.Equal(t, n, entries2)

	// one file edited: exactly one new entry row and one new chunk
	require.NoError(t, os.WriteFile(filepath.Join(root, "pkg1", "f001.go"), []byte("package p // edited\n"), 0o644))
	m3 := scanTree(t, root, m2)
	e3 := saveWithManifest(t, s, "wf", "c-3", m3, e2)
	_, chunks3, entries3 := driftRows(t, s)
	require.Equal(t, chunks+1, chunks3)
	require.Equal(t, n+1, entries3)
	got, err := loadManifestOf(t, s, "c-3")
	require.NoError(t, err)
	require.Equal(t, m3.Entries, got.Entries)
	got, err = loadManifestOf(t, s, "c-1")
	require.NoError(t, err)
	require.Equal(t, m1.Entries, got.Entries, "older manifests are unaffected")

	// a file added and one removed: the chunks around them change, the others stay shared
	require.NoError(t, os.WriteFile(filepath.Join(root, "pkg2", "new.go"), []byte("package p\n"), 0o644))
	require.NoError(t, os.Remove(filepath.Join(root, "pkg0", "f150.go")))
	m4 := scanTree(t, root, m3)
	saveWithManifest(t, s, "wf", "c-4", m4, e3) // retention (keepLast 3) removes c-1
	mf, chunks4, entries4 := driftRows(t, s)
	require.Equal(t, 3, mf)
	require.LessOrEqual(t, chunks4, chunks+5)
	require.Equal(t, n+2, entries4, "c-2 and c-3 still list the removed file; the new file is one row")
	got, err = loadManifestOf(t, s, "c-4")
	require.NoError(t, err)
	require.Equal(t, m4.Entries, got.Entries)

	// delete c-2 and c-3: the old version of the edited file and the removed file go
	_, err = s.Delete(ctx, "c-2")
	require.NoError(t, err)
	_, err = s.Delete(ctx, "c-3")
	require.NoError(t, err)
	mf, _, entries = driftRows(t, s)
	require.Equal(t, 1, mf)
	require.Equal(t, len(m4.Entries), entries)
	got, err = loadManifestOf(t, s, "c-4")
	require.NoError(t, err)
	require.Equal(t, m4.Entries, got.Entries)

	// retention, prune and workflow deletion collect what they remove
	for i := 5; i <= 8; i++ {
		saveWithManifest(t, s, "wf", fmt.Sprintf("c-%d", i), m4, nil)
	}
	mf, _, entries = driftRows(t, s)
	require.Equal(t, 3, mf)
	require.Equal(t, len(m4.Entries), entries)
	_, err = s.Prune(ctx, PruneRequest{WorkflowID: "wf", KeepLast: 1})
	require.NoError(t, err)
	mf, _, entries = driftRows(t, s)
	require.Equal(t, 1, mf)
	require.Equal(t, len(m4.Entries), entries)
	_, err = s.DeleteWorkflow(ctx, "wf")
	require.NoError(t, err)
	mf, chunks, entries = driftRows(t, s)
	require.Zero(t, mf+chunks+entries)

	// complete without preserve deletes too
	saveWithManifest(t, s, "wf2", "d-1", m4, nil)
	_, err = s.Complete(ctx, "wf2", false)
	require.NoError(t, err)
	mf, chunks, entries = driftRows(t, s)
	require.Zero(t, mf+chunks+entries)
}

// TestManifestSharedAcrossWorkflows: two workflows fingerprinting the same tree share rows;
// deleting one leaves the other intact.
func TestManifestSharedAcrossWorkflows(t *testing.T) {
	s := openTest(t)
	m := scanTree(t, srcTree(t, 50), nil)
	saveWithManifest(t, s, "a", "a-1", m, nil)
	_, chunks, entries := driftRows(t, s)
	saveWithManifest(t, s, "b", "b-1", m, nil)
	_, chunks2, entries2 := driftRows(t, s)
	require.Equal(t, chunks, chunks2)
	require.Equal(t, entries, entries2)
	_, err := s.DeleteWorkflow(context.Background(), "a")
	require.NoError(t, err)
	got, err := loadManifestOf(t, s, "b-1")
	require.NoError(t, err)
	require.Equal(t, m.Entries, got.Entries)
	driftRows(t, s)
}

// TestManifestIdempotentResave: repeating a save (same checkpointId and content) does not count
// its manifest twice.
func TestManifestIdempotentResave(t *testing.T) {
	s := openTest(t)
	m := scanTree(t, srcTree(t, 5), nil)
	saveWithManifest(t, s, "wf", "c-1", m, nil)
	res, err := s.Save(context.Background(), SaveRequest{WorkflowID: "wf", CheckpointID: "c-1", State: []byte(`{}`)})
	require.NoError(t, err)
	require.True(t, res.Existing)
	saveWithManifest(t, s, "wf", "c-1", m, nil)
	mf, _, entries := driftRows(t, s)
	require.Equal(t, 1, mf)
	require.Equal(t, len(m.Entries), entries)
}

// TestManifestEncodeReuse: entries equal to the previous encoding's are reused, and the
// result is the same as encoding from scratch.
func TestManifestEncodeReuse(t *testing.T) {
	root := srcTree(t, 40)
	m1 := scanTree(t, root, nil)
	e1, err := EncodeManifest(m1, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "pkg0", "f000.go"), []byte("changed"), 0o644))
	m2 := scanTree(t, root, m1)
	reused, err := EncodeManifest(m2, e1)
	require.NoError(t, err)
	fresh, err := EncodeManifest(m2, nil)
	require.NoError(t, err)
	require.Equal(t, fresh.ids, reused.ids)
	require.Equal(t, fresh.keys, reused.keys)
	require.Equal(t, fresh.data, reused.data)
	for i, e := range m2.Entries {
		require.Equal(t, drift.EntryKey(e), reused.keys[i])
	}
}

func TestManifestDamaged(t *testing.T) {
	s := openTest(t)
	m := scanTree(t, srcTree(t, 5), nil)
	saveWithManifest(t, s, "wf", "c-1", m, nil)
	db := rawDB(t, s.Path())
	_, err := db.Exec(`DELETE FROM drift_entries WHERE key = (SELECT key FROM drift_entries ORDER BY key LIMIT 1)`)
	require.NoError(t, err)
	_, err = loadManifestOf(t, s, "c-1")
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "c-1", ce.CheckpointID)
	require.Contains(t, ce.Reason, "missing")

	_, err = db.Exec(`UPDATE drift_manifests SET header = X'00'`)
	require.NoError(t, err)
	_, err = loadManifestOf(t, s, "c-1")
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Reason, "does not decode")
}

func TestWorkflowSources(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	got, err := s.WorkflowSources(ctx, "wf")
	require.NoError(t, err)
	require.Nil(t, got)

	spec := json.RawMessage(`{"root":"/src","include":["**/*.go"],"gitignore":true}`)
	require.NoError(t, s.SetWorkflowSources(ctx, "wf", spec)) // creates the workflow
	got, err = s.WorkflowSources(ctx, "wf")
	require.NoError(t, err)
	require.JSONEq(t, string(spec), string(got))
	ws, err := s.Workflows(ctx, false)
	require.NoError(t, err)
	require.Len(t, ws, 1)

	// other config members survive; the retention column is separate
	db := rawDB(t, s.Path())
	_, err = db.Exec(`UPDATE workflows SET config = json_set(config, '$.other', 7)`)
	require.NoError(t, err)
	_, err = s.Configure(ctx, "wf", &Retention{KeepLast: 2})
	require.NoError(t, err)
	spec2 := json.RawMessage(`{"root":"/other","gitignore":false}`)
	require.NoError(t, s.SetWorkflowSources(ctx, "wf", spec2))
	got, err = s.WorkflowSources(ctx, "wf")
	require.NoError(t, err)
	require.JSONEq(t, string(spec2), string(got))
	var cfg string
	require.NoError(t, s.rdb.QueryRow(`SELECT config FROM workflows WHERE workflow_id = 'wf'`).Scan(&cfg))
	require.JSONEq(t, `{"sources":{"root":"/other","gitignore":false},"other":7}`, cfg)
	r, err := s.Configure(ctx, "wf", nil)
	require.NoError(t, err)
	require.Equal(t, 2, r.KeepLast)

	require.NoError(t, s.SetWorkflowSources(ctx, "wf", nil))
	got, err = s.WorkflowSources(ctx, "wf")
	require.NoError(t, err)
	require.Nil(t, got)
	require.NoError(t, s.SetWorkflowSources(ctx, "unknown", nil)) // removing from nothing is fine

	// a config that is not an object is replaced, not an error
	_, err = db.Exec(`UPDATE workflows SET config = '[1]'`)
	require.NoError(t, err)
	require.NoError(t, s.SetWorkflowSources(ctx, "wf", spec))
	got, err = s.WorkflowSources(ctx, "wf")
	require.NoError(t, err)
	require.JSONEq(t, string(spec), string(got))
}

// TestMigrateToManifests: a database at schema 3 (before source manifests) with checkpoints
// migrates, and its checkpoints get manifests afterwards like new ones.
func TestMigrateToManifests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckptd.db")
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: path, maxSchema: 3, noBackground: true})
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

	s, err = Open(ctx, Options{Path: path, noBackground: true})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, SchemaVersion, userVersion(t, path))
	require.NoError(t, s.rdb.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name IN ('drift_manifests', 'drift_entries')`).Scan(&n))
	require.Equal(t, 2, n)
	ref, err := s.CheckpointManifestRef(ctx, "old")
	require.NoError(t, err)
	require.False(t, ref.HasManifest)
	m := scanTree(t, srcTree(t, 3), nil)
	saveWithManifest(t, s, "wf", "new", m, nil)
	got, err := loadManifestOf(t, s, "new")
	require.NoError(t, err)
	require.Equal(t, m.Entries, got.Entries)
	_, err = s.Delete(ctx, "old")
	require.NoError(t, err)
	_, err = s.Delete(ctx, "new")
	require.NoError(t, err)
	mf, chunks, entries := driftRows(t, s)
	require.Zero(t, mf+chunks+entries)
}

// TestManifestChunkLostKeys: a chunk whose key list lost entries does not load as a smaller
// manifest (its files would look added) but as a corrupt one.
func TestManifestChunkLostKeys(t *testing.T) {
	s := openTest(t)
	m := scanTree(t, srcTree(t, 5), nil)
	saveWithManifest(t, s, "wf", "c-1", m, nil)
	_, err := rawDB(t, s.Path()).Exec(`UPDATE drift_chunks SET keys = substr(keys, 17)`)
	require.NoError(t, err)
	_, err = loadManifestOf(t, s, "c-1")
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Reason, "is missing or damaged")
}

// TestManifestEntryChanged: an entry row whose bytes changed (say a flipped hash byte) loads as
// corrupt, not as a file that changed.
func TestManifestEntryChanged(t *testing.T) {
	s := openTest(t)
	m := scanTree(t, srcTree(t, 5), nil)
	saveWithManifest(t, s, "wf", "c-1", m, nil)
	e := m.Entries[0]
	e.Hash = append(drift.Digest(nil), e.Hash...)
	e.Hash[0] ^= 1
	_, err := rawDB(t, s.Path()).Exec(`UPDATE drift_entries SET data = ? WHERE key = ?`, drift.EncodeEntry(e), drift.EntryKey(m.Entries[0]))
	require.NoError(t, err)
	_, err = loadManifestOf(t, s, "c-1")
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Reason, "BLAKE3 mismatch")
}
