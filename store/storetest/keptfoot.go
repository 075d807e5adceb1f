package storetest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
)

// The database's footprint kept (store.FootprintReport's Total, Chunks and Runs): Footprints
// reads it from counters every write keeps in its transaction, and it always equals the sum of
// every value row (the backend's RecountFootprint); CheckFigures finds nothing.

func init() {
	add(testCase{"KeptFootprint", testKeptFootprint})
}

// footprintRecounter is what the suite needs of a backend beyond the contract: the full sum the
// kept counters replace.
type footprintRecounter interface {
	RecountFootprint(ctx context.Context) (store.FootprintReport, error)
}

// checkKeptFootprint fails unless the kept total equals the recount and the kept figures check
// clean.
func checkKeptFootprint(t *testing.T, s store.Backend, what string) store.FootprintReport {
	t.Helper()
	rc, ok := s.(footprintRecounter)
	if !ok {
		t.Fatalf("storetest: the backend (%T) has no RecountFootprint", s)
	}
	ctx := context.Background()
	want, err := rc.RecountFootprint(ctx)
	require.NoError(t, err, what)
	got, err := s.Footprints(ctx, store.FootprintRequest{})
	require.NoError(t, err, what)
	require.Equal(t, want.Total, got.Total, "%s: kept total against the recount", what)
	require.Equal(t, want.Chunks, got.Chunks, "%s: kept chunk count", what)
	require.Equal(t, want.Runs, got.Runs, "%s: kept run count", what)
	bad, err := s.CheckFigures(ctx)
	require.NoError(t, err, what)
	require.Empty(t, bad, what)
	return got
}

// testKeptFootprint: a random mix of every write that changes what the footprint adds up —
// saves of small and chunked states, pending writes (kept, replaced, chunked), LangGraph puts
// (small and large values) and writes (kept and replaced), LangGraph prunes, copies, thread
// deletions, imports, expiry and retention, checkpoint deletes, prunes, completions, workflow
// deletions, imports (dry runs too) and compaction — with the kept total checked against the
// recount after each step. At the end, with everything deleted, the total is zero.
func testKeptFootprint(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	r := testgen.New(1717)
	rng := rand.New(rand.NewPCG(17, 17))
	checkKeptFootprint(t, s, "empty")

	wfs := []string{"w0", "w1", "w2"}
	threads := []string{"t0", "t1", "t2"}
	base := r.JSON(24 << 10)
	last := map[string][]byte{}
	ckpts := map[string][]string{} // workflow -> its checkpoints (as far as the test knows)
	lgIDs := map[string]int{}      // thread -> checkpoints put
	copies := 0
	_, err := s.Configure(ctx, "w2", &store.Retention{KeepLast: 3, IdleTTLSeconds: 3600})
	require.NoError(t, err)
	anyCkpt := func(wf string) (string, bool) {
		l := ckpts[wf]
		if len(l) == 0 {
			return "", false
		}
		return l[rng.IntN(len(l))], true
	}
	drop := func(wf string, ids ...string) {
		gone := map[string]bool{}
		for _, id := range ids {
			gone[id] = true
		}
		var keep []string
		for _, id := range ckpts[wf] {
			if !gone[id] {
				keep = append(keep, id)
			}
		}
		ckpts[wf] = keep
	}
	lgPut := func(th string, big, again bool) {
		n := lgIDs[th]
		if again { // the latest checkpoint put again, its checkpoint bytes and value replaced
			n--
		}
		lgIDs[th] = n + 1
		id, parent := fmt.Sprintf("1f0-%04d", n+1), ""
		if n > 0 {
			parent = fmt.Sprintf("1f0-%04d", n)
		}
		val := fmt.Sprintf(`["v%d"]`, n)
		if big {
			val = string(CheckpointJSON(rng, 8<<10+rng.IntN(16<<10)))
		}
		vj := fmt.Sprintf(`{"m":%d,"e":1}`, n+1)
		req := store.LGPutRequest{ThreadID: th, CheckpointID: id, ParentID: parent, Type: "json",
			Checkpoint: []byte(fmt.Sprintf(`{"id":%q,"pad":%q}`, id, r.JSON(rng.IntN(3)*(3<<10)))), ChannelVersions: []byte(vj),
			Metadata: []byte(fmt.Sprintf(`{"step":%d}`, n)),
			Blobs: []store.LGBlob{{Channel: "e", Version: "1", Type: store.LGEmptyType},
				{Channel: "m", Version: fmt.Sprint(n + 1), Type: "json", Data: []byte(val)}}}
		p, _ := s.LGPut(req)
		require.NoError(t, p.Wait(ctx))
	}

	const steps = 140
	for step := 0; step < steps; step++ {
		wf := wfs[rng.IntN(len(wfs))]
		th := threads[rng.IntN(len(threads))]
		op := rng.IntN(26)
		what := fmt.Sprintf("step %d (op %d, %s, %s)", step, op, wf, th)
		switch {
		case op < 4: // a chunked state: an edit of the workflow's last one
			src := last[wf]
			if src == nil {
				src = base
			}
			v := r.Edit(src, []int{10, 300, 3000}[rng.IntN(3)], false).Apply(src)
			if len(v) < 5<<10 {
				v = base
			}
			res := mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: v, StateType: store.StateBytes})
			ckpts[wf] = append(ckpts[wf], res.CheckpointID)
			drop(wf, res.Pruned...)
			last[wf] = v
		case op < 6: // a small state (sometimes the same bytes again: deduplicated)
			v := []byte(fmt.Sprintf(`{"n":%d}`, rng.IntN(4)))
			res := mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: v, StateType: store.StateJSON})
			ckpts[wf] = append(ckpts[wf], res.CheckpointID)
			drop(wf, res.Pruned...)
		case op < 8: // pending writes: small, chunked, kept once or replaced
			id, ok := anyCkpt(wf)
			if !ok {
				continue
			}
			val := []byte(fmt.Sprintf(`"w%d"`, step))
			if rng.IntN(2) == 0 {
				val = r.Bytes(5<<10 + rng.IntN(20<<10))
			}
			idx := int64(rng.IntN(2))
			if rng.IntN(2) == 0 {
				idx = -1 - idx
			}
			_, err := s.PutWrites(ctx, wf, "", id, []store.Write{{TaskID: fmt.Sprint("task", rng.IntN(2)), Channel: "c", Idx: idx, Value: val, IsBytes: true}})
			require.NoError(t, err, what)
		case op < 9: // delete a checkpoint
			id, ok := anyCkpt(wf)
			if !ok {
				continue
			}
			_, err := s.Delete(ctx, id)
			require.NoError(t, err, what)
			drop(wf, id)
		case op < 10: // prune
			res, err := s.Prune(ctx, store.PruneRequest{WorkflowID: wf, KeepLast: 1 + rng.IntN(2)})
			require.NoError(t, err, what)
			drop(wf, res.IDs[wf]...)
		case op < 11: // complete, preserving or not
			if len(ckpts[wf]) == 0 {
				continue
			}
			preserve := rng.IntN(2) == 0
			_, err := s.Complete(ctx, wf, preserve)
			require.NoError(t, err, what)
			if !preserve {
				ckpts[wf] = nil
			}
		case op < 12: // delete the workflow
			_, err := s.DeleteWorkflow(ctx, wf)
			require.NoError(t, err, what)
			ckpts[wf], last[wf] = nil, nil
		case op < 13: // export, delete, import again (and a dry run, which changes nothing)
			if len(ckpts[wf]) == 0 {
				continue
			}
			rec, cps := exportAll(t, s, wf)
			_, err := s.DeleteWorkflow(ctx, wf)
			require.NoError(t, err, what)
			checkKeptFootprint(t, s, what+" (deleted for the import)")
			dry, err := s.Import(ctx, rec, seqOf(cps), store.ImportOptions{DryRun: true})
			require.NoError(t, err, what)
			require.Equal(t, len(cps), dry.Imported, what)
			checkKeptFootprint(t, s, what+" (dry run)")
			res, err := s.Import(ctx, rec, seqOf(cps), store.ImportOptions{})
			require.NoError(t, err, what)
			require.Equal(t, len(cps), res.Imported, what)
			ckpts[wf] = ckpts[wf][:0]
			for _, cp := range cps {
				ckpts[wf] = append(ckpts[wf], cp.CheckpointID)
			}
		case op < 14: // idle expiry (w2 has an idle TTL)
			clock.Advance(2 * time.Hour)
			out, err := s.ExpireIdle(ctx)
			require.NoError(t, err, what)
			for w, ids := range out {
				drop(w, ids...)
			}
		case op < 15:
			require.NoError(t, s.Compact(ctx), what)
		case op < 18: // a LangGraph put, small or large values; or the latest put again
			lgPut(th, rng.IntN(2) == 0, lgIDs[th] > 0 && rng.IntN(3) == 0)
		case op < 20: // LangGraph writes, kept once or replaced (idx < 0)
			if lgIDs[th] == 0 {
				continue
			}
			id := fmt.Sprintf("1f0-%04d", lgIDs[th]-rng.IntN(min(2, lgIDs[th])))
			val := fmt.Sprintf(`"x%d"`, step)
			if rng.IntN(2) == 0 {
				val = string(CheckpointJSON(rng, 6<<10))
			}
			idx := int64(rng.IntN(2))
			if rng.IntN(2) == 0 {
				idx = -1 - idx
			}
			p, _ := s.LGPutWrites(th, "", id, []store.LGWrite{{TaskID: "task", TaskPath: "p", Idx: idx, Channel: "m", Type: "json", Data: []byte(val)}})
			require.NoError(t, p.Wait(ctx), what)
		case op < 21: // LangGraph prune to the latest
			_, err := s.LGPrune(ctx, []string{th}, "keep_latest")
			require.NoError(t, err, what)
		case op < 22: // delete a thread
			_, err := s.LGDeleteThread(ctx, th)
			require.NoError(t, err, what)
			lgIDs[th] = 0
		case op < 23: // copy a thread
			if lgIDs[th] == 0 {
				continue
			}
			copies++
			_, err := s.LGCopyThread(ctx, th, fmt.Sprintf("copy%d", copies))
			require.NoError(t, err, what)
		case op < 24: // export a thread, delete it, import it again
			if lgIDs[th] == 0 {
				continue
			}
			_, recs := lgExportAll(t, s, th)
			_, err := s.LGDeleteThread(ctx, th)
			require.NoError(t, err, what)
			_, err = s.LGImport(ctx, th, lgSeq(recs), store.ImportOptions{DryRun: true})
			require.NoError(t, err, what)
			checkKeptFootprint(t, s, what+" (LangGraph dry run)")
			_, err = s.LGImport(ctx, th, lgSeq(recs), store.ImportOptions{})
			require.NoError(t, err, what)
		case op < 25: // a copy's retention: idle threads expire
			if copies == 0 {
				continue
			}
			c := fmt.Sprintf("copy%d", 1+rng.IntN(copies))
			_, err := s.LGConfigure(ctx, &c, &store.Retention{IdleTTLSeconds: 60}, false)
			require.NoError(t, err, what)
			clock.Advance(2 * time.Minute)
			_, err = s.LGExpireIdle(ctx)
			require.NoError(t, err, what)
		default: // a LangGraph value staged, then put with a checkpoint or left to expire
			v := []byte(`"staged"`)
			if rng.IntN(2) == 0 { // a large one is stored as chunks
				v = fmt.Appendf(nil, `{"staged":%q}`, bytes.Repeat([]byte{'a' + byte(rng.IntN(26))}, 9000+rng.IntN(9000)))
			}
			_, err := s.LGStageValue(ctx, th, "json", v)
			require.NoError(t, err, what)
		}
		checkKeptFootprint(t, s, what)
	}

	// everything deleted: nothing is left to count
	for _, wf := range wfs {
		_, err := s.DeleteWorkflow(ctx, wf)
		require.NoError(t, err)
	}
	for _, th := range threads {
		_, err := s.LGDeleteThread(ctx, th)
		require.NoError(t, err)
	}
	for i := 1; i <= copies; i++ {
		_, err := s.LGDeleteThread(ctx, fmt.Sprintf("copy%d", i))
		require.NoError(t, err)
	}
	rep := checkKeptFootprint(t, s, "everything deleted")
	require.Equal(t, store.FootprintReport{}, store.FootprintReport{Total: rep.Total, Chunks: rep.Chunks, Runs: rep.Runs})

	// a restart reads the same counters
	s2 := h.reopen(t, s)
	checkKeptFootprint(t, s2, "reopened")

	// a database migrated from the oldest schema gets its counters counted by the migration
	old := h.db(t, func(o *Options) { o.Oldest = true })
	rep = checkKeptFootprint(t, old, "migrated from the oldest schema")
	require.Positive(t, rep.Total.LogicalBytes, "the oldest schema's checkpoints count")
}
