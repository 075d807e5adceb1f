package engine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
)

// srcTree writes n small files under a new directory.
func srcTree(t *testing.T, n int) string {
	t.Helper()
	root := t.TempDir()
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("pkg%d", i%3), fmt.Sprintf("f%03d.go", i))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf("package p\n// file %d\n", i)), 0o644))
	}
	return root
}

func scanTree(t *testing.T, root string, prev *drift.Manifest) *drift.Manifest {
	t.Helper()
	m, err := drift.Scan(context.Background(), drift.Spec{Root: root}, prev, drift.ScanOptions{})
	require.NoError(t, err)
	return m
}

func marshal(t *testing.T, m *drift.Manifest) []byte {
	t.Helper()
	b, err := drift.MarshalManifest(m)
	require.NoError(t, err)
	return b
}

// TestManifestsThroughTheStore: a manifest saved in storage form loads back as the same
// manifest; decoded manifests are cached by checkpoint; latest finds the base of the next scan.
func TestManifestsThroughTheStore(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	root := srcTree(t, 300)
	m1 := scanTree(t, root, nil)
	e1, err := drift.EncodeManifest(m1, nil)
	require.NoError(t, err)
	_, err = st.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-1", Manifest: ManifestRecord(e1)})
	require.NoError(t, err)
	_, err = st.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-2"})
	require.NoError(t, err)

	var ms manifestCache
	ref, err := st.CheckpointManifestRef(ctx, "c-1")
	require.NoError(t, err)
	got, err := ms.load(ctx, st, ref)
	require.NoError(t, err)
	assert.Equal(t, marshal(t, m1), marshal(t, got))
	again, err := ms.load(ctx, st, ref)
	require.NoError(t, err)
	assert.Same(t, got, again, "served from the cache")
	other, err := New(st, nil).Manifest(ctx, ref)
	require.NoError(t, err)
	assert.NotSame(t, got, other, "another engine decodes its own")
	assert.Equal(t, marshal(t, m1), marshal(t, other))

	latest, err := ms.latest(ctx, st, "wf", root)
	require.NoError(t, err)
	assert.Same(t, got, latest, "past c-2, which has no manifest")
	none, err := ms.latest(ctx, st, "wf", "/elsewhere")
	require.NoError(t, err)
	assert.Nil(t, none)
	ref2, err := st.CheckpointManifestRef(ctx, "c-2")
	require.NoError(t, err)
	_, err = ms.load(ctx, st, ref2)
	require.ErrorIs(t, err, store.ErrNotFound)

	// an edit: encoded against the previous encoding, it loads as the new tree
	require.NoError(t, os.WriteFile(filepath.Join(root, "pkg1", "f001.go"), []byte("edited\n"), 0o644))
	m3 := scanTree(t, root, m1)
	e3, err := drift.EncodeManifest(m3, e1)
	require.NoError(t, err)
	_, err = st.Save(ctx, store.SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "c-3", Manifest: ManifestRecord(e3)})
	require.NoError(t, err)
	latest, err = ms.latest(ctx, st, "wf", root)
	require.NoError(t, err)
	assert.Equal(t, marshal(t, m3), marshal(t, latest))

	// the cache keeps the last few
	for i := 4; i < 4+manifestCacheSize; i++ {
		id := fmt.Sprintf("c-%d", i)
		_, err = st.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: id, Manifest: ManifestRecord(e3)})
		require.NoError(t, err)
		r, err := st.CheckpointManifestRef(ctx, id)
		require.NoError(t, err)
		_, err = ms.load(ctx, st, r)
		require.NoError(t, err)
	}
	evicted, err := ms.load(ctx, st, ref)
	require.NoError(t, err)
	assert.NotSame(t, got, evicted)
	assert.Equal(t, marshal(t, m1), marshal(t, evicted))
}

// TestDecodeManifestDamage: a record whose bytes changed decodes to an error naming the
// checkpoint, never to another tree.
func TestDecodeManifestDamage(t *testing.T) {
	m := scanTree(t, srcTree(t, 10), nil)
	em, err := drift.EncodeManifest(m, nil)
	require.NoError(t, err)
	rec := ManifestRecord(em)
	ref := store.ManifestRef{CheckpointID: "c-1", WorkflowID: "wf"}
	got, err := DecodeManifest(ref, *rec)
	require.NoError(t, err)
	assert.Equal(t, marshal(t, m), marshal(t, got))

	damaged := *rec
	damaged.Chunks = append([]store.ManifestChunk(nil), rec.Chunks...)
	entries := append([][]byte(nil), damaged.Chunks[0].Entries...)
	entries[0] = append(bytes.Clone(entries[0]), 0)
	damaged.Chunks[0].Entries = entries
	_, err = DecodeManifest(ref, damaged)
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "c-1", ce.CheckpointID)
	assert.Equal(t, "wf", ce.WorkflowID)
	assert.Contains(t, ce.Reason, "BLAKE3 mismatch")

	damaged.Header = []byte{0}
	_, err = DecodeManifest(ref, damaged)
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "stored source manifest does not decode")

	// an exported checkpoint with such a record stops the export with the same error
	each := ExportManifests(func(store.Checkpoint, *drift.Manifest) error { return nil })
	err = each(store.Checkpoint{Summary: store.Summary{CheckpointID: "c-9", WorkflowID: "wf"}, Manifest: &damaged})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "c-9", ce.CheckpointID)
	var seen *drift.Manifest
	each = ExportManifests(func(_ store.Checkpoint, m *drift.Manifest) error { seen = m; return nil })
	require.NoError(t, each(store.Checkpoint{Manifest: rec}))
	assert.Equal(t, marshal(t, m), marshal(t, seen))
	require.NoError(t, each(store.Checkpoint{}))
	assert.Nil(t, seen)
}

// TestImportManifests: archived manifests are checked and put in storage form, consecutive ones
// sharing their encodings; an unsound one stops the import naming its checkpoint.
func TestImportManifests(t *testing.T) {
	root := srcTree(t, 40)
	m1 := scanTree(t, root, nil)
	require.NoError(t, os.WriteFile(filepath.Join(root, "pkg1", "new.go"), []byte("package p\n"), 0o644))
	m2 := scanTree(t, root, m1)
	in := []Sourced{
		{Checkpoint: store.Checkpoint{Summary: store.Summary{CheckpointID: "c-1"}}, Sources: m1},
		{Checkpoint: store.Checkpoint{Summary: store.Summary{CheckpointID: "c-2"}}},
		{Checkpoint: store.Checkpoint{Summary: store.Summary{CheckpointID: "c-3"}}, Sources: m2},
	}
	seq := func(yield func(Sourced, error) bool) {
		for _, sc := range in {
			if !yield(sc, nil) {
				return
			}
		}
	}
	var out []store.Checkpoint
	for cp, err := range ImportManifests(seq) {
		require.NoError(t, err)
		out = append(out, cp)
	}
	require.Len(t, out, 3)
	assert.Nil(t, out[1].Manifest)
	for i, m := range map[int]*drift.Manifest{0: m1, 2: m2} {
		fresh, err := drift.EncodeManifest(m, nil)
		require.NoError(t, err)
		assert.Equal(t, ManifestRecord(fresh), out[i].Manifest)
	}
	// the unchanged entries of c-3 share c-1's bytes (encoded once)
	assert.Same(t, &out[0].Manifest.Chunks[0].Entries[0][0], &out[2].Manifest.Chunks[0].Entries[0][0])

	rel := *m2
	rel.Spec.Root = "relative/dir"
	in[2].Sources = &rel
	var last error
	n := 0
	for _, err := range ImportManifests(seq) {
		n++
		last = err
	}
	assert.Equal(t, 3, n, "the error comes with the checkpoint, and ends the sequence")
	var ie *store.InvalidError
	require.ErrorAs(t, last, &ie)
	assert.Equal(t, "manifest", ie.Field)
	assert.Contains(t, ie.Reason, `root "relative/dir" is not an absolute path`)
	assert.Contains(t, last.Error(), `checkpoint "c-3"`)
}
