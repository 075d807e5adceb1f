package storetest

// Chunked LangGraph channel values (docs/storage.md "Chunked values"): a channel value larger
// than chunk.InlineMax is stored as chunks shared with every other value (of the thread, of other
// threads, of states), read back byte for byte, freed with the last value that lists it (prunes,
// retention, thread deletion in bites), copied and archived without losing a reference; and a
// put may send a value as a wire delta against the channel's previous version.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk/delta"
)

func init() {
	add(
		testCase{"LGChunkedValues", testLGChunkedValues},
		testCase{"LGChunkedRetention", testLGChunkedRetention},
		testCase{"LGValueDeltas", testLGValueDeltas},
	)
}

// lgGrowing is a LangGraph thread whose "messages" channel grows by a message per step (a JSON
// list, ~n bytes at the start), with a small "step" channel beside it.
type lgGrowing struct {
	r      *testgen.Rand
	thread string
	msgs   []byte
	step   int
	parent string
	want   map[string]map[string]string // checkpoint id -> channel -> value
}

func newLGGrowing(seed uint64, thread string, n int) *lgGrowing {
	g := &lgGrowing{r: testgen.New(seed), thread: thread, want: map[string]map[string]string{}}
	g.msgs = append([]byte(`[`), g.r.JSON(n)...)
	return g
}

// next puts the thread's next checkpoint and returns its id.
func (g *lgGrowing) next(t testing.TB, s store.Backend) string {
	t.Helper()
	g.msgs = append(g.msgs, fmt.Sprintf(`,{"role":"user","content":%q}`, g.r.Text(80+g.r.Intn(200)))...)
	id := fmt.Sprintf("%06d", g.step)
	ver := fmt.Sprintf("%032d.0.1", g.step+1)
	vals := map[string]string{"messages": string(g.msgs) + "]", "step": fmt.Sprint(g.step)}
	putLGReq(t, s, lgReq(g.thread, id, g.parent, map[string]string{"messages": ver, "step": ver}, vals))
	g.want[id] = vals
	g.parent = id
	g.step++
	return id
}

// check reads every checkpoint of want back and compares the values byte for byte.
func (g *lgGrowing) check(t testing.TB, s store.Backend, thread string, what string) {
	t.Helper()
	for id, vals := range g.want {
		got, err := s.LGGet(context.Background(), thread, "", id)
		require.NoError(t, err, "%s: %s", what, id)
		if got == nil {
			continue // pruned
		}
		require.Equal(t, vals, BlobMap(got), "%s: %s", what, id)
	}
}

func verifyLGClean(t *testing.T, s store.Backend, what string) (runs, chunks int) {
	t.Helper()
	_, problems, err := s.VerifyLG(context.Background())
	require.NoError(t, err, what)
	require.Empty(t, problems, what)
	return verifyClean(t, s, what)
}

// testLGChunkedValues: round trips, sharing across threads (a copy, a second thread with the same
// history), the footprint, export/import, and chunks freed with the last value listing them.
func testLGChunkedValues(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	g := newLGGrowing(5, "t1", 24<<10)
	for i := 0; i < 30; i++ {
		g.next(t, s)
	}
	g.check(t, s, "t1", "after the puts")
	runs, chunks := verifyLGClean(t, s, "after the puts")
	require.Positive(t, runs)
	require.Positive(t, chunks)

	// stored much smaller than logical: each put stores the chunks around its append only
	fp, err := s.Footprints(ctx, store.FootprintRequest{Threads: []string{"t1"}})
	require.NoError(t, err)
	th := fp.Threads["t1"]
	require.Positive(t, th.LogicalBytes)
	require.Less(t, th.StoredBytes*4, th.LogicalBytes, "thread footprint %+v", th)
	require.Less(t, fp.Total.StoredBytes*4, fp.Total.LogicalBytes, "total %+v", fp.Total)

	// a second process reads them (no value cache)
	s2 := h.reopen(t, s, func(o *Options) { o.BlobCacheBytes = -1; o.StateCacheBytes = -1 })
	g.check(t, s2, "t1", "another process")

	// a copy lists the same chunks: no new chunk or run
	_, err = s.LGCopyThread(ctx, "t1", "t2")
	require.NoError(t, err)
	g.check(t, s, "t2", "the copy")
	r2, c2 := verifyLGClean(t, s, "after the copy")
	require.Equal(t, runs, r2)
	require.Equal(t, chunks, c2)

	// a thread of its own with the same history shares them too
	g3 := newLGGrowing(5, "t3", 24<<10)
	for i := 0; i < 30; i++ {
		g3.next(t, s)
	}
	r3, c3 := verifyLGClean(t, s, "a second thread with the same values")
	require.Equal(t, runs, r3)
	require.Equal(t, chunks, c3)

	// export, import into another database and into this one under another id
	_, recs := lgExportAll(t, s, "t1")
	o := h.db(t)
	_, err = o.LGImport(ctx, "t1", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	g.check(t, o, "t1", "imported elsewhere")
	verifyLGClean(t, o, "imported elsewhere")
	res, err := o.LGImport(ctx, "t1", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	require.Zero(t, res.Imported.Values, "a second import skips identical rows")
	_, err = s.LGImport(ctx, "t4", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	g.check(t, s, "t4", "imported here")
	verifyLGClean(t, s, "imported here")

	// deleting threads frees nothing another thread lists, and everything with the last one
	for i, thread := range []string{"t1", "t3", "t2", "t4"} {
		_, err := s.LGDeleteThread(ctx, thread)
		require.NoError(t, err)
		r, c := verifyLGClean(t, s, "deleted "+thread)
		if i < 3 {
			require.Equal(t, runs, r, "deleted %s", thread)
			require.Equal(t, chunks, c, "deleted %s", thread)
			continue
		}
		require.Zero(t, r, "runs left once nothing lists them")
		require.Zero(t, c, "chunks left once nothing lists them")
	}
}

// testLGChunkedRetention: a thread's retention (in the put's transaction) and thread/prune free
// the chunks of the values only the removed checkpoints listed; what stays reads back.
func testLGChunkedRetention(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	g := newLGGrowing(7, "r1", 12<<10)
	for i := 0; i < 5; i++ {
		g.next(t, s)
	}
	thread := "r1"
	_, err := s.LGConfigure(ctx, &thread, &store.Retention{KeepLast: 3}, false)
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		g.next(t, s)
		verifyLGClean(t, s, fmt.Sprintf("retention, put %d", i))
	}
	g.check(t, s, "r1", "after retention")
	n := len(lgIDs(t, s, store.LGListFilter{ThreadID: thread}))
	require.Equal(t, 3, n)
	_, err = s.LGPrune(ctx, []string{"r1"}, "keep_latest")
	require.NoError(t, err)
	g.check(t, s, "r1", "after keep_latest")
	verifyLGClean(t, s, "after keep_latest")
	_, err = s.LGPrune(ctx, []string{"r1"}, "delete")
	require.NoError(t, err)
	r, c := verifyLGClean(t, s, "after delete")
	require.Zero(t, r)
	require.Zero(t, c)
}

// testLGValueDeltas: a blob sent as a delta against its channel's previous version is stored as
// the value it describes, from the value cache or (another process) from the database, also
// against a variant; a wrong sha256, a missing base and bounds are refused, storing nothing.
func testLGValueDeltas(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	r := testgen.New(11)
	v1 := append(r.JSON(20<<10), "tail"...)
	v2 := append(append([]byte{}, v1[:len(v1)-4]...), `,"appended":"x"tail`...)
	ver := func(i int) string { return fmt.Sprintf("%032d.0.1", i) }
	req := func(id, parent string, i int, data []byte) store.LGPutRequest {
		return lgReq("d", id, parent, map[string]string{"m": ver(i)}, map[string]string{"m": string(data)})
	}
	putLGReq(t, s, req("1", "", 1, v1))
	deltaReq := func(s store.Backend, id, parent string, i int, base string, prev, next []byte, sha string) error {
		kp, ks, mid := delta.Compute(prev, next)
		q := req(id, parent, i, []byte("-"))
		q.Blobs[0].Data = mid
		if sha == "" {
			sha = fmt.Sprintf("%x", sha256Sum(next))
		}
		q.Blobs[0].Delta = &store.LGDelta{BaseVersion: `"` + base + `"`, KeepPrefix: int64(kp), KeepSuffix: int64(ks), SHA256: sha}
		p, _ := s.LGPut(q)
		return p.Wait(ctx)
	}
	require.NoError(t, deltaReq(s, "2", "1", 2, ver(1), v1, v2, ""))
	require.Equal(t, string(v2), lgValues(t, s, "d", "2")["m"])

	// another process: the base is read from the database
	s2 := h.reopen(t, s, func(o *Options) { o.BlobCacheBytes = -1; o.StateCacheBytes = -1 })
	v3 := append(append([]byte{}, v2...), " more"...)
	require.NoError(t, deltaReq(s2, "3", "2", 3, ver(2), v2, v3, ""))
	require.Equal(t, string(v3), lgValues(t, s2, "d", "3")["m"])

	// a variant: version 3 holds other bytes on a branch from 2; a delta against each works
	v3b := append(append([]byte{}, v2...), " other"...)
	require.NoError(t, deltaReq(s2, "3b", "2", 3, ver(2), v2, v3b, ""))
	v4 := append(append([]byte{}, v3...), " four"...)
	s3 := h.reopen(t, s, func(o *Options) { o.BlobCacheBytes = -1; o.StateCacheBytes = -1 })
	require.NoError(t, deltaReq(s3, "4", "3", 4, ver(3), v3, v4, ""))
	require.Equal(t, string(v4), lgValues(t, s3, "d", "4")["m"])
	require.Equal(t, string(v3b), lgValues(t, s3, "d", "3b")["m"])

	// refused: a wrong sha256, a missing base, keepPrefix beyond the base
	err := deltaReq(s3, "5", "4", 5, ver(4), v4, append(v4, '!'), fmt.Sprintf("%x", sha256Sum([]byte("other"))))
	var ie *store.InvalidError
	require.True(t, errors.As(err, &ie), "%v", err)
	require.Equal(t, "blobs[0].delta.sha256", ie.Field)
	err = deltaReq(s3, "5", "4", 5, ver(40), v4, append(v4, '!'), "")
	require.ErrorIs(t, err, store.ErrNotFound)
	q := req("5", "4", 5, []byte("x"))
	q.Blobs[0].Delta = &store.LGDelta{BaseVersion: `"` + ver(4) + `"`, KeepPrefix: int64(len(v4) + 1), SHA256: fmt.Sprintf("%x", sha256Sum(v4))}
	p, _ := s3.LGPut(q)
	err = p.Wait(ctx)
	require.True(t, errors.As(err, &ie), "%v", err)
	require.Equal(t, "blobs[0].delta.keepPrefix", ie.Field)
	got, err := s3.LGGet(ctx, "d", "", "5")
	require.NoError(t, err)
	require.Nil(t, got, "a refused delta stores nothing")
	verifyLGClean(t, s3, "after the deltas")
}

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }
