package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/storetest"
)

func TestLGListPaging(t *testing.T) {
	s := openTest(t, func(o *Options) { o.Durability = store.DurabilityNormal })
	ctx := context.Background()
	oldTuples, oldBytes := lgPageTuples, lgPageBytes
	t.Cleanup(func() { lgPageTuples, lgPageBytes = oldTuples, oldBytes })
	lgPageTuples, lgPageBytes = 4, 1<<20

	var want []string
	for i := 0; i < 11; i++ {
		id := fmt.Sprintf("c%02d", i)
		storetest.PutLG(t, s, "T", "", id, "", map[string]any{"big": i}, map[string]string{"big": `"` + strings.Repeat("x", 300<<10) + `"`}, "")
		want = append([]string{id}, want...)
	}
	// the same ids in another namespace: ties across pages
	for i := 0; i < 3; i++ {
		storetest.PutLG(t, s, "T", "ns", fmt.Sprintf("c%02d", i), "", map[string]any{}, nil, "")
	}
	collect := func(f store.LGListFilter) ([]string, int) {
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
	ids, pages := collect(store.LGListFilter{ThreadID: "T", Namespace: &root})
	var wantRoot []string
	for _, id := range want {
		wantRoot = append(wantRoot, "/"+id)
	}
	require.Equal(t, wantRoot, ids)
	require.GreaterOrEqual(t, pages, 3) // 1 MiB budget, 300 KiB blobs: at most 4 per page
	ids, _ = collect(store.LGListFilter{ThreadID: "T"})
	require.Len(t, ids, 14)
	require.Equal(t, []string{"ns/c02", "/c02", "ns/c01", "/c01", "ns/c00", "/c00"}, ids[8:])
	ids, _ = collect(store.LGListFilter{ThreadID: "T", Limit: 5})
	require.Len(t, ids, 5)
}

// TestLGBlobCache: values this store wrote or verified are served from memory by their stored
// SHA-256; another Store on the same file (another process) reads and verifies the bytes.
func TestLGBlobCache(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	big := checkpointJSON(rng, 100<<10)
	req := store.LGPutRequest{ThreadID: "T", CheckpointID: "c1", Type: "json", Checkpoint: []byte(`{}`),
		ChannelVersions: json.RawMessage(`{"m":"v1","s":"v1"}`),
		Blobs:           []store.LGBlob{{Channel: "m", Version: `"v1"`, Type: "msgpack", Data: big}, {Channel: "s", Version: `"v1"`, Type: "json", Data: []byte(`"small"`)}}}
	p, _ := s.LGPut(req)
	require.NoError(t, p.Wait(ctx))
	st := s.BlobCacheStats()
	require.Equal(t, 2, st.Entries)
	got, err := s.LGGet(ctx, "T", "", "c1")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"m": string(big), "s": `"small"`}, storetest.BlobMap(got))
	require.EqualValues(t, 2, s.BlobCacheStats().Hits)

	// the stored bytes go bad: this store still answers with the value it wrote (a value is
	// named by its stored hash, so the cached one is the right one) ...
	_, err = rawDB(t, s.Path()).Exec(`UPDATE lg_blobs SET data = CAST('"smalL"' AS BLOB) WHERE channel = 's'`)
	require.NoError(t, err)
	got, err = s.LGGet(ctx, "T", "", "c1")
	require.NoError(t, err)
	require.Equal(t, `"small"`, storetest.BlobMap(got)["s"])
	// ... while a store without the value in memory reads, verifies and reports the damage
	other, err := open(ctx, options(s.Path()))
	require.NoError(t, err)
	defer other.Close()
	_, err = other.LGGet(ctx, "T", "", "c1")
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Reason, "blob s@")
}

func TestLGCompressedRoundTrip(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	big := checkpointJSON(rng, 200<<10)
	req := store.LGPutRequest{ThreadID: "T", CheckpointID: "c", Type: "json", Checkpoint: big, ChannelVersions: json.RawMessage(`{"m":"v1"}`),
		Blobs: []store.LGBlob{{Channel: "m", Version: `"v1"`, Type: "msgpack", Data: big}}}
	p, _ := s.LGPut(req)
	require.NoError(t, p.Wait(ctx))
	var enc, stored int
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT encoding, length(data) FROM lg_checkpoints`).Scan(&enc, &stored))
	require.Equal(t, store.EncS2, enc)
	require.Less(t, stored, len(big)/2)
	// a channel value over chunk.InlineMax is chunked, its chunks compressed
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT encoding, (SELECT sum(length(data)) FROM chunks) FROM lg_blobs`).Scan(&enc, &stored))
	require.Equal(t, store.EncChunked, enc)
	require.Less(t, stored, len(big)/2)
	got, err := s.LGGet(ctx, "T", "", "")
	require.NoError(t, err)
	require.Equal(t, big, got.Checkpoint)
	require.Equal(t, big, got.Blobs[0].Data)
}

// lgPlan returns the EXPLAIN QUERY PLAN text of one lg/list page query.
func lgPlan(t *testing.T, s *Store, f store.LGListFilter, cur *store.LGCursor) string {
	t.Helper()
	meta, err := store.NewLGMetaQuery(f.Metadata, f.MetadataMatch)
	require.NoError(t, err)
	q, args := lgListQuery(lgCols, f, meta, cur, 11)
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
	s := openTest(t, func(o *Options) { o.Durability = store.DurabilityNormal })
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	base := checkpointJSON(rng, 100<<10)
	n := lgScaleN
	parent := ""
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("1f0%05d-0000-6000-8000-%012d", i, i)
		blob := append([]byte(fmt.Sprintf("%06d", i)), base...)
		req := store.LGPutRequest{ThreadID: "big", CheckpointID: id, ParentID: parent, Type: "msgpack", Checkpoint: []byte(`{"v":4}`),
			ChannelVersions: json.RawMessage(fmt.Sprintf(`{"messages":%d,"step":%d,"const":1}`, i+1, i+1)),
			Metadata:        json.RawMessage(fmt.Sprintf(`{"source":"loop","step":%d,"run_id":"r%d"}`, i, i%3)),
			Blobs: []store.LGBlob{{Channel: "messages", Version: fmt.Sprint(i + 1), Type: "msgpack", Data: blob},
				{Channel: "step", Version: fmt.Sprint(i + 1), Type: "msgpack", Data: []byte(fmt.Sprint(i))}}}
		if i == 0 {
			req.Blobs = append(req.Blobs, store.LGBlob{Channel: "const", Version: "1", Type: "msgpack", Data: []byte("c")})
		}
		p, _ := s.LGPut(req)
		require.NoError(t, p.Wait(ctx))
		parent = id
	}
	root := ""
	md := map[string]json.RawMessage{"source": json.RawMessage(`"loop"`)}
	md2 := map[string]json.RawMessage{"source": json.RawMessage(`"loop"`), "run_id": json.RawMessage(`"r1"`)}
	cur := &store.LGCursor{ID: "1f000500-0000-6000-8000-000000000500", Key: 501}
	shapes := []store.LGListFilter{
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
		for _, c := range []*store.LGCursor{nil, cur} {
			plan := lgPlan(t, s, f, c)
			require.NotContains(t, plan, "TEMP B-TREE", "shape %d (cursor %v):\n%s", i, c != nil, plan)
			require.NotRegexp(t, `(?m)^SCAN c$`, plan, "shape %d:\n%s", i, plan)
		}
	}
	// a page of 10 reads 10 tuples, not the thread
	start := time.Now()
	const rounds = 20
	for r := 0; r < rounds; r++ {
		res, err := s.LGList(ctx, store.LGListFilter{ThreadID: "big", Namespace: &root, Limit: 10})
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
	res, err := s.LGList(ctx, store.LGListFilter{ThreadID: "big", Namespace: &root, Metadata: map[string]json.RawMessage{"step": json.RawMessage("0")}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, res.Tuples, 1)
}

func BenchmarkLGList10(b *testing.B) {
	s := openTest(b, func(o *Options) { o.Durability = store.DurabilityNormal })
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	base := checkpointJSON(rng, 100<<10)
	parent := ""
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("1f0%05d", i)
		blob := append([]byte(fmt.Sprintf("%06d", i)), base...)
		req := store.LGPutRequest{ThreadID: "big", CheckpointID: id, ParentID: parent, Type: "msgpack", Checkpoint: []byte(`{"v":4}`),
			ChannelVersions: json.RawMessage(fmt.Sprintf(`{"messages":%d}`, i+1)),
			Blobs:           []store.LGBlob{{Channel: "messages", Version: fmt.Sprint(i + 1), Type: "msgpack", Data: blob}}}
		p, _ := s.LGPut(req)
		require.NoError(b, p.Wait(ctx))
		parent = id
	}
	root := ""
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.LGList(ctx, store.LGListFilter{ThreadID: "big", Namespace: &root, Limit: 10}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLGPutGrowing is the put of the LangGraph benches: one thread whose message list grows
// by ~100 bytes a step (to ~100 KB at step 1000) plus small channels, each put storing the
// changed channels. Run it with -benchtime=1000x to match the benches' 1000 steps.
func BenchmarkLGPutGrowing(b *testing.B) {
	for _, d := range []string{store.DurabilityFull, store.DurabilityNormal} {
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
		req := store.LGPutRequest{ThreadID: "t", CheckpointID: id, ParentID: parent, Type: "json",
			Checkpoint:      []byte(fmt.Sprintf(`{"v":4,"id":%q,"ts":"2026-11-24T00:00:00Z","versions_seen":{"agent":{"messages":%s}}}`, id, v)),
			ChannelVersions: json.RawMessage(fmt.Sprintf(`{"messages":%s,"step":%s,"usage":%s,"config":1}`, v, v, v)),
			Metadata:        json.RawMessage(fmt.Sprintf(`{"source":"loop","step":%d,"parents":{}}`, i)),
			Blobs: []store.LGBlob{
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
