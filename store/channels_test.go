package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lgPutT stores one LangGraph checkpoint; blobs are "channel=value" (version = the given
// versions' entry for that channel), "channel=" stores an empty blob.
func lgPutT(t testing.TB, s *Store, thread, ns, id, parent string, versions map[string]any, blobs map[string]string, meta string) {
	t.Helper()
	vj, err := json.Marshal(versions)
	require.NoError(t, err)
	req := LGPutRequest{ThreadID: thread, Namespace: ns, CheckpointID: id, ParentID: parent, Type: "json",
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
		key, err := CanonicalVersion(raw)
		require.NoError(t, err)
		b := LGBlob{Channel: ch, Version: key, Type: "json", Data: []byte(blobs[ch])}
		if blobs[ch] == "" {
			b.Type, b.Data = LGEmptyType, nil
		}
		req.Blobs = append(req.Blobs, b)
	}
	p, _ := s.LGPut(req)
	require.NoError(t, p.Wait(context.Background()))
}

func lgWritesT(t testing.TB, s *Store, thread, ns, id, task, path string, kv ...string) {
	t.Helper()
	var ws []LGWrite
	for i := 0; i+1 < len(kv); i += 2 {
		ws = append(ws, LGWrite{TaskID: task, TaskPath: path, Idx: int64(i / 2), Channel: kv[i], Type: "json", Data: []byte(kv[i+1])})
	}
	p, _ := s.LGPutWrites(thread, ns, id, ws)
	require.NoError(t, p.Wait(context.Background()))
}

func blobMap(t *LGTuple) map[string]string {
	out := map[string]string{}
	for _, b := range t.Blobs {
		out[b.Channel] = string(b.Data)
	}
	return out
}

func tupleIDs(ts []LGTuple) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.CheckpointID)
	}
	return out
}

func TestLGPutGet(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	lgPutT(t, s, "t1", "", "c1", "", map[string]any{"a": 1, "b": 1, "gone": 1}, map[string]string{"a": `"a1"`, "b": `"b1"`, "gone": `"x"`}, `{"source":"input","step":-1}`)
	lgPutT(t, s, "t1", "", "c2", "c1", map[string]any{"a": 2, "b": 1, "e": 1}, map[string]string{"a": `"a2"`, "e": ""}, `{"source":"loop","step":0}`)

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
			require.Equal(t, tc.want, blobMap(got))
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

func TestLGPutValidation(t *testing.T) {
	s := openTest(t)
	base := func() LGPutRequest {
		return LGPutRequest{ThreadID: "t", CheckpointID: "c", Type: "json", Checkpoint: []byte("{}"), ChannelVersions: json.RawMessage(`{}`)}
	}
	cases := []struct {
		name  string
		mut   func(r *LGPutRequest)
		field string
	}{
		{"no thread", func(r *LGPutRequest) { r.ThreadID = "" }, "threadId"},
		{"no id", func(r *LGPutRequest) { r.CheckpointID = "" }, "checkpointId"},
		{"long thread", func(r *LGPutRequest) { r.ThreadID = strings.Repeat("x", 513) }, "threadId"},
		{"no type", func(r *LGPutRequest) { r.Type = "" }, "checkpoint.type"},
		{"no versions", func(r *LGPutRequest) { r.ChannelVersions = nil }, "channelVersions"},
		{"versions not object", func(r *LGPutRequest) { r.ChannelVersions = json.RawMessage(`[1]`) }, "channelVersions"},
		{"bool version", func(r *LGPutRequest) { r.ChannelVersions = json.RawMessage(`{"a":true}`) }, "channelVersions"},
		{"dup channel", func(r *LGPutRequest) { r.ChannelVersions = json.RawMessage(`{"a":1,"a":2}`) }, "channelVersions"},
		{"metadata array", func(r *LGPutRequest) { r.Metadata = json.RawMessage(`[1]`) }, "metadata"},
		{"blob no channel", func(r *LGPutRequest) { r.Blobs = []LGBlob{{Version: "1", Type: "json"}} }, "blobs[0].channel"},
		{"blob no type", func(r *LGPutRequest) { r.Blobs = []LGBlob{{Channel: "a", Version: "1"}} }, "blobs[0].type"},
		{"empty with bytes", func(r *LGPutRequest) {
			r.Blobs = []LGBlob{{Channel: "a", Version: "1", Type: LGEmptyType, Data: []byte("x")}}
		}, "blobs[0].length"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.mut(&r)
			p, _ := s.LGPut(r)
			err := p.Wait(context.Background())
			var ie *InvalidError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, tc.field, ie.Field)
		})
	}
	// nothing was stored, and the writer still works
	lgPutT(t, s, "t", "", "ok", "", map[string]any{}, nil, "")
	got, err := s.LGGet(context.Background(), "t", "", "")
	require.NoError(t, err)
	require.Equal(t, "ok", got.CheckpointID)
}

func TestLGCanonicalVersion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`1`, `1`}, {`1.0`, `1`}, {`1e0`, `1`}, {`"1"`, `"1"`}, {`"0001.0.5"`, `"0001.0.5"`}, {`2.5`, `2.5`}, {` 3 `, `3`},
	} {
		got, err := CanonicalVersion(json.RawMessage(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{`true`, `null`, `{}`, `[1]`, ``} {
		_, err := CanonicalVersion(json.RawMessage(bad))
		require.Error(t, err, bad)
	}
}

func TestLGBlobsImmutableAndReplace(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	lgPutT(t, s, "t", "", "c1", "", map[string]any{"a": "v1"}, map[string]string{"a": `"first"`}, `{"step":1}`)
	lgWritesT(t, s, "t", "", "c1", "task", "", "ch", `"w"`)
	// same id again: checkpoint row replaced, blob kept, writes kept
	lgPutT(t, s, "t", "", "c1", "p0", map[string]any{"a": "v1"}, map[string]string{"a": `"second"`}, `{"step":2}`)
	got, err := s.LGGet(ctx, "t", "", "c1")
	require.NoError(t, err)
	require.Equal(t, `"first"`, blobMap(got)["a"])
	require.Equal(t, "p0", got.ParentID)
	require.JSONEq(t, `{"step":2}`, string(got.Metadata))
	require.Len(t, got.Writes, 1)
	// the metadata index follows the replacement
	res, err := s.LGList(ctx, LGListFilter{Metadata: map[string]json.RawMessage{"step": json.RawMessage(`1`)}})
	require.NoError(t, err)
	require.Empty(t, res.Tuples)
	res, err = s.LGList(ctx, LGListFilter{Metadata: map[string]json.RawMessage{"step": json.RawMessage(`2.0`)}})
	require.NoError(t, err)
	require.Equal(t, []string{"c1"}, tupleIDs(res.Tuples))
}

func TestLGWrites(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	lgPutT(t, s, "t", "", "c", "", map[string]any{}, nil, "")
	put := func(task, path string, ws ...LGWrite) int {
		for i := range ws {
			ws[i].TaskID, ws[i].TaskPath, ws[i].Type = task, path, "json"
		}
		p, n := s.LGPutWrites("t", "", "c", ws)
		require.NoError(t, p.Wait(ctx))
		return *n
	}
	require.Equal(t, 2, put("t1", "~pull, b", LGWrite{Idx: 0, Channel: "x", Data: []byte("1")}, LGWrite{Idx: 1, Channel: "y", Data: []byte("2")}))
	// repeat of idx >= 0 is ignored
	require.Equal(t, 0, put("t1", "~pull, b", LGWrite{Idx: 0, Channel: "x", Data: []byte("changed")}))
	// negative idx replaces
	require.Equal(t, 1, put("t1", "~pull, b", LGWrite{Idx: -1, Channel: "__error__", Data: []byte(`"e1"`)}))
	require.Equal(t, 1, put("t1", "~pull, b", LGWrite{Idx: -1, Channel: "__error__", Data: []byte(`"e2"`)}))
	// ordering: task_path first (pathless first), then task id, then idx
	require.Equal(t, 1, put("zzz", "~pull, a", LGWrite{Idx: 0, Channel: "x", Data: []byte("3")}))
	require.Equal(t, 1, put("aaa", "~pull, c", LGWrite{Idx: 0, Channel: "x", Data: []byte("4")}))
	require.Equal(t, 1, put("mmm", "", LGWrite{Idx: 0, Channel: "x", Data: []byte("5")}))
	got, err := s.LGGet(ctx, "t", "", "c")
	require.NoError(t, err)
	var seq []string
	for _, w := range got.Writes {
		seq = append(seq, fmt.Sprintf("%s/%d=%s", w.TaskID, w.Idx, w.Data))
	}
	require.Equal(t, []string{"mmm/0=5", "zzz/0=3", "t1/-1=\"e2\"", "t1/0=1", "t1/1=2", "aaa/0=4"}, seq)

	// isolated per namespace; the checkpoint need not exist
	p, _ := s.LGPutWrites("t", "child", "c", []LGWrite{{TaskID: "k", Channel: "x", Type: "json", Data: []byte("9")}})
	require.NoError(t, p.Wait(ctx))
	got, _ = s.LGGet(ctx, "t", "", "c")
	require.Len(t, got.Writes, 6)

	p, _ = s.LGPutWrites("t", "", "c", []LGWrite{{TaskID: "", Channel: "x", Type: "json"}})
	var ie *InvalidError
	require.ErrorAs(t, p.Wait(ctx), &ie)
}

func TestLGList(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	// two threads, root + child namespaces, ids chosen so that string order != put order
	lgPutT(t, s, "A", "", "a3", "", map[string]any{}, nil, `{"source":"input","step":0,"run_id":"r1"}`)
	lgPutT(t, s, "A", "", "a1", "a3", map[string]any{}, nil, `{"source":"loop","step":1,"run_id":"r1"}`)
	lgPutT(t, s, "A", "", "a2", "a1", map[string]any{}, nil, `{"source":"loop","step":2,"run_id":"r2","parents":{}}`)
	lgPutT(t, s, "A", "child:1", "a9", "", map[string]any{}, nil, `{"source":"loop","step":1}`)
	lgPutT(t, s, "B", "", "b1", "", map[string]any{}, nil, `{"source":"input","step":1}`)
	lgPutT(t, s, "B", "", "a2", "", map[string]any{}, nil, `{"source":"update","step":5}`) // same id as in A
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
		f    LGListFilter
		want []string
	}{
		{"thread+root", LGListFilter{ThreadID: "A", Namespace: &root}, []string{"a3", "a2", "a1"}},
		{"thread+child", LGListFilter{ThreadID: "A", Namespace: &child}, []string{"a9"}},
		{"thread all ns", LGListFilter{ThreadID: "A"}, []string{"a9", "a3", "a2", "a1"}},
		{"all threads", LGListFilter{}, []string{"b1", "a9", "a3", "a2", "a2", "a1"}},
		{"all threads root", LGListFilter{Namespace: &root}, []string{"b1", "a3", "a2", "a2", "a1"}},
		{"before", LGListFilter{ThreadID: "A", Namespace: &root, Before: "a3"}, []string{"a2", "a1"}},
		{"before + limit", LGListFilter{ThreadID: "A", Namespace: &root, Before: "a3", Limit: 1}, []string{"a2"}},
		{"limit", LGListFilter{Limit: 2}, []string{"b1", "a9"}},
		{"checkpoint id", LGListFilter{CheckpointID: "a2"}, []string{"a2", "a2"}},
		{"checkpoint id in thread", LGListFilter{ThreadID: "B", CheckpointID: "a2"}, []string{"a2"}},
		{"meta one key", LGListFilter{ThreadID: "A", Namespace: &root, Metadata: md("source", `"loop"`)}, []string{"a2", "a1"}},
		{"meta two keys", LGListFilter{ThreadID: "A", Metadata: md("source", `"loop"`, "step", `1`)}, []string{"a9", "a1"}},
		{"meta number forms", LGListFilter{ThreadID: "A", Metadata: md("step", `2.0`)}, []string{"a2"}},
		{"meta object", LGListFilter{Metadata: md("parents", `{}`)}, []string{"a2"}},
		{"meta no thread", LGListFilter{Metadata: md("source", `"input"`)}, []string{"b1", "a3"}},
		{"meta no thread + ns + before", LGListFilter{Namespace: &root, Before: "b1", Metadata: md("source", `"loop"`)}, []string{"a2", "a1"}},
		{"meta no match", LGListFilter{ThreadID: "A", Metadata: md("source", `"update"`, "step", `99`)}, nil},
		{"meta string vs number", LGListFilter{Metadata: md("step", `"1"`)}, nil},
		{"unknown thread", LGListFilter{ThreadID: "nope"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.LGList(ctx, tc.f)
			require.NoError(t, err)
			require.Equal(t, append([]string{}, tc.want...), tupleIDs(res.Tuples))
			require.Empty(t, res.Cursor)
		})
	}
	// ties: the same id in two threads comes in reverse storage order
	res, err := s.LGList(ctx, LGListFilter{CheckpointID: "a2"})
	require.NoError(t, err)
	require.Equal(t, []string{"B", "A"}, []string{res.Tuples[0].ThreadID, res.Tuples[1].ThreadID})

	_, err = s.LGList(ctx, LGListFilter{Cursor: "garbage!"})
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "cursor", ie.Field)
}

func TestLGListPaging(t *testing.T) {
	s := openTest(t, func(o *Options) { o.Durability = DurabilityNormal })
	ctx := context.Background()
	oldTuples, oldBytes := lgPageTuples, lgPageBytes
	t.Cleanup(func() { lgPageTuples, lgPageBytes = oldTuples, oldBytes })
	lgPageTuples, lgPageBytes = 4, 1<<20

	var want []string
	for i := 0; i < 11; i++ {
		id := fmt.Sprintf("c%02d", i)
		lgPutT(t, s, "T", "", id, "", map[string]any{"big": i}, map[string]string{"big": `"` + strings.Repeat("x", 300<<10) + `"`}, "")
		want = append([]string{id}, want...)
	}
	// the same ids in another namespace: ties across pages
	for i := 0; i < 3; i++ {
		lgPutT(t, s, "T", "ns", fmt.Sprintf("c%02d", i), "", map[string]any{}, nil, "")
	}
	collect := func(f LGListFilter) ([]string, int) {
		var ids []string
		pages := 0
		for {
			res, err := s.LGList(ctx, f)
			require.NoError(t, err)
			pages++
			for _, tu := range res.Tuples {
				ids = append(ids, tu.Namespace+"/"+tu.CheckpointID)
			}
			if res.Cursor == "" {
				return ids, pages
			}
			if f.Limit > 0 {
				f.Limit -= len(res.Tuples)
			}
			f.Cursor = res.Cursor
			require.Less(t, pages, 50)
		}
	}
	root := ""
	ids, pages := collect(LGListFilter{ThreadID: "T", Namespace: &root})
	var wantRoot []string
	for _, id := range want {
		wantRoot = append(wantRoot, "/"+id)
	}
	require.Equal(t, wantRoot, ids)
	require.GreaterOrEqual(t, pages, 3) // 1 MiB budget, 300 KiB blobs: at most 4 per page
	ids, _ = collect(LGListFilter{ThreadID: "T"})
	require.Len(t, ids, 14)
	require.Equal(t, []string{"ns/c02", "/c02", "ns/c01", "/c01", "ns/c00", "/c00"}, ids[8:])
	ids, _ = collect(LGListFilter{ThreadID: "T", Limit: 5})
	require.Len(t, ids, 5)
}

func TestLGChannelHistory(t *testing.T) {
	s := openTest(t)
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
				lgPutT(t, s, thread, "", id, parent, map[string]any{"ch": i + 1}, map[string]string{"ch": fmt.Sprint(i * 100)}, "")
			} else {
				lgPutT(t, s, thread, "", id, parent, map[string]any{}, nil, "")
				lgWritesT(t, s, thread, "", id, fmt.Sprintf("task-%d", i), "", "ch", fmt.Sprint(i))
			}
			ids = append(ids, id)
			parent = id
		}
		return ids
	}
	values := func(ws []LGWrite) []string {
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
	lgWritesT(t, s, "t1", "", ids[4], "extra", "", "ch", `"extra"`)
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
	lgPutT(t, s, "t4", "", "s0", "", map[string]any{"ch": 1}, map[string]string{"ch": "10"}, "")
	lgWritesT(t, s, "t4", "", "s0", "ffff", "~pull, 02", "ch", `"at-seed-2"`)
	lgWritesT(t, s, "t4", "", "s0", "0000", "~pull, 01", "ch", `"at-seed-1"`)
	lgWritesT(t, s, "t4", "", "s0", "zzzz", "", "ch", `"input"`)
	lgPutT(t, s, "t4", "", "s1", "s0", map[string]any{"ch": 1}, nil, "") // unchanged version: seed here
	lgPutT(t, s, "t4", "", "s2", "s1", map[string]any{"ch": 2}, map[string]string{"ch": ""}, "")
	lgWritesT(t, s, "t4", "", "s2", "t", "", "ch", `"after"`)
	lgPutT(t, s, "t4", "", "s3", "s2", map[string]any{"ch": 3}, map[string]string{"ch": ""}, "")
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
	lgPutT(t, s, "t5", "", "x1", "x2", map[string]any{}, nil, "")
	lgPutT(t, s, "t5", "", "x2", "x1", map[string]any{}, nil, "")
	res, err = s.LGChannelHistory(ctx, "t5", "", "x2", []string{"ch"})
	require.NoError(t, err)
	require.Equal(t, []string{"x1"}, res.Visited)
}

func countLG(t *testing.T, s *Store) (ckpts, blobs, writes, meta int) {
	t.Helper()
	db := rawDB(t, s.Path())
	for _, q := range []struct {
		dst *int
		tbl string
	}{{&ckpts, "lg_checkpoints"}, {&blobs, "lg_blobs"}, {&writes, "lg_writes"}, {&meta, "lg_meta"}} {
		require.NoError(t, db.QueryRow("SELECT count(*) FROM "+q.tbl).Scan(q.dst))
	}
	return
}

func TestLGDeleteCopyPruneRuns(t *testing.T) {
	ctx := context.Background()
	blobsFor := func(s *Store, th string) {
		// every checkpoint ci stores k@i and keep@0 (first one)
		parent := ""
		for i := 0; i < 3; i++ {
			id := fmt.Sprintf("c%d", i)
			bl := map[string]string{"k": fmt.Sprint(i)}
			if i == 0 {
				bl["keep"] = `"k"`
			}
			lgPutT(t, s, th, "", id, parent, map[string]any{"k": i, "keep": 0}, bl, fmt.Sprintf(`{"run_id":"%s-run%d","step":%d}`, th, i%2, i))
			parent = id
		}
		lgPutT(t, s, th, "sub", "s0", "", map[string]any{"k": 1}, map[string]string{"k": "sub"}, `{"run_id":"`+th+`-run0"}`)
		lgWritesT(t, s, th, "", "c2", "task", "", "ch", `"w"`)
		lgWritesT(t, s, th, "", "c0", "task", "", "ch", `"w0"`)
	}
	fresh := func(t *testing.T) *Store {
		s := openTest(t)
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
		require.Equal(t, map[string]string{"k": "2", "keep": `"k"`}, blobMap(got))
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
			a, err := s.LGList(ctx, LGListFilter{ThreadID: "A", Namespace: &ns})
			require.NoError(t, err)
			c, err := s.LGList(ctx, LGListFilter{ThreadID: "C", Namespace: &ns})
			require.NoError(t, err)
			require.Equal(t, tupleIDs(a.Tuples), tupleIDs(c.Tuples))
			for i := range a.Tuples {
				require.Equal(t, blobMap(&a.Tuples[i]), blobMap(&c.Tuples[i]))
				require.Equal(t, a.Tuples[i].ParentID, c.Tuples[i].ParentID)
				require.Equal(t, string(a.Tuples[i].Metadata), string(c.Tuples[i].Metadata))
				require.Equal(t, len(a.Tuples[i].Writes), len(c.Tuples[i].Writes))
			}
		}
		// the metadata index covers the copies
		res, err := s.LGList(ctx, LGListFilter{ThreadID: "C", Metadata: map[string]json.RawMessage{"step": json.RawMessage("1")}})
		require.NoError(t, err)
		require.Equal(t, []string{"c1"}, tupleIDs(res.Tuples))
		// copying again overwrites, does not duplicate
		n, err = s.LGCopyThread(ctx, "A", "C")
		require.NoError(t, err)
		require.Equal(t, 4, n)
		res, err = s.LGList(ctx, LGListFilter{ThreadID: "C"})
		require.NoError(t, err)
		require.Len(t, res.Tuples, 4)
		_, _, _, meta := countLG(t, s)
		require.Equal(t, 3*(2*3+1), meta) // run_id+step on 3 root, run_id on sub; 3 threads
		// unknown source copies nothing; same thread is refused
		n, err = s.LGCopyThread(ctx, "nope", "D")
		require.NoError(t, err)
		require.Zero(t, n)
		_, err = s.LGCopyThread(ctx, "A", "A")
		var ie *InvalidError
		require.ErrorAs(t, err, &ie)
	})

	t.Run("prune keep_latest", func(t *testing.T) {
		s := fresh(t)
		n, err := s.LGPrune(ctx, []string{"A", "nope"}, "keep_latest")
		require.NoError(t, err)
		require.Equal(t, 2, n)
		res, err := s.LGList(ctx, LGListFilter{ThreadID: "A"})
		require.NoError(t, err)
		require.Equal(t, []string{"s0", "c2"}, tupleIDs(res.Tuples))
		require.Equal(t, map[string]string{"k": "2", "keep": `"k"`}, blobMap(&res.Tuples[1]))
		require.Len(t, res.Tuples[1].Writes, 1)
		c, b, w, _ := countLG(t, s)
		require.Equal(t, []int{2 + 4, 3 + 5, 1 + 2}, []int{c, b, w}) // A: k@2, keep@0, sub k@1
		res, err = s.LGList(ctx, LGListFilter{ThreadID: "B"})
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
		res, err := s.LGList(ctx, LGListFilter{ThreadID: "A"})
		require.NoError(t, err)
		require.Equal(t, []string{"c1"}, tupleIDs(res.Tuples))
		// c1 still reads keep@0, stored with c0
		require.Equal(t, map[string]string{"k": "1", "keep": `"k"`}, blobMap(&res.Tuples[0]))
		c, b, w, _ := countLG(t, s)
		require.Equal(t, []int{1 + 4, 2 + 5, 0 + 2}, []int{c, b, w})
		n, err = s.LGDeleteForRuns(ctx, nil)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func TestLGPruneKeepsDeltaChain(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	// ch has a value at c1 only; c2..c4 bump its version without a value (delta channel)
	lgPutT(t, s, "T", "", "c0", "", map[string]any{"x": 1}, map[string]string{"x": "0"}, "")
	lgPutT(t, s, "T", "", "c1", "c0", map[string]any{"x": 1, "ch": 1}, map[string]string{"ch": `"snap"`}, "")
	for i := 2; i <= 4; i++ {
		lgPutT(t, s, "T", "", fmt.Sprintf("c%d", i), fmt.Sprintf("c%d", i-1), map[string]any{"x": 1, "ch": i}, map[string]string{"ch": ""}, "")
		lgWritesT(t, s, "T", "", fmt.Sprintf("c%d", i-1), "task", "", "ch", fmt.Sprint(i))
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
	require.Equal(t, map[string]string{"x": "0"}, blobMap(got)) // x@1 stored with c0 is still referenced

	// a delta channel that is not versioned between snapshots: the ancestors' writes name it
	lgPutT(t, s, "U", "", "u0", "", map[string]any{}, nil, "")
	lgWritesT(t, s, "U", "", "u0", "task", "", "d", "0")
	lgPutT(t, s, "U", "", "u1", "u0", map[string]any{"d": 2}, map[string]string{"d": `"snap"`}, "")
	for i := 2; i <= 4; i++ {
		lgPutT(t, s, "U", "", fmt.Sprintf("u%d", i), fmt.Sprintf("u%d", i-1), map[string]any{}, nil, "")
		lgWritesT(t, s, "U", "", fmt.Sprintf("u%d", i), "task", "", "d", fmt.Sprint(i))
	}
	// special (negative idx) writes do not hold ancestors back
	p, _ := s.LGPutWrites("U", "", "u0", []LGWrite{{TaskID: "t", Idx: -1, Channel: "__error__", Type: "json", Data: []byte(`"x"`)}})
	require.NoError(t, p.Wait(ctx))
	n, err = s.LGPrune(ctx, []string{"U"}, "keep_latest")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	res, err := s.LGList(ctx, LGListFilter{ThreadID: "U"})
	require.NoError(t, err)
	require.Equal(t, []string{"u4", "u3", "u2", "u1"}, tupleIDs(res.Tuples))
	// nothing written, nothing open: exactly one checkpoint stays
	for i := 0; i < 3; i++ {
		lgPutT(t, s, "V", "", fmt.Sprintf("v%d", i), fmt.Sprintf("v%d", i-1), map[string]any{"a": i}, map[string]string{"a": fmt.Sprint(i)}, "")
	}
	lgWritesT(t, s, "V", "", "v0", "task", "", "a", "1") // a has a value at the latest: no replay needed
	n, err = s.LGPrune(ctx, []string{"V"}, "keep_latest")
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

func TestLGCorruption(t *testing.T) {
	s := openTest(t, func(o *Options) { o.BlobCacheBytes = -1 })
	ctx := context.Background()
	lgPutT(t, s, "T", "", "c1", "", map[string]any{"a": 1}, map[string]string{"a": `"hello"`}, "")
	_, err := rawDB(t, s.Path()).Exec(`UPDATE lg_blobs SET data = CAST('"hellO"' AS BLOB)`)
	require.NoError(t, err)
	_, err = s.LGGet(ctx, "T", "", "c1")
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "c1", ce.CheckpointID)
	require.Contains(t, ce.Reason, "SHA-256")
	_, err = s.LGList(ctx, LGListFilter{ThreadID: "T"})
	require.ErrorAs(t, err, &ce)
}

// TestLGBlobCache: values this store wrote or verified are served from memory by their stored
// SHA-256; another Store on the same file (another process) reads and verifies the bytes.
func TestLGBlobCache(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	big := checkpointJSON(rng, 100<<10)
	req := LGPutRequest{ThreadID: "T", CheckpointID: "c1", Type: "json", Checkpoint: []byte(`{}`),
		ChannelVersions: json.RawMessage(`{"m":"v1","s":"v1"}`),
		Blobs:           []LGBlob{{Channel: "m", Version: `"v1"`, Type: "msgpack", Data: big}, {Channel: "s", Version: `"v1"`, Type: "json", Data: []byte(`"small"`)}}}
	p, _ := s.LGPut(req)
	require.NoError(t, p.Wait(ctx))
	st := s.BlobCacheStats()
	require.Equal(t, 2, st.Entries)
	got, err := s.LGGet(ctx, "T", "", "c1")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"m": string(big), "s": `"small"`}, blobMap(got))
	require.EqualValues(t, 2, s.BlobCacheStats().Hits)

	// the stored bytes go bad: this store still answers with the value it wrote (a value is
	// named by its stored hash, so the cached one is the right one) ...
	_, err = rawDB(t, s.Path()).Exec(`UPDATE lg_blobs SET data = CAST('"smalL"' AS BLOB) WHERE channel = 's'`)
	require.NoError(t, err)
	got, err = s.LGGet(ctx, "T", "", "c1")
	require.NoError(t, err)
	require.Equal(t, `"small"`, blobMap(got)["s"])
	// ... while a store without the value in memory reads, verifies and reports the damage
	other, err := Open(ctx, Options{Path: s.Path(), noBackground: true})
	require.NoError(t, err)
	defer other.Close()
	_, err = other.LGGet(ctx, "T", "", "c1")
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Reason, "blob s@")

	// the cache holds at most its size, least recently used values leave first, and a value
	// over an eighth of it is not kept
	small := newBlobCache(1 << 10)
	small.add(make([]byte, 32), make([]byte, 100))
	require.Equal(t, 1, small.stats().Entries)
	k2 := append(make([]byte, 31), 1)
	small.add(k2, make([]byte, 129)) // over max/8: not kept
	require.Equal(t, 1, small.stats().Entries)
	for i := 2; i < 20; i++ {
		small.add(append(make([]byte, 31), byte(i)), make([]byte, 100))
	}
	require.LessOrEqual(t, small.stats().Bytes, int64(1<<10))
	_, ok := small.get(make([]byte, 32))
	require.False(t, ok, "least recently used value evicted")
	v, ok := small.get(append(make([]byte, 31), 19))
	require.True(t, ok)
	require.Len(t, v, 100)
}

func TestLGCompressedRoundTrip(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	big := checkpointJSON(rng, 200<<10)
	req := LGPutRequest{ThreadID: "T", CheckpointID: "c", Type: "json", Checkpoint: big, ChannelVersions: json.RawMessage(`{"m":"v1"}`),
		Blobs: []LGBlob{{Channel: "m", Version: `"v1"`, Type: "msgpack", Data: big}}}
	p, _ := s.LGPut(req)
	require.NoError(t, p.Wait(ctx))
	var enc, stored int
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT encoding, length(data) FROM lg_blobs`).Scan(&enc, &stored))
	require.Equal(t, lgEncS2, enc)
	require.Less(t, stored, len(big)/2)
	got, err := s.LGGet(ctx, "T", "", "")
	require.NoError(t, err)
	require.Equal(t, big, got.Checkpoint)
	require.Equal(t, big, got.Blobs[0].Data)
}

// lgPlan returns the EXPLAIN QUERY PLAN text of one lg/list page query.
func lgPlan(t *testing.T, s *Store, f LGListFilter, cur *lgCursor) string {
	t.Helper()
	q, args, err := lgListQuery(f, cur, 11)
	require.NoError(t, err)
	rows, err := s.rdb.Query("EXPLAIN QUERY PLAN "+q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
		lines = append(lines, detail)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}

// TestLGListScale stores lgScaleN checkpoints of one thread with a 100 KB growing channel each
// and checks that every lg/list shape walks an index (no temp b-tree sort) and that a 10-tuple
// page stays fast.
func TestLGListScale(t *testing.T) {
	s := openTest(t, func(o *Options) { o.Durability = DurabilityNormal })
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	base := checkpointJSON(rng, 100<<10)
	n := lgScaleN
	parent := ""
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("1f0%05d-0000-6000-8000-%012d", i, i)
		blob := append([]byte(fmt.Sprintf("%06d", i)), base...)
		req := LGPutRequest{ThreadID: "big", CheckpointID: id, ParentID: parent, Type: "msgpack", Checkpoint: []byte(`{"v":4}`),
			ChannelVersions: json.RawMessage(fmt.Sprintf(`{"messages":%d,"step":%d,"const":1}`, i+1, i+1)),
			Metadata:        json.RawMessage(fmt.Sprintf(`{"source":"loop","step":%d,"run_id":"r%d"}`, i, i%3)),
			Blobs: []LGBlob{{Channel: "messages", Version: fmt.Sprint(i + 1), Type: "msgpack", Data: blob},
				{Channel: "step", Version: fmt.Sprint(i + 1), Type: "msgpack", Data: []byte(fmt.Sprint(i))}}}
		if i == 0 {
			req.Blobs = append(req.Blobs, LGBlob{Channel: "const", Version: "1", Type: "msgpack", Data: []byte("c")})
		}
		p, _ := s.LGPut(req)
		require.NoError(t, p.Wait(ctx))
		parent = id
	}
	root := ""
	md := map[string]json.RawMessage{"source": json.RawMessage(`"loop"`)}
	md2 := map[string]json.RawMessage{"source": json.RawMessage(`"loop"`), "run_id": json.RawMessage(`"r1"`)}
	cur := &lgCursor{id: "1f000500-0000-6000-8000-000000000500", rowid: 501}
	shapes := []LGListFilter{
		{ThreadID: "big", Namespace: &root},
		{ThreadID: "big", Namespace: &root, Before: parent},
		{ThreadID: "big", Namespace: &root, Metadata: md},
		{ThreadID: "big", Namespace: &root, Metadata: md2, Before: parent},
		{ThreadID: "big"},
		{ThreadID: "big", Metadata: md},
		{Namespace: &root},
		{Metadata: md},
		{Metadata: md2, Namespace: &root, Before: parent},
		{},
		{CheckpointID: parent},
	}
	for i, f := range shapes {
		for _, c := range []*lgCursor{nil, cur} {
			plan := lgPlan(t, s, f, c)
			require.NotContains(t, plan, "TEMP B-TREE", "shape %d (cursor %v):\n%s", i, c != nil, plan)
			require.NotRegexp(t, `(?m)^SCAN c$`, plan, "shape %d:\n%s", i, plan)
		}
	}
	// a page of 10 reads 10 tuples, not the thread
	start := time.Now()
	const rounds = 20
	for r := 0; r < rounds; r++ {
		res, err := s.LGList(ctx, LGListFilter{ThreadID: "big", Namespace: &root, Limit: 10})
		require.NoError(t, err)
		require.Len(t, res.Tuples, 10)
		require.Equal(t, parent, res.Tuples[0].CheckpointID)
		require.Len(t, res.Tuples[0].Blobs, 3)
	}
	per := time.Since(start) / rounds
	t.Logf("lg list limit 10 over %d x 100 KB: %v per call", n, per)
	if !raceEnabled {
		require.Less(t, per, 200*time.Millisecond)
	}
	// filters that match late still use the index
	res, err := s.LGList(ctx, LGListFilter{ThreadID: "big", Namespace: &root, Metadata: map[string]json.RawMessage{"step": json.RawMessage("0")}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, res.Tuples, 1)
}

func TestLGMigrationAddsTables(t *testing.T) {
	s := openTest(t)
	var n int
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name LIKE 'lg_%'`).Scan(&n))
	require.GreaterOrEqual(t, n, 9)
	// LangGraph data is invisible to the checkpoint family and not subject to retention
	s2 := openTest(t, func(o *Options) { o.DefaultRetention = Retention{KeepLast: 1} })
	for i := 0; i < 3; i++ {
		lgPutT(t, s2, "T", "", fmt.Sprintf("c%d", i), "", map[string]any{}, nil, "")
		mustSave(t, s2, SaveRequest{WorkflowID: "T", State: []byte(`{}`)})
	}
	res, err := s2.LGList(context.Background(), LGListFilter{ThreadID: "T"})
	require.NoError(t, err)
	require.Len(t, res.Tuples, 3)
	sums, err := s2.List(context.Background(), ListFilter{WorkflowID: "T"})
	require.NoError(t, err)
	require.Len(t, sums, 1)
	var nilErr *CorruptError
	require.False(t, errors.As(err, &nilErr))
}

func BenchmarkLGList10(b *testing.B) {
	s := openTest(b, func(o *Options) { o.Durability = DurabilityNormal })
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	base := checkpointJSON(rng, 100<<10)
	parent := ""
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("1f0%05d", i)
		blob := append([]byte(fmt.Sprintf("%06d", i)), base...)
		req := LGPutRequest{ThreadID: "big", CheckpointID: id, ParentID: parent, Type: "msgpack", Checkpoint: []byte(`{"v":4}`),
			ChannelVersions: json.RawMessage(fmt.Sprintf(`{"messages":%d}`, i+1)),
			Blobs:           []LGBlob{{Channel: "messages", Version: fmt.Sprint(i + 1), Type: "msgpack", Data: blob}}}
		p, _ := s.LGPut(req)
		require.NoError(b, p.Wait(ctx))
		parent = id
	}
	root := ""
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.LGList(ctx, LGListFilter{ThreadID: "big", Namespace: &root, Limit: 10}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLGPutGrowing is the put of the LangGraph benches: one thread whose message list grows
// by ~100 bytes a step (to ~100 KB at step 1000) plus small channels, each put storing the
// changed channels. Run it with -benchtime=1000x to match the benches' 1000 steps.
func BenchmarkLGPutGrowing(b *testing.B) {
	for _, d := range []string{DurabilityFull, DurabilityNormal} {
		b.Run(d, func(b *testing.B) { benchLGPutGrowing(b, benchStore(b, d)) })
	}
}

func benchLGPutGrowing(b *testing.B, s *Store) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 3))
	var msgs []byte
	lat := make(latencies, 0, b.N)
	parent := ""
	startCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		msg := fmt.Sprintf(`{"id":"msg-%d","role":"ai","content":%q}`, i, checkpointJSON(rng, 60))
		if len(msgs) == 0 {
			msgs = []byte("[" + msg + "]")
		} else {
			msgs = append(append(msgs[:len(msgs)-1:len(msgs)-1], ","+msg...), ']')
		}
		id := fmt.Sprintf("1f0%08d", i)
		v := fmt.Sprint(i + 1)
		req := LGPutRequest{ThreadID: "t", CheckpointID: id, ParentID: parent, Type: "json",
			Checkpoint:      []byte(fmt.Sprintf(`{"v":4,"id":%q,"ts":"2026-11-24T00:00:00Z","versions_seen":{"agent":{"messages":%s}}}`, id, v)),
			ChannelVersions: json.RawMessage(fmt.Sprintf(`{"messages":%s,"step":%s,"usage":%s,"config":1}`, v, v, v)),
			Metadata:        json.RawMessage(fmt.Sprintf(`{"source":"loop","step":%d,"parents":{}}`, i)),
			Blobs: []LGBlob{
				{Channel: "messages", Version: v, Type: "json", Data: msgs},
				{Channel: "step", Version: v, Type: "json", Data: []byte(v)},
				{Channel: "usage", Version: v, Type: "json", Data: []byte(fmt.Sprintf(`{"input_tokens":%d}`, i*120))},
			}}
		t0 := time.Now()
		p, _ := s.LGPut(req)
		if err := p.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		parent = id
	}
	b.StopTimer()
	lat.report(b)
}
