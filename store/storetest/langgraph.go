package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func init() {
	add(
		testCase{"LGPutGet", testLGPutGet},
		testCase{"LGPutValidation", testLGPutValidation},
		testCase{"LGReplace", testLGReplace},
		testCase{"LGWrites", testLGWrites},
		testCase{"LGList", testLGList},
		testCase{"LGChannelHistory", testLGChannelHistory},
		testCase{"LGDeleteCopyPruneRuns", testLGDeleteCopyPruneRuns},
		testCase{"LGPruneKeepsDeltaChain", testLGPruneKeepsDeltaChain},
		testCase{"LGCorruption", testLGCorruption},
		testCase{"LGSeparateFromCheckpoints", testLGSeparateFromCheckpoints},
		testCase{"LGThreads", testLGThreads},
		testCase{"LGExportImportRoundTrip", testLGExportImportRoundTrip},
		testCase{"LGImportRefuses", testLGImportRefuses},
		testCase{"LGExportCorrupt", testLGExportCorrupt},
	)
}

// PutLG stores one LangGraph checkpoint (checkpoint bytes {"id":id}, type "json"): blobs maps a
// channel to its value, stored at the version versions gives it; "" stores an empty blob.
func PutLG(t testing.TB, s store.Backend, thread, ns, id, parent string, versions map[string]any, blobs map[string]string, meta string) {
	t.Helper()
	vj, err := json.Marshal(versions)
	require.NoError(t, err)
	req := store.LGPutRequest{ThreadID: thread, Namespace: ns, CheckpointID: id, ParentID: parent, Type: "json",
		Checkpoint: []byte(`{"id":"` + id + `"}`), ChannelVersions: vj}
	if meta != "" {
		req.Metadata = json.RawMessage(meta)
	}
	chans := make([]string, 0, len(blobs))
	for ch := range blobs {
		chans = append(chans, ch)
	}
	sort.Strings(chans)
	for _, ch := range chans {
		raw, _ := json.Marshal(versions[ch])
		key, err := store.CanonicalVersion(raw)
		require.NoError(t, err)
		b := store.LGBlob{Channel: ch, Version: key, Type: "json", Data: []byte(blobs[ch])}
		if blobs[ch] == "" {
			b.Type, b.Data = store.LGEmptyType, nil
		}
		req.Blobs = append(req.Blobs, b)
	}
	p, _ := s.LGPut(req)
	require.NoError(t, p.Wait(context.Background()))
}

// PutLGWrites stores pending writes of one task against a checkpoint: kv is channel, value, ...
// at idx 0, 1, ...
func PutLGWrites(t testing.TB, s store.Backend, thread, ns, id, task, path string, kv ...string) {
	t.Helper()
	var ws []store.LGWrite
	for i := 0; i+1 < len(kv); i += 2 {
		ws = append(ws, store.LGWrite{TaskID: task, TaskPath: path, Idx: int64(i / 2), Channel: kv[i], Type: "json", Data: []byte(kv[i+1])})
	}
	p, _ := s.LGPutWrites(thread, ns, id, ws)
	require.NoError(t, p.Wait(context.Background()))
}

// BlobMap is a tuple's channel values by channel.
func BlobMap(t *store.LGTuple) map[string]string {
	out := map[string]string{}
	for _, b := range t.Blobs {
		out[b.Channel] = string(b.Data)
	}
	return out
}

// TupleIDs lists the tuples' checkpoint ids.
func TupleIDs(ts []store.LGTuple) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.CheckpointID)
	}
	return out
}

func testLGPutGet(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	PutLG(t, s, "t1", "", "c1", "", map[string]any{"a": 1, "b": 1, "gone": 1}, map[string]string{"a": `"a1"`, "b": `"b1"`, "gone": `"x"`}, `{"source":"input","step":-1}`)
	PutLG(t, s, "t1", "", "c2", "c1", map[string]any{"a": 2, "b": 1, "e": 1}, map[string]string{"a": `"a2"`, "e": ""}, `{"source":"loop","step":0}`)

	cases := []struct {
		name, id, wantID, wantParent string
		want                         map[string]string
	}{
		{"latest", "", "c2", "c1", map[string]string{"a": `"a2"`, "b": `"b1"`}},
		{"by id, older versions", "c1", "c1", "", map[string]string{"a": `"a1"`, "b": `"b1"`, "gone": `"x"`}},
		{"by id", "c2", "c2", "c1", map[string]string{"a": `"a2"`, "b": `"b1"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.LGGet(ctx, "t1", "", tc.id)
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, tc.wantID, got.CheckpointID)
			require.Equal(t, tc.wantParent, got.ParentID)
			require.Equal(t, tc.want, BlobMap(got))
			require.Equal(t, `{"id":"`+tc.wantID+`"}`, string(got.Checkpoint))
			require.Equal(t, "json", got.Type)
		})
	}
	// blobs come in channelVersions order; empty ("e") and removed ("gone") are left out
	got, _ := s.LGGet(ctx, "t1", "", "c2")
	require.Equal(t, []string{"a", "b"}, []string{got.Blobs[0].Channel, got.Blobs[1].Channel})
	require.JSONEq(t, `{"source":"loop","step":0}`, string(got.Metadata))

	for _, miss := range [][3]string{{"t1", "", "nope"}, {"t2", "", ""}, {"t1", "child", ""}} {
		got, err := s.LGGet(ctx, miss[0], miss[1], miss[2])
		require.NoError(t, err)
		require.Nil(t, got, "%v", miss)
	}
}

func testLGPutValidation(t *testing.T, h *harness) {
	s := h.db(t)
	base := func() store.LGPutRequest {
		return store.LGPutRequest{ThreadID: "t", CheckpointID: "c", Type: "json", Checkpoint: []byte("{}"), ChannelVersions: json.RawMessage(`{}`)}
	}
	cases := []struct {
		name  string
		mut   func(r *store.LGPutRequest)
		field string
	}{
		{"no id", func(r *store.LGPutRequest) { r.CheckpointID = "" }, "checkpointId"},
		{"long thread", func(r *store.LGPutRequest) { r.ThreadID = strings.Repeat("x", store.MaxLGThreadIDBytes+1) }, "threadId"},
		{"negative retention", func(r *store.LGPutRequest) { r.Retention = &store.Retention{KeepLast: -1} }, "retention.keepLast"},
		{"no type", func(r *store.LGPutRequest) { r.Type = "" }, "checkpoint.type"},
		{"no versions", func(r *store.LGPutRequest) { r.ChannelVersions = nil }, "channelVersions"},
		{"versions not object", func(r *store.LGPutRequest) { r.ChannelVersions = json.RawMessage(`[1]`) }, "channelVersions"},
		{"bool version", func(r *store.LGPutRequest) { r.ChannelVersions = json.RawMessage(`{"a":true}`) }, "channelVersions"},
		{"dup channel", func(r *store.LGPutRequest) { r.ChannelVersions = json.RawMessage(`{"a":1,"a":2}`) }, "channelVersions"},
		{"metadata array", func(r *store.LGPutRequest) { r.Metadata = json.RawMessage(`[1]`) }, "metadata"},
		{"blob no channel", func(r *store.LGPutRequest) { r.Blobs = []store.LGBlob{{Version: "1", Type: "json"}} }, "blobs[0].channel"},
		{"blob no type", func(r *store.LGPutRequest) { r.Blobs = []store.LGBlob{{Channel: "a", Version: "1"}} }, "blobs[0].type"},
		{"empty with bytes", func(r *store.LGPutRequest) {
			r.Blobs = []store.LGBlob{{Channel: "a", Version: "1", Type: store.LGEmptyType, Data: []byte("x")}}
		}, "blobs[0].length"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.mut(&r)
			p, _ := s.LGPut(r)
			err := p.Wait(context.Background())
			var ie *store.InvalidError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, tc.field, ie.Field)
		})
	}
	// nothing was stored, and the writer still works
	PutLG(t, s, "t", "", "ok", "", map[string]any{}, nil, "")
	got, err := s.LGGet(context.Background(), "t", "", "")
	require.NoError(t, err)
	require.Equal(t, "ok", got.CheckpointID)
}

func testLGReplace(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	PutLG(t, s, "t", "", "c1", "", map[string]any{"a": "v1"}, map[string]string{"a": `"first"`}, `{"step":1}`)
	PutLGWrites(t, s, "t", "", "c1", "task", "", "ch", `"w"`)
	// same id again: checkpoint row replaced with the value it sends (as the reference savers,
	// which store values inline), writes kept
	PutLG(t, s, "t", "", "c1", "p0", map[string]any{"a": "v1"}, map[string]string{"a": `"second"`}, `{"step":2}`)
	got, err := s.LGGet(ctx, "t", "", "c1")
	require.NoError(t, err)
	require.Equal(t, `"second"`, BlobMap(got)["a"])
	require.Equal(t, "p0", got.ParentID)
	require.JSONEq(t, `{"step":2}`, string(got.Metadata))
	require.Len(t, got.Writes, 1)
	// the metadata index follows the replacement
	res, err := s.LGList(ctx, store.LGListFilter{Metadata: map[string]json.RawMessage{"step": json.RawMessage(`1`)}})
	require.NoError(t, err)
	require.Empty(t, res.Tuples)
	res, err = s.LGList(ctx, store.LGListFilter{Metadata: map[string]json.RawMessage{"step": json.RawMessage(`2.0`)}})
	require.NoError(t, err)
	require.Equal(t, []string{"c1"}, TupleIDs(res.Tuples))
}

func testLGWrites(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	PutLG(t, s, "t", "", "c", "", map[string]any{}, nil, "")
	put := func(task, path string, ws ...store.LGWrite) int {
		for i := range ws {
			ws[i].TaskID, ws[i].TaskPath, ws[i].Type = task, path, "json"
		}
		p, n := s.LGPutWrites("t", "", "c", ws)
		require.NoError(t, p.Wait(ctx))
		return *n
	}
	require.Equal(t, 2, put("t1", "~pull, b", store.LGWrite{Idx: 0, Channel: "x", Data: []byte("1")}, store.LGWrite{Idx: 1, Channel: "y", Data: []byte("2")}))
	// repeat of idx >= 0 is ignored
	require.Equal(t, 0, put("t1", "~pull, b", store.LGWrite{Idx: 0, Channel: "x", Data: []byte("changed")}))
	// negative idx replaces
	require.Equal(t, 1, put("t1", "~pull, b", store.LGWrite{Idx: -1, Channel: "__error__", Data: []byte(`"e1"`)}))
	require.Equal(t, 1, put("t1", "~pull, b", store.LGWrite{Idx: -1, Channel: "__error__", Data: []byte(`"e2"`)}))
	// ordering: task_path first (pathless first), then task id, then idx
	require.Equal(t, 1, put("zzz", "~pull, a", store.LGWrite{Idx: 0, Channel: "x", Data: []byte("3")}))
	require.Equal(t, 1, put("aaa", "~pull, c", store.LGWrite{Idx: 0, Channel: "x", Data: []byte("4")}))
	require.Equal(t, 1, put("mmm", "", store.LGWrite{Idx: 0, Channel: "x", Data: []byte("5")}))
	got, err := s.LGGet(ctx, "t", "", "c")
	require.NoError(t, err)
	var seq []string
	for _, w := range got.Writes {
		seq = append(seq, fmt.Sprintf("%s/%d=%s", w.TaskID, w.Idx, w.Data))
	}
	require.Equal(t, []string{"mmm/0=5", "zzz/0=3", "t1/-1=\"e2\"", "t1/0=1", "t1/1=2", "aaa/0=4"}, seq)

	// isolated per namespace; the checkpoint need not exist
	p, _ := s.LGPutWrites("t", "child", "c", []store.LGWrite{{TaskID: "k", Channel: "x", Type: "json", Data: []byte("9")}})
	require.NoError(t, p.Wait(ctx))
	got, _ = s.LGGet(ctx, "t", "", "c")
	require.Len(t, got.Writes, 6)

	p, _ = s.LGPutWrites("t", "", "c", []store.LGWrite{{TaskID: "", Channel: "x", Type: "json"}})
	var ie *store.InvalidError
	require.ErrorAs(t, p.Wait(ctx), &ie)
}

func testLGList(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	// two threads, root + child namespaces, ids chosen so that string order != put order
	PutLG(t, s, "A", "", "a3", "", map[string]any{}, nil, `{"source":"input","step":0,"run_id":"r1"}`)
	PutLG(t, s, "A", "", "a1", "a3", map[string]any{}, nil, `{"source":"loop","step":1,"run_id":"r1"}`)
	PutLG(t, s, "A", "", "a2", "a1", map[string]any{}, nil, `{"source":"loop","step":2,"run_id":"r2","parents":{}}`)
	PutLG(t, s, "A", "child:1", "a9", "", map[string]any{}, nil, `{"source":"loop","step":1}`)
	PutLG(t, s, "B", "", "b1", "", map[string]any{}, nil, `{"source":"input","step":1}`)
	PutLG(t, s, "B", "", "a2", "", map[string]any{}, nil, `{"source":"update","step":5}`) // same id as in A
	root, child := "", "child:1"
	md := func(kv ...string) map[string]json.RawMessage {
		m := map[string]json.RawMessage{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = json.RawMessage(kv[i+1])
		}
		return m
	}
	cases := []struct {
		name string
		f    store.LGListFilter
		want []string
	}{
		{"thread+root", store.LGListFilter{ThreadID: "A", Namespace: &root}, []string{"a3", "a2", "a1"}},
		{"thread+child", store.LGListFilter{ThreadID: "A", Namespace: &child}, []string{"a9"}},
		{"thread all ns", store.LGListFilter{ThreadID: "A"}, []string{"a9", "a3", "a2", "a1"}},
		{"all threads", store.LGListFilter{}, []string{"b1", "a9", "a3", "a2", "a2", "a1"}},
		{"all threads root", store.LGListFilter{Namespace: &root}, []string{"b1", "a3", "a2", "a2", "a1"}},
		{"before", store.LGListFilter{ThreadID: "A", Namespace: &root, Before: "a3"}, []string{"a2", "a1"}},
		{"before + limit", store.LGListFilter{ThreadID: "A", Namespace: &root, Before: "a3", Limit: 1}, []string{"a2"}},
		{"limit", store.LGListFilter{Limit: 2}, []string{"b1", "a9"}},
		{"checkpoint id", store.LGListFilter{CheckpointID: "a2"}, []string{"a2", "a2"}},
		{"checkpoint id in thread", store.LGListFilter{ThreadID: "B", CheckpointID: "a2"}, []string{"a2"}},
		{"meta one key", store.LGListFilter{ThreadID: "A", Namespace: &root, Metadata: md("source", `"loop"`)}, []string{"a2", "a1"}},
		{"meta two keys", store.LGListFilter{ThreadID: "A", Metadata: md("source", `"loop"`, "step", `1`)}, []string{"a9", "a1"}},
		{"meta number forms", store.LGListFilter{ThreadID: "A", Metadata: md("step", `2.0`)}, []string{"a2"}},
		{"meta object", store.LGListFilter{Metadata: md("parents", `{}`)}, []string{"a2"}},
		{"meta no thread", store.LGListFilter{Metadata: md("source", `"input"`)}, []string{"b1", "a3"}},
		{"meta no thread + ns + before", store.LGListFilter{Namespace: &root, Before: "b1", Metadata: md("source", `"loop"`)}, []string{"a2", "a1"}},
		{"meta no match", store.LGListFilter{ThreadID: "A", Metadata: md("source", `"update"`, "step", `99`)}, nil},
		{"meta string vs number", store.LGListFilter{Metadata: md("step", `"1"`)}, nil},
		{"unknown thread", store.LGListFilter{ThreadID: "nope"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.LGList(ctx, tc.f)
			require.NoError(t, err)
			require.Equal(t, append([]string{}, tc.want...), TupleIDs(res.Tuples))
			require.Empty(t, res.Cursor)
		})
	}
	// ties: the same id in two threads comes in reverse storage order
	res, err := s.LGList(ctx, store.LGListFilter{CheckpointID: "a2"})
	require.NoError(t, err)
	require.Equal(t, []string{"B", "A"}, []string{res.Tuples[0].ThreadID, res.Tuples[1].ThreadID})

	_, err = s.LGList(ctx, store.LGListFilter{Cursor: "garbage!"})
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "cursor", ie.Field)
}

func testLGChannelHistory(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	// chain builds checkpoints c0..c(n-1) on thread; snap[i] stores a value for ch at step i,
	// every other step stores a write; returns the ids.
	chain := func(thread string, n int, snaps ...int) []string {
		var ids []string
		isSnap := map[int]bool{}
		for _, i := range snaps {
			isSnap[i] = true
		}
		parent := ""
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("%s-%02d", thread, i)
			if isSnap[i] {
				PutLG(t, s, thread, "", id, parent, map[string]any{"ch": i + 1}, map[string]string{"ch": fmt.Sprint(i * 100)}, "")
			} else {
				PutLG(t, s, thread, "", id, parent, map[string]any{}, nil, "")
				PutLGWrites(t, s, thread, "", id, fmt.Sprintf("task-%d", i), "", "ch", fmt.Sprint(i))
			}
			ids = append(ids, id)
			parent = id
		}
		return ids
	}
	values := func(ws []store.LGWrite) []string {
		out := []string{}
		for _, w := range ws {
			out = append(out, string(w.Data))
		}
		return out
	}

	ids := chain("t1", 5, 0)
	res, err := s.LGChannelHistory(ctx, "t1", "", ids[4], []string{"ch"})
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "3"}, values(res.Channels["ch"].Writes))
	require.NotNil(t, res.Channels["ch"].Seed)
	require.Equal(t, "0", string(res.Channels["ch"].Seed.Data))
	require.Equal(t, []string{ids[3], ids[2], ids[1], ids[0]}, res.Visited)

	// default target: the latest; the target's own writes are excluded
	PutLGWrites(t, s, "t1", "", ids[4], "extra", "", "ch", `"extra"`)
	res, err = s.LGChannelHistory(ctx, "t1", "", "", []string{"ch"})
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "3"}, values(res.Channels["ch"].Writes))

	// nearest snapshot wins
	ids = chain("t2", 6, 0, 3)
	res, err = s.LGChannelHistory(ctx, "t2", "", ids[5], []string{"ch"})
	require.NoError(t, err)
	require.Equal(t, "300", string(res.Channels["ch"].Seed.Data))
	require.Equal(t, []string{"4"}, values(res.Channels["ch"].Writes))

	// no snapshot: walk to the root, no seed
	ids = chain("t3", 4)
	res, err = s.LGChannelHistory(ctx, "t3", "", ids[3], []string{"ch", "other"})
	require.NoError(t, err)
	require.Nil(t, res.Channels["ch"].Seed)
	require.Equal(t, []string{"0", "1", "2"}, values(res.Channels["ch"].Writes))
	require.Empty(t, res.Channels["other"].Writes)

	// writes stored at the seed ancestor are replayed; task_path order, pathless first
	PutLG(t, s, "t4", "", "s0", "", map[string]any{"ch": 1}, map[string]string{"ch": "10"}, "")
	PutLGWrites(t, s, "t4", "", "s0", "ffff", "~pull, 02", "ch", `"at-seed-2"`)
	PutLGWrites(t, s, "t4", "", "s0", "0000", "~pull, 01", "ch", `"at-seed-1"`)
	PutLGWrites(t, s, "t4", "", "s0", "zzzz", "", "ch", `"input"`)
	PutLG(t, s, "t4", "", "s1", "s0", map[string]any{"ch": 1}, nil, "") // unchanged version: seed here
	PutLG(t, s, "t4", "", "s2", "s1", map[string]any{"ch": 2}, map[string]string{"ch": ""}, "")
	PutLGWrites(t, s, "t4", "", "s2", "t", "", "ch", `"after"`)
	PutLG(t, s, "t4", "", "s3", "s2", map[string]any{"ch": 3}, map[string]string{"ch": ""}, "")
	res, err = s.LGChannelHistory(ctx, "t4", "", "s3", []string{"ch"})
	require.NoError(t, err)
	require.Equal(t, []string{`"after"`}, values(res.Channels["ch"].Writes))
	require.Equal(t, "10", string(res.Channels["ch"].Seed.Data)) // s1 names version 1: a value
	res, err = s.LGChannelHistory(ctx, "t4", "", "s1", []string{"ch"})
	require.NoError(t, err)
	require.Equal(t, []string{`"input"`, `"at-seed-1"`, `"at-seed-2"`}, values(res.Channels["ch"].Writes))

	// empty channel list, unknown target
	res, err = s.LGChannelHistory(ctx, "t4", "", "s3", nil)
	require.NoError(t, err)
	require.Empty(t, res.Channels)
	res, err = s.LGChannelHistory(ctx, "t4", "", "nope", []string{"ch"})
	require.NoError(t, err)
	require.Empty(t, res.Channels["ch"].Writes)
	require.Nil(t, res.Channels["ch"].Seed)

	// a parent cycle (re-put of an ancestor under a descendant) ends the walk
	PutLG(t, s, "t5", "", "x1", "x2", map[string]any{}, nil, "")
	PutLG(t, s, "t5", "", "x2", "x1", map[string]any{}, nil, "")
	res, err = s.LGChannelHistory(ctx, "t5", "", "x2", []string{"ch"})
	require.NoError(t, err)
	require.Equal(t, []string{"x1"}, res.Visited)
}

func countLG(t *testing.T, s store.Backend) (ckpts, blobs, writes, meta int) {
	t.Helper()
	return corrupter(t, s).LGRows(t)
}

func testLGDeleteCopyPruneRuns(t *testing.T, h *harness) {
	ctx := context.Background()
	blobsFor := func(s store.Backend, th string) {
		// every checkpoint ci stores k@i and keep@0 (first one)
		parent := ""
		for i := 0; i < 3; i++ {
			id := fmt.Sprintf("c%d", i)
			bl := map[string]string{"k": fmt.Sprint(i)}
			if i == 0 {
				bl["keep"] = `"k"`
			}
			PutLG(t, s, th, "", id, parent, map[string]any{"k": i, "keep": 0}, bl, fmt.Sprintf(`{"run_id":"%s-run%d","step":%d}`, th, i%2, i))
			parent = id
		}
		PutLG(t, s, th, "sub", "s0", "", map[string]any{"k": 1}, map[string]string{"k": "sub"}, `{"run_id":"`+th+`-run0"}`)
		PutLGWrites(t, s, th, "", "c2", "task", "", "ch", `"w"`)
		PutLGWrites(t, s, th, "", "c0", "task", "", "ch", `"w0"`)
	}
	fresh := func(t *testing.T) store.Backend {
		s := h.db(t)
		blobsFor(s, "A")
		blobsFor(s, "B")
		return s
	}

	t.Run("delete thread", func(t *testing.T) {
		s := fresh(t)
		n, err := s.LGDeleteThread(ctx, "A")
		require.NoError(t, err)
		require.Equal(t, 4, n)
		c, b, w, _ := countLG(t, s)
		require.Equal(t, []int{4, 5, 2}, []int{c, b, w})
		got, _ := s.LGGet(ctx, "A", "", "")
		require.Nil(t, got)
		got, _ = s.LGGet(ctx, "B", "", "")
		require.Equal(t, map[string]string{"k": "2", "keep": `"k"`}, BlobMap(got))
		n, err = s.LGDeleteThread(ctx, "nope")
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("copy thread", func(t *testing.T) {
		s := fresh(t)
		n, err := s.LGCopyThread(ctx, "A", "C")
		require.NoError(t, err)
		require.Equal(t, 4, n)
		for _, ns := range []string{"", "sub"} {
			a, err := s.LGList(ctx, store.LGListFilter{ThreadID: "A", Namespace: &ns})
			require.NoError(t, err)
			c, err := s.LGList(ctx, store.LGListFilter{ThreadID: "C", Namespace: &ns})
			require.NoError(t, err)
			require.Equal(t, TupleIDs(a.Tuples), TupleIDs(c.Tuples))
			for i := range a.Tuples {
				require.Equal(t, BlobMap(&a.Tuples[i]), BlobMap(&c.Tuples[i]))
				require.Equal(t, a.Tuples[i].ParentID, c.Tuples[i].ParentID)
				require.Equal(t, string(a.Tuples[i].Metadata), string(c.Tuples[i].Metadata))
				require.Equal(t, len(a.Tuples[i].Writes), len(c.Tuples[i].Writes))
			}
		}
		// the metadata index covers the copies
		res, err := s.LGList(ctx, store.LGListFilter{ThreadID: "C", Metadata: map[string]json.RawMessage{"step": json.RawMessage("1")}})
		require.NoError(t, err)
		require.Equal(t, []string{"c1"}, TupleIDs(res.Tuples))
		// copying again overwrites, does not duplicate
		n, err = s.LGCopyThread(ctx, "A", "C")
		require.NoError(t, err)
		require.Equal(t, 4, n)
		res, err = s.LGList(ctx, store.LGListFilter{ThreadID: "C"})
		require.NoError(t, err)
		require.Len(t, res.Tuples, 4)
		_, _, _, meta := countLG(t, s)
		require.Equal(t, 3*(2*3+1), meta) // run_id+step on 3 root, run_id on sub; 3 threads
		// unknown source copies nothing; same thread is refused
		n, err = s.LGCopyThread(ctx, "nope", "D")
		require.NoError(t, err)
		require.Zero(t, n)
		_, err = s.LGCopyThread(ctx, "A", "A")
		var ie *store.InvalidError
		require.ErrorAs(t, err, &ie)
	})

	t.Run("prune keep_latest", func(t *testing.T) {
		s := fresh(t)
		n, err := s.LGPrune(ctx, []string{"A", "nope"}, "keep_latest")
		require.NoError(t, err)
		require.Equal(t, 2, n)
		res, err := s.LGList(ctx, store.LGListFilter{ThreadID: "A"})
		require.NoError(t, err)
		require.Equal(t, []string{"s0", "c2"}, TupleIDs(res.Tuples))
		require.Equal(t, map[string]string{"k": "2", "keep": `"k"`}, BlobMap(&res.Tuples[1]))
		require.Len(t, res.Tuples[1].Writes, 1)
		c, b, w, _ := countLG(t, s)
		require.Equal(t, []int{2 + 4, 3 + 5, 1 + 2}, []int{c, b, w}) // A: k@2, keep@0, sub k@1
		res, err = s.LGList(ctx, store.LGListFilter{ThreadID: "B"})
		require.NoError(t, err)
		require.Len(t, res.Tuples, 4)
	})

	t.Run("prune delete", func(t *testing.T) {
		s := fresh(t)
		n, err := s.LGPrune(ctx, []string{"A"}, "delete")
		require.NoError(t, err)
		require.Equal(t, 4, n)
		c, _, _, _ := countLG(t, s)
		require.Equal(t, 4, c)
		_, err = s.LGPrune(ctx, []string{"A"}, "bogus")
		require.Error(t, err)
	})

	t.Run("delete for runs", func(t *testing.T) {
		s := fresh(t)
		n, err := s.LGDeleteForRuns(ctx, []string{"A-run0", "A-run0", "missing"})
		require.NoError(t, err)
		require.Equal(t, 3, n) // c0, c2, sub/s0
		res, err := s.LGList(ctx, store.LGListFilter{ThreadID: "A"})
		require.NoError(t, err)
		require.Equal(t, []string{"c1"}, TupleIDs(res.Tuples))
		// c1 still reads keep@0, stored with c0
		require.Equal(t, map[string]string{"k": "1", "keep": `"k"`}, BlobMap(&res.Tuples[0]))
		c, b, w, _ := countLG(t, s)
		require.Equal(t, []int{1 + 4, 2 + 5, 0 + 2}, []int{c, b, w})
		n, err = s.LGDeleteForRuns(ctx, nil)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func testLGPruneKeepsDeltaChain(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	// ch has a value at c1 only; c2..c4 bump its version without a value (delta channel)
	PutLG(t, s, "T", "", "c0", "", map[string]any{"x": 1}, map[string]string{"x": "0"}, "")
	PutLG(t, s, "T", "", "c1", "c0", map[string]any{"x": 1, "ch": 1}, map[string]string{"ch": `"snap"`}, "")
	for i := 2; i <= 4; i++ {
		PutLG(t, s, "T", "", fmt.Sprintf("c%d", i), fmt.Sprintf("c%d", i-1), map[string]any{"x": 1, "ch": i}, map[string]string{"ch": ""}, "")
		PutLGWrites(t, s, "T", "", fmt.Sprintf("c%d", i-1), "task", "", "ch", fmt.Sprint(i))
	}
	before, err := s.LGChannelHistory(ctx, "T", "", "c4", []string{"ch"})
	require.NoError(t, err)
	n, err := s.LGPrune(ctx, []string{"T"}, "keep_latest")
	require.NoError(t, err)
	require.Equal(t, 1, n) // only c0 goes
	after, err := s.LGChannelHistory(ctx, "T", "", "c4", []string{"ch"})
	require.NoError(t, err)
	require.Equal(t, before, after)
	got, err := s.LGGet(ctx, "T", "", "c4")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"x": "0"}, BlobMap(got)) // x@1 stored with c0 is still referenced

	// a delta channel that is not versioned between snapshots: the ancestors' writes name it
	PutLG(t, s, "U", "", "u0", "", map[string]any{}, nil, "")
	PutLGWrites(t, s, "U", "", "u0", "task", "", "d", "0")
	PutLG(t, s, "U", "", "u1", "u0", map[string]any{"d": 2}, map[string]string{"d": `"snap"`}, "")
	for i := 2; i <= 4; i++ {
		PutLG(t, s, "U", "", fmt.Sprintf("u%d", i), fmt.Sprintf("u%d", i-1), map[string]any{}, nil, "")
		PutLGWrites(t, s, "U", "", fmt.Sprintf("u%d", i), "task", "", "d", fmt.Sprint(i))
	}
	// special (negative idx) writes do not hold ancestors back
	p, _ := s.LGPutWrites("U", "", "u0", []store.LGWrite{{TaskID: "t", Idx: -1, Channel: "__error__", Type: "json", Data: []byte(`"x"`)}})
	require.NoError(t, p.Wait(ctx))
	n, err = s.LGPrune(ctx, []string{"U"}, "keep_latest")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	res, err := s.LGList(ctx, store.LGListFilter{ThreadID: "U"})
	require.NoError(t, err)
	require.Equal(t, []string{"u4", "u3", "u2", "u1"}, TupleIDs(res.Tuples))
	// nothing written, nothing open: exactly one checkpoint stays
	for i := 0; i < 3; i++ {
		PutLG(t, s, "V", "", fmt.Sprintf("v%d", i), fmt.Sprintf("v%d", i-1), map[string]any{"a": i}, map[string]string{"a": fmt.Sprint(i)}, "")
	}
	PutLGWrites(t, s, "V", "", "v0", "task", "", "a", "1") // a has a value at the latest: no replay needed
	n, err = s.LGPrune(ctx, []string{"V"}, "keep_latest")
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

func testLGCorruption(t *testing.T, h *harness) {
	s := h.db(t, func(o *Options) { o.BlobCacheBytes = -1 })
	ctx := context.Background()
	PutLG(t, s, "T", "", "c1", "", map[string]any{"a": 1}, map[string]string{"a": `"hello"`}, "")
	corrupter(t, s).SetLGValueBytes(t, "T", "", "a", "1", []byte(`"hellO"`))
	_, err := s.LGGet(ctx, "T", "", "c1")
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "c1", ce.CheckpointID)
	require.Contains(t, ce.Reason, "SHA-256")
	_, err = s.LGList(ctx, store.LGListFilter{ThreadID: "T"})
	require.ErrorAs(t, err, &ce)
}

// testLGSeparateFromCheckpoints: LangGraph data is invisible to the checkpoint family and not
// subject to retention.
func testLGSeparateFromCheckpoints(t *testing.T, h *harness) {
	s2 := h.db(t, withRetention(store.Retention{KeepLast: 1}))
	for i := 0; i < 3; i++ {
		PutLG(t, s2, "T", "", fmt.Sprintf("c%d", i), "", map[string]any{}, nil, "")
		mustSave(t, s2, store.SaveRequest{WorkflowID: "T", State: []byte(`{}`)})
	}
	res, err := s2.LGList(context.Background(), store.LGListFilter{ThreadID: "T"})
	require.NoError(t, err)
	require.Len(t, res.Tuples, 3)
	sums, err := s2.List(context.Background(), store.ListFilter{WorkflowID: "T"})
	require.NoError(t, err)
	require.Len(t, sums, 1)
	var nilErr *store.CorruptError
	require.False(t, errors.As(err, &nilErr))
}

func testLGThreads(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	threads, err := s.LGThreads(ctx)
	require.NoError(t, err)
	assert.Empty(t, threads)

	PutLG(t, s, "t-old", "", "1f0-a", "", map[string]any{"m": 1}, map[string]string{"m": `["hi"]`}, `{"source":"input","step":-1}`)
	clock.Advance(time.Minute)
	PutLG(t, s, "t-new", "", "1f0-a", "", map[string]any{"m": 1}, map[string]string{"m": `["a"]`}, `{"source":"input","step":-1}`)
	PutLG(t, s, "t-new", "", "1f0-b", "1f0-a", map[string]any{"m": 2, "n": 1}, map[string]string{"m": `["a","b"]`, "n": `1`}, `{"source":"loop","step":0}`)
	PutLG(t, s, "t-new", "sub:1", "1f0-z", "", map[string]any{}, nil, "")
	PutLGWrites(t, s, "t-new", "", "1f0-b", "task-1", "", "m", `"c"`, "n", `2`)
	PutLGWrites(t, s, "t-writes-only", "", "1f0-x", "task-1", "", "m", `"w"`)

	threads, err = s.LGThreads(ctx)
	require.NoError(t, err)
	require.Len(t, threads, 3)
	assert.Equal(t, []string{"t-new", "t-old", "t-writes-only"}, []string{threads[0].ThreadID, threads[1].ThreadID, threads[2].ThreadID},
		"newest first; a thread with only writes has no update time and comes last")
	n := threads[0]
	assert.Equal(t, 3, n.Checkpoints)
	assert.Equal(t, 2, n.Namespaces)
	assert.Equal(t, 2, n.Writes)
	assert.Equal(t, "1f0-b", n.LatestID, "the root namespace's newest, though sub:1's id sorts after it")
	assert.True(t, n.UpdatedAt.After(threads[1].UpdatedAt))
	assert.Positive(t, n.ChannelBytes)
	assert.Greater(t, n.StoredBytes, n.ChannelBytes)
	assert.Equal(t, 0, threads[2].Checkpoints)
	assert.Equal(t, 1, threads[2].Writes)
	assert.True(t, threads[2].UpdatedAt.IsZero())

	cps, err := s.LGThreadCheckpoints(ctx, "t-new", nil, 0)
	require.NoError(t, err)
	var ids []string
	for _, c := range cps {
		ids = append(ids, c.Namespace+"/"+c.CheckpointID)
	}
	assert.Equal(t, []string{"/1f0-b", "/1f0-a", "sub:1/1f0-z"}, ids)
	b := cps[0]
	assert.Equal(t, "1f0-a", b.ParentID)
	assert.Equal(t, 2, b.Channels)
	assert.Equal(t, 2, b.Writes)
	assert.JSONEq(t, `{"source":"loop","step":0}`, string(b.Metadata))
	assert.EqualValues(t, len(`{"id":"1f0-b"}`), b.SizeBytes)
	assert.Nil(t, cps[2].Metadata)

	root := ""
	cps, err = s.LGThreadCheckpoints(ctx, "t-new", &root, 1)
	require.NoError(t, err)
	require.Len(t, cps, 1)
	assert.Equal(t, "1f0-b", cps[0].CheckpointID)
	none := "nope"
	cps, err = s.LGThreadCheckpoints(ctx, "t-new", &none, 0)
	require.NoError(t, err, "a known thread with nothing in that namespace is not an error")
	assert.Empty(t, cps)
	cps, err = s.LGThreadCheckpoints(ctx, "t-writes-only", nil, 0)
	require.NoError(t, err)
	assert.Empty(t, cps)
	_, err = s.LGThreadCheckpoints(ctx, "unknown", nil, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func lgExportAll(t *testing.T, s store.Backend, thread string) (store.LGThreadCounts, []store.LGRecord) {
	t.Helper()
	var counts store.LGThreadCounts
	var out []store.LGRecord
	require.NoError(t, s.LGExport(context.Background(), thread, func(c store.LGThreadCounts) error {
		counts = c
		return nil
	}, func(r store.LGRecord) error {
		out = append(out, r)
		return nil
	}))
	return counts, out
}

func lgSeq(rs []store.LGRecord) iter.Seq2[store.LGRecord, error] {
	return func(yield func(store.LGRecord, error) bool) {
		for _, r := range rs {
			if !yield(r, nil) {
				return
			}
		}
	}
}

func lgArchiveSource(t *testing.T, h *harness) store.Backend {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	big := string(CheckpointJSON(rand.New(rand.NewPCG(5, 5)), 64<<10)) // compressed when stored
	PutLG(t, s, "t", "", "1f0-a", "", map[string]any{"m": 1, "e": 1}, map[string]string{"m": big, "e": ""}, `{"source":"input","step":-1}`)
	PutLG(t, s, "t", "", "1f0-b", "1f0-a", map[string]any{"m": 2, "e": 1}, map[string]string{"m": `["x"]`}, `{"source":"loop","step":0}`)
	PutLG(t, s, "t", "sub:1", "1f0-c", "", map[string]any{"q": "00000001.0.5"}, map[string]string{"q": `"q"`}, "")
	PutLGWrites(t, s, "t", "", "1f0-b", "task-1", "p", "m", `"w0"`, "e", `"w1"`)
	PutLG(t, s, "other", "", "1f0-a", "", map[string]any{"m": 1}, map[string]string{"m": `["other"]`}, "")
	return s
}

func testLGExportImportRoundTrip(t *testing.T, h *harness) {
	src := lgArchiveSource(t, h)
	counts, recs := lgExportAll(t, src, "t")
	assert.Equal(t, store.LGThreadCounts{Checkpoints: 3, Values: 4, Writes: 2}, counts)
	require.Len(t, recs, 9)
	kinds := make([]string, len(recs))
	for i, r := range recs {
		kinds[i] = r.Kind
	}
	assert.Equal(t, []string{"checkpoint", "checkpoint", "checkpoint", "value", "value", "value", "value", "write", "write"}, kinds)

	dst := h.db(t)
	res, err := dst.LGImport(context.Background(), "t", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	assert.True(t, res.CreatedThread)
	assert.Equal(t, counts, res.Imported)
	assert.Equal(t, store.LGThreadCounts{}, res.Skipped)

	// every row comes back identical, creation times included, and reads the same as the original
	_, again := lgExportAll(t, dst, "t")
	assert.Equal(t, recs, again)
	for _, ns := range []string{"", "sub:1"} {
		a, err := src.LGGet(context.Background(), "t", ns, "")
		require.NoError(t, err)
		b, err := dst.LGGet(context.Background(), "t", ns, "")
		require.NoError(t, err)
		assert.Equal(t, a, b, ns)
	}
	root := ""
	la, err := src.LGList(context.Background(), store.LGListFilter{ThreadID: "t", Namespace: &root,
		Metadata: map[string]json.RawMessage{"source": json.RawMessage(`"loop"`)}})
	require.NoError(t, err)
	lb, err := dst.LGList(context.Background(), store.LGListFilter{ThreadID: "t", Namespace: &root,
		Metadata: map[string]json.RawMessage{"source": json.RawMessage(`"loop"`)}})
	require.NoError(t, err)
	require.Len(t, lb.Tuples, 1, "the metadata index came along")
	assert.Equal(t, la.Tuples, lb.Tuples)

	// a second import skips everything; a dry run writes nothing
	res, err = dst.LGImport(context.Background(), "t", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	assert.False(t, res.CreatedThread)
	assert.Equal(t, store.LGThreadCounts{}, res.Imported)
	assert.Equal(t, counts, res.Skipped)
	dry := h.db(t)
	res, err = dry.LGImport(context.Background(), "t", lgSeq(recs), store.ImportOptions{DryRun: true})
	require.NoError(t, err)
	assert.True(t, res.DryRun)
	assert.Equal(t, counts, res.Imported)
	err = dry.LGExport(context.Background(), "t", func(store.LGThreadCounts) error { return nil }, func(store.LGRecord) error { return nil })
	require.ErrorIs(t, err, store.ErrNotFound)

	_, problems, err := dst.VerifyLG(context.Background())
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func testLGImportRefuses(t *testing.T, h *harness) {
	src := lgArchiveSource(t, h)
	_, recs := lgExportAll(t, src, "t")
	for _, tc := range []struct {
		name   string
		mutate func(rs []store.LGRecord) []store.LGRecord
		check  func(t *testing.T, err error)
	}{
		{"bad kind", func(rs []store.LGRecord) []store.LGRecord { rs[0].Kind = "blob"; return rs }, invalidField("kind")},
		{"no creation time", func(rs []store.LGRecord) []store.LGRecord { rs[0].CreatedAt = time.Time{}; return rs }, invalidField("createdAt")},
		{"version not canonical", func(rs []store.LGRecord) []store.LGRecord { rs[3].Version = " 1"; return rs }, invalidField("version")},
		{"empty value with bytes", func(rs []store.LGRecord) []store.LGRecord {
			rs[3].Type = store.LGEmptyType
			rs[3].Data = []byte("x")
			return rs
		}, invalidField("type")},
		{"write without task", func(rs []store.LGRecord) []store.LGRecord { rs[7].TaskID = ""; return rs }, invalidField("write")},
		{"bad channel versions", func(rs []store.LGRecord) []store.LGRecord { rs[1].ChannelVersions = json.RawMessage(`[1]`); return rs }, invalidField("channelVersions")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := h.db(t)
			rs := tc.mutate(slices.Clone(recs))
			_, err := dst.LGImport(context.Background(), "t", lgSeq(rs), store.ImportOptions{})
			require.Error(t, err)
			tc.check(t, err)
			err = dst.LGExport(context.Background(), "t", func(store.LGThreadCounts) error { return nil }, func(store.LGRecord) error { return nil })
			require.ErrorIs(t, err, store.ErrNotFound, "nothing was written")
		})
	}

	// the same key with other bytes conflicts, and the whole import is refused
	dst := h.db(t)
	PutLG(t, dst, "t", "sub:1", "1f0-c", "", map[string]any{"q": "00000001.0.5"}, map[string]string{"q": `"different"`}, "")
	_, err := dst.LGImport(context.Background(), "t", lgSeq(recs), store.ImportOptions{})
	require.ErrorIs(t, err, store.ErrConflict)
	assert.Contains(t, err.Error(), "already here with different content")
	counts, _ := lgExportAll(t, dst, "t")
	assert.Equal(t, store.LGThreadCounts{Checkpoints: 1, Values: 1}, counts)

	// an error from the records rolls everything back
	failing := func(yield func(store.LGRecord, error) bool) {
		if yield(recs[0], nil) {
			yield(store.LGRecord{}, errors.New("archive damaged"))
		}
	}
	empty := h.db(t)
	_, err = empty.LGImport(context.Background(), "t", failing, store.ImportOptions{})
	require.ErrorContains(t, err, "archive damaged")
	err = empty.LGExport(context.Background(), "t", func(store.LGThreadCounts) error { return nil }, func(store.LGRecord) error { return nil })
	require.ErrorIs(t, err, store.ErrNotFound)
}

func invalidField(field string) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		var ie *store.InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, field, ie.Field)
	}
}

// TestLGExportCorrupt: a damaged row stops the export with a *CorruptError naming it.
func testLGExportCorrupt(t *testing.T, h *harness) {
	s := lgArchiveSource(t, h)
	corrupter(t, s).SetLGValueBytes(t, "t", "", "m", "2", []byte(`["y"]`))
	err := s.LGExport(context.Background(), "t", func(store.LGThreadCounts) error { return nil }, func(store.LGRecord) error { return nil })
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "SHA-256 mismatch")
}
