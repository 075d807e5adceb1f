package storetest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// Chunked values (docs/storage.md "Chunked values"): states and pending-write values larger
// than chunk.InlineMax are stored as chunks shared across checkpoints and workflows, loaded
// byte for byte and verified, and freed with the last value that lists them.

func init() {
	add(
		testCase{"ChunkedRoundTrip", testChunkedRoundTrip},
		testCase{"ChunkSharing", testChunkSharing},
		testCase{"ChunkGC", testChunkGC},
		testCase{"ChunkCorruption", testChunkCorruption},
		testCase{"ChunkCacheCorruption", testChunkCacheCorruption},
		testCase{"ChunkedWrites", testChunkedWrites},
		testCase{"ChunkProcesses", testChunkProcesses},
		testCase{"Footprints", testFootprints},
		testCase{"ChunkRepeats", testChunkRepeats},
	)
}

// verifyClean runs Verify and fails on any problem, and checks the stored counts against the
// harness's own recount (Corrupter.ChunkRows). It returns the runs and chunks stored.
func verifyClean(t *testing.T, s store.Backend, what string) (runs, chunks int) {
	t.Helper()
	bad, err := s.Verify(context.Background(), nil)
	require.NoError(t, err, what)
	require.Empty(t, bad, what)
	return corrupter(t, s).ChunkRows(t)
}

// loadEach loads every checkpoint of want (checkpoint id -> state) and compares the bytes.
func loadEach(t *testing.T, s store.Backend, want map[string][]byte, what string) {
	t.Helper()
	for id, st := range want {
		cp, err := s.Load(context.Background(), id)
		require.NoError(t, err, "%s: load %s", what, id)
		if !bytes.Equal(st, cp.State) {
			t.Fatalf("%s: checkpoint %s: loaded %d bytes differ from the %d saved", what, id, len(cp.State), len(st))
		}
	}
}

// testChunkedRoundTrip: random edits (append, insert, delete, replace, at random places) of
// random JSON and binary states, each saved as the next checkpoint, load back byte for byte.
func testChunkedRoundTrip(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	r := testgen.New(1717)
	want := map[string][]byte{}
	for _, in := range []struct {
		name string
		v    []byte
		text bool
		typ  store.StateType
	}{
		{"json", r.JSON(96 << 10), true, store.StateJSON},
		{"binary", r.Binary(80 << 10), false, store.StateBytes},
		{"random", r.Bytes(40 << 10), false, store.StateBytes},
	} {
		v := in.v
		for i := 0; i < 30; i++ {
			res := mustSave(t, s, store.SaveRequest{WorkflowID: "wf-" + in.name, State: v, StateType: in.typ})
			want[res.CheckpointID] = v
			cp, err := s.Load(ctx, res.CheckpointID)
			require.NoError(t, err)
			require.True(t, bytes.Equal(v, cp.State), "%s step %d", in.name, i)
			// the store does not parse a json state: text edits keep it realistic, not valid
			e := r.Edit(v, []int{1, 30, 900, 9000}[i%4], in.text)
			if next := e.Apply(v); len(next) > 0 {
				v = next
			}
		}
		lr, err := s.LoadLatest(ctx, "wf-"+in.name, "")
		require.NoError(t, err)
		require.Empty(t, lr.RecoveredFrom)
	}
	loadEach(t, s, want, "all")
	runs, chunks := verifyClean(t, s, "after the saves")
	require.Positive(t, runs)
	require.Positive(t, chunks)
}

// testChunkSharing: a state is stored once however many checkpoints and workflows contain it
// or an edit of it, and a pending-write value shares the chunks of a state.
func testChunkSharing(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	w := testgen.NewWorkload(9, 256<<10)
	v0 := w.State()
	mustSave(t, s, store.SaveRequest{WorkflowID: "a", State: v0})
	require.NoError(t, s.Compact(ctx)) // a backend may cut new content into chunks after the save
	fp, err := s.Footprints(ctx, store.FootprintRequest{})
	require.NoError(t, err)
	require.Less(t, fp.Total.StoredBytes, fp.Total.LogicalBytes, "compressed chunk by chunk")
	runs0, chunks0 := verifyClean(t, s, "one state")
	require.Positive(t, chunks0)

	// the same state in another workflow: deduplicated, nothing new
	again := mustSave(t, s, store.SaveRequest{WorkflowID: "b", State: v0})
	require.True(t, again.Deduplicated)
	// an edit of it, in a third workflow: a few chunks only
	w.Advance()
	v1 := w.State()
	edited := mustSave(t, s, store.SaveRequest{WorkflowID: "c", State: v1})
	require.False(t, edited.Deduplicated)
	require.NoError(t, s.Compact(ctx))
	cp, err := s.Load(ctx, edited.CheckpointID)
	require.NoError(t, err)
	assert.Less(t, cp.StoredBytes, int64(16<<10), "an edit of a stored state stores the change, not the state (%d bytes)", cp.StoredBytes)
	runs1, chunks1 := verifyClean(t, s, "an edit")
	var n int
	assert.LessOrEqual(t, chunks1-chunks0, 4, "new chunks for a 1 KB append")
	assert.LessOrEqual(t, runs1-runs0, 4, "new runs for a 1 KB append")

	// a pending write holding the same bytes lists the same runs: no new row at all
	n, err = s.PutWrites(ctx, "c", "", edited.CheckpointID, []store.Write{{TaskID: "t", Channel: "copy", Value: v1, IsBytes: true}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	runs2, chunks2 := verifyClean(t, s, "a write sharing a state's chunks")
	require.Equal(t, runs1, runs2)
	require.Equal(t, chunks1, chunks2)

	// deleting one workflow frees nothing the others still list
	_, err = s.DeleteWorkflow(ctx, "a")
	require.NoError(t, err)
	loadEach(t, s, map[string][]byte{again.CheckpointID: v0, edited.CheckpointID: v1}, "after deleting a")
	runs3, chunks3 := verifyClean(t, s, "after deleting a")
	require.Equal(t, runs2, runs3)
	require.Equal(t, chunks2, chunks3)
	_, err = s.DeleteWorkflow(ctx, "b")
	require.NoError(t, err)
	_, chunks4 := verifyClean(t, s, "after deleting b")
	require.Less(t, chunks4, chunks3, "v0's own chunks go with the last checkpoint listing them")
	_, err = s.DeleteWorkflow(ctx, "c")
	require.NoError(t, err)
	runs5, chunks5 := verifyClean(t, s, "after deleting everything")
	require.Zero(t, runs5)
	require.Zero(t, chunks5)
}

// gcModel is what testChunkGC expects to be stored: every checkpoint's state by id, by workflow
// in seq order.
type gcModel struct {
	states map[string][]byte
	order  map[string][]string // workflow -> checkpoint ids in save order
}

func (m *gcModel) add(wf, id string, v []byte) {
	m.states[id] = v
	m.order[wf] = append(m.order[wf], id)
}

func (m *gcModel) drop(ids ...string) {
	gone := map[string]bool{}
	for _, id := range ids {
		delete(m.states, id)
		gone[id] = true
	}
	for wf, l := range m.order {
		var keep []string
		for _, id := range l {
			if !gone[id] {
				keep = append(keep, id)
			}
		}
		m.order[wf] = keep
	}
}

// testChunkGC: random saves, deletes, prunes, retention, completions, workflow deletes, idle
// expiry and pending writes (kept and replaced) over workflows sharing content; after each
// step every remaining checkpoint loads byte for byte and Verify finds nothing (counts match
// the listings, no orphan); once everything is deleted no run or chunk is left.
func testChunkGC(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	r := testgen.New(4242)
	rng := rand.New(rand.NewPCG(42, 42))
	base := r.JSON(48 << 10)
	m := &gcModel{states: map[string][]byte{}, order: map[string][]string{}}
	wfs := []string{"w0", "w1", "w2", "w3"}
	last := map[string][]byte{}
	for _, wf := range wfs {
		last[wf] = base
	}
	_, err := s.Configure(ctx, "w3", &store.Retention{KeepLast: 3, IdleTTLSeconds: 3600})
	require.NoError(t, err)
	for step := 0; step < 80; step++ {
		wf := wfs[rng.IntN(len(wfs))]
		op := rng.IntN(20)
		what := fmt.Sprintf("step %d (op %d on %s)", step, op, wf)
		switch {
		case op < 10: // save an edit of the workflow's last state (sometimes of another's)
			src := last[wf]
			if op == 0 {
				src = last[wfs[rng.IntN(len(wfs))]]
			}
			e := r.Edit(src, []int{5, 200, 3000}[rng.IntN(3)], false)
			v := e.Apply(src)
			if len(v) <= chunk.InlineMax {
				v = base
			}
			res := mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: v, StateType: store.StateBytes})
			m.add(wf, res.CheckpointID, v)
			m.drop(res.Pruned...)
			last[wf] = v
		case op < 12 && len(m.order[wf]) > 0: // delete one checkpoint
			ids := m.order[wf]
			id := ids[rng.IntN(len(ids))]
			n, err := s.Delete(ctx, id)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			m.drop(id)
		case op < 14: // prune to keepLast 2
			res, err := s.Prune(ctx, store.PruneRequest{WorkflowID: wf, KeepLast: 2})
			require.NoError(t, err)
			m.drop(res.IDs[wf]...)
		case op < 15: // complete without preserving
			if len(m.order[wf]) == 0 {
				continue
			}
			_, err := s.Complete(ctx, wf, false)
			require.NoError(t, err)
			m.drop(m.order[wf]...)
		case op < 16: // delete the workflow
			_, err := s.DeleteWorkflow(ctx, wf)
			require.NoError(t, err)
			m.drop(m.order[wf]...)
			if wf == "w3" {
				_, err := s.Configure(ctx, "w3", &store.Retention{KeepLast: 3, IdleTTLSeconds: 3600})
				require.NoError(t, err)
			}
		case op < 17: // idle expiry of w3
			clock.Advance(2 * time.Hour)
			out, err := s.ExpireIdle(ctx)
			require.NoError(t, err)
			for _, ids := range out {
				m.drop(ids...)
			}
			if _, err := s.Configure(ctx, "w3", &store.Retention{KeepLast: 3, IdleTTLSeconds: 3600}); err != nil {
				require.NoError(t, err)
			}
		default: // pending writes with large values, kept once (idx >= 0) or replaced (idx < 0)
			ids := m.order[wf]
			if len(ids) == 0 {
				continue
			}
			id := ids[len(ids)-1]
			val := r.Edit(last[wf], 100, false).Apply(last[wf])
			idx := int64(rng.IntN(2))
			if rng.IntN(2) == 0 {
				idx = -1 - idx
			}
			_, err := s.PutWrites(ctx, wf, "", id, []store.Write{{TaskID: "task", Channel: "c", Idx: idx, Value: val, IsBytes: true}})
			require.NoError(t, err, what)
		}
		if step%7 == 3 { // a backend may cut new content into chunks after the save: now, between the others
			require.NoError(t, s.Compact(ctx))
		}
		loadEach(t, s, m.states, what)
		verifyClean(t, s, what)
	}
	for _, wf := range wfs {
		_, err := s.DeleteWorkflow(ctx, wf)
		require.NoError(t, err)
	}
	runs, chunks := verifyClean(t, s, "everything deleted")
	require.Zero(t, runs, "runs left once nothing lists them")
	require.Zero(t, chunks, "chunks left once nothing lists them")
}

// testChunkCorruption: a damaged or missing chunk makes every checkpoint whose state lists it
// corrupt (Load: a CorruptError naming the chunk; LoadLatest: falls back to the newest intact
// one), and Verify names them; a wrong reference count is a database-level problem.
func testChunkCorruption(t *testing.T, h *harness) {
	s := h.db(t)
	c := corrupter(t, s)
	ctx := context.Background()
	w := testgen.NewWorkload(3, 128<<10)
	var ids []string
	var states [][]byte
	for i := 0; i < 3; i++ {
		v := w.State()
		states = append(states, v)
		ids = append(ids, mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: v}).CheckpointID)
		w.Advance()
	}
	require.NoError(t, s.Compact(ctx)) // every state as chunks
	verifyClean(t, s, "saved")
	// a chunk only the newest state has
	_, older := chunk.Split(states[1])
	have := map[chunk.Address]bool{}
	for _, ch := range older {
		have[ch.Addr] = true
	}
	_, newest := chunk.Split(states[2])
	var own chunk.Chunk
	for _, ch := range newest {
		if !have[ch.Addr] {
			own = ch
			break
		}
	}
	require.NotZero(t, own.Size)
	damaged := bytes.Clone(own.Data)
	damaged[0] ^= 0xff
	c.SetChunkRaw(t, own.Addr, damaged)
	_, err := s.Load(ctx, ids[2])
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, ids[2], ce.CheckpointID)
	assert.Contains(t, ce.Reason, own.Addr.String(), "the reason names the chunk")
	lr, err := s.LoadLatest(ctx, "w", "")
	require.NoError(t, err)
	assert.Equal(t, ids[1], lr.CheckpointID)
	require.Len(t, lr.RecoveredFrom, 1)
	assert.Equal(t, ids[2], lr.RecoveredFrom[0].CheckpointID)
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Len(t, bad, 1)
	assert.Equal(t, ids[2], bad[0].CheckpointID)
	c.SetChunkRaw(t, own.Addr, own.Data) // repaired
	verifyClean(t, s, "repaired")

	// a chunk every state lists, gone: all three corrupt, the newest named with the others
	shared := newest[0]
	c.DropChunk(t, shared.Addr)
	_, err = s.LoadLatest(ctx, "w", "")
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, ids[2], ce.CheckpointID)
	assert.Contains(t, ce.Reason, "missing")
	require.Len(t, ce.AlsoCorrupt, 2)
	bad, err = s.Verify(ctx, nil)
	require.NoError(t, err)
	var named []string
	var dbLevel []string
	for _, b := range bad {
		if b.CheckpointID == "" {
			dbLevel = append(dbLevel, b.Reason)
		} else {
			named = append(named, b.CheckpointID)
		}
	}
	sort.Strings(named)
	want := append([]string(nil), ids...)
	sort.Strings(want)
	assert.Equal(t, want, named)
	require.NotEmpty(t, dbLevel)
	assert.Contains(t, strings.Join(dbLevel, "\n"), shared.Addr.String(), "the dangling reference is named")

	// deleting what lists a missing chunk works (nothing to count down) and leaves no orphan
	for _, id := range ids {
		_, err := s.Delete(ctx, id)
		require.NoError(t, err)
	}
	runs, chunks := verifyClean(t, s, "deleted")
	assert.Zero(t, runs)
	assert.Zero(t, chunks)

	// a wrong reference count is reported, the checkpoints stay intact
	v := w.State()
	id := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: v}).CheckpointID
	require.NoError(t, s.Compact(ctx))
	_, cs := chunk.Split(v)
	c.SetChunkRefs(t, cs[0].Addr, 7)
	bad, err = s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Len(t, bad, 1)
	assert.Empty(t, bad[0].CheckpointID)
	assert.Contains(t, bad[0].Reason, "reference count 7")
	loadEach(t, s, map[string][]byte{id: v}, "wrong count")
}

// testChunkCacheCorruption: a backend's loads take the chunks an earlier load verified from its
// chunk cache (store.ChunkCache) only while their stored bytes are the ones verified. A value
// loaded twice (the second load from the cache) is byte for byte the value saved; one of its
// stored chunks damaged after that, the very next load in the same store reports the checkpoint
// corrupt and names the chunk, whether the damage kept the chunk's encoding and size (a chunk
// stored raw, one byte flipped) or not (a compressed chunk replaced); repaired, it loads again.
func testChunkCacheCorruption(t *testing.T, h *harness) {
	s := h.db(t)
	c := corrupter(t, s)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(18, 1))
	names := []string{"raw", "compressed"}
	values := map[string][]byte{
		"raw":        RandBytes(rng, 128<<10),      // incompressible: its chunks stored raw
		"compressed": CheckpointJSON(rng, 128<<10), // its chunks stored zstd-compressed
	}
	ids := map[string]string{}
	for _, name := range names {
		ids[name] = mustSave(t, s, store.SaveRequest{WorkflowID: name, State: values[name], StateType: store.StateBytes}).CheckpointID
	}
	require.NoError(t, s.Compact(ctx)) // every state as chunks
	for _, name := range names {
		for i := 1; i <= 2; i++ {
			loadEach(t, s, map[string][]byte{ids[name]: values[name]}, fmt.Sprintf("%s, load %d", name, i))
		}
	}
	for _, name := range names {
		_, cs := chunk.Split(values[name])
		own := cs[len(cs)/2]
		damaged := bytes.Clone(own.Data)
		damaged[len(damaged)/3] ^= 0x20
		c.SetChunkRaw(t, own.Addr, damaged)
		_, err := s.Load(ctx, ids[name])
		var ce *store.CorruptError
		require.ErrorAs(t, err, &ce, "%s: a load after the damage", name)
		assert.Equal(t, ids[name], ce.CheckpointID)
		assert.Contains(t, ce.Reason, own.Addr.String(), "%s: the reason names the chunk", name)
		c.SetChunkRaw(t, own.Addr, own.Data) // repaired (stored raw)
		for i := 1; i <= 2; i++ {
			loadEach(t, s, map[string][]byte{ids[name]: values[name]}, fmt.Sprintf("%s repaired, load %d", name, i))
		}
	}
	verifyClean(t, s, "repaired")
}

// testChunkedWrites: large pending-write values are chunked: they load back, a replaced value
// (idx < 0) and the values of a deleted checkpoint free their chunks, and a damaged one makes
// its checkpoint corrupt.
func testChunkedWrites(t *testing.T, h *harness) {
	s := h.db(t)
	c := corrupter(t, s)
	ctx := context.Background()
	r := testgen.New(88)
	res := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"small":true}`)})
	j := r.JSON(40 << 10)
	b := r.Bytes(30 << 10)
	n, err := s.PutWrites(ctx, "w", "", res.CheckpointID, []store.Write{
		{TaskID: "t1", Channel: "messages", Idx: 0, Value: j},
		{TaskID: "t1", Channel: "blob", Idx: 1, Value: b, IsBytes: true},
		{TaskID: "t2", Channel: "small", Idx: 0, Value: []byte(`1`)},
		{TaskID: "t3", Channel: "error", Idx: -1, Value: r.Bytes(20 << 10), IsBytes: true},
	})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	// a repeat of idx >= 0 is ignored (and counts nothing); idx < 0 replaces
	final := r.Bytes(25 << 10)
	_, err = s.PutWrites(ctx, "w", "", res.CheckpointID, []store.Write{
		{TaskID: "t1", Channel: "messages", Idx: 0, Value: r.JSON(50 << 10)},
		{TaskID: "t3", Channel: "error", Idx: -1, Value: final, IsBytes: true},
	})
	require.NoError(t, err)
	cp, err := s.Load(ctx, res.CheckpointID)
	require.NoError(t, err)
	require.Len(t, cp.PendingWrites, 4)
	byTask := map[string][]byte{}
	for _, w := range cp.PendingWrites {
		byTask[fmt.Sprintf("%s/%d", w.TaskID, w.Idx)] = w.Value
	}
	require.Equal(t, j, byTask["t1/0"])
	require.Equal(t, b, byTask["t1/1"])
	require.Equal(t, []byte(`1`), byTask["t2/0"])
	require.Equal(t, final, byTask["t3/-1"])
	_, chunksAll := verifyClean(t, s, "writes")
	require.Positive(t, chunksAll)

	// damage a chunk of b: the checkpoint is corrupt, naming the write
	_, cs := chunk.Split(b)
	c.SetChunkRaw(t, cs[1].Addr, []byte("not the chunk"))
	_, err = s.Load(ctx, res.CheckpointID)
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "t1/1")
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Len(t, bad, 1)
	assert.Equal(t, res.CheckpointID, bad[0].CheckpointID)
	c.SetChunkRaw(t, cs[1].Addr, cs[1].Data)

	_, err = s.Delete(ctx, res.CheckpointID)
	require.NoError(t, err)
	runs, chunks := verifyClean(t, s, "checkpoint deleted")
	assert.Zero(t, runs)
	assert.Zero(t, chunks)
}

// testChunkProcesses: two backends on one database (two ckptd processes) save edits of one
// shared state into their own workflows and delete and prune them at the same time: every
// remaining checkpoint loads and the counts stay exact.
func testChunkProcesses(t *testing.T, h *harness) {
	a := h.db(t)
	b := h.reopen(t, a)
	ctx := context.Background()
	base := testgen.New(5).JSON(64 << 10)
	type saved struct {
		id string
		v  []byte
	}
	var mu sync.Mutex
	kept := map[string][]byte{}
	var wg sync.WaitGroup
	for p, s := range []store.Backend{a, b} {
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := testgen.New(uint64(100*p + g))
				wf := fmt.Sprintf("p%d-g%d", p, g)
				var mine []saved
				v := base
				for i := 0; i < 25; i++ {
					v = r.Edit(v, 300, true).Apply(v)
					res, err := s.Save(ctx, store.SaveRequest{WorkflowID: wf, State: v, StateType: store.StateBytes})
					if !assert.NoError(t, err) {
						return
					}
					mine = append(mine, saved{res.CheckpointID, v})
					switch i % 5 {
					case 2: // delete an older one
						k := len(mine) / 2
						if _, err := s.Delete(ctx, mine[k].id); !assert.NoError(t, err) {
							return
						}
						mine = append(mine[:k], mine[k+1:]...)
					case 4: // prune to the newest 3
						res, err := s.Prune(ctx, store.PruneRequest{WorkflowID: wf, KeepLast: 3})
						if !assert.NoError(t, err) {
							return
						}
						gone := map[string]bool{}
						for _, id := range res.IDs[wf] {
							gone[id] = true
						}
						var keep []saved
						for _, m := range mine {
							if !gone[m.id] {
								keep = append(keep, m)
							}
						}
						mine = keep
					}
				}
				mu.Lock()
				for _, m := range mine {
					kept[m.id] = m.v
				}
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	loadEach(t, a, kept, "process a")
	loadEach(t, b, kept, "process b")
	verifyClean(t, a, "after the processes")
}

// testFootprints: logical bytes are what was saved (every checkpoint's state, every pending-write
// value, every LangGraph row); stored bytes are what is stored, a workflow's counting the chunks
// it shares in full and the total counting every byte once.
func testFootprints(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	all := store.FootprintRequest{AllWorkflows: true, AllThreads: true}
	rep, err := s.Footprints(ctx, all)
	require.NoError(t, err)
	require.Equal(t, store.Footprint{}, rep.Total)
	require.Empty(t, rep.Workflows)

	w := testgen.NewWorkload(11, 128<<10)
	var logicalA int64
	var last store.SaveResult
	for i := 0; i < 10; i++ {
		v := w.State()
		logicalA += int64(len(v))
		last = mustSave(t, s, store.SaveRequest{WorkflowID: "a", State: v})
		w.Advance()
	}
	require.NoError(t, s.Compact(ctx))
	big := testgen.New(3).Bytes(20 << 10)
	_, err = s.PutWrites(ctx, "a", "", last.CheckpointID, []store.Write{{TaskID: "t", Channel: "c", Value: big, IsBytes: true},
		{TaskID: "t", Channel: "d", Idx: 1, Value: []byte(`{"x":1}`)}})
	require.NoError(t, err)
	logicalA += int64(len(big)) + int64(len(`{"x":1}`))
	rep, err = s.Footprints(ctx, all)
	require.NoError(t, err)
	a := rep.Workflows["a"]
	assert.Equal(t, logicalA, a.LogicalBytes)
	assert.Equal(t, logicalA, rep.Total.LogicalBytes)
	assert.Equal(t, rep.Total.StoredBytes, a.StoredBytes, "alone, the workflow is everything stored")
	assert.Greater(t, a.Ratio(), 5.0, "ten growing states share their chunks: %+v", a)
	assert.Positive(t, rep.Chunks)
	assert.Positive(t, rep.Runs)

	// the same states in workflow b: b's footprint is a's states', the total grows by b's rows only
	w = testgen.NewWorkload(11, 128<<10)
	for i := 0; i < 10; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: "b", State: w.State()})
		w.Advance()
	}
	require.NoError(t, s.Compact(ctx))
	rep2, err := s.Footprints(ctx, store.FootprintRequest{Workflows: []string{"b", "nope"}})
	require.NoError(t, err)
	b := rep2.Workflows["b"]
	assert.NotContains(t, rep2.Workflows, "nope")
	assert.NotContains(t, rep2.Workflows, "a")
	assert.Less(t, b.StoredBytes, a.StoredBytes, "b has no pending writes")
	assert.Equal(t, rep.Total.StoredBytes, rep2.Total.StoredBytes, "identical states are stored once")
	assert.Equal(t, 2*logicalA-int64(len(big))-int64(len(`{"x":1}`)), rep2.Total.LogicalBytes)

	// a LangGraph thread counts too
	PutLG(t, s, "th", "", "1f0-1", "", map[string]any{"m": 1}, map[string]string{"m": `["hello"]`}, "")
	rep3, err := s.Footprints(ctx, store.FootprintRequest{Threads: []string{"th"}})
	require.NoError(t, err)
	th := rep3.Threads["th"]
	assert.Positive(t, th.LogicalBytes)
	assert.Positive(t, th.StoredBytes)
	assert.Equal(t, rep2.Total.LogicalBytes+th.LogicalBytes, rep3.Total.LogicalBytes)

	// deleting a leaves b's footprint and the total equal to b's plus the thread's
	_, err = s.DeleteWorkflow(ctx, "a")
	require.NoError(t, err)
	rep4, err := s.Footprints(ctx, all)
	require.NoError(t, err)
	assert.Equal(t, b, rep4.Workflows["b"])
	assert.Equal(t, b.Add(th), rep4.Total)
}

// testChunkRepeats: values whose content repeats list the same chunks and runs several times
// (counted with multiplicity), in values of many runs (counted in a batch by SQLite) and few:
// removing one value never frees what the others list, removing all frees everything.
func testChunkRepeats(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	block := testgen.New(77).Bytes(96 << 10)
	small := testgen.New(78).Bytes(6 << 10)
	rep := func(b []byte, n int) []byte { return bytes.Repeat(b, n) }
	want := map[string][]byte{}
	var ids []string
	for i, v := range [][]byte{rep(block, 8), rep(block, 9), append(rep(block, 3), small...), rep(small, 2), rep(small, 3)} {
		res := mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("w%d", i%2), State: v, StateType: store.StateBytes})
		want[res.CheckpointID] = v
		ids = append(ids, res.CheckpointID)
	}
	loadEach(t, s, want, "saved")
	verifyClean(t, s, "saved")
	for i, id := range ids {
		n, err := s.Delete(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		delete(want, id)
		loadEach(t, s, want, fmt.Sprintf("after deleting %d", i))
		runs, chunks := verifyClean(t, s, fmt.Sprintf("after deleting %d", i))
		if len(want) == 0 {
			require.Zero(t, runs)
			require.Zero(t, chunks)
		}
	}
}
