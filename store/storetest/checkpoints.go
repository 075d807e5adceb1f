package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

func init() {
	add(
		testCase{"SaveLoadRoundtrip", testSaveLoadRoundtrip},
		testCase{"CompressionThreshold", testCompressionThreshold},
		testCase{"Dedup", testDedup},
		testCase{"IdempotentAndConflict", testIdempotentAndConflict},
		testCase{"SeqMonotonic", testSeqMonotonic},
		testCase{"InvalidRequests", testInvalidRequests},
		testCase{"NotFound", testNotFound},
		testCase{"Corruption", testCorruption},
		testCase{"CorruptErrorNamesWorkflow", testCorruptErrorNamesWorkflow},
		testCase{"SaveCheck", testSaveCheck},
		testCase{"RetentionInSave", testRetentionInSave},
		testCase{"Prune", testPrune},
		testCase{"CompleteAndWorkflows", testCompleteAndWorkflows},
		testCase{"IdleExpiry", testIdleExpiry},
		testCase{"PutWrites", testPutWrites},
		testCase{"ListFilters", testListFilters},
		testCase{"Inspect", testInspect},
		testCase{"WorkflowAndUsage", testWorkflowAndUsage},
		testCase{"Closed", testClosed},
	)
}

func testSaveLoadRoundtrip(t *testing.T, h *harness) {
	rng := rand.New(rand.NewPCG(1, 2))
	big := CheckpointJSON(rng, 200<<10)
	cases := []struct {
		name     string
		req      store.SaveRequest
		wantType store.StateType
		compress bool
	}{
		{"json small", store.SaveRequest{State: []byte(`{"a":1}`), StateType: store.StateJSON}, store.StateJSON, false},
		{"json default type", store.SaveRequest{State: []byte(`[1,2]`)}, store.StateJSON, false},
		{"json big compressed", store.SaveRequest{State: big, StateType: store.StateJSON}, store.StateJSON, true},
		{"bytes", store.SaveRequest{State: []byte{0, 1, 2, 255}, StateType: store.StateBytes}, store.StateBytes, false},
		{"bytes empty", store.SaveRequest{State: []byte{}, StateType: store.StateBytes}, store.StateBytes, false},
		{"random bytes incompressible", store.SaveRequest{State: RandBytes(rng, 100<<10), StateType: store.StateBytes}, store.StateBytes, false},
		{"none", store.SaveRequest{}, store.StateNone, false},
		{"none explicit", store.SaveRequest{StateType: store.StateNone}, store.StateNone, false},
	}
	s := h.db(t)
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.WorkflowID = "wf-" + tc.name
			req.Namespace = "ns"
			req.ParentID = "parent"
			req.Phase = store.PhaseFailed
			req.Step = int64(i)
			req.StepName = "step"
			req.Error = &store.StepError{Message: "boom", Retryable: true}
			req.CompletedTasks = json.RawMessage(`[{"id":"a"}, {"id":"b"}]`)
			req.PendingTasks = json.RawMessage(` [ "x" ] `)
			req.WorkflowHash = "sha256:abc"
			req.Metadata = json.RawMessage(`{"source": "loop", "n": 1}`)
			res := mustSave(t, s, req)
			require.NotEmpty(t, res.CheckpointID)
			require.Equal(t, int64(1), res.Seq)
			require.Equal(t, int64(len(req.State)), res.SizeBytes)
			require.NoError(t, s.Compact(ctx)) // a backend may compress after the save
			cp, err := s.Load(ctx, res.CheckpointID)
			require.NoError(t, err)
			switch {
			case tc.compress:
				require.Less(t, cp.StoredBytes, cp.SizeBytes)
			case !chunk.Inline(len(req.State)):
				// stored as chunks, raw: the chunks plus the value's runs and index
				require.GreaterOrEqual(t, cp.StoredBytes, cp.SizeBytes)
				require.LessOrEqual(t, cp.StoredBytes, cp.SizeBytes+cp.SizeBytes/20)
			default:
				require.Equal(t, cp.SizeBytes, cp.StoredBytes)
			}
			require.Equal(t, tc.wantType, cp.StateType)
			if tc.wantType == store.StateNone {
				require.Nil(t, cp.State)
				require.Empty(t, cp.SHA256)
			} else {
				require.True(t, bytes.Equal(req.State, cp.State))
				require.Equal(t, res.SHA256, cp.SHA256)
			}
			require.Equal(t, res.CheckpointID, cp.CheckpointID)
			require.Equal(t, req.WorkflowID, cp.WorkflowID)
			require.Equal(t, "ns", cp.Namespace)
			require.Equal(t, "parent", cp.ParentID)
			require.Equal(t, store.PhaseFailed, cp.Phase)
			require.Equal(t, int64(i), cp.Step)
			require.Equal(t, "step", cp.StepName)
			require.Equal(t, &store.StepError{Message: "boom", Retryable: true}, cp.Error)
			require.Equal(t, "sha256:abc", cp.WorkflowHash)
			require.JSONEq(t, `{"source":"loop","n":1}`, string(cp.Metadata))
			require.Equal(t, `[{"id":"a"}, {"id":"b"}]`, string(cp.CompletedTasks))
			require.Equal(t, ` [ "x" ] `, string(cp.PendingTasks))
			require.Equal(t, 2, cp.CompletedTaskCount)
			require.Equal(t, 1, cp.PendingTaskCount)
			require.Equal(t, res.CreatedAt, cp.CreatedAt)
			require.Equal(t, store.FormatVersion, cp.FormatVersion)

			lr, err := s.LoadLatest(ctx, req.WorkflowID, "ns")
			require.NoError(t, err)
			require.Equal(t, res.CheckpointID, lr.CheckpointID)
			require.Empty(t, lr.RecoveredFrom)
		})
	}
}

func testCompressionThreshold(t *testing.T, h *harness) {
	rng := rand.New(rand.NewPCG(3, 4))
	state := CheckpointJSON(rng, 50<<10)
	for _, tc := range []struct {
		name       string
		threshold  int
		compressed bool
	}{
		{"default", 0, true},
		{"above", 100 << 10, false},
		{"never", -1, false},
		{"tiny", 16, true},
	} {
		for _, inline := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/inline=%v", tc.name, inline), func(t *testing.T) {
				s := h.db(t, func(o *Options) { o.CompressThreshold, o.CompressInline = tc.threshold, inline })
				res := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: state})
				if inline {
					require.Equal(t, tc.compressed, res.StoredBytes < res.SizeBytes, "stored %d of %d", res.StoredBytes, res.SizeBytes)
				}
				require.NoError(t, s.Compact(context.Background()))
				cp, err := s.Load(context.Background(), res.CheckpointID)
				require.NoError(t, err)
				require.Equal(t, state, cp.State)
				require.Equal(t, tc.compressed, cp.StoredBytes < cp.SizeBytes, "stored %d of %d", cp.StoredBytes, cp.SizeBytes)
			})
		}
	}
}

func testDedup(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	state := CheckpointJSON(rand.New(rand.NewPCG(5, 6)), 20<<10)
	a := mustSave(t, s, store.SaveRequest{WorkflowID: "a", State: state})
	b := mustSave(t, s, store.SaveRequest{WorkflowID: "b", State: state})
	require.False(t, a.Deduplicated)
	require.True(t, b.Deduplicated)
	require.Equal(t, a.SHA256, b.SHA256)
	require.Equal(t, a.StoredBytes, b.StoredBytes)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.States)
	require.Equal(t, 2, st.Checkpoints)
	// deleting one keeps the shared blob, deleting both removes it
	n, err := s.Delete(ctx, a.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	cp, err := s.Load(ctx, b.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, state, cp.State)
	_, err = s.Delete(ctx, b.CheckpointID)
	require.NoError(t, err)
	st, err = s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, st.States)
	require.Equal(t, int64(0), st.StatesStoredBytes)
}

func testIdempotentAndConflict(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	req := store.SaveRequest{WorkflowID: "w", CheckpointID: "c1", State: []byte(`{"x":1}`), Metadata: json.RawMessage(`{"a":1,"b":"x"}`)}
	first := mustSave(t, s, req)
	require.False(t, first.Existing)
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"x":2}`)})

	again := req
	again.Metadata = json.RawMessage(`{ "b" : "x", "a" : 1.0 }`) // same content, other spelling
	rep := mustSave(t, s, again)
	require.True(t, rep.Existing)
	require.Equal(t, first.Seq, rep.Seq)
	require.Equal(t, first.CreatedAt, rep.CreatedAt)
	require.Equal(t, first.SHA256, rep.SHA256)

	for name, mod := range map[string]func(*store.SaveRequest){
		"state":    func(r *store.SaveRequest) { r.State = []byte(`{"x":3}`) },
		"step":     func(r *store.SaveRequest) { r.Step = 5 },
		"metadata": func(r *store.SaveRequest) { r.Metadata = json.RawMessage(`{"a":"1","b":"x"}`) },
		"phase":    func(r *store.SaveRequest) { r.Phase = store.PhaseFailed },
		"workflow": func(r *store.SaveRequest) { r.WorkflowID = "other" },
	} {
		t.Run(name, func(t *testing.T) {
			r := req
			mod(&r)
			_, err := s.Save(ctx, r)
			require.ErrorIs(t, err, store.ErrConflict)
			require.Contains(t, err.Error(), "c1")
		})
	}
	// the workflow "other" got no row/seq from the failed save
	lst, err := s.List(ctx, store.ListFilter{WorkflowID: "other"})
	require.NoError(t, err)
	require.Empty(t, lst)
}

func testSeqMonotonic(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	var last store.SaveResult
	for i := 0; i < 5; i++ {
		ns := ""
		if i%2 == 1 {
			ns = "sub"
		}
		r := mustSave(t, s, store.SaveRequest{WorkflowID: "w", Namespace: ns})
		require.Equal(t, int64(i+1), r.Seq)
		last = r
	}
	_, err := s.Delete(ctx, last.CheckpointID)
	require.NoError(t, err)
	r := mustSave(t, s, store.SaveRequest{WorkflowID: "w"})
	require.Equal(t, int64(6), r.Seq, "seq never reused after delete")
	// another workflow has its own sequence
	require.Equal(t, int64(1), mustSave(t, s, store.SaveRequest{WorkflowID: "w2"}).Seq)
}

func testInvalidRequests(t *testing.T, h *harness) {
	s := h.db(t, func(o *Options) { o.MaxStateBytes = 1000 })
	ctx := context.Background()
	long := string(bytes.Repeat([]byte("x"), 600))
	for _, tc := range []struct {
		name  string
		req   store.SaveRequest
		field string
	}{
		{"no workflow", store.SaveRequest{}, "workflowId"},
		{"long workflow", store.SaveRequest{WorkflowID: long}, "workflowId"},
		{"long id", store.SaveRequest{WorkflowID: "w", CheckpointID: long}, "checkpointId"},
		{"phase", store.SaveRequest{WorkflowID: "w", Phase: "done"}, "phase"},
		{"step", store.SaveRequest{WorkflowID: "w", Step: -1}, "step"},
		{"metadata array", store.SaveRequest{WorkflowID: "w", Metadata: json.RawMessage(`[1]`)}, "metadata"},
		{"metadata string", store.SaveRequest{WorkflowID: "w", Metadata: json.RawMessage(`"x"`)}, "metadata"},
		{"metadata broken", store.SaveRequest{WorkflowID: "w", Metadata: json.RawMessage(`{"a":`)}, "metadata"},
		{"tasks object", store.SaveRequest{WorkflowID: "w", PendingTasks: json.RawMessage(`{}`)}, "pendingTasks"},
		{"tasks unterminated", store.SaveRequest{WorkflowID: "w", CompletedTasks: json.RawMessage(`[1,`)}, "completedTasks"},
		{"state type", store.SaveRequest{WorkflowID: "w", State: []byte("x"), StateType: "xml"}, "stateType"},
		{"none with bytes", store.SaveRequest{WorkflowID: "w", State: []byte("x"), StateType: store.StateNone}, "stateType"},
		{"empty json", store.SaveRequest{WorkflowID: "w", State: []byte(" "), StateType: store.StateJSON}, "state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Save(ctx, tc.req)
			var ie *store.InvalidError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, tc.field, ie.Field)
		})
	}
	_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: make([]byte, 1001), StateType: store.StateBytes})
	require.ErrorIs(t, err, store.ErrTooLarge)
	var tl *store.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, int64(1000), tl.Limit)
	require.Equal(t, int64(1001), tl.Size)
	require.Contains(t, err.Error(), "1000")
	require.Contains(t, err.Error(), "1001")
	// nothing was written by the failures
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Checkpoints)
	require.Zero(t, st.Workflows)
}

func testNotFound(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	_, err := s.Load(ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.LoadLatest(ctx, "nope", "")
	require.ErrorIs(t, err, store.ErrNotFound)
	n, err := s.Delete(ctx, "nope")
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = s.DeleteWorkflow(ctx, "nope")
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = s.Complete(ctx, "nope", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.PutWrites(ctx, "w", "", "nope", []store.Write{{TaskID: "t", Channel: "c"}})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.List(ctx, store.ListFilter{Before: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
	// namespace matters for LoadLatest
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", Namespace: "a"})
	_, err = s.LoadLatest(ctx, "w", "")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testCorruption: a state that does not decode, one whose bytes decode to something else and
// one that is missing are each reported as corrupt by Load and Verify; a latest-load falls back
// past them, and names them all when none is intact. The states are stored whole (at most
// chunk.InlineMax bytes, compressed); testChunkCorruption damages chunked ones.
func testCorruption(t *testing.T, h *harness) {
	s := h.db(t, func(o *Options) { o.CompressThreshold = 1 << 10 })
	c := corrupter(t, s)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	var ids []string
	for i := 0; i < 4; i++ {
		state := CheckpointJSON(rng, 3<<10)
		require.True(t, chunk.Inline(len(state)))
		ids = append(ids, mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: state}).CheckpointID)
	}
	require.NoError(t, s.Compact(ctx))
	// 3: compressed blob with garbage (does not decompress); 2: a valid zstd frame of other bytes
	c.SetStateBytes(t, ids[3], []byte("garbage that is not zstd"))
	cp2, err := s.Load(ctx, ids[2])
	require.NoError(t, err)
	require.Less(t, cp2.StoredBytes, cp2.SizeBytes, "stored compressed")
	flipped := bytes.Clone(cp2.State)
	flipped[100] ^= 1
	codec, err := store.NewCodec(1 << 20)
	require.NoError(t, err)
	defer codec.Close()
	compressed, enc := codec.Compress(flipped, 0)
	require.Equal(t, store.EncZstd, enc)
	c.SetStateBytes(t, ids[2], compressed)

	for _, id := range ids[2:] {
		_, err := s.Load(ctx, id)
		var ce *store.CorruptError
		require.ErrorAs(t, err, &ce, id)
		require.Equal(t, id, ce.CheckpointID)
	}
	lr, err := s.LoadLatest(ctx, "w", "")
	require.NoError(t, err)
	require.Equal(t, ids[1], lr.CheckpointID)
	require.Len(t, lr.RecoveredFrom, 2)
	require.Equal(t, ids[3], lr.RecoveredFrom[0].CheckpointID)
	require.Contains(t, lr.RecoveredFrom[0].Reason, "decode")
	require.Equal(t, ids[2], lr.RecoveredFrom[1].CheckpointID)
	require.Contains(t, lr.RecoveredFrom[1].Reason, "SHA-256")

	var progressed [2]int
	bad, err := s.Verify(ctx, func(done, total int) { progressed = [2]int{done, total} })
	require.NoError(t, err)
	require.Len(t, bad, 2)
	require.Equal(t, [2]int{4, 4}, progressed)

	// a missing state is corruption too
	extra := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"extra":1}`)})
	c.DropState(t, extra.CheckpointID)
	_, err = s.Load(ctx, extra.CheckpointID)
	var missing *store.CorruptError
	require.ErrorAs(t, err, &missing)
	require.Contains(t, missing.Reason, "missing")
	lr, err = s.LoadLatest(ctx, "w", "")
	require.NoError(t, err)
	require.Equal(t, ids[1], lr.CheckpointID)
	require.Len(t, lr.RecoveredFrom, 3)
	bad, err = s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Len(t, bad, 3)
	_, err = s.Delete(ctx, extra.CheckpointID)
	require.NoError(t, err)

	// every checkpoint corrupt: the newest's CorruptError
	c.SetStateBytes(t, ids[1], []byte("x"))
	c.SetStateBytes(t, ids[0], []byte("y"))
	_, err = s.LoadLatest(ctx, "w", "")
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, ids[3], ce.CheckpointID)
	require.False(t, errors.Is(err, store.ErrNotFound))
	// ... naming the older ones too, newest first
	var also []string
	for _, r := range ce.AlsoCorrupt {
		also = append(also, r.CheckpointID)
		require.NotEmpty(t, r.Reason)
	}
	require.Equal(t, []string{ids[2], ids[1], ids[0]}, also)
}

// testCorruptErrorNamesWorkflow: a checkpoint whose state fails its hash, loaded by id, names its
// workflow (the checkpoint/corrupted notification carries it).
func testCorruptErrorNamesWorkflow(t *testing.T, h *harness) {
	s := h.db(t)
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf-x", CheckpointID: "c-1", State: []byte(`{"a":1}`)})
	corrupter(t, s).SetStateBytes(t, "c-1", []byte(`{"a":2}`))
	_, err := s.Load(context.Background(), "c-1")
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, store.CorruptError{CheckpointID: "c-1", WorkflowID: "wf-x", Reason: "state SHA-256 mismatch"}, *ce)
}

// testSaveCheck: SaveRequest.Check runs beside the write; a failing check undoes the save
// alone, also among saves queued together.
func testSaveCheck(t *testing.T, h *harness) {
	ctx := context.Background()
	s := h.db(t)
	bad := &store.InvalidError{Field: "stateType", Reason: "not JSON"}
	rng := rand.New(rand.NewPCG(4, 4))
	state := func() []byte { return CheckpointJSON(rng, 40<<10) }
	slowOK := func() error { time.Sleep(5 * time.Millisecond); return nil }
	slowBad := func() error { time.Sleep(5 * time.Millisecond); return bad }

	// single
	_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: state(), Check: slowBad})
	require.ErrorIs(t, err, bad)
	_, err = s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: state(), Check: func() error { panic("boom") }})
	require.ErrorContains(t, err, "internal error")

	// queued together: the first is slow, three more wait behind it
	p1 := s.Enqueue(store.SaveRequest{WorkflowID: "w", State: state(), Check: slowOK})
	p2 := s.Enqueue(store.SaveRequest{WorkflowID: "w", State: state(), Check: slowBad})
	p3 := s.Enqueue(store.SaveRequest{WorkflowID: "w", State: state(), Check: slowOK})
	r1, err := p1.Wait(ctx)
	require.NoError(t, err)
	_, err = p2.Wait(ctx)
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "stateType", ie.Field)
	r3, err := p3.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, r1.Seq+1, r3.Seq, "the failed save took no seq")

	l, err := s.List(ctx, store.ListFilter{WorkflowID: "w"})
	require.NoError(t, err)
	require.Len(t, l, 2)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.States, "the failed saves stored no state bytes")
}

func testRetentionInSave(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withRetention(store.Retention{KeepLast: 3}), withClock(clock))
	ctx := context.Background()
	var mu sync.Mutex
	var notified []string
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, "retention", reason)
		notified = append(notified, ids...)
	})
	var ids []string
	for i := 0; i < 5; i++ {
		r := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		ids = append(ids, r.CheckpointID)
		if i == 3 {
			require.Equal(t, []string{ids[0]}, r.Pruned)
		}
	}
	// another namespace counts separately
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", Namespace: "sub"})
	lst, err := s.List(ctx, store.ListFilter{WorkflowID: "w", Namespace: strp("")})
	require.NoError(t, err)
	require.Len(t, lst, 3)
	require.Equal(t, ids[4], lst[0].CheckpointID)
	mu.Lock()
	require.Equal(t, []string{ids[0], ids[1]}, notified)
	mu.Unlock()
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.States, "pruned states removed (the sub checkpoint has none)")

	// per-workflow configuration overrides the default
	got, err := s.Configure(ctx, "w", &store.Retention{KeepLast: 0, MaxAgeSeconds: 3600, KeepFirst: true})
	require.NoError(t, err)
	require.Equal(t, store.Retention{MaxAgeSeconds: 3600, KeepFirst: true}, got)
	eff, err := s.Configure(ctx, "w", nil)
	require.NoError(t, err)
	require.Equal(t, got, eff)
	eff, err = s.Configure(ctx, "unknown", nil)
	require.NoError(t, err)
	require.Equal(t, store.Retention{KeepLast: 3}, eff)
	for i := 0; i < 4; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: "w"})
	}
	lst, err = s.List(ctx, store.ListFilter{WorkflowID: "w", Namespace: strp("")})
	require.NoError(t, err)
	require.Len(t, lst, 7, "keepLast 0 = unlimited")
	clock.Advance(2 * time.Hour)
	r := mustSave(t, s, store.SaveRequest{WorkflowID: "w"})
	require.Len(t, r.Pruned, 6, "all older than maxAge except the first (keepFirst)")
	lst, err = s.List(ctx, store.ListFilter{WorkflowID: "w", Namespace: strp("")})
	require.NoError(t, err)
	require.Len(t, lst, 2)
	require.Equal(t, ids[2], lst[1].CheckpointID, "keepFirst keeps the lowest surviving seq")

	_, err = s.Configure(ctx, "w", &store.Retention{KeepLast: -1})
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
}

// testPrune: a dry run reports what a prune deletes without deleting it; the prune deletes
// exactly that, per (workflow, namespace), never the newest.
func testPrune(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 40; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("w%d", i%2), State: RandBytes(rng, 16<<10), StateType: store.StateBytes})
	}
	var mu sync.Mutex
	pruned := map[string]int{}
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, "prune", reason)
		pruned[wf] += len(ids)
	})

	dry, err := s.Prune(ctx, store.PruneRequest{WorkflowID: "w0", KeepLast: 5, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 15, dry.Deleted)
	require.GreaterOrEqual(t, dry.FreedBytes, int64(0))
	lst, err := s.List(ctx, store.ListFilter{WorkflowID: "w0"})
	require.NoError(t, err)
	require.Len(t, lst, 20, "dry run deletes nothing")
	mu.Lock()
	require.Empty(t, pruned)
	mu.Unlock()

	real, err := s.Prune(ctx, store.PruneRequest{WorkflowID: "w0", KeepLast: 5})
	require.NoError(t, err)
	require.Equal(t, dry.Deleted, real.Deleted)
	require.Equal(t, dry.FreedBytes, real.FreedBytes)
	require.Equal(t, dry.IDs, real.IDs)
	mu.Lock()
	require.Equal(t, map[string]int{"w0": 15}, pruned)
	mu.Unlock()
	lst, err = s.List(ctx, store.ListFilter{WorkflowID: "w0"})
	require.NoError(t, err)
	require.Len(t, lst, 5)
	for _, id := range real.IDs["w0"] {
		_, err := s.Load(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}

	// olderThan across all workflows; newest always kept
	clock.Advance(time.Hour)
	res, err := s.Prune(ctx, store.PruneRequest{OlderThanSeconds: 60})
	require.NoError(t, err)
	require.Equal(t, 4+19, res.Deleted)
	wfs, err := store.AllWorkflows(ctx, s, false)
	require.NoError(t, err)
	for _, w := range wfs {
		require.Equal(t, 1, w.Count)
	}
	_, err = s.Prune(ctx, store.PruneRequest{KeepLast: -1})
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
}

func testCompleteAndWorkflows(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	var mu sync.Mutex
	var reasons []string
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		mu.Lock()
		reasons = append(reasons, reason+":"+wf)
		mu.Unlock()
	})
	for _, wf := range []string{"a", "b", "c"} {
		for i := 0; i < 3; i++ {
			mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: []byte(`{"wf":"` + wf + `"}`)})
		}
	}
	_, err := s.Configure(ctx, "empty", &store.Retention{KeepLast: 2})
	require.NoError(t, err)

	n, err := s.Complete(ctx, "a", false)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = s.Complete(ctx, "b", true)
	require.NoError(t, err)
	require.Zero(t, n)
	for wf, want := range map[string]bool{"a": true, "b": true, "c": false, "empty": false, "none": false} {
		got, err := s.IsCompleted(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, want, got, wf)
	}
	mu.Lock()
	require.Equal(t, []string{"complete:a"}, reasons)
	mu.Unlock()

	all, err := store.AllWorkflows(ctx, s, false)
	require.NoError(t, err)
	byID := map[string]store.WorkflowInfo{}
	for _, w := range all {
		byID[w.WorkflowID] = w
	}
	require.Len(t, byID, 4)
	require.Equal(t, store.WorkflowInfo{WorkflowID: "a", Completed: true, UpdatedAt: byID["a"].UpdatedAt}, byID["a"])
	require.Equal(t, 3, byID["b"].Count)
	require.True(t, byID["b"].Completed)
	require.False(t, byID["b"].Resumable)
	require.True(t, byID["c"].Resumable)
	require.Equal(t, int64(3*len(`{"wf":"c"}`)), byID["c"].StoredBytes)
	require.NotNil(t, byID["c"].Latest)
	require.Equal(t, int64(3), byID["c"].Latest.Seq)
	require.Nil(t, byID["empty"].Latest)
	require.False(t, byID["empty"].Resumable)

	res, err := store.AllWorkflows(ctx, s, true)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, "c", res[0].WorkflowID)

	// a later save makes a completed workflow resumable again, seq continues
	r := mustSave(t, s, store.SaveRequest{WorkflowID: "a"})
	require.Equal(t, int64(4), r.Seq)
	done, err := s.IsCompleted(ctx, "a")
	require.NoError(t, err)
	require.False(t, done)
	res, err = store.AllWorkflows(ctx, s, true)
	require.NoError(t, err)
	require.Len(t, res, 2)

	// DeleteWorkflow removes checkpoints and configuration
	n, err = s.DeleteWorkflow(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	_, err = s.LoadLatest(ctx, "c", "")
	require.ErrorIs(t, err, store.ErrNotFound)
	n, err = s.DeleteWorkflow(ctx, "empty")
	require.NoError(t, err)
	require.Zero(t, n)
	eff, err := s.Configure(ctx, "empty", nil)
	require.NoError(t, err)
	require.Equal(t, s.DefaultRetention(), eff)
}

func testIdleExpiry(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock))
	ctx := context.Background()
	var mu sync.Mutex
	var got []string
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, "idle", reason)
		got = append(got, wf)
	})
	mustSave(t, s, store.SaveRequest{WorkflowID: "idle"})
	mustSave(t, s, store.SaveRequest{WorkflowID: "busy"})
	mustSave(t, s, store.SaveRequest{WorkflowID: "forever"})
	_, err := s.Configure(ctx, "idle", &store.Retention{IdleTTLSeconds: 60})
	require.NoError(t, err)
	_, err = s.Configure(ctx, "busy", &store.Retention{IdleTTLSeconds: 60})
	require.NoError(t, err)
	out, err := s.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Empty(t, out)
	clock.Advance(50 * time.Second)
	mustSave(t, s, store.SaveRequest{WorkflowID: "busy"})
	clock.Advance(20 * time.Second)
	out, err = s.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.Len(t, out["idle"], 1)
	mu.Lock()
	require.Equal(t, []string{"idle"}, got)
	mu.Unlock()
	wfs, err := store.AllWorkflows(ctx, s, false)
	require.NoError(t, err)
	require.Len(t, wfs, 2)

	// a default idle TTL, applied at open too
	require.NoError(t, s.Close())
	clock.Advance(time.Hour)
	s2 := h.reopen(t, s, withClock(clock), withRetention(store.Retention{IdleTTLSeconds: 600}))
	wfs, err = store.AllWorkflows(ctx, s2, false)
	require.NoError(t, err)
	require.Empty(t, wfs, "busy expired by its own TTL, forever by the default at open")
}

func testPutWrites(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	cp := mustSave(t, s, store.SaveRequest{WorkflowID: "w", Namespace: "ns", CheckpointID: "c"})
	n, err := s.PutWrites(ctx, "w", "ns", cp.CheckpointID, []store.Write{
		{TaskID: "t2", Idx: 0, Channel: "messages", Value: []byte(`"hello"`), Type: "json"},
		{TaskID: "t1", Idx: 1, Channel: "b", Value: []byte{1, 2, 3}, IsBytes: true, TaskPath: "p"},
		{TaskID: "t1", Idx: 0, Channel: "a", Value: []byte(`1`)},
		{TaskID: "t1", Idx: -1, Channel: "__error__", Value: []byte(`"first"`)},
	})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	// repeats: idx >= 0 ignored, idx < 0 replaced
	n, err = s.PutWrites(ctx, "w", "ns", cp.CheckpointID, []store.Write{
		{TaskID: "t1", Idx: 0, Channel: "a", Value: []byte(`999`)},
		{TaskID: "t1", Idx: -1, Channel: "__error__", Value: []byte(`"second"`)},
		{TaskID: "t3", Idx: 0, Channel: "c"},
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got, err := s.Load(ctx, cp.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, []store.Write{
		{TaskID: "t1", Idx: -1, Channel: "__error__", Value: []byte(`"second"`)},
		{TaskID: "t1", Idx: 0, Channel: "a", Value: []byte(`1`)},
		{TaskID: "t1", Idx: 1, Channel: "b", Value: []byte{1, 2, 3}, IsBytes: true, TaskPath: "p"},
		{TaskID: "t2", Idx: 0, Channel: "messages", Value: []byte(`"hello"`), Type: "json"},
		{TaskID: "t3", Idx: 0, Channel: "c"},
	}, got.PendingWrites)
	lr, err := s.LoadLatest(ctx, "w", "ns")
	require.NoError(t, err)
	require.Len(t, lr.PendingWrites, 5)

	_, err = s.PutWrites(ctx, "other", "ns", cp.CheckpointID, []store.Write{{TaskID: "t", Channel: "c"}})
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.PutWrites(ctx, "w", "ns", cp.CheckpointID, []store.Write{{TaskID: "t"}})
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)

	// writes go with their checkpoint: the same id saved again has none
	_, err = s.Delete(ctx, cp.CheckpointID)
	require.NoError(t, err)
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", Namespace: "ns", CheckpointID: "c"})
	got, err = s.Load(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, got.PendingWrites)
}

func testInspect(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	state := []byte(`{"s": 1}`)
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "a", State: state, StateType: store.StateJSON, PendingTasks: []byte(`[1]`)})
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "b", State: state, StateType: store.StateJSON})
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "n"})
	_, err := s.PutWrites(ctx, "wf", "", "a", []store.Write{{TaskID: "t", Channel: "c", Value: []byte(`1`)}})
	require.NoError(t, err)

	in, err := s.Inspect(ctx, "a")
	require.NoError(t, err)
	assert.Empty(t, in.Corrupt)
	assert.Equal(t, state, in.State)
	assert.Equal(t, "raw", in.Encoding)
	assert.Equal(t, 1, in.SharedWith)
	assert.Len(t, in.PendingWrites, 1)

	in, err = s.Inspect(ctx, "n")
	require.NoError(t, err)
	assert.Equal(t, store.StateNone, in.StateType)
	assert.Empty(t, in.Encoding)

	_, err = s.Inspect(ctx, "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)

	corrupter(t, s).SetStateBytes(t, "a", []byte(`{"s": 2}`))
	in, err = s.Inspect(ctx, "a")
	require.NoError(t, err, "a corrupt checkpoint is still inspected")
	assert.Equal(t, "state SHA-256 mismatch", in.Corrupt)
	assert.Nil(t, in.State)
	assert.Equal(t, "wf", in.WorkflowID)
	assert.Equal(t, `[1]`, string(in.PendingTasks))
	assert.Len(t, in.PendingWrites, 1)

	sums, err := s.Summaries(ctx, []string{"a", "nope", "n"})
	require.NoError(t, err)
	assert.Len(t, sums, 2)
	assert.EqualValues(t, 1, sums["a"].Seq)
}

func testWorkflowAndUsage(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	mustSave(t, s, store.SaveRequest{WorkflowID: "w1", CheckpointID: "a", State: []byte(`{"x":1}`), StateType: store.StateJSON})
	mustSave(t, s, store.SaveRequest{WorkflowID: "w1", CheckpointID: "b", State: []byte(`{"x":1}`), StateType: store.StateJSON})
	mustSave(t, s, store.SaveRequest{WorkflowID: "w2", CheckpointID: "c", State: []byte(`{"y":22}`), StateType: store.StateJSON})
	_, err := s.Complete(ctx, "w2", true)
	require.NoError(t, err)
	_, err = s.Configure(ctx, "w3", &store.Retention{KeepLast: 1}) // a workflow without checkpoints
	require.NoError(t, err)

	w, err := s.Workflow(ctx, "w1")
	require.NoError(t, err)
	assert.Equal(t, 2, w.Count)
	assert.True(t, w.Resumable)
	assert.Equal(t, "b", w.Latest.CheckpointID)
	w, err = s.Workflow(ctx, "w3")
	require.NoError(t, err)
	assert.Equal(t, 0, w.Count)
	assert.Nil(t, w.Latest)
	_, err = s.Workflow(ctx, "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)

	u, err := s.Usage(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 7+7+8, u.StateBytes)
	assert.EqualValues(t, 7+7+8, u.CheckpointStored)
	assert.Equal(t, 1, u.ResumableWorkflow)
	assert.Equal(t, 1, u.CompletedWorkflow)

	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, store.DBStats{Path: st.Path, SizeBytes: st.SizeBytes, Workflows: 3, Checkpoints: 3, States: 2,
		StatesStoredBytes: 7 + 8}, st)
	_, err = s.Health(ctx)
	require.NoError(t, err)
	about := s.About()
	assert.NotEmpty(t, about.Name)
	assert.NotEmpty(t, about.Integrity)
	problems, err := s.IntegrityCheck(ctx)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// testClosed: a closed backend refuses work with ErrClosed; closing twice is harmless.
func testClosed(t *testing.T, h *harness) {
	s := h.db(t)
	mustSave(t, s, store.SaveRequest{WorkflowID: "w"})
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err := s.Save(context.Background(), store.SaveRequest{WorkflowID: "w"})
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Delete(context.Background(), "x")
	require.ErrorIs(t, err, store.ErrClosed)
	p, _ := s.LGPut(store.LGPutRequest{ThreadID: "t", CheckpointID: "c", Type: "json", ChannelVersions: json.RawMessage(`{}`)})
	require.ErrorIs(t, p.Wait(context.Background()), store.ErrClosed)
	// a reopened database has what was saved
	s2 := h.reopen(t, s)
	lr, err := s2.LoadLatest(context.Background(), "w", "")
	require.NoError(t, err)
	require.EqualValues(t, 1, lr.Seq)
}

// --- list -------------------------------------------------------------------------------

type listFixture struct {
	s   store.Backend
	all []store.Summary // in save order
}

// newListFixture saves 60 checkpoints over 3 workflows x 2 namespaces with varied phase/metadata.
func newListFixture(t *testing.T, s store.Backend) *listFixture {
	phases := []store.Phase{store.PhaseBeforeStep, store.PhaseCompleted, store.PhaseFailed, store.PhaseInterrupted}
	for i := 0; i < 60; i++ {
		wf := fmt.Sprintf("wf-%d", i%3)
		ns := ""
		if i%5 == 0 {
			ns = "sub"
		}
		meta := fmt.Sprintf(`{"source":%q,"step":%d,"tag":"t%d"}`, []string{"loop", "input"}[i%2], i%4, i%3)
		mustSave(t, s, store.SaveRequest{WorkflowID: wf, Namespace: ns, Phase: phases[i%4], Step: int64(i),
			Metadata: json.RawMessage(meta), State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	all, err := s.List(context.Background(), store.ListFilter{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, all, 60)
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return &listFixture{s: s, all: all}
}

func metaMatch(sm store.Summary, f map[string]json.RawMessage) bool {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(sm.Metadata, &m)
	for k, v := range f {
		got, ok := m[k]
		if !ok {
			return false
		}
		a, _ := store.CanonicalJSON(got)
		b, _ := store.CanonicalJSON(v)
		if a != b {
			return false
		}
	}
	return true
}

// expect computes the answer by brute force from the fixture.
func (fx *listFixture) expect(f store.ListFilter) []string {
	var beforeIdx = len(fx.all)
	if f.Before != "" {
		for i, sm := range fx.all {
			if sm.CheckpointID == f.Before {
				beforeIdx = i
			}
		}
	}
	var out []string
	for i := len(fx.all) - 1; i >= 0; i-- {
		sm := fx.all[i]
		if i >= beforeIdx ||
			(f.WorkflowID != "" && sm.WorkflowID != f.WorkflowID) ||
			(f.Namespace != nil && sm.Namespace != *f.Namespace) ||
			(f.Phase != "" && sm.Phase != f.Phase) ||
			!metaMatch(sm, f.Metadata) {
			continue
		}
		out = append(out, sm.CheckpointID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// ListShapes are the list filters the suite checks, by name: every combination of workflow,
// namespace, phase, metadata, before and limit (before names the checkpoint before). A backend
// may check its query plans over them.
func ListShapes(before string) map[string]store.ListFilter {
	fs := map[string]store.ListFilter{}
	wfs := []string{"", "wf-1"}
	nss := []*string{nil, strp(""), strp("sub")}
	phases := []store.Phase{"", store.PhaseFailed, store.PhaseCompleted}
	metas := []map[string]json.RawMessage{nil,
		{"source": json.RawMessage(`"loop"`)},
		{"source": json.RawMessage(`"input"`), "step": json.RawMessage(`1.0`)},
		{"step": json.RawMessage(`"1"`)}, // string "1" != number 1
		{"missing": json.RawMessage(`true`)}}
	befores := []string{"", before}
	limits := []int{0, 3}
	for _, wf := range wfs {
		for _, ns := range nss {
			for _, ph := range phases {
				for mi, m := range metas {
					for _, b := range befores {
						for _, l := range limits {
							nsn := "nil"
							if ns != nil {
								nsn = fmt.Sprintf("%q", *ns)
							}
							name := fmt.Sprintf("wf=%s/ns=%s/phase=%s/meta=%d/before=%v/limit=%d", wf, nsn, ph, mi, b != "", l)
							fs[name] = store.ListFilter{WorkflowID: wf, Namespace: ns, Phase: ph, Metadata: m, Before: b, Limit: l}
						}
					}
				}
			}
		}
	}
	return fs
}

func testListFilters(t *testing.T, h *harness) {
	fx := newListFixture(t, h.db(t))
	ctx := context.Background()
	nonEmpty := 0
	for name, f := range ListShapes(fx.all[40].CheckpointID) {
		got, err := fx.s.List(ctx, f)
		require.NoError(t, err, name)
		ids := make([]string, 0, len(got))
		for _, sm := range got {
			ids = append(ids, sm.CheckpointID)
		}
		want := fx.expect(f)
		if len(want) == 0 {
			want = []string{}
		}
		require.Equal(t, want, ids, name)
		if len(want) > 0 {
			nonEmpty++
		}
	}
	require.Greater(t, nonEmpty, 50)
	// within a workflow newest first by seq
	got, err := fx.s.List(ctx, store.ListFilter{WorkflowID: "wf-2", Limit: 5})
	require.NoError(t, err)
	for i := 1; i < len(got); i++ {
		require.Greater(t, got[i-1].Seq, got[i].Seq)
	}
	require.Equal(t, "wf-2", got[0].WorkflowID)
	require.NotEmpty(t, got[0].SHA256)
	require.NotZero(t, got[0].SizeBytes)
	_, err = fx.s.List(ctx, store.ListFilter{Phase: "bogus"})
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "phase", ie.Field)
	_, err = fx.s.List(ctx, store.ListFilter{Metadata: map[string]json.RawMessage{"k": json.RawMessage(`{`)}})
	require.ErrorAs(t, err, &ie)
	require.True(t, strings.HasPrefix(ie.Field, "metadata"))
}
