package storetest

// LangGraph fidelity (value variants, metadata rules, staged values, thread ids) and retention of
// LangGraph threads (keepLast, keepFirst, maxAge, idle TTL, lg/configure), deleting in bites.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func init() {
	add(
		testCase{"LGValueVariants", testLGValueVariants},
		testCase{"LGValueVariantsCopyExport", testLGValueVariantsCopyExport},
		testCase{"LGThreadIDs", testLGThreadIDs},
		testCase{"LGMetadataMatch", testLGMetadataMatch},
		testCase{"LGMetadataMatchPaging", testLGMetadataMatchPaging},
		testCase{"LGStagedValues", testLGStagedValues},
		testCase{"LGRetentionKeepLast", testLGRetentionKeepLast},
		testCase{"LGRetentionDeltaAndParent", testLGRetentionDeltaAndParent},
		testCase{"LGRetentionAgeFirstConfigure", testLGRetentionAgeFirstConfigure},
		testCase{"LGRetentionIdle", testLGRetentionIdle},
		testCase{"LGRetentionCatchUp", testLGRetentionCatchUp},
		testCase{"LGBites", testLGBites},
	)
}

// putLGReq stores req and returns the values it stored.
func putLGReq(t testing.TB, s store.Backend, req store.LGPutRequest) int {
	t.Helper()
	p, n := s.LGPut(req)
	require.NoError(t, p.Wait(context.Background()))
	return *n
}

// lgReq is a put of checkpoint id (parent parent) whose channel versions are versions (version
// strings) and whose values are blobs (channel -> JSON text).
func lgReq(thread, id, parent string, versions map[string]string, blobs map[string]string) store.LGPutRequest {
	vs := map[string]any{}
	for ch, v := range versions {
		vs[ch] = v
	}
	vj, _ := json.Marshal(vs)
	req := store.LGPutRequest{ThreadID: thread, CheckpointID: id, ParentID: parent, Type: "json",
		Checkpoint: []byte(`{"id":"` + id + `"}`), ChannelVersions: vj}
	for ch, val := range blobs {
		raw, _ := json.Marshal(versions[ch])
		key, _ := store.CanonicalVersion(raw)
		b := store.LGBlob{Channel: ch, Version: key, Type: "json", Data: []byte(val)}
		if val == "" {
			b.Type, b.Data = store.LGEmptyType, nil
		}
		req.Blobs = append(req.Blobs, b)
	}
	return req
}

func lgValues(t testing.TB, s store.Backend, thread, id string) map[string]string {
	t.Helper()
	got, err := s.LGGet(context.Background(), thread, "", id)
	require.NoError(t, err)
	require.NotNil(t, got, "checkpoint %s", id)
	return BlobMap(got)
}

func lgIDs(t testing.TB, s store.Backend, f store.LGListFilter) []string {
	t.Helper()
	var ids []string
	for {
		res, err := s.LGList(context.Background(), f)
		require.NoError(t, err)
		ids = append(ids, TupleIDs(res.Tuples)...)
		if res.Cursor == "" {
			return ids
		}
		if f.Limit > 0 {
			if f.Limit -= len(res.Tuples); f.Limit <= 0 {
				return ids
			}
		}
		f.Cursor = res.Cursor
	}
}

// testLGValueVariants: a replayed branch that makes a version another branch used, with other
// bytes, reads its own value, and so do the checkpoints after it; the other branch keeps its.
func testLGValueVariants(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	require.Equal(t, 2, putLGReq(t, s, lgReq("t", "c1", "", map[string]string{"a": "1", "n": "1"}, map[string]string{"a": `"A1"`, "n": `"N"`})))
	require.Equal(t, 1, putLGReq(t, s, lgReq("t", "c2", "c1", map[string]string{"a": "2", "n": "1"}, map[string]string{"a": `"A2"`})))
	// replayed from c1: the same version "2", other bytes
	require.Equal(t, 1, putLGReq(t, s, lgReq("t", "c3", "c1", map[string]string{"a": "2", "n": "1"}, map[string]string{"a": `"B2"`})))
	// a child of c3 that does not change a: it reads c3's a
	require.Equal(t, 1, putLGReq(t, s, lgReq("t", "c4", "c3", map[string]string{"a": "2", "n": "2"}, map[string]string{"n": `"N2"`})))
	// a child of c2 likewise reads c2's
	require.Equal(t, 0, putLGReq(t, s, lgReq("t", "c5", "c2", map[string]string{"a": "2", "n": "1"}, nil)))
	// the same bytes again reuse the stored variant
	require.Equal(t, 0, putLGReq(t, s, lgReq("t", "c6", "c1", map[string]string{"a": "2", "n": "1"}, map[string]string{"a": `"B2"`})))
	require.Equal(t, 0, putLGReq(t, s, lgReq("t", "c7", "c1", map[string]string{"a": "2", "n": "1"}, map[string]string{"a": `"A2"`})))
	want := map[string]string{"c1": `"A1"`, "c2": `"A2"`, "c3": `"B2"`, "c4": `"B2"`, "c5": `"A2"`, "c6": `"B2"`, "c7": `"A2"`}
	for id, a := range want {
		require.Equal(t, a, lgValues(t, s, "t", id)["a"], id)
	}
	require.Equal(t, `"N2"`, lgValues(t, s, "t", "c4")["n"])
	// one page with every checkpoint: each tuple its own value
	res, err := s.LGList(ctx, store.LGListFilter{ThreadID: "t"})
	require.NoError(t, err)
	require.Len(t, res.Tuples, 7)
	for i := range res.Tuples {
		require.Equal(t, want[res.Tuples[i].CheckpointID], BlobMap(&res.Tuples[i])["a"], res.Tuples[i].CheckpointID)
	}
	// the channel history of c4's child seeds from c4's own branch
	require.Equal(t, 1, putLGReq(t, s, lgReq("t", "c8", "c4", map[string]string{"a": "3", "n": "2"}, map[string]string{"a": ""})))
	hist, err := s.LGChannelHistory(ctx, "t", "", "c8", []string{"a"})
	require.NoError(t, err)
	require.NotNil(t, hist.Channels["a"].Seed)
	require.Equal(t, `"B2"`, string(hist.Channels["a"].Seed.Data))
	// keep_latest keeps c8 and c4 (c8's a has no value): c4 still reads B2; A2 is collected
	_, err = s.LGPrune(ctx, []string{"t"}, "keep_latest")
	require.NoError(t, err)
	require.Equal(t, []string{"c8", "c4"}, lgIDs(t, s, store.LGListFilter{ThreadID: "t"}))
	require.Equal(t, `"B2"`, lgValues(t, s, "t", "c4")["a"])
	_, values, _, _ := corrupter(t, s).LGRows(t)
	require.Equal(t, 3, values, "a@2#1, a@3 (empty), n@2")
}

// testLGValueVariantsCopyExport: copies and archives carry the variants and refs.
func testLGValueVariantsCopyExport(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	putLGReq(t, s, lgReq("src", "c1", "", map[string]string{"a": "1"}, map[string]string{"a": `"A1"`}))
	putLGReq(t, s, lgReq("src", "c2", "c1", map[string]string{"a": "2"}, map[string]string{"a": `"A2"`}))
	putLGReq(t, s, lgReq("src", "c3", "c1", map[string]string{"a": "2"}, map[string]string{"a": `"B2"`}))
	putLGReq(t, s, lgReq("src", "c4", "c3", map[string]string{"a": "2", "b": "1"}, map[string]string{"b": `"b"`}))
	// dst holds a@2 with other bytes again, as variant 0 and 1
	putLGReq(t, s, lgReq("dst", "d1", "", map[string]string{"a": "2"}, map[string]string{"a": `"Z"`}))
	putLGReq(t, s, lgReq("dst", "d2", "", map[string]string{"a": "2"}, map[string]string{"a": `"B2"`}))
	n, err := s.LGCopyThread(ctx, "src", "dst")
	require.NoError(t, err)
	require.Equal(t, 4, n)
	for id, a := range map[string]string{"c1": `"A1"`, "c2": `"A2"`, "c3": `"B2"`, "c4": `"B2"`, "d1": `"Z"`, "d2": `"B2"`} {
		require.Equal(t, a, lgValues(t, s, "dst", id)["a"], id)
	}
	// export and import into another database
	counts, recs := lgExportAll(t, s, "src")
	require.Equal(t, store.LGThreadCounts{Checkpoints: 4, Values: 4, Writes: 0}, counts)
	s2 := h.db(t)
	res, err := s2.LGImport(ctx, "src", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, 4, res.Imported.Checkpoints)
	for id, a := range map[string]string{"c1": `"A1"`, "c2": `"A2"`, "c3": `"B2"`, "c4": `"B2"`} {
		require.Equal(t, a, lgValues(t, s2, "src", id)["a"], id)
	}
	// importing again is a no-op
	res, err = s2.LGImport(ctx, "src", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, store.LGThreadCounts{Checkpoints: 4, Values: 4}, res.Skipped)
}

// testLGThreadIDs: the empty string and long ids are thread ids, up to MaxLGThreadIDBytes.
func testLGThreadIDs(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	long := strings.Repeat("é", store.MaxLGThreadIDBytes/2)
	for _, thread := range []string{"", long, "other"} {
		putLGReq(t, s, lgReq(thread, "c1", "", map[string]string{"a": "1"}, map[string]string{"a": fmt.Sprintf("%q", thread)}))
	}
	for _, thread := range []string{"", long} {
		got, err := s.LGGet(ctx, thread, "", "")
		require.NoError(t, err)
		require.Equal(t, thread, got.ThreadID)
		require.Equal(t, fmt.Sprintf("%q", thread), BlobMap(got)["a"])
	}
	require.Len(t, lgIDs(t, s, store.LGListFilter{ThreadID: "", ThreadGiven: true}), 1)
	require.Len(t, lgIDs(t, s, store.LGListFilter{}), 3)
	p, _ := s.LGPut(lgReq(long+"x", "c1", "", map[string]string{}, nil))
	var ie *store.InvalidError
	require.ErrorAs(t, p.Wait(ctx), &ie)
	require.Equal(t, "threadId", ie.Field)
	n, err := s.LGDeleteThread(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, lgIDs(t, s, store.LGListFilter{}), 2)
}

// testLGMetadataMatch: the three comparison rules of lg/list metadata filters.
func testLGMetadataMatch(t *testing.T, h *harness) {
	s := h.db(t)
	metas := map[string]string{
		"m1": `{"flag": true, "step": 1, "src": "loop", "x": {"a": 1, "b": 2}, "n": null}`,
		"m2": `{"flag": 1, "step": 1.0, "src": "input", "x": {"b": 2, "a": 1}}`,
		"m3": `{"flag": false, "step": 0, "x": [1, true]}`,
		"m4": `{"step": 2, "big": 9007199254740993}`,
	}
	for _, thread := range []string{"t", "u"} {
		for _, id := range []string{"m1", "m2", "m3", "m4"} {
			req := lgReq(thread, id, "", map[string]string{}, nil)
			req.Metadata = json.RawMessage(metas[id])
			putLGReq(t, s, req)
		}
	}
	cases := []struct {
		rule, filter string
		want         []string
	}{
		{store.LGMatchPython, `{"flag": 1}`, []string{"m2", "m1"}},
		{store.LGMatchPython, `{"flag": true}`, []string{"m2", "m1"}},
		{store.LGMatchPython, `{"step": true}`, []string{"m2", "m1"}},
		{store.LGMatchPython, `{"step": false}`, []string{"m3"}},
		{store.LGMatchPython, `{"flag": 0.0}`, []string{"m3"}},
		{store.LGMatchPython, `{"missing": null}`, []string{"m4", "m3", "m2", "m1"}},
		{store.LGMatchPython, `{"n": null}`, []string{"m4", "m3", "m2", "m1"}},
		{store.LGMatchPython, `{"src": null}`, []string{"m4", "m3"}},
		{store.LGMatchPython, `{"src": null, "step": 2}`, []string{"m4"}},
		{store.LGMatchPython, `{"x": {"b": 2, "a": 1}}`, []string{"m2", "m1"}},
		{store.LGMatchPython, `{"x": {"a": true, "b": 2}}`, []string{"m2", "m1"}},
		{store.LGMatchPython, `{"x": [1, 1]}`, []string{"m3"}},
		{store.LGMatchPython, `{"x": [true, true, true, true, true, true]}`, nil},
		{store.LGMatchPython, `{"big": 9007199254740993}`, []string{"m4"}},
		{store.LGMatchPython, `{"big": 9007199254740992.0}`, nil},
		{store.LGMatchPython, `{"src": "loop", "flag": 1}`, []string{"m1"}},
		{store.LGMatchJS, `{"flag": 1}`, []string{"m2"}},
		{store.LGMatchJS, `{"flag": true}`, []string{"m1"}},
		{store.LGMatchJS, `{"step": 1}`, []string{"m1"}},
		{store.LGMatchJS, `{"x": {"a": 1, "b": 2}}`, []string{"m1"}},
		{store.LGMatchJS, `{"x": [1, true]}`, []string{"m3"}},
		{store.LGMatchJS, `{"n": null}`, []string{"m1"}},
		{store.LGMatchJS, `{"missing": null}`, nil},
		{store.LGMatchJSON, `{"flag": 1}`, []string{"m2"}},
		{store.LGMatchJSON, `{"step": 1}`, []string{"m2", "m1"}},
		{store.LGMatchJSON, `{"x": {"b": 2, "a": 1}}`, []string{"m2", "m1"}},
		{store.LGMatchJSON, `{"n": null}`, []string{"m1"}},
		{"", `{"missing": null}`, nil},
	}
	for _, tc := range cases {
		var md map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(tc.filter), &md))
		// one thread, then every thread (twice the ids)
		got := lgIDs(t, s, store.LGListFilter{ThreadID: "t", Metadata: md, MetadataMatch: tc.rule})
		require.Equal(t, tc.want, nilIfEmpty(got), "%s %s (thread)", tc.rule, tc.filter)
		got = lgIDs(t, s, store.LGListFilter{Metadata: md, MetadataMatch: tc.rule})
		var twice []string
		for _, id := range tc.want {
			twice = append(twice, id, id)
		}
		require.Equal(t, twice, nilIfEmpty(got), "%s %s (all threads)", tc.rule, tc.filter)
	}
	_, err := s.LGList(context.Background(), store.LGListFilter{Metadata: map[string]json.RawMessage{"a": json.RawMessage("1")}, MetadataMatch: "ruby"})
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "metadataMatch", ie.Field)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// testLGMetadataMatchPaging: a filter the index does not decide alone pages through many
// candidates (limits and cursors included).
func testLGMetadataMatchPaging(t *testing.T, h *harness) {
	s := h.db(t)
	var want []string
	for i := 0; i < 300; i++ {
		id := fmt.Sprintf("c%03d", i)
		req := lgReq("t", id, "", map[string]string{}, nil)
		if i%7 == 0 {
			req.Metadata = json.RawMessage(`{"x": {"a": 1, "b": 2}}`)
			want = append([]string{id}, want...)
		} else {
			req.Metadata = json.RawMessage(`{"x": {"b": 2, "a": 1}}`)
		}
		putLGReq(t, s, req)
	}
	md := map[string]json.RawMessage{"x": json.RawMessage(`{"a":1,"b":2}`)}
	require.Equal(t, want, lgIDs(t, s, store.LGListFilter{ThreadID: "t", Metadata: md, MetadataMatch: store.LGMatchJS}))
	require.Equal(t, want, lgIDs(t, s, store.LGListFilter{Metadata: md, MetadataMatch: store.LGMatchJS}))
	require.Equal(t, want[:5], lgIDs(t, s, store.LGListFilter{ThreadID: "t", Metadata: md, MetadataMatch: store.LGMatchJS, Limit: 5}))
	require.Equal(t, want[3:8], lgIDs(t, s, store.LGListFilter{ThreadID: "t", Metadata: md, MetadataMatch: store.LGMatchJS, Limit: 5, Before: want[2]}))
	require.Len(t, lgIDs(t, s, store.LGListFilter{ThreadID: "t", Metadata: md, MetadataMatch: store.LGMatchPython}), 300)
}

// testLGStagedValues: values stored ahead of the put (or putWrites) that names them.
func testLGStagedValues(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	big := `"` + strings.Repeat("v", 100<<10) + `"`
	v1, err := s.LGStageValue(ctx, "t", "json", []byte(big))
	require.NoError(t, err)
	cp, err := s.LGStageValue(ctx, "t", "json", []byte(`{"id":"c1"}`))
	require.NoError(t, err)
	req := lgReq("t", "c1", "", map[string]string{"a": "1", "b": "1"}, map[string]string{"b": `"small"`})
	req.Blobs = append(req.Blobs, store.LGBlob{Channel: "a", Version: `"1"`, Staged: v1})
	req.Type, req.Checkpoint, req.CheckpointStaged = "", nil, cp
	require.Equal(t, 2, putLGReq(t, s, req))
	got, err := s.LGGet(ctx, "t", "", "c1")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": big, "b": `"small"`}, BlobMap(got))
	require.Equal(t, `{"id":"c1"}`, string(got.Checkpoint))
	require.Equal(t, "json", got.Type)
	// a staged value goes with the put that took it
	req2 := lgReq("t", "c2", "c1", map[string]string{"a": "2"}, nil)
	req2.Blobs = []store.LGBlob{{Channel: "a", Version: `"2"`, Staged: v1}}
	p, _ := s.LGPut(req2)
	var ie *store.InvalidError
	require.ErrorAs(t, p.Wait(ctx), &ie)
	require.Equal(t, "blobs[0].valueId", ie.Field)
	// another thread's value is refused, and stays for its own thread
	other, err := s.LGStageValue(ctx, "u", "json", []byte(`"u"`))
	require.NoError(t, err)
	req2.Blobs[0].Staged = other
	p, _ = s.LGPut(req2)
	require.ErrorAs(t, p.Wait(ctx), &ie)
	require.Contains(t, ie.Reason, "another thread")
	// writes
	w1, err := s.LGStageValue(ctx, "u", "json", []byte(big))
	require.NoError(t, err)
	pw, n := s.LGPutWrites("u", "", "c1", []store.LGWrite{{TaskID: "task", Idx: 0, Channel: "a", Staged: w1}})
	require.NoError(t, pw.Wait(ctx))
	require.Equal(t, 1, *n)
	putLGReq(t, s, lgReq("u", "c1", "", map[string]string{}, nil))
	got, err = s.LGGet(ctx, "u", "", "c1")
	require.NoError(t, err)
	require.Len(t, got.Writes, 1)
	require.Equal(t, big, string(got.Writes[0].Data))
	// refused before anything else
	_, err = s.LGStageValue(ctx, "u", store.LGEmptyType, nil)
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "type", ie.Field)
	// a value no put takes is collected once it is old
	clock.Advance(store.LGStagedTTL + time.Minute)
	_, err = s.LGExpireIdle(ctx)
	require.NoError(t, err)
	req3 := lgReq("u", "c2", "c1", map[string]string{"a": "1"}, nil)
	req3.Blobs = []store.LGBlob{{Channel: "a", Version: `"1"`, Staged: other}}
	p, _ = s.LGPut(req3)
	require.ErrorAs(t, p.Wait(ctx), &ie)
	require.Contains(t, ie.Reason, "expired")
}

// chat stores n turns of a chat thread (each checkpoint a new 1 KB message value) with r, and
// returns the ids, oldest first.
func chat(t testing.TB, s store.Backend, thread, ns string, n int, r *store.Retention) []string {
	t.Helper()
	var ids []string
	parent := ""
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("c%05d", i)
		req := lgReq(thread, id, parent, map[string]string{"messages": fmt.Sprint(i + 1)},
			map[string]string{"messages": fmt.Sprintf(`"%04d%s"`, i, strings.Repeat("m", 1000))})
		req.Namespace, req.Retention = ns, r
		req.Metadata = json.RawMessage(fmt.Sprintf(`{"step": %d}`, i))
		putLGReq(t, s, req)
		ids = append(ids, id)
		parent = id
	}
	return ids
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// testLGRetentionKeepLast: keepLast per (thread, namespace) after each put; what goes takes its
// values and writes along, other threads are untouched.
func testLGRetentionKeepLast(t *testing.T, h *harness) {
	s := h.db(t)
	r := &store.Retention{KeepLast: 3}
	ids := chat(t, s, "t", "", 10, r)
	chat(t, s, "t", "sub", 5, r)
	chat(t, s, "other", "", 5, nil)
	root := ""
	require.Equal(t, reversed(ids[7:]), lgIDs(t, s, store.LGListFilter{ThreadID: "t", Namespace: &root}))
	sub := "sub"
	require.Len(t, lgIDs(t, s, store.LGListFilter{ThreadID: "t", Namespace: &sub}), 3)
	require.Len(t, lgIDs(t, s, store.LGListFilter{ThreadID: "other"}), 5)
	ck, values, _, _ := corrupter(t, s).LGRows(t)
	require.Equal(t, 3+3+5, ck)
	require.Equal(t, 3+3+5, values, "each message value goes with its checkpoint")
	for _, id := range ids[7:] {
		require.Len(t, lgValues(t, s, "t", id)["messages"], 1006)
	}
	info, err := s.LGConfigure(context.Background(), strp("t"), nil, false)
	require.NoError(t, err)
	require.Equal(t, store.LGRetentionInfo{Retention: *r, Source: store.LGRetentionThread}, info)
}

// testLGRetentionDeltaAndParent: retention keeps the ancestors a kept checkpoint's delta replay
// needs, and the checkpoint a put names as its parent.
func testLGRetentionDeltaAndParent(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	r := &store.Retention{KeepLast: 2}
	// d has a value every 4th step, its writes in between: a replay of the latest needs the
	// chain back to the last value
	parent := ""
	for i := 0; i < 11; i++ {
		id := fmt.Sprintf("c%02d", i)
		val := ""
		if i%4 == 0 {
			val = fmt.Sprintf(`"seed%d"`, i)
		}
		req := lgReq("t", id, parent, map[string]string{"d": fmt.Sprint(i + 1)}, map[string]string{"d": val})
		req.Retention = r
		putLGReq(t, s, req)
		PutLGWrites(t, s, "t", "", id, "task", "", "d", fmt.Sprintf(`"w%d"`, i))
		parent = id
	}
	// kept: c10, c09 (keepLast), c08 (the seed both replays need)
	require.Equal(t, []string{"c10", "c09", "c08"}, lgIDs(t, s, store.LGListFilter{ThreadID: "t"}))
	hist, err := s.LGChannelHistory(ctx, "t", "", "c10", []string{"d"})
	require.NoError(t, err)
	require.Equal(t, `"seed8"`, string(hist.Channels["d"].Seed.Data))
	require.Len(t, hist.Channels["d"].Writes, 2)
	// a fork from c09 with a value: c09 stays as the put's parent, and for c10's replay
	req := lgReq("t", "c11", "c09", map[string]string{"d": "20"}, map[string]string{"d": `"fork"`})
	req.Retention = r
	putLGReq(t, s, req)
	require.Equal(t, []string{"c11", "c10", "c09", "c08"}, lgIDs(t, s, store.LGListFilter{ThreadID: "t"}))
	// then a chain of values: only the newest two and the last put's parent remain
	parent = "c11"
	for _, id := range []string{"c12", "c13"} {
		req := lgReq("t", id, parent, map[string]string{"d": id}, map[string]string{"d": `"v"`})
		req.Retention = r
		putLGReq(t, s, req)
		parent = id
	}
	require.Equal(t, []string{"c13", "c12"}, lgIDs(t, s, store.LGListFilter{ThreadID: "t"}))
	// a fork from an old checkpoint keeps it (the put's parent)
	req = lgReq("t", "c14", "c12", map[string]string{"d": "c14"}, map[string]string{"d": `"w"`})
	req.Retention = &store.Retention{KeepLast: 1}
	putLGReq(t, s, req)
	require.Equal(t, []string{"c14", "c12"}, lgIDs(t, s, store.LGListFilter{ThreadID: "t"}))
}

// testLGRetentionAgeFirstConfigure: keepFirst, maxAgeSeconds and where a thread's retention
// comes from (its own, the database's, the daemon's).
func testLGRetentionAgeFirstConfigure(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock), func(o *Options) { o.LGDefaultRetention = store.Retention{KeepLast: 4} })
	ctx := context.Background()
	info, err := s.LGConfigure(ctx, strp("t"), nil, false)
	require.NoError(t, err)
	require.Equal(t, store.LGRetentionInfo{Retention: store.Retention{KeepLast: 4}, Source: store.LGRetentionDaemon}, info)
	ids := chat(t, s, "t", "", 6, nil)
	require.Equal(t, reversed(ids[2:]), lgIDs(t, s, store.LGListFilter{ThreadID: "t"}))
	// the database's retention beats the daemon's
	info, err = s.LGConfigure(ctx, nil, &store.Retention{KeepLast: 2, KeepFirst: true}, false)
	require.NoError(t, err)
	require.Equal(t, store.LGRetentionDatabase, info.Source)
	ids = append(ids, chat(t, s, "t2", "", 5, nil)...)
	require.Equal(t, []string{"c00004", "c00003", "c00000"}, lgIDs(t, s, store.LGListFilter{ThreadID: "t2"}))
	// a thread's own beats both; maxAge drops the old ones but the latest
	info, err = s.LGConfigure(ctx, strp("t3"), &store.Retention{MaxAgeSeconds: 60}, false)
	require.NoError(t, err)
	require.Equal(t, store.LGRetentionInfo{Retention: store.Retention{MaxAgeSeconds: 60}, Source: store.LGRetentionThread}, info)
	chat(t, s, "t3", "", 3, nil)
	clock.Advance(2 * time.Minute)
	putLGReq(t, s, lgReq("t3", "c99999", "c00002", map[string]string{}, nil))
	require.Equal(t, []string{"c99999", "c00002"}, lgIDs(t, s, store.LGListFilter{ThreadID: "t3"}), "the put's parent stays")
	putLGReq(t, s, lgReq("t3", "d00000", "c99999", map[string]string{}, nil))
	require.Equal(t, []string{"d00000", "c99999"}, lgIDs(t, s, store.LGListFilter{ThreadID: "t3"}))
	// inherit: back to the database's
	info, err = s.LGConfigure(ctx, strp("t3"), nil, true)
	require.NoError(t, err)
	require.Equal(t, store.LGRetentionDatabase, info.Source)
	info, err = s.LGConfigure(ctx, nil, nil, true)
	require.NoError(t, err)
	require.Equal(t, store.LGRetentionInfo{Retention: store.Retention{KeepLast: 4}, Source: store.LGRetentionDaemon}, info)
	_, err = s.LGConfigure(ctx, nil, &store.Retention{MaxAgeSeconds: -1}, false)
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
}

// testLGRetentionIdle: a thread no put has touched for its idle TTL is deleted by the sweep;
// others stay; a put makes a thread live again.
func testLGRetentionIdle(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock), func(o *Options) { o.LGDefaultRetention = store.Retention{IdleTTLSeconds: 3600} })
	ctx := context.Background()
	chat(t, s, "old", "", 3, nil)
	chat(t, s, "own", "", 3, &store.Retention{IdleTTLSeconds: 60})
	chat(t, s, "keep", "", 3, &store.Retention{KeepLast: 10}) // its own retention: no idle TTL
	clock.Advance(2 * time.Minute)
	chat(t, s, "fresh", "", 2, nil)
	idle, err := s.LGIdleThreads(ctx, clock.Now().Add(-time.Minute), 0)
	require.NoError(t, err)
	var names []string
	for _, it := range idle {
		names = append(names, it.ThreadID)
	}
	require.Equal(t, []string{"old", "own", "keep"}, names)
	require.Equal(t, int64(3600), idle[0].IdleTTLSeconds)
	require.Equal(t, int64(60), idle[1].IdleTTLSeconds)
	require.True(t, idle[1].ExpiresAt.Before(clock.Now()))
	require.Zero(t, idle[2].IdleTTLSeconds)
	res, err := s.LGExpireIdle(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"own"}, res.Threads)
	require.Equal(t, 3, res.Checkpoints)
	clock.Advance(59 * time.Minute)
	putLGReq(t, s, lgReq("old", "z", "", map[string]string{}, nil)) // live again
	res, err = s.LGExpireIdle(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Threads)
	require.Len(t, lgIDs(t, s, store.LGListFilter{ThreadID: "own"}), 0)
	require.Len(t, lgIDs(t, s, store.LGListFilter{ThreadID: "old"}), 4)
	require.Len(t, lgIDs(t, s, store.LGListFilter{ThreadID: "keep"}), 3)
	clock.Advance(2 * time.Hour)
	res, err = s.LGExpireIdle(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"old", "fresh"}, res.Threads)
	require.Equal(t, []string{"c00002", "c00001", "c00000"}, lgIDs(t, s, store.LGListFilter{}))
}

// testLGRetentionCatchUp: a thread larger than what a put's transaction reads is brought down in
// bites after the put.
func testLGRetentionCatchUp(t *testing.T, h *harness) {
	s := h.db(t)
	ids := chat(t, s, "t", "", 3*store.BiteUnits, nil)
	req := lgReq("t", "z", ids[len(ids)-1], map[string]string{"messages": "9999"}, map[string]string{"messages": `"last"`})
	req.Retention = &store.Retention{KeepLast: 5}
	putLGReq(t, s, req)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := lgIDs(t, s, store.LGListFilter{ThreadID: "t"})
		if len(got) == 5 {
			require.Equal(t, append([]string{"z"}, reversed(ids[len(ids)-4:])...), got)
			break
		}
		require.True(t, time.Now().Before(deadline), "retention did not catch up: %d checkpoints", len(got))
		time.Sleep(20 * time.Millisecond)
	}
	for {
		_, values, _, _ := corrupter(t, s).LGRows(t)
		if values == 5 {
			break
		}
		require.True(t, time.Now().Before(deadline), "values not collected: %d", values)
		time.Sleep(20 * time.Millisecond)
	}
}

// testLGBites: prunes and deletions larger than a bite are exact.
func testLGBites(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	n := store.BiteUnits*2 + 7
	chat(t, s, "a", "", n, nil)
	chat(t, s, "a", "sub", 10, nil)
	chat(t, s, "b", "", n, nil)
	for i := 0; i < 3; i++ {
		PutLGWrites(t, s, "b", "", fmt.Sprintf("c%05d", i), "task", "", "messages", `"w"`)
	}
	deleted, err := s.LGPrune(ctx, []string{"a"}, "keep_latest")
	require.NoError(t, err)
	require.Equal(t, n-1+9, deleted)
	require.Equal(t, []string{fmt.Sprintf("c%05d", n-1), "c00009"}, lgIDs(t, s, store.LGListFilter{ThreadID: "a"}))
	deleted, err = s.LGDeleteThread(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, n, deleted)
	ck, values, writes, meta := corrupter(t, s).LGRows(t)
	require.Equal(t, []int{2, 2, 0, 2}, []int{ck, values, writes, meta})
	deleted, err = s.LGPrune(ctx, []string{"a", "b"}, "delete")
	require.NoError(t, err)
	require.Equal(t, 2, deleted)
	ck, values, writes, meta = corrupter(t, s).LGRows(t)
	require.Equal(t, []int{0, 0, 0, 0}, []int{ck, values, writes, meta})
}
