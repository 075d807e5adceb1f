package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func init() {
	add(
		testCase{"EnqueueKeepsOrder", testEnqueueKeepsOrder},
		testCase{"CloseDrainsQueue", testCloseDrainsQueue},
		testCase{"TwoBackendsOneDatabase", testTwoBackendsOneDatabase},
		testCase{"ConcurrentReads", testConcurrentReads},
		testCase{"MigrateOldest", testMigrateOldest},
	)
}

// testEnqueueKeepsOrder: saves of many goroutines commit in Enqueue order per workflow, and a
// conflicting or invalid one among them disturbs none of the others.
func testEnqueueKeepsOrder(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	const workers, per = 8, 60
	pend := make([][]*store.Pending, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				// every 20th save conflicts / is invalid: it must not disturb the others
				req := store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", w), CheckpointID: fmt.Sprintf("c-%d-%d", w, i),
					State: []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)), Step: int64(i)}
				if i%20 == 19 {
					req.CheckpointID = fmt.Sprintf("c-%d-%d", w, i-1) // conflict: same id, other content
				}
				if i%20 == 10 {
					req.Phase = "bogus"
				}
				pend[w] = append(pend[w], s.Enqueue(req))
			}
		}(w)
	}
	wg.Wait()
	for w := 0; w < workers; w++ {
		seq := int64(0)
		for i, p := range pend[w] {
			res, err := p.Wait(ctx)
			switch i % 20 {
			case 19:
				require.ErrorIs(t, err, store.ErrConflict)
				continue
			case 10:
				var ie *store.InvalidError
				require.ErrorAs(t, err, &ie)
				continue
			}
			require.NoError(t, err)
			seq++
			require.Equal(t, seq, res.Seq, "workflow %d save %d", w, i)
		}
		lst, err := s.List(ctx, store.ListFilter{WorkflowID: fmt.Sprintf("wf-%d", w), Limit: 1000})
		require.NoError(t, err)
		require.Len(t, lst, int(seq))
		for j, sm := range lst { // newest first: steps descending
			if j > 0 {
				require.Less(t, sm.Step, lst[j-1].Step)
			}
		}
	}
}

// testCloseDrainsQueue: Close answers every accepted save, committed; later saves are refused.
func testCloseDrainsQueue(t *testing.T, h *harness) {
	s := h.db(t)
	var pend []*store.Pending
	for i := 0; i < 300; i++ {
		pend = append(pend, s.Enqueue(store.SaveRequest{WorkflowID: fmt.Sprintf("w%d", i%3), State: []byte(fmt.Sprintf(`{"i":%d}`, i))}))
	}
	require.NoError(t, s.Close())
	for _, p := range pend {
		select {
		case <-p.Done():
		default:
			t.Fatal("Close returned before a save was answered")
		}
		_, err := p.Wait(context.Background())
		require.NoError(t, err)
	}
	_, err := s.Enqueue(store.SaveRequest{WorkflowID: "w"}).Wait(context.Background())
	require.ErrorIs(t, err, store.ErrClosed)
	st, err := h.reopen(t, s).Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, 300, st.Checkpoints)
}

// testTwoBackendsOneDatabase: two backends on one database (two ckptd processes) save, read,
// prune and list at once; each workflow's seqs still follow save order.
func testTwoBackendsOneDatabase(t *testing.T, h *harness) {
	ctx := context.Background()
	first := h.db(t, func(o *Options) { o.Durability = store.DurabilityNormal })
	stores := []store.Backend{first, h.reopen(t, first, func(o *Options) { o.Durability = store.DurabilityNormal })}
	const per = 100
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for si, s := range stores {
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func(s store.Backend, wf string) {
				defer wg.Done()
				for i := 0; i < per; i++ {
					res, err := s.Save(ctx, store.SaveRequest{WorkflowID: wf, State: []byte(fmt.Sprintf(`{"i":%d,"pad":"%0200d"}`, i, i))})
					if err != nil {
						errs <- err
						return
					}
					if res.Seq != int64(i+1) {
						errs <- fmt.Errorf("%s: seq %d, want %d", wf, res.Seq, i+1)
					}
					if i%10 == 0 {
						if _, err := s.LoadLatest(ctx, wf, ""); err != nil {
							errs <- err
						}
						if _, err := s.List(ctx, store.ListFilter{Limit: 5}); err != nil {
							errs <- err
						}
					}
				}
			}(s, fmt.Sprintf("store%d-wf%d", si, g))
		}
	}
	// both prune concurrently too
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			if _, err := stores[i%2].Prune(ctx, store.PruneRequest{KeepLast: 50}); err != nil {
				errs <- err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, s := range stores {
		wfs, err := store.AllWorkflows(ctx, s, false)
		require.NoError(t, err)
		require.Len(t, wfs, 6)
	}
}

// testConcurrentReads: many first-time reads at once, of every kind, while saves go on.
func testConcurrentReads(t *testing.T, h *harness) {
	s := h.db(t)
	for i := 0; i < 8; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", i), CheckpointID: fmt.Sprintf("c-%d", i),
			State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var err error
			switch g % 5 {
			case 0:
				_, err = s.Load(ctx, fmt.Sprintf("c-%d", g%8))
			case 1:
				_, err = s.LoadLatest(ctx, fmt.Sprintf("wf-%d", g%8), "")
			case 2:
				_, err = s.List(ctx, store.ListFilter{WorkflowID: fmt.Sprintf("wf-%d", g%8), Limit: g})
			case 3:
				_, err = store.AllWorkflows(ctx, s, g%2 == 0)
			case 4:
				_, err = s.Save(ctx, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", g%8), State: []byte(`{}`)})
			}
			errs <- err
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// testMigrateOldest: a database of the oldest schema the backend reads, holding
// OldestCheckpoints, is migrated: every checkpoint loads intact, repeated saves are recognised,
// the metadata index works, and everything added since works on it.
func testMigrateOldest(t *testing.T, h *harness) {
	ctx := context.Background()
	s := h.db(t, func(o *Options) { o.Oldest = true }, withRetention(store.Retention{KeepLast: 100}))
	want := OldestCheckpoints()
	for _, req := range want {
		cp, err := s.Load(ctx, req.CheckpointID)
		require.NoError(t, err, req.CheckpointID)
		require.Equal(t, req.State, cp.State)
		require.Equal(t, req.StateType, cp.StateType)
		require.Equal(t, req.WorkflowID, cp.WorkflowID)
		require.Equal(t, req.Namespace, cp.Namespace)
		require.Equal(t, req.Phase, cp.Phase)
		require.Equal(t, req.Error, cp.Error)
		require.JSONEq(t, string(req.Metadata), string(cp.Metadata))
		require.Empty(t, cp.PendingWrites)
		// idempotent re-save of the same content is recognised
		res, err := s.Save(ctx, req)
		require.NoError(t, err)
		require.True(t, res.Existing, req.CheckpointID)
		require.Equal(t, cp.Seq, res.Seq)
	}
	lst, err := s.List(ctx, store.ListFilter{Metadata: map[string]json.RawMessage{"source": json.RawMessage(`"loop"`)}})
	require.NoError(t, err)
	require.Len(t, lst, len(want))
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, bad)
	requireFigures(t, s) // counted by the migration

	// later features work on the migrated database; sequences continue
	r := mustSave(t, s, store.SaveRequest{WorkflowID: "fixture-wf-0", State: []byte(`{}`)})
	require.Equal(t, int64(4), r.Seq)
	_, err = s.PutWrites(ctx, "fixture-wf-0", "", r.CheckpointID, []store.Write{{TaskID: "t", Channel: "c", Value: []byte(`1`)}})
	require.NoError(t, err)
	_, err = s.Configure(ctx, "fixture-wf-1", &store.Retention{KeepLast: 1})
	require.NoError(t, err)
	r = mustSave(t, s, store.SaveRequest{WorkflowID: "fixture-wf-1"})
	require.Equal(t, []string{"fixture-ckpt-1", "fixture-ckpt-3", "fixture-ckpt-5"}, r.Pruned)
	ref, err := s.CheckpointManifestRef(ctx, "fixture-ckpt-0")
	require.NoError(t, err)
	require.False(t, ref.HasManifest)
	saveWithRecord(t, s, "fixture-wf-0", "with-sources", newTree(3).record("/src"))
	requireRecord(t, s, "with-sources", newTree(3).record("/src"))
	PutLG(t, s, "thread", "", "c1", "", map[string]any{"a": 1}, map[string]string{"a": `"v"`}, "")
	got, err := s.LGGet(ctx, "thread", "", "")
	require.NoError(t, err)
	require.Equal(t, "c1", got.CheckpointID)
	requireFigures(t, s)
}
