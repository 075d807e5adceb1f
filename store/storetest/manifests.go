package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func init() {
	add(
		testCase{"ManifestSaveLoad", testManifestSaveLoad},
		testCase{"ManifestDedupAndGC", testManifestDedupAndGC},
		testCase{"ManifestSharedAcrossWorkflows", testManifestSharedAcrossWorkflows},
		testCase{"ManifestIdempotentResave", testManifestIdempotentResave},
		testCase{"ManifestMissingRows", testManifestMissingRows},
		testCase{"VerifyManifests", testVerifyManifests},
		testCase{"WorkflowSources", testWorkflowSources},
		testCase{"SaveAssumingNoSources", testSaveAssumingNoSources},
	)
}

// Manifests are opaque to the store: the suite builds records the way drift's encoder shapes
// them (a header, entries named by a content address, runs of keys cut after paths whose hash
// says so), with SHA-256 for the addresses. fakeChecker checks them like drift checks its own.

// tree is a source tree as the fake encoder sees it: path -> content version.
type tree map[string]string

func sum16(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:store.ManifestKeyLen]
}

func fakeEntry(path, version string) []byte { return []byte("entry:" + path + ":" + version) }

// record encodes t in storage form.
func (t tree) record(root string) *store.ManifestRecord {
	paths := make([]string, 0, len(t))
	for p := range t {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	r := &store.ManifestRecord{Root: root, Files: len(paths), Header: []byte("HDR:" + root)}
	var cur store.ManifestChunk
	for i, p := range paths {
		data := fakeEntry(p, t[p])
		cur.Keys = append(cur.Keys, sum16(data)...)
		cur.Entries = append(cur.Entries, data)
		if i+1 == len(paths) || sum16([]byte(p))[0]%8 == 0 || len(cur.Entries) == 32 {
			cur.ID = sum16(cur.Keys)
			r.Chunks = append(r.Chunks, cur)
			cur = store.ManifestChunk{}
		}
	}
	return r
}

func (t tree) with(kv ...string) tree {
	out := tree{}
	for k, v := range t {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

func newTree(n int) tree {
	t := tree{}
	for i := range n {
		t[fmt.Sprintf("pkg%d/f%03d.go", i%3, i)] = "v1"
	}
	return t
}

// fakeChecker checks fake records' rows as drift.StoredChecker checks real ones.
type fakeChecker struct{}

func (fakeChecker) CheckEntry(key, data []byte) error {
	if string(sum16(data)) != string(key) {
		return errors.New("address mismatch")
	}
	if !strings.HasPrefix(string(data), "entry:") {
		return errors.New("does not decode")
	}
	return nil
}

func (fakeChecker) CheckChunk(id, keys []byte) error {
	if string(sum16(keys)) != string(id) {
		return errors.New("address mismatch")
	}
	return nil
}

func (fakeChecker) CheckHeader(header []byte) error {
	if !strings.HasPrefix(string(header), "HDR:") {
		return errors.New("bad header")
	}
	return nil
}

func saveWithRecord(t *testing.T, s store.Backend, wf, id string, r *store.ManifestRecord) {
	t.Helper()
	mustSave(t, s, store.SaveRequest{WorkflowID: wf, CheckpointID: id, State: []byte(`{}`), Manifest: r})
}

func recordOf(t *testing.T, s store.Backend, checkpointID string) (store.ManifestRecord, error) {
	t.Helper()
	ref, err := s.CheckpointManifestRef(context.Background(), checkpointID)
	require.NoError(t, err)
	return s.Manifest(context.Background(), ref)
}

// requireRecord checks that checkpointID's stored manifest reads back as want.
func requireRecord(t *testing.T, s store.Backend, checkpointID string, want *store.ManifestRecord) {
	t.Helper()
	got, err := recordOf(t, s, checkpointID)
	require.NoError(t, err, checkpointID)
	require.Equal(t, *want, got, checkpointID)
}

func testManifestSaveLoad(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	r1 := newTree(22).record("/src")
	require.Greater(t, len(r1.Chunks), 1)
	saveWithRecord(t, s, "wf", "c-1", r1)
	requireRecord(t, s, "c-1", r1)

	ref, err := s.CheckpointManifestRef(ctx, "c-1")
	require.NoError(t, err)
	require.True(t, ref.HasManifest)
	require.Equal(t, "/src", ref.Root)
	require.Equal(t, 22, ref.Files)
	require.Equal(t, "wf", ref.WorkflowID)
	require.EqualValues(t, 1, ref.Seq)
	latest, err := s.LatestManifestRef(ctx, "wf", "")
	require.NoError(t, err)
	require.Equal(t, ref, latest)

	// a checkpoint without sources
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-2"})
	ref2, err := s.CheckpointManifestRef(ctx, "c-2")
	require.NoError(t, err)
	require.False(t, ref2.HasManifest)
	require.NotEqual(t, ref.Key, ref2.Key)
	_, err = s.Manifest(ctx, ref2)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Contains(t, err.Error(), "no sources recorded for checkpoint \"c-2\"")
	_, err = s.CheckpointManifestRef(ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.LatestManifestRef(ctx, "wf", "other-ns")
	require.ErrorIs(t, err, store.ErrNotFound)

	// the newest manifest of the workflow for that root, past checkpoints without one, in any
	// namespace
	src, err := s.LatestSourcesRef(ctx, "wf", "/src")
	require.NoError(t, err)
	require.Equal(t, ref, src)
	r3 := newTree(5).record("/src")
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "c-3", Manifest: r3})
	src, err = s.LatestSourcesRef(ctx, "wf", "/src")
	require.NoError(t, err)
	require.Equal(t, "c-3", src.CheckpointID)
	_, err = s.LatestSourcesRef(ctx, "wf", "/elsewhere")
	require.ErrorIs(t, err, store.ErrNotFound)

	// an empty tree is a manifest too
	empty := tree{}.record("/empty")
	saveWithRecord(t, s, "wf", "c-4", empty)
	got, err := recordOf(t, s, "c-4")
	require.NoError(t, err)
	require.Empty(t, got.Chunks)
	require.Equal(t, empty.Header, got.Header)
	require.Zero(t, got.Files)

	// a record whose shape is wrong is refused
	bad := newTree(3).record("/src")
	bad.Files = 4
	_, err = s.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-5", Manifest: bad})
	require.Error(t, err)
	_, err = s.CheckpointManifestRef(ctx, "c-5")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing of a refused save is stored")
}

func testManifestDedupAndGC(t *testing.T, h *harness) {
	s := h.db(t, withRetention(store.Retention{KeepLast: 3}))
	c := corrupter(t, s)
	ctx := context.Background()
	t1 := newTree(300)
	n := len(t1)
	r1 := t1.record("/src")
	saveWithRecord(t, s, "wf", "c-1", r1)
	mf, chunks, entries := c.ManifestRows(t)
	require.Equal(t, 1, mf)
	require.Equal(t, n, entries)
	require.Equal(t, len(r1.Chunks), chunks)
	require.Greater(t, chunks, 3, "a 300-file manifest is cut into chunks")

	// same tree again: no new row but the manifest's own
	saveWithRecord(t, s, "wf", "c-2", t1.record("/src"))
	mf, chunks2, entries2 := c.ManifestRows(t)
	require.Equal(t, 2, mf)
	require.Equal(t, chunks, chunks2)
	require.Equal(t, n, entries2)

	// one file edited: exactly one new entry and one new chunk
	t3 := t1.with("pkg1/f001.go", "v2")
	r3 := t3.record("/src")
	saveWithRecord(t, s, "wf", "c-3", r3)
	_, chunks3, entries3 := c.ManifestRows(t)
	require.Equal(t, chunks+1, chunks3)
	require.Equal(t, n+1, entries3)
	requireRecord(t, s, "c-3", r3)
	requireRecord(t, s, "c-1", r1) // older manifests are unaffected

	// a file added and one removed: the chunks around them change, the others stay shared
	t4 := t3.with("pkg2/new.go", "v1", "pkg0/f150.go", "")
	r4 := t4.record("/src")
	saveWithRecord(t, s, "wf", "c-4", r4) // retention (keepLast 3) removes c-1
	mf, chunks4, entries4 := c.ManifestRows(t)
	require.Equal(t, 3, mf)
	require.LessOrEqual(t, chunks4, chunks+5)
	require.Equal(t, n+2, entries4, "c-2 and c-3 still list the removed file; the new file is one entry")
	requireRecord(t, s, "c-4", r4)

	// delete c-2 and c-3: the old version of the edited file and the removed file go
	_, err := s.Delete(ctx, "c-2")
	require.NoError(t, err)
	_, err = s.Delete(ctx, "c-3")
	require.NoError(t, err)
	mf, _, entries = c.ManifestRows(t)
	require.Equal(t, 1, mf)
	require.Equal(t, len(t4), entries)
	requireRecord(t, s, "c-4", r4)

	// retention, prune and workflow deletion collect what they remove
	for i := 5; i <= 8; i++ {
		saveWithRecord(t, s, "wf", fmt.Sprintf("c-%d", i), r4)
	}
	mf, _, entries = c.ManifestRows(t)
	require.Equal(t, 3, mf)
	require.Equal(t, len(t4), entries)
	_, err = s.Prune(ctx, store.PruneRequest{WorkflowID: "wf", KeepLast: 1})
	require.NoError(t, err)
	mf, _, entries = c.ManifestRows(t)
	require.Equal(t, 1, mf)
	require.Equal(t, len(t4), entries)
	_, err = s.DeleteWorkflow(ctx, "wf")
	require.NoError(t, err)
	mf, chunks, entries = c.ManifestRows(t)
	require.Zero(t, mf+chunks+entries)

	// complete without preserve deletes too
	saveWithRecord(t, s, "wf2", "d-1", r4)
	_, err = s.Complete(ctx, "wf2", false)
	require.NoError(t, err)
	mf, chunks, entries = c.ManifestRows(t)
	require.Zero(t, mf+chunks+entries)
}

// testManifestSharedAcrossWorkflows: two workflows fingerprinting the same tree share rows;
// deleting one leaves the other intact.
func testManifestSharedAcrossWorkflows(t *testing.T, h *harness) {
	s := h.db(t)
	c := corrupter(t, s)
	r := newTree(50).record("/src")
	saveWithRecord(t, s, "a", "a-1", r)
	_, chunks, entries := c.ManifestRows(t)
	saveWithRecord(t, s, "b", "b-1", r)
	_, chunks2, entries2 := c.ManifestRows(t)
	require.Equal(t, chunks, chunks2)
	require.Equal(t, entries, entries2)
	_, err := s.DeleteWorkflow(context.Background(), "a")
	require.NoError(t, err)
	requireRecord(t, s, "b-1", r)
	c.ManifestRows(t)
}

// testManifestIdempotentResave: repeating a save (same checkpointId and content) does not count
// its manifest twice.
func testManifestIdempotentResave(t *testing.T, h *harness) {
	s := h.db(t)
	r := newTree(5).record("/src")
	saveWithRecord(t, s, "wf", "c-1", r)
	res, err := s.Save(context.Background(), store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-1", State: []byte(`{}`)})
	require.NoError(t, err)
	require.True(t, res.Existing)
	saveWithRecord(t, s, "wf", "c-1", r)
	mf, _, entries := corrupter(t, s).ManifestRows(t)
	require.Equal(t, 1, mf)
	require.Equal(t, 5, entries)
	requireRecord(t, s, "c-1", r)
}

// testManifestMissingRows: a manifest whose chunk or entry rows are gone reads as corrupt (never
// as a smaller manifest), naming its checkpoint.
func testManifestMissingRows(t *testing.T, h *harness) {
	s := h.db(t)
	c := corrupter(t, s)
	r := newTree(40).record("/src")
	saveWithRecord(t, s, "wf", "c-1", r)
	c.DropManifestEntry(t, r.Chunks[1].Keys[:store.ManifestKeyLen])
	_, err := recordOf(t, s, "c-1")
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "c-1", ce.CheckpointID)
	require.Equal(t, "wf", ce.WorkflowID)
	require.Contains(t, ce.Reason, "missing")

	saveWithRecord(t, s, "wf", "c-2", newTree(7).record("/other"))
	c.DropManifestChunks(t)
	_, err = recordOf(t, s, "c-2")
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "c-2", ce.CheckpointID)
	require.Contains(t, ce.Reason, "missing")
}

// testVerifyManifests: every kind of damage to the stored manifest rows is found by
// store.VerifyManifests, and named by the checkpoints whose manifest it breaks.
func testVerifyManifests(t *testing.T, h *harness) {
	t1 := newTree(40)
	r1 := t1.record("/src")
	r2 := t1.with("pkg0/extra.go", "v1").record("/src")
	build := func(t *testing.T) (store.Backend, Corrupter) {
		s := h.db(t)
		saveWithRecord(t, s, "wf", "c-1", r1)
		saveWithRecord(t, s, "wf", "c-2", r2) // shares most entries and chunks with c-1
		mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-3", State: []byte(`{}`)})
		return s, corrupter(t, s)
	}
	s, _ := build(t)
	counts, bad, err := store.VerifyManifests(context.Background(), s, fakeChecker{})
	require.NoError(t, err)
	assert.Empty(t, bad)
	assert.Equal(t, 2, counts.Manifests)
	assert.Equal(t, len(t1)+1, counts.Entries)

	shared := r1.Chunks[0].Keys[:store.ManifestKeyLen] // unchanged: in both manifests
	sharedData := r1.Chunks[0].Entries[0]
	for _, tc := range []struct {
		name, reason string
		damage       func(t *testing.T, c Corrupter)
		ids          []string
	}{
		{"entry bytes", "file entry", func(t *testing.T, c Corrupter) {
			c.SetManifestEntry(t, shared, append(slices.Clone(sharedData), 0))
		}, []string{"c-1", "c-2"}},
		{"entry missing", "is missing", func(t *testing.T, c Corrupter) { c.DropManifestEntry(t, shared) }, []string{"c-1", "c-2"}},
		{"chunk keys", "entry chunk", func(t *testing.T, c Corrupter) {
			for _, ch := range r1.Chunks {
				c.SetManifestChunkKeys(t, ch.ID, ch.Keys[store.ManifestKeyLen:])
			}
		}, []string{"c-1", "c-2"}},
		{"chunk missing", "entry chunk", func(t *testing.T, c Corrupter) { c.DropManifestChunks(t) }, []string{"c-1", "c-2"}},
		{"header", "source manifest header", func(t *testing.T, c Corrupter) { c.SetManifestHeader(t, "c-2", []byte{0}) },
			[]string{"c-2"}},
		{"chunk list", "chunk list of 2 bytes", func(t *testing.T, c Corrupter) { c.SetManifestChunkIDs(t, "c-1", []byte{1, 2}) },
			[]string{"c-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := build(t)
			tc.damage(t, c)
			_, bad, err := store.VerifyManifests(context.Background(), s, fakeChecker{})
			require.NoError(t, err)
			var ids []string
			for _, p := range bad {
				ids = append(ids, p.CheckpointID)
				assert.Equal(t, "wf", p.WorkflowID)
				assert.Contains(t, p.Reason, tc.reason)
			}
			assert.Equal(t, tc.ids, ids)
		})
	}
}

// testWorkflowSources: a workflow's configured sources live beside the rest of its config.
func testWorkflowSources(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	got, err := s.WorkflowSources(ctx, "wf")
	require.NoError(t, err)
	require.Nil(t, got)

	spec := json.RawMessage(`{"root":"/src","include":["**/*.go"],"gitignore":true}`)
	require.NoError(t, s.SetWorkflowSources(ctx, "wf", spec)) // creates the workflow
	got, err = s.WorkflowSources(ctx, "wf")
	require.NoError(t, err)
	require.JSONEq(t, string(spec), string(got))
	ws, err := store.AllWorkflows(ctx, s, false)
	require.NoError(t, err)
	require.Len(t, ws, 1)

	// other config members survive; the retention is separate
	_, err = s.Import(ctx, store.WorkflowRecord{WorkflowID: "other", Config: json.RawMessage(`{"other":7}`)},
		func(func(store.Checkpoint, error) bool) {}, store.ImportOptions{})
	require.NoError(t, err)
	_, err = s.Configure(ctx, "other", &store.Retention{KeepLast: 2})
	require.NoError(t, err)
	spec2 := json.RawMessage(`{"root":"/other","gitignore":false}`)
	require.NoError(t, s.SetWorkflowSources(ctx, "other", spec2))
	got, err = s.WorkflowSources(ctx, "other")
	require.NoError(t, err)
	require.JSONEq(t, string(spec2), string(got))
	rec, _ := exportAll(t, s, "other")
	require.JSONEq(t, `{"sources":{"root":"/other","gitignore":false},"other":7}`, string(rec.Config))
	r, err := s.Configure(ctx, "other", nil)
	require.NoError(t, err)
	require.Equal(t, 2, r.KeepLast)

	require.NoError(t, s.SetWorkflowSources(ctx, "other", nil))
	got, err = s.WorkflowSources(ctx, "other")
	require.NoError(t, err)
	require.Nil(t, got)
	rec, _ = exportAll(t, s, "other")
	require.JSONEq(t, `{"other":7}`, string(rec.Config))
	require.NoError(t, s.SetWorkflowSources(ctx, "unknown", nil)) // removing from nothing is fine

	// a config that is not an object is replaced, not an error
	_, err = s.Import(ctx, store.WorkflowRecord{WorkflowID: "list", Config: json.RawMessage(`[1]`)},
		func(func(store.Checkpoint, error) bool) {}, store.ImportOptions{})
	require.NoError(t, err)
	got, err = s.WorkflowSources(ctx, "list")
	require.NoError(t, err)
	require.Nil(t, got)
	require.NoError(t, s.SetWorkflowSources(ctx, "list", spec))
	got, err = s.WorkflowSources(ctx, "list")
	require.NoError(t, err)
	require.JSONEq(t, string(spec), string(got))

	err = s.SetWorkflowSources(ctx, "wf", json.RawMessage(`{`))
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "sources", ie.Field)
}

// testSaveAssumingNoSources: a save made on the belief that its workflow has no sources
// configured (SaveRequest.AssumeNoSources) is checked in its own transaction: stored as it is
// either way, with the sources found when the belief was wrong.
func testSaveAssumingNoSources(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	save := func(wf string, step int64) store.SaveResult {
		t.Helper()
		return mustSave(t, s, store.SaveRequest{WorkflowID: wf, Step: step, State: []byte(fmt.Sprintf(`{"n":%d}`, step)),
			StateType: store.StateJSON, AssumeNoSources: true})
	}
	assert.Nil(t, save("wf", 0).ConfiguredSources, "a new workflow has no sources")
	assert.Nil(t, save("wf", 1).ConfiguredSources)

	// configured by someone else meanwhile: found, and the save is stored without a fingerprint
	spec := json.RawMessage(`{"root":"/src","gitignore":true}`)
	require.NoError(t, s.SetWorkflowSources(ctx, "wf", spec))
	res := save("wf", 2)
	require.JSONEq(t, string(spec), string(res.ConfiguredSources))
	cp, err := s.Load(ctx, res.CheckpointID)
	require.NoError(t, err)
	assert.Equal(t, `{"n":2}`, string(cp.State))
	assert.Equal(t, int64(3), cp.Seq)
	ref, err := s.CheckpointManifestRef(ctx, res.CheckpointID)
	require.NoError(t, err)
	assert.False(t, ref.HasManifest, "no fingerprint was recorded")

	// without the assumption nothing is checked or reported
	res = mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Step: 3, State: []byte(`{"n":3}`), StateType: store.StateJSON})
	assert.Nil(t, res.ConfiguredSources)

	// other members of the config are not sources; removed sources are none
	_, err = s.Import(ctx, store.WorkflowRecord{WorkflowID: "cfg", Config: json.RawMessage(`{"other":7}`)},
		func(func(store.Checkpoint, error) bool) {}, store.ImportOptions{})
	require.NoError(t, err)
	assert.Nil(t, save("cfg", 0).ConfiguredSources)
	require.NoError(t, s.SetWorkflowSources(ctx, "wf", nil))
	assert.Nil(t, save("wf", 4).ConfiguredSources)

	// an idempotent repeat reports the first save's outcome, nothing more
	first := save("rep", 0)
	require.NoError(t, s.SetWorkflowSources(ctx, "rep", spec))
	again := mustSave(t, s, store.SaveRequest{WorkflowID: "rep", CheckpointID: first.CheckpointID, Step: 0, State: []byte(`{"n":0}`),
		StateType: store.StateJSON, AssumeNoSources: true})
	assert.True(t, again.Existing)
	assert.Nil(t, again.ConfiguredSources)
}
