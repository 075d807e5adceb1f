package storetest

// Chunked LangGraph pending writes and staged values (docs/storage.md "Chunked values"): a
// pending-write value (lg/putWrites) or a staged value (lg/putValue) larger than chunk.InlineMax
// is stored as chunks shared with every other value (channel values, other threads' writes),
// read back byte for byte (get, list, channel history, another process), and its chunks freed
// with the last value listing them on every path that removes it: a replaced special write,
// prune, retention, delete_for_runs, thread deletion, a consumed or expired staged value.

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

func init() {
	add(
		testCase{"LGChunkedWrites", testLGChunkedWrites},
		testCase{"LGChunkedWritesFreed", testLGChunkedWritesFreed},
		testCase{"LGChunkedStaged", testLGChunkedStaged},
		testCase{"LGChunkedWritesProcesses", testLGChunkedWritesProcesses},
		testCase{"LGChunkedWritesDamage", testLGChunkedWritesDamage},
	)
}

func lgVer(i int) string { return fmt.Sprintf("%032d.0.1", i) }

func putLGWritesOf(t testing.TB, s store.Backend, thread, cp string, ws ...store.LGWrite) int {
	t.Helper()
	p, n := s.LGPutWrites(thread, "", cp, ws)
	require.NoError(t, p.Wait(context.Background()))
	return *n
}

// lgWriteMap is a checkpoint's pending writes, "task/idx" -> value.
func lgWriteMap(t testing.TB, s store.Backend, thread, cp string) map[string]string {
	t.Helper()
	got, err := s.LGGet(context.Background(), thread, "", cp)
	require.NoError(t, err)
	require.NotNil(t, got, "%s/%s", thread, cp)
	out := map[string]string{}
	for _, w := range got.Writes {
		out[fmt.Sprintf("%s/%d", w.TaskID, w.Idx)] = string(w.Data)
	}
	return out
}

// testLGChunkedWrites: large pending writes round trip byte for byte on every read path, share
// their chunks with channel values and with other threads' writes (a write with the bytes of a
// stored channel value adds no chunk), a replaced special write releases its value, and copies and
// archives keep every count right.
func testLGChunkedWrites(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	r := testgen.New(31)
	shared := string(r.JSON(24 << 10))
	other := string(r.Binary(20 << 10))
	lone := h.db(t) // other's chunks and runs alone
	putLGReq(t, lone, lgReq("z", "1", "", map[string]string{"m": lgVer(1)}, map[string]string{"m": "0"}))
	putLGWritesOf(t, lone, "z", "1", store.LGWrite{TaskID: "t", Channel: "x", Type: "bytes", Data: []byte(other)})
	ro, co := verifyLGClean(t, lone, "other alone")
	require.Positive(t, ro)

	putLGReq(t, s, lgReq("a", "1", "", map[string]string{"m": lgVer(1)}, map[string]string{"m": shared}))
	r0, c0 := verifyLGClean(t, s, "the channel value")
	want := map[string]string{"t1/0": shared, "t1/1": other, "t1/2": `"small"`}
	n := putLGWritesOf(t, s, "a", "1",
		store.LGWrite{TaskID: "t1", Idx: 0, Channel: "m", Type: "json", Data: []byte(shared)},
		store.LGWrite{TaskID: "t1", Idx: 1, Channel: "x", Type: "bytes", Data: []byte(other)},
		store.LGWrite{TaskID: "t1", Idx: 2, Channel: "s", Type: "json", Data: []byte(`"small"`)})
	require.Equal(t, 3, n)
	r1, c1 := verifyLGClean(t, s, "the writes")
	require.Equal(t, r0+ro, r1, "the write with the channel value's bytes adds no run")
	require.Equal(t, c0+co, c1, "nor a chunk")
	require.Equal(t, want, lgWriteMap(t, s, "a", "1"))
	// written again (idx >= 0): stored once, nothing counted twice
	require.Zero(t, putLGWritesOf(t, s, "a", "1", store.LGWrite{TaskID: "t1", Idx: 1, Channel: "x", Type: "bytes", Data: []byte(other)}))
	rr, cc := verifyLGClean(t, s, "a write sent again")
	require.Equal(t, [2]int{r1, c1}, [2]int{rr, cc})

	// a child checkpoint: its channel history carries the parent's writes
	putLGReq(t, s, lgReq("a", "2", "1", map[string]string{"m": lgVer(1), "y": lgVer(2)}, map[string]string{"y": "1"}))
	hist, err := s.LGChannelHistory(ctx, "a", "", "2", []string{"x", "m"})
	require.NoError(t, err)
	require.Len(t, hist.Channels["x"].Writes, 1)
	require.Equal(t, other, string(hist.Channels["x"].Writes[0].Data))
	require.Equal(t, shared, string(hist.Channels["m"].Seed.Data))
	list, err := s.LGList(ctx, store.LGListFilter{ThreadID: "a"})
	require.NoError(t, err)
	require.Len(t, list.Tuples, 2)
	for _, tu := range list.Tuples {
		if tu.CheckpointID == "1" {
			require.Len(t, tu.Writes, 3)
			for _, w := range tu.Writes {
				require.Equal(t, want[fmt.Sprintf("%s/%d", w.TaskID, w.Idx)], string(w.Data))
			}
		}
	}

	// another process reads them (no value cache)
	s2 := h.reopen(t, s, func(o *Options) { o.BlobCacheBytes = -1; o.StateCacheBytes = -1 })
	require.Equal(t, want, lgWriteMap(t, s2, "a", "1"))
	hist, err = s2.LGChannelHistory(ctx, "a", "", "2", []string{"x"})
	require.NoError(t, err)
	require.Equal(t, other, string(hist.Channels["x"].Writes[0].Data))

	// another thread writes the same values: shared, nothing new
	putLGReq(t, s, lgReq("b", "1", "", map[string]string{"m": lgVer(1)}, map[string]string{"m": "0"}))
	putLGWritesOf(t, s, "b", "1",
		store.LGWrite{TaskID: "t", Idx: 0, Channel: "m", Type: "json", Data: []byte(shared)},
		store.LGWrite{TaskID: "t", Idx: 1, Channel: "x", Type: "bytes", Data: []byte(other)})
	rb, cb := verifyLGClean(t, s, "thread b's writes")
	require.Equal(t, [2]int{r1, c1}, [2]int{rb, cb})

	// a special write (idx < 0) replaced by another large one: the first one's chunks go
	third := string(r.Binary(18 << 10))
	special := func(v string) store.LGWrite {
		return store.LGWrite{TaskID: "t1", Idx: -1, Channel: "__error__", Type: "bytes", Data: []byte(v)}
	}
	require.Equal(t, 1, putLGWritesOf(t, s, "a", "1", special(third)))
	r3, c3 := verifyLGClean(t, s, "a large special write")
	require.Greater(t, r3, r1)
	require.Greater(t, c3, c1)
	require.Equal(t, 1, putLGWritesOf(t, s, "a", "1", special(third))) // over itself: nothing freed
	rr, cc = verifyLGClean(t, s, "the special write over itself")
	require.Equal(t, [2]int{r3, c3}, [2]int{rr, cc})
	require.Equal(t, third, lgWriteMap(t, s, "a", "1")["t1/-1"])
	require.Equal(t, 1, putLGWritesOf(t, s, "a", "1", special(other)))
	rr, cc = verifyLGClean(t, s, "the special write replaced")
	require.Equal(t, [2]int{r1, c1}, [2]int{rr, cc}, "the replaced value's own chunks are freed")
	require.Equal(t, 1, putLGWritesOf(t, s, "a", "1", special(`"small"`)))
	rr, cc = verifyLGClean(t, s, "the special write replaced by a small one")
	require.Equal(t, [2]int{r1, c1}, [2]int{rr, cc})

	// the footprint counts the writes' chunks
	fp, err := s.Footprints(ctx, store.FootprintRequest{Threads: []string{"b"}})
	require.NoError(t, err)
	require.Greater(t, fp.Threads["b"].StoredBytes, int64(len(shared)/8), "thread b's footprint %+v", fp.Threads["b"])

	// a copy lists the same chunks; copied over itself nothing is counted twice
	_, err = s.LGCopyThread(ctx, "a", "c")
	require.NoError(t, err)
	require.Equal(t, lgWriteMap(t, s, "a", "1"), lgWriteMap(t, s, "c", "1"))
	rr, cc = verifyLGClean(t, s, "the copy")
	require.Equal(t, [2]int{r1, c1}, [2]int{rr, cc})
	_, err = s.LGCopyThread(ctx, "a", "c")
	require.NoError(t, err)
	verifyLGClean(t, s, "copied again over the copy")
	// the copy's own special write replaced: the source's stays
	require.Equal(t, 1, putLGWritesOf(t, s, "c", "1", store.LGWrite{TaskID: "t1", Idx: -1, Channel: "__error__", Type: "bytes", Data: []byte(third)}))
	_, err = s.LGCopyThread(ctx, "a", "c") // the copy replaces it with the source's again
	require.NoError(t, err)
	rr, cc = verifyLGClean(t, s, "a copy replacing a large write")
	require.Equal(t, [2]int{r1, c1}, [2]int{rr, cc})

	// export, import elsewhere and here under another id
	_, recs := lgExportAll(t, s, "a")
	o := h.db(t)
	_, err = o.LGImport(ctx, "a", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, lgWriteMap(t, s, "a", "1"), lgWriteMap(t, o, "a", "1"))
	verifyLGClean(t, o, "imported elsewhere")
	res, err := o.LGImport(ctx, "a", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	require.Zero(t, res.Imported.Writes, "a second import skips identical rows")
	_, err = s.LGImport(ctx, "d", lgSeq(recs), store.ImportOptions{})
	require.NoError(t, err)
	rr, cc = verifyLGClean(t, s, "imported here")
	require.Equal(t, [2]int{r1, c1}, [2]int{rr, cc})

	// thread deletion frees nothing another thread lists, everything with the last one
	for i, thread := range []string{"a", "c", "d", "b"} {
		_, err := s.LGDeleteThread(ctx, thread)
		require.NoError(t, err)
		rr, cc := verifyLGClean(t, s, "deleted "+thread)
		if i < 3 {
			require.Equal(t, [2]int{r1, c1}, [2]int{rr, cc}, "deleted %s", thread)
			require.Equal(t, shared, lgWriteMap(t, s, "b", "1")["t/0"])
			continue
		}
		require.Zero(t, rr, "runs left once nothing lists them")
		require.Zero(t, cc, "chunks left once nothing lists them")
	}
}

// testLGChunkedWritesFreed: every path that removes a checkpoint's writes frees the chunks only
// they listed, and none another checkpoint's write still lists.
func testLGChunkedWritesFreed(t *testing.T, h *harness) {
	ctx := context.Background()
	r := testgen.New(41)
	// thread's step i: checkpoint i with run id run<i/2>; its write carries a value of its own
	// plus one every step shares
	common := string(r.JSON(12 << 10))
	own := func(thread string, i int) string { return fmt.Sprintf(`{"%s":%d,"v":%s}`, thread, i, r.JSON(10<<10)) }
	steps := func(t *testing.T, s store.Backend, thread string, n int) map[string]map[string]string {
		out := map[string]map[string]string{}
		parent := ""
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("%03d", i)
			req := lgReq(thread, id, parent, map[string]string{"m": lgVer(i + 1)}, map[string]string{"m": fmt.Sprint(i)})
			req.Metadata = []byte(fmt.Sprintf(`{"run_id":"%s-run%d"}`, thread, i/2))
			putLGReq(t, s, req)
			v := own(thread, i)
			putLGWritesOf(t, s, thread, id,
				store.LGWrite{TaskID: "t", Idx: 0, Channel: "m", Type: "json", Data: []byte(v)},
				store.LGWrite{TaskID: "t", Idx: 1, Channel: "m", Type: "json", Data: []byte(common)})
			out[id] = map[string]string{"t/0": v, "t/1": common}
			parent = id
		}
		return out
	}
	check := func(t *testing.T, s store.Backend, thread string, want map[string]map[string]string, what string) {
		t.Helper()
		ids := lgIDs(t, s, store.LGListFilter{ThreadID: thread})
		for _, id := range ids {
			require.Equal(t, want[id], lgWriteMap(t, s, thread, id), "%s: %s", what, id)
		}
	}

	t.Run("prune", func(t *testing.T) {
		s := h.db(t)
		want := steps(t, s, "p", 6)
		steps(t, s, "keep", 1) // lists common in another thread
		_, c0 := verifyLGClean(t, s, "stored")
		_, err := s.LGPrune(ctx, []string{"p"}, "keep_latest")
		require.NoError(t, err)
		require.Len(t, lgIDs(t, s, store.LGListFilter{ThreadID: "p"}), 1)
		check(t, s, "p", want, "after keep_latest")
		_, c1 := verifyLGClean(t, s, "after keep_latest")
		require.Less(t, c1, c0, "the pruned writes' own chunks are freed")
		_, err = s.LGPrune(ctx, []string{"p"}, "delete")
		require.NoError(t, err)
		verifyLGClean(t, s, "after delete")
		require.Equal(t, common, lgWriteMap(t, s, "keep", "000")["t/1"])
		_, err = s.LGDeleteThread(ctx, "keep")
		require.NoError(t, err)
		r, c := verifyLGClean(t, s, "all gone")
		require.Zero(t, r)
		require.Zero(t, c)
	})
	t.Run("retention", func(t *testing.T) {
		s := h.db(t)
		thread := "r"
		_, err := s.LGConfigure(ctx, &thread, &store.Retention{KeepLast: 2}, false)
		require.NoError(t, err)
		want := steps(t, s, thread, 8)
		check(t, s, thread, want, "after retention")
		require.Len(t, lgIDs(t, s, store.LGListFilter{ThreadID: thread}), 2)
		verifyLGClean(t, s, "after retention")
		_, err = s.LGDeleteThread(ctx, thread)
		require.NoError(t, err)
		r, c := verifyLGClean(t, s, "all gone")
		require.Zero(t, r)
		require.Zero(t, c)
	})
	t.Run("deleteForRuns", func(t *testing.T) {
		s := h.db(t)
		want := steps(t, s, "f", 6)
		_, c0 := verifyLGClean(t, s, "stored")
		n, err := s.LGDeleteForRuns(ctx, []string{"f-run0", "f-run2"})
		require.NoError(t, err)
		require.Equal(t, 4, n)
		check(t, s, "f", want, "after delete_for_runs")
		_, c1 := verifyLGClean(t, s, "after delete_for_runs")
		require.Less(t, c1, c0)
		_, err = s.LGDeleteForRuns(ctx, []string{"f-run1"})
		require.NoError(t, err)
		r, c := verifyLGClean(t, s, "every run deleted")
		require.Zero(t, r)
		require.Zero(t, c)
	})
	t.Run("orphanWrites", func(t *testing.T) {
		// writes whose checkpoint is never stored are collected with the thread
		s := h.db(t)
		putLGWritesOf(t, s, "o", "nope", store.LGWrite{TaskID: "t", Channel: "x", Type: "json", Data: []byte(common)})
		verifyLGClean(t, s, "an orphan write")
		_, err := s.LGDeleteThread(ctx, "o")
		require.NoError(t, err)
		r, c := verifyLGClean(t, s, "thread deleted")
		require.Zero(t, r)
		require.Zero(t, c)
	})
}

// testLGChunkedStaged: a large staged value is stored as chunks; a put taking it as a channel
// value, a write or its checkpoint keeps the bytes and the counts right; one no put takes is
// freed when it expires or when the store that staged it closes.
func testLGChunkedStaged(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	r := testgen.New(51)
	big := string(r.JSON(30 << 10))
	cpBig := fmt.Sprintf(`{"id":"c1","pad":%s}`, r.JSON(8<<10))
	wBig := string(r.Binary(12 << 10))

	v, err := s.LGStageValue(ctx, "t", "json", []byte(big))
	require.NoError(t, err)
	cp, err := s.LGStageValue(ctx, "t", "json", []byte(cpBig))
	require.NoError(t, err)
	rs, cs := verifyLGClean(t, s, "staged")
	require.Positive(t, rs)
	require.Positive(t, cs)
	req := lgReq("t", "c1", "", map[string]string{"a": "1"}, nil)
	req.Checkpoint, req.Type, req.CheckpointStaged = nil, "", cp
	req.Blobs = []store.LGBlob{{Channel: "a", Version: `"1"`, Staged: v}}
	putLGReq(t, s, req)
	got, err := s.LGGet(ctx, "t", "", "c1")
	require.NoError(t, err)
	require.Equal(t, cpBig, string(got.Checkpoint))
	require.Equal(t, big, BlobMap(got)["a"])
	verifyLGClean(t, s, "staged values taken by a put")

	// the same bytes staged again as a value of an existing version: no second row, freed
	v2, err := s.LGStageValue(ctx, "t", "json", []byte(big))
	require.NoError(t, err)
	req2 := lgReq("t", "c2", "c1", map[string]string{"a": "1"}, nil)
	req2.Blobs = []store.LGBlob{{Channel: "a", Version: `"1"`, Staged: v2}}
	putLGReq(t, s, req2)
	verifyLGClean(t, s, "a staged value matching a stored one")

	// a staged write, also replacing (idx < 0) another large one
	w1, err := s.LGStageValue(ctx, "t", "bytes", []byte(wBig))
	require.NoError(t, err)
	require.Equal(t, 1, putLGWritesOf(t, s, "t", "c2", store.LGWrite{TaskID: "x", Idx: 0, Channel: "w", Staged: w1}))
	w2, err := s.LGStageValue(ctx, "t", "bytes", []byte(big))
	require.NoError(t, err)
	require.Equal(t, 1, putLGWritesOf(t, s, "t", "c2", store.LGWrite{TaskID: "x", Idx: -2, Channel: "__interrupt__", Staged: w2}))
	w3, err := s.LGStageValue(ctx, "t", "bytes", []byte(wBig))
	require.NoError(t, err)
	require.Equal(t, 1, putLGWritesOf(t, s, "t", "c2", store.LGWrite{TaskID: "x", Idx: -2, Channel: "__interrupt__", Staged: w3}))
	require.Equal(t, map[string]string{"x/0": wBig, "x/-2": wBig}, lgWriteMap(t, s, "t", "c2"))
	verifyLGClean(t, s, "staged writes")

	// another process reads them
	s2 := h.reopen(t, s, func(o *Options) { o.BlobCacheBytes = -1; o.StateCacheBytes = -1 })
	require.Equal(t, map[string]string{"x/0": wBig, "x/-2": wBig}, lgWriteMap(t, s2, "t", "c2"))

	// expired: a staged value no put took is freed with its chunks
	lone := string(r.Binary(16 << 10))
	r0, c0 := verifyLGClean(t, s, "before")
	_, err = s.LGStageValue(ctx, "t", "bytes", []byte(lone))
	require.NoError(t, err)
	r1, c1 := verifyLGClean(t, s, "a value staged")
	require.Greater(t, c1, c0)
	clock.Advance(store.LGStagedTTL + time.Minute)
	_, err = s.LGExpireIdle(ctx)
	require.NoError(t, err)
	rr, cc := verifyLGClean(t, s, "the staged value expired")
	require.Equal(t, [2]int{r0, c0}, [2]int{rr, cc})
	require.Greater(t, r1, r0)

	// the store that staged a value closes: freed
	s3 := h.reopen(t, s)
	_, err = s3.LGStageValue(ctx, "t", "bytes", []byte(lone))
	require.NoError(t, err)
	require.NoError(t, s3.Close())
	rr, cc = verifyLGClean(t, s, "the staging store closed")
	require.Equal(t, [2]int{r0, c0}, [2]int{rr, cc})

	_, err = s.LGDeleteThread(ctx, "t")
	require.NoError(t, err)
	rr, cc = verifyLGClean(t, s, "thread deleted")
	require.Zero(t, rr)
	require.Zero(t, cc)
}

// testLGChunkedWritesProcesses: two stores on one database write, replace and delete large
// writes sharing chunks in threads of their own at the same time; nothing one frees is still
// listed by the other's rows, and every count matches at the end.
func testLGChunkedWritesProcesses(t *testing.T, h *harness) {
	a := h.db(t)
	b := h.reopen(t, a)
	ctx := context.Background()
	base := testgen.New(61).JSON(20 << 10)
	var mu sync.Mutex
	kept := map[string]map[string]string{} // thread/checkpoint -> writes
	var wg sync.WaitGroup
	for p, s := range []store.Backend{a, b} {
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := testgen.New(uint64(200*p + g))
				v := base
				for k := 0; k < 4; k++ {
					thread := fmt.Sprintf("p%d-g%d-%d", p, g, k)
					req := lgReq(thread, "1", "", map[string]string{"m": lgVer(1)}, map[string]string{"m": string(base)})
					pp, _ := s.LGPut(req)
					if !assert.NoError(t, pp.Wait(ctx)) {
						return
					}
					for i := 0; i < 4; i++ {
						v = r.Edit(v, 300, true).Apply(v)
						pw, _ := s.LGPutWrites(thread, "", "1", []store.LGWrite{
							{TaskID: "t", Idx: int64(i), Channel: "m", Type: "json", Data: bytes.Clone(v)},
							{TaskID: "t", Idx: -1, Channel: "__error__", Type: "json", Data: bytes.Clone(v)}})
						if !assert.NoError(t, pw.Wait(ctx)) {
							return
						}
					}
					if k%2 == 0 { // every other thread deleted again
						if _, err := s.LGDeleteThread(ctx, thread); !assert.NoError(t, err) {
							return
						}
						continue
					}
					got, err := s.LGGet(ctx, thread, "", "1")
					if !assert.NoError(t, err) || !assert.NotNil(t, got) {
						return
					}
					m := map[string]string{}
					for _, w := range got.Writes {
						m[fmt.Sprintf("%s/%d", w.TaskID, w.Idx)] = string(w.Data)
					}
					mu.Lock()
					kept[thread] = m
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	for thread, m := range kept {
		require.Equal(t, m, lgWriteMap(t, a, thread, "1"), thread)
		require.Equal(t, m, lgWriteMap(t, b, thread, "1"), thread)
	}
	verifyLGClean(t, a, "after the processes")
}

// testLGChunkedWritesDamage: a chunk a pending write lists, gone, is a dangling reference that
// ckptd verify's audit and VerifyLG report (naming the write) and that a read reports as damage;
// a chunk counted once more than it is listed (what a lost release would leave) is reported too.
func testLGChunkedWritesDamage(t *testing.T, h *harness) {
	s := h.db(t)
	c := corrupter(t, s)
	ctx := context.Background()
	v := testgen.New(71).Binary(24 << 10)
	putLGReq(t, s, lgReq("d", "1", "", map[string]string{"m": lgVer(1)}, map[string]string{"m": "0"}))
	putLGWritesOf(t, s, "d", "1", store.LGWrite{TaskID: "task", Idx: 0, Channel: "m", Type: "bytes", Data: v})
	verifyLGClean(t, s, "stored")
	_, cs := chunk.Split(v)
	require.Greater(t, len(cs), 2)

	c.SetChunkRefs(t, cs[1].Addr, 2)
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	require.NotEmpty(t, bad, "a chunk counted more often than listed")
	c.SetChunkRefs(t, cs[1].Addr, 1)
	verifyLGClean(t, s, "count repaired")

	c.DropChunk(t, cs[0].Addr)
	bad, err = s.Verify(ctx, nil)
	require.NoError(t, err)
	require.NotEmpty(t, bad, "a dangling reference")
	_, problems, err := s.VerifyLG(ctx)
	require.NoError(t, err)
	require.Len(t, problems, 1)
	assert.Equal(t, "write", problems[0].Kind)
	assert.Equal(t, "task", problems[0].TaskID)
	assert.Contains(t, problems[0].Reason, "write task/0")
	_, err = s.LGGet(ctx, "d", "", "1")
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "write task/0")
}
