package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// Paged lists and maintenance in bites (issue #22): workflow/list pages read kept figures that
// every write keeps exact; prune, retention, deletion, completion, idle expiry and import work
// in bounded transactions with exact results, whatever happens between two bites.

func init() {
	add(
		testCase{"KeptFiguresFollowEveryWrite", testKeptFigures},
		testCase{"WorkflowPages", testWorkflowPages},
		testCase{"WorkflowPagesUnderChanges", testWorkflowPagesUnderChanges},
		testCase{"PruneInBites", testPruneInBites},
		testCase{"PruneInBitesWithSavesBetween", testPruneInBitesWithSaves},
		testCase{"DeleteAndCompleteInBites", testDeleteCompleteInBites},
		testCase{"ExpireIdleInBites", testExpireIdleInBites},
		testCase{"ImportInBites", testImportInBites},
		testCase{"SaveRetentionLeavesTheRestToASweep", testRetentionSweep},
		testCase{"LGThreadPages", testLGThreadPages},
	)
}

// withBites cuts maintenance into bites of BiteUnits units (a budget of 1ns) and counts them.
func withBites(n *int, mu *sync.Mutex, after func(int)) func(*Options) {
	return func(o *Options) {
		o.BiteBudget = time.Nanosecond
		o.AfterBite = func(k int) {
			mu.Lock()
			*n = k
			mu.Unlock()
			if after != nil {
				after(k)
			}
		}
	}
}

// requireFigures fails unless every kept figure matches a recount, and the listing agrees with
// the checkpoints List shows.
func requireFigures(t *testing.T, s store.Backend) {
	t.Helper()
	ctx := context.Background()
	bad, err := s.CheckFigures(ctx)
	require.NoError(t, err)
	require.Empty(t, bad, "kept figures")
	wfs, err := store.AllWorkflows(ctx, s, false)
	require.NoError(t, err)
	db, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, len(wfs), db.Workflows)
	total := 0
	for _, w := range wfs {
		var all []store.Summary
		before := ""
		for {
			l, err := s.List(ctx, store.ListFilter{WorkflowID: w.WorkflowID, Before: before, Limit: store.MaxListLimit})
			require.NoError(t, err)
			all = append(all, l...)
			if len(l) < store.MaxListLimit {
				break
			}
			before = l[len(l)-1].CheckpointID
		}
		require.Equal(t, len(all), w.Count, w.WorkflowID)
		var stored int64
		for _, sm := range all {
			stored += sm.StoredBytes
		}
		require.Equal(t, stored, w.StoredBytes, w.WorkflowID)
		if len(all) == 0 {
			require.Nil(t, w.Latest, w.WorkflowID)
		} else {
			require.NotNil(t, w.Latest, w.WorkflowID)
			require.Equal(t, all[0].CheckpointID, w.Latest.CheckpointID, w.WorkflowID)
		}
		require.Equal(t, len(all) > 0 && !w.Completed, w.Resumable, w.WorkflowID)
		total += len(all)
	}
	require.Equal(t, total, db.Checkpoints)
}

// testKeptFigures: every kind of write keeps the figures exact: saves (dedup, no state, several
// namespaces), idempotent repeats, retention, delete, prune, complete, delete workflow, import,
// rollback pruning, deferred compression, and the counters stats reads.
func testKeptFigures(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	big := CheckpointJSON(rng, 20<<10) // compressed (deferred on SQLite)
	requireFigures(t, s)
	for i := 0; i < 12; i++ {
		req := store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", i%3), Namespace: []string{"", "sub"}[i%2],
			CheckpointID: fmt.Sprintf("c-%d", i), State: []byte(fmt.Sprintf(`{"i":%d}`, i%4)), StateType: store.StateJSON}
		switch i % 4 {
		case 1:
			req.State = big
		case 3:
			req.State, req.StateType = nil, ""
		}
		mustSave(t, s, req)
		if i == 5 {
			r := mustSave(t, s, req) // an idempotent repeat adds nothing
			require.True(t, r.Existing)
		}
	}
	requireFigures(t, s)
	require.NoError(t, s.Compact(ctx))
	requireFigures(t, s)
	_, err := s.Configure(ctx, "wf-0", &store.Retention{KeepLast: 1})
	require.NoError(t, err)
	r := mustSave(t, s, store.SaveRequest{WorkflowID: "wf-0", State: big, StateType: store.StateJSON})
	require.NotEmpty(t, r.Pruned)
	requireFigures(t, s)
	n, err := s.Delete(ctx, "c-1") // the newest of wf-1's root namespace? no: of its seqs, an old one
	require.NoError(t, err)
	require.Equal(t, 1, n)
	requireFigures(t, s)
	n, err = s.Delete(ctx, "c-10") // wf-1's newest: latest moves back
	require.NoError(t, err)
	require.Equal(t, 1, n)
	requireFigures(t, s)
	_, err = s.Prune(ctx, store.PruneRequest{WorkflowID: "wf-2", KeepLast: 1})
	require.NoError(t, err)
	requireFigures(t, s)
	_, err = s.Complete(ctx, "wf-2", true)
	require.NoError(t, err)
	requireFigures(t, s)
	_, err = s.Complete(ctx, "wf-1", false)
	require.NoError(t, err)
	requireFigures(t, s)
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf-1"}) // resumable again
	requireFigures(t, s)
	rec, cps := exportAll(t, s, "wf-0")
	rec.WorkflowID = "copy"
	for i := range cps {
		cps[i].WorkflowID = "copy"
		cps[i].CheckpointID = "copy-" + cps[i].CheckpointID
	}
	_, err = s.Import(ctx, rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	requireFigures(t, s)
	_, err = s.Import(ctx, rec, seqOf(cps), store.ImportOptions{DryRun: true})
	require.NoError(t, err)
	requireFigures(t, s)
	_, err = s.Configure(ctx, "idle", &store.Retention{IdleTTLSeconds: 1})
	require.NoError(t, err)
	mustSave(t, s, store.SaveRequest{WorkflowID: "idle", State: big, StateType: store.StateJSON})
	clock.Advance(time.Hour)
	_, err = s.ExpireIdle(ctx)
	require.NoError(t, err)
	requireFigures(t, s)
	// rollback with prune deletes checkpoints too
	mustSave(t, s, store.SaveRequest{WorkflowID: "rb", CheckpointID: "rb-1"})
	mustSave(t, s, store.SaveRequest{WorkflowID: "rb", CheckpointID: "rb-2"})
	rb, _, err := s.BeginRollback(ctx, "rb", "", "rb-1", 1)
	require.NoError(t, err)
	_, pruned, err := s.CompleteRollback(ctx, rb.RollbackID, true)
	require.NoError(t, err)
	require.Equal(t, []string{"rb-2"}, pruned)
	requireFigures(t, s)
	n, err = s.DeleteWorkflow(ctx, "wf-0")
	require.NoError(t, err)
	require.NotZero(t, n)
	requireFigures(t, s)
	db, err := s.Stats(ctx)
	require.NoError(t, err)
	u, err := s.Usage(ctx)
	require.NoError(t, err)
	require.Positive(t, db.Checkpoints)
	require.Positive(t, db.States)
	require.Positive(t, u.StateBytes)
}

// testWorkflowPages: limits, cursors, both orders, resumableOnly and claimable, and refusals.
func testWorkflowPages(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	var ids []string
	for i := 0; i < 23; i++ {
		wf := fmt.Sprintf("wf-%02d", (i*7)%23) // saved out of id order
		ids = append(ids, wf)
		mustSave(t, s, store.SaveRequest{WorkflowID: wf})
		clock.Advance(time.Second)
	}
	_, err := s.Complete(ctx, "wf-03", true)
	require.NoError(t, err)
	_, err = s.Configure(ctx, "configured-only", &store.Retention{KeepLast: 2}) // a workflow without checkpoints
	require.NoError(t, err)
	_, err = s.Claim(ctx, "wf-07", "worker", time.Hour)
	require.NoError(t, err)

	pages := func(f store.WorkflowFilter) ([]string, int) {
		t.Helper()
		var got []string
		n := 0
		for {
			p, err := s.ListWorkflows(ctx, f)
			require.NoError(t, err)
			n++
			require.LessOrEqual(t, len(p.Workflows), f.Limit)
			for _, w := range p.Workflows {
				got = append(got, w.WorkflowID)
			}
			if p.Cursor == "" {
				return got, n
			}
			require.Len(t, p.Workflows, f.Limit, "a page followed by a cursor is full")
			f.Cursor = p.Cursor
		}
	}
	newest := slices.Clone(ids)
	slices.Reverse(newest) // saved in ids' order, one second apart
	newest = append([]string{"configured-only"}, newest...)
	got, n := pages(store.WorkflowFilter{Limit: 5})
	require.Equal(t, newest, got)
	require.Equal(t, 5, n)
	byID := slices.Clone(newest)
	sort.Strings(byID)
	got, _ = pages(store.WorkflowFilter{Limit: 4, Order: store.OrderID})
	require.Equal(t, byID, got)

	resumable := slices.DeleteFunc(slices.Clone(newest), func(id string) bool { return id == "wf-03" || id == "configured-only" })
	got, _ = pages(store.WorkflowFilter{Limit: 3, ResumableOnly: true})
	require.Equal(t, resumable, got)
	resumableByID := slices.Clone(resumable)
	sort.Strings(resumableByID)
	got, _ = pages(store.WorkflowFilter{Limit: 6, ResumableOnly: true, Order: store.OrderID})
	require.Equal(t, resumableByID, got)

	claimable := slices.DeleteFunc(slices.Clone(resumable), func(id string) bool { return id == "wf-07" })
	slices.Reverse(claimable) // oldest first
	got, _ = pages(store.WorkflowFilter{Limit: 4, Claimable: true})
	require.Equal(t, claimable, got)
	claimableByID := slices.Clone(claimable)
	sort.Strings(claimableByID)
	got, _ = pages(store.WorkflowFilter{Limit: 50, Claimable: true, Order: store.OrderID})
	require.Equal(t, claimableByID, got)
	all, err := s.Claimable(ctx, 0)
	require.NoError(t, err)
	require.Len(t, all, len(claimable))
	two, err := s.Claimable(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, claimable[:2], []string{two[0].WorkflowID, two[1].WorkflowID})

	// the default page is 1000; one page holds everything here
	p, err := s.ListWorkflows(ctx, store.WorkflowFilter{})
	require.NoError(t, err)
	require.Len(t, p.Workflows, len(newest))
	require.Empty(t, p.Cursor)
	for _, w := range p.Workflows {
		if w.WorkflowID == "wf-03" {
			require.True(t, w.Completed)
			require.False(t, w.Resumable)
			require.Equal(t, 1, w.Count)
		}
		if w.WorkflowID == "configured-only" {
			require.Zero(t, w.Count)
			require.Nil(t, w.Latest)
		}
	}

	// refusals name the field
	first, err := s.ListWorkflows(ctx, store.WorkflowFilter{Limit: 2})
	require.NoError(t, err)
	require.NotEmpty(t, first.Cursor)
	for _, tc := range []struct {
		f     store.WorkflowFilter
		field string
	}{
		{store.WorkflowFilter{Limit: -1}, "limit"},
		{store.WorkflowFilter{Limit: store.MaxWorkflowPage + 1}, "limit"},
		{store.WorkflowFilter{Order: "size"}, "order"},
		{store.WorkflowFilter{Claimable: true, Order: store.OrderUpdated}, "order"},
		{store.WorkflowFilter{Cursor: "%%%"}, "cursor"},
		{store.WorkflowFilter{Cursor: "WyJ1IiwxXQ"}, "cursor"},
		{store.WorkflowFilter{Cursor: first.Cursor, Order: store.OrderID}, "cursor"}, // another order's
		{store.WorkflowFilter{Cursor: first.Cursor, Claimable: true}, "cursor"},
	} {
		_, err := s.ListWorkflows(ctx, tc.f)
		var ie *store.InvalidError
		require.ErrorAs(t, err, &ie, "%+v", tc.f)
		require.Equal(t, tc.field, ie.Field, "%+v", tc.f)
	}
}

// testWorkflowPagesUnderChanges: saves, deletes and new workflows between pages. Order "id"
// lists every workflow that exists from the first page to the last exactly once; the default
// order never lists one twice.
func testWorkflowPagesUnderChanges(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 60
	for i := 0; i < n; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%03d", i)})
	}
	for round := 0; round < 6; round++ {
		for _, order := range []string{store.OrderID, store.OrderUpdated} {
			// the workflows that exist now and are never deleted during this listing
			throughout := map[string]bool{}
			wfs, err := store.AllWorkflows(ctx, s, false)
			require.NoError(t, err)
			deletable := map[string]bool{}
			for _, w := range wfs {
				throughout[w.WorkflowID] = true
			}
			f := store.WorkflowFilter{Limit: 1 + rng.IntN(9), Order: order}
			seen := map[string]int{}
			for {
				p, err := s.ListWorkflows(ctx, f)
				require.NoError(t, err)
				for _, w := range p.Workflows {
					seen[w.WorkflowID]++
				}
				// between pages: saves to listed and unlisted workflows, new workflows, and
				// deletions of a few (which then did not exist throughout)
				for k := 0; k < 4; k++ {
					wf := wfs[rng.IntN(len(wfs))].WorkflowID
					switch rng.IntN(4) {
					case 0:
						if !deletable[wf] && throughout[wf] {
							_, err := s.DeleteWorkflow(ctx, wf)
							require.NoError(t, err)
							delete(throughout, wf)
							deletable[wf] = true
						}
					case 1:
						mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("new-%d-%d", round, rng.IntN(1000))})
					default:
						if !deletable[wf] {
							mustSave(t, s, store.SaveRequest{WorkflowID: wf})
						}
					}
				}
				if p.Cursor == "" {
					break
				}
				f.Cursor = p.Cursor
			}
			for wf, k := range seen {
				require.Equal(t, 1, k, "order %q listed %s %d times", order, wf, k)
			}
			if order == store.OrderID {
				for wf := range throughout {
					require.Equal(t, 1, seen[wf], "order id missed %s, which existed throughout", wf)
				}
			}
		}
	}
	requireFigures(t, s)
}

// pruneFixture saves a mix of workflows for the prune cases: namespaces, a keepFirst workflow,
// one held by an unfinished rollback, several sizes. It returns the retention items by group.
func pruneFixture(t *testing.T, s store.Backend, clock *Clock) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	for w := 0; w < 12; w++ {
		wf := fmt.Sprintf("wf-%02d", w)
		n := 5 + rng.IntN(60)
		for i := 0; i < n; i++ {
			mustSave(t, s, store.SaveRequest{WorkflowID: wf, Namespace: []string{"", "a", "b"}[rng.IntN(3)],
				State: []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)), StateType: store.StateJSON})
			clock.Advance(time.Duration(rng.IntN(100)) * time.Second)
		}
	}
	_, err := s.Configure(ctx, "wf-03", &store.Retention{KeepFirst: true})
	require.NoError(t, err)
	_, _, err = s.BeginRollback(ctx, "wf-05", "", "", 0) // holds nothing to a full rollback
	require.NoError(t, err)
}

// expectedPrune is what SelectExpired deletes of the database as it is now.
func expectedPrune(t *testing.T, s store.Backend, req store.PruneRequest, now time.Time) map[string][]string {
	ctx := context.Background()
	out := map[string][]string{}
	wfs, err := store.AllWorkflows(ctx, s, false)
	require.NoError(t, err)
	for _, w := range wfs {
		if req.WorkflowID != "" && w.WorkflowID != req.WorkflowID {
			continue
		}
		own, err := s.Configure(ctx, w.WorkflowID, nil)
		require.NoError(t, err)
		l, err := s.List(ctx, store.ListFilter{WorkflowID: w.WorkflowID, Limit: store.MaxListLimit})
		require.NoError(t, err)
		groups := map[string][]store.RetentionItem{}
		for _, sm := range l {
			groups[sm.Namespace] = append(groups[sm.Namespace], store.RetentionItem{Seq: sm.Seq, ID: sm.CheckpointID, CreatedAt: sm.CreatedAt})
		}
		nss := make([]string, 0, len(groups))
		for ns := range groups {
			nss = append(nss, ns)
		}
		sort.Strings(nss)
		for _, ns := range nss {
			out[w.WorkflowID] = append(out[w.WorkflowID], store.SelectExpired(groups[ns], req.Retention(own), now)...)
		}
	}
	for wf, ids := range out {
		if len(ids) == 0 {
			delete(out, wf)
		}
	}
	return out
}

// testPruneInBites: with bites of BiteUnits units, a prune takes many bites and deletes exactly
// what SelectExpired selects (keepLast, olderThan, keepFirst, namespaces); a dry run reports
// the same; counts and freed bytes are sums over the bites; progress is reported per bite.
func testPruneInBites(t *testing.T, h *harness) {
	var mu sync.Mutex
	bites := 0
	clock := NewClock()
	s := h.db(t, withClock(clock), withBites(&bites, &mu, nil))
	ctx := context.Background()
	pruneFixture(t, s, clock)
	for _, req := range []store.PruneRequest{
		{KeepLast: 20},
		{OlderThanSeconds: 3000, KeepLast: 4},
		{WorkflowID: "wf-03", KeepLast: 1},
		{WorkflowID: "wf-07", KeepLast: 1},
		{OlderThanSeconds: 1},
	} {
		want := expectedPrune(t, s, req, clock.Now())
		wantN := 0
		for _, ids := range want {
			wantN += len(ids)
		}
		dry := req
		dry.DryRun = true
		d, err := s.Prune(ctx, dry)
		require.NoError(t, err)

		require.Equal(t, wantN, d.Deleted, "%+v", req)
		mu.Lock()
		before := bites
		mu.Unlock()
		var progress []store.PruneProgress
		req.Progress = func(p store.PruneProgress) { progress = append(progress, p) }
		res, err := s.Prune(ctx, req)
		require.NoError(t, err)
		mu.Lock()
		took := bites - before
		mu.Unlock()
		require.Equal(t, wantN, res.Deleted, "%+v", req)
		for wf := range want {
			require.ElementsMatch(t, want[wf], res.IDs[wf], "%s %+v", wf, req)
		}
		require.Equal(t, d.IDs, res.IDs)
		// a dry run keeps nothing between its bites: what it frees is each bite's on its own
		require.LessOrEqual(t, d.FreedBytes, res.FreedBytes)
		if wantN > store.BiteUnits {
			require.Greater(t, took, 1, "%+v: %d deletions in one bite", req, wantN)
		}
		require.NotEmpty(t, progress)
		last := progress[len(progress)-1]
		require.Equal(t, res.Deleted, last.Deleted)
		require.Equal(t, last.Total, last.Workflows)
		requireFigures(t, s)
		omit := req
		omit.OmitIDs = true
		again, err := s.Prune(ctx, omit)
		require.NoError(t, err)
		require.Zero(t, again.Deleted, "a prune run again finds nothing left")
		require.Nil(t, again.IDs)
	}
}

// testPruneInBitesWithSavesBetween: saves between bites (to the workflows being pruned, and to
// others) are never lost: everything saved during the prune is still there, every group keeps
// at least its newest KeepLast, and every checkpoint the prune deleted was beyond them.
func testPruneInBitesWithSaves(t *testing.T, h *harness) {
	var mu sync.Mutex
	bites := 0
	var s store.Backend
	var saved []string
	saving := true
	rng := rand.New(rand.NewPCG(5, 6))
	clock := NewClock()
	s = h.db(t, withClock(clock), withBites(&bites, &mu, func(int) {
		if !saving {
			return
		}
		wf := fmt.Sprintf("wf-%02d", rng.IntN(14)) // 12 and 13 are new
		r := mustSave(t, s, store.SaveRequest{WorkflowID: wf, Namespace: []string{"", "a"}[rng.IntN(2)]})
		saved = append(saved, r.CheckpointID)
	}))
	ctx := context.Background()
	pruneFixture(t, s, clock)
	const keep = 3
	groups := func() map[string]int {
		out := map[string]int{}
		wfs, err := store.AllWorkflows(ctx, s, false)
		require.NoError(t, err)
		for _, w := range wfs {
			l, err := s.List(ctx, store.ListFilter{WorkflowID: w.WorkflowID, Limit: store.MaxListLimit})
			require.NoError(t, err)
			for _, sm := range l {
				out[w.WorkflowID+"/"+sm.Namespace]++
			}
		}
		return out
	}
	before := groups()
	res, err := s.Prune(ctx, store.PruneRequest{KeepLast: keep})
	require.NoError(t, err)
	require.NotEmpty(t, saved)
	for _, id := range saved {
		_, err := s.Load(ctx, id)
		require.NoError(t, err, "saved between bites")
	}
	require.Positive(t, res.Deleted)
	for g, n := range groups() {
		require.GreaterOrEqual(t, n, min(keep, before[g]), "%s keeps its newest %d", g, keep)
	}
	requireFigures(t, s)
	// without saves any more, a run finishes what the saves left, and then nothing is left
	saving = false
	_, err = s.Prune(ctx, store.PruneRequest{KeepLast: keep})
	require.NoError(t, err)
	again, err := s.Prune(ctx, store.PruneRequest{KeepLast: keep})
	require.NoError(t, err)
	require.Zero(t, again.Deleted)
	for g, n := range groups() {
		want := keep
		if strings.HasPrefix(g, "wf-03/") { // keepFirst: its first checkpoint stays too
			want++
		}
		require.Equal(t, min(want, max(n, before[g])), n, g)
	}
	requireFigures(t, s)
}

// testDeleteCompleteInBites: deleting a workflow and completing one without preserve take many
// bites and report exact counts; a save between two bites of a completion is kept (the
// workflow is resumable again with it) while the checkpoints it had at completion go.
func testDeleteCompleteInBites(t *testing.T, h *harness) {
	var mu sync.Mutex
	bites := 0
	var s store.Backend
	var hook func()
	s = h.db(t, withBites(&bites, &mu, func(k int) {
		if hook != nil {
			f := hook
			hook = nil
			f()
		}
	}))
	ctx := context.Background()
	var pruned []string
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		mu.Lock()
		defer mu.Unlock()
		if reason == "complete" {
			pruned = append(pruned, ids...)
		}
	})
	const n = 3*store.BiteUnits + 17
	for _, wf := range []string{"del", "done", "again"} {
		for i := 0; i < n; i++ {
			mustSave(t, s, store.SaveRequest{WorkflowID: wf, Namespace: []string{"", "x"}[i%2], State: []byte(fmt.Sprintf(`{"%s":%d}`, wf, i)),
				StateType: store.StateJSON})
		}
		_, err := s.PutWrites(ctx, wf, "", mustSave(t, s, store.SaveRequest{WorkflowID: wf}).CheckpointID,
			[]store.Write{{TaskID: "t", Channel: "c", Value: []byte(`1`)}})
		require.NoError(t, err)
	}
	mu.Lock()
	before := bites
	mu.Unlock()
	got, err := s.DeleteWorkflow(ctx, "del")
	require.NoError(t, err)
	require.Equal(t, n+1, got)
	mu.Lock()
	require.GreaterOrEqual(t, bites-before, 3)
	mu.Unlock()
	_, err = s.Workflow(ctx, "del")
	require.ErrorIs(t, err, store.ErrNotFound)
	requireFigures(t, s)

	got, err = s.Complete(ctx, "done", false)
	require.NoError(t, err)
	require.Equal(t, n+1, got)
	mu.Lock()
	require.Len(t, pruned, n+1)
	mu.Unlock()
	info, err := s.Workflow(ctx, "done")
	require.NoError(t, err)
	require.True(t, info.Completed)
	require.Zero(t, info.Count)
	requireFigures(t, s)

	var late store.SaveResult
	hook = func() {
		late = mustSave(t, s, store.SaveRequest{WorkflowID: "again", State: []byte(`"late"`), StateType: store.StateJSON})
	}
	got, err = s.Complete(ctx, "again", false)
	require.NoError(t, err)
	require.Equal(t, n+1, got, "the checkpoints it had at completion")
	require.NotEmpty(t, late.CheckpointID)
	info, err = s.Workflow(ctx, "again")
	require.NoError(t, err)
	require.False(t, info.Completed, "saved to after completion")
	require.True(t, info.Resumable)
	require.Equal(t, 1, info.Count)
	require.Equal(t, late.CheckpointID, info.Latest.CheckpointID)
	requireFigures(t, s)
}

// testExpireIdleInBites: many idle workflows expire in bites; one saved to between two bites is
// kept, whole if its turn had not come, or with what is left of it.
func testExpireIdleInBites(t *testing.T, h *harness) {
	var mu sync.Mutex
	bites := 0
	clock := NewClock()
	var s store.Backend
	var hook func()
	s = h.db(t, withClock(clock), withRetention(store.Retention{IdleTTLSeconds: 60}), withBites(&bites, &mu, func(int) {
		if hook != nil {
			f := hook
			hook = nil
			f()
		}
	}))
	ctx := context.Background()
	for w := 0; w < 40; w++ {
		for i := 0; i < 9; i++ {
			mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%02d", w)})
		}
	}
	clock.Advance(time.Hour)
	hook = func() { mustSave(t, s, store.SaveRequest{WorkflowID: "wf-39", CheckpointID: "late"}) }
	out, err := s.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Len(t, out, 39)
	require.NotContains(t, out, "wf-39")
	for wf, ids := range out {
		require.Len(t, ids, 9, wf)
	}
	mu.Lock()
	require.Greater(t, bites, 1)
	mu.Unlock()
	wfs, err := store.AllWorkflows(ctx, s, false)
	require.NoError(t, err)
	require.Len(t, wfs, 1)
	require.Equal(t, "wf-39", wfs[0].WorkflowID)
	require.Equal(t, "late", wfs[0].Latest.CheckpointID)
	requireFigures(t, s)
}

// testImportInBites: a large archive imports in many bites with exact counts; a conflict at its
// end, or the caller giving up part-way, leaves nothing imported (what earlier bites wrote is
// deleted again, and a workflow the import created); importing again after a partial import
// skips what is there and writes the rest.
func testImportInBites(t *testing.T, h *harness) {
	var mu sync.Mutex
	bites := 0
	src := h.db(t)
	ctx := context.Background()
	const n = 3*store.BiteUnits + 5
	for i := 0; i < n; i++ {
		mustSave(t, src, store.SaveRequest{WorkflowID: "big", CheckpointID: fmt.Sprintf("b-%04d", i), Namespace: []string{"", "ns"}[i%2],
			State: []byte(fmt.Sprintf(`{"i":%d}`, i)), StateType: store.StateJSON})
	}
	rec, cps := exportAll(t, src, "big")

	var hook func(int)
	dst := h.db(t, withBites(&bites, &mu, func(k int) {
		if hook != nil {
			hook(k)
		}
	}))
	res, err := dst.Import(ctx, rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, n, res.Imported)
	require.True(t, res.CreatedWorkflow)
	mu.Lock()
	require.GreaterOrEqual(t, bites, 3)
	mu.Unlock()
	requireFigures(t, dst)
	res, err = dst.Import(ctx, rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, n, res.Skipped)
	require.Zero(t, res.Imported)

	// a conflict at the end: nothing stays
	other := h.db(t, withBites(&bites, &mu, nil))
	bad := slices.Clone(cps)
	mustSave(t, other, store.SaveRequest{WorkflowID: "big", CheckpointID: bad[n-1].CheckpointID, State: []byte(`"mine"`),
		StateType: store.StateJSON})
	_, err = other.Import(ctx, rec, seqOf(bad), store.ImportOptions{})
	require.ErrorIs(t, err, store.ErrConflict)
	info, err := other.Workflow(ctx, "big")
	require.NoError(t, err)
	require.Equal(t, 1, info.Count, "only its own checkpoint")
	requireFigures(t, other)

	// the caller gives up after the second bite: nothing stays, not even the workflow
	third := h.db(t, withBites(&bites, &mu, func(k int) {
		if hook != nil {
			hook(k)
		}
	}))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	calls := 0
	hook = func(int) {
		calls++
		if calls == 2 {
			cancel()
		}
	}
	_, err = third.Import(cctx, rec, seqOf(cps), store.ImportOptions{})
	require.ErrorIs(t, err, context.Canceled)
	hook = nil
	_, err = third.Workflow(ctx, "big")
	require.ErrorIs(t, err, store.ErrNotFound)
	requireFigures(t, third)

	// a partial import (a crash after some bites, as a prefix of the archive) completes on rerun
	res, err = third.Import(ctx, rec, seqOf(cps[:150]), store.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, 150, res.Imported)
	res, err = third.Import(ctx, rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, 150, res.Skipped)
	require.Equal(t, n-150, res.Imported)
	require.Zero(t, res.Renumbered)
	requireFigures(t, third)
	assert.Equal(t, exportedStates(t, src, "big"), exportedStates(t, third, "big"))
}

func exportedStates(t *testing.T, s store.Backend, wf string) []string {
	_, cps := exportAll(t, s, wf)
	var out []string
	for _, cp := range cps {
		out = append(out, fmt.Sprintf("%s %d %s %s", cp.CheckpointID, cp.Seq, cp.Namespace, cp.State))
	}
	return out
}

// testRetentionSweep: a save's retention deletes at most BiteUnits checkpoints in the save's
// transaction; a sweep in bites deletes the rest soon after.
func testRetentionSweep(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	const n = 2*store.BiteUnits + 40
	for i := 0; i < n; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: "wf"})
	}
	var mu sync.Mutex
	var swept int
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, "retention", reason)
		swept += len(ids)
	})
	_, err := s.Configure(ctx, "wf", &store.Retention{KeepLast: 5})
	require.NoError(t, err)
	r := mustSave(t, s, store.SaveRequest{WorkflowID: "wf"})
	require.Len(t, r.Pruned, store.BiteUnits, "the save's own share")
	require.Eventually(t, func() bool {
		info, err := s.Workflow(ctx, "wf")
		require.NoError(t, err)
		return info.Count == 5
	}, 30*time.Second, 10*time.Millisecond, "the sweep deletes the rest")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return swept == n+1-5
	}, 10*time.Second, 10*time.Millisecond)
	requireFigures(t, s)
}

// testLGThreadPages: the LangGraph thread listing pages through the kept list of threads, in the
// order and with the figures of LGThreads, and follows puts, writes, copies, prunes and
// deletions.
func testLGThreadPages(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	all := func() []store.LGThread {
		t.Helper()
		var out []store.LGThread
		cursor := ""
		for {
			p, err := s.ListLGThreads(ctx, 3, cursor)
			require.NoError(t, err)
			out = append(out, p.Threads...)
			if p.Cursor == "" {
				require.Equal(t, len(out), p.Total)
				return out
			}
			require.Len(t, p.Threads, 3)
			cursor = p.Cursor
		}
	}
	same := func() {
		t.Helper()
		want, err := s.LGThreads(ctx)
		require.NoError(t, err)
		got := all()
		require.Equal(t, len(want), len(got))
		for i := range want {
			require.Equal(t, want[i], got[i], i)
		}
		bad, err := s.CheckFigures(ctx)
		require.NoError(t, err)
		require.Empty(t, bad)
	}
	same()
	for i := 0; i < 8; i++ {
		th := fmt.Sprintf("t-%d", i)
		PutLG(t, s, th, "", "1f0-a", "", map[string]any{"m": 1}, map[string]string{"m": `["hi"]`}, `{"source":"input","step":-1}`)
		clock.Advance(time.Minute)
		PutLG(t, s, th, "sub", "1f0-b", "", map[string]any{"m": 2}, map[string]string{"m": `["a","b"]`}, `{"source":"loop","step":0}`)
		clock.Advance(time.Minute)
		PutLGWrites(t, s, th, "", "1f0-a", "task", "", "m", `"w"`)
	}
	PutLGWrites(t, s, "t-writes-only", "", "1f0-x", "task-1", "", "m", `"w"`)
	same()
	PutLG(t, s, "t-2", "", "1f0-c", "1f0-a", map[string]any{"m": 3}, map[string]string{"m": `[]`}, "") // t-2 is the newest now
	got := all()
	require.Equal(t, "t-2", got[0].ThreadID)
	require.Equal(t, "t-writes-only", got[len(got)-1].ThreadID, "no checkpoint: last")
	require.True(t, got[len(got)-1].UpdatedAt.IsZero())
	same()
	_, err := s.LGCopyThread(ctx, "t-1", "copy")
	require.NoError(t, err)
	same()
	_, err = s.LGPrune(ctx, []string{"t-2"}, "keep_latest")
	require.NoError(t, err)
	same()
	n, err := s.LGDeleteThread(ctx, "t-3")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = s.LGDeleteThread(ctx, "t-writes-only")
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = s.LGDeleteForRuns(ctx, []string{"nope"})
	require.NoError(t, err)
	same()
	for _, th := range all() {
		require.NotEqual(t, "t-3", th.ThreadID)
		require.NotEqual(t, "t-writes-only", th.ThreadID)
	}
	_, err = s.ListLGThreads(ctx, 0, "")
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "limit", ie.Field)
	_, err = s.ListLGThreads(ctx, 5, "nope")
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "cursor", ie.Field)
}
