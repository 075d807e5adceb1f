package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSaveLoadRoundtrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	big := checkpointJSON(rng, 200<<10)
	cases := []struct {
		name     string
		req      SaveRequest
		wantType StateType
		compress bool
	}{
		{"json small", SaveRequest{State: []byte(`{"a":1}`), StateType: StateJSON}, StateJSON, false},
		{"json default type", SaveRequest{State: []byte(`[1,2]`)}, StateJSON, false},
		{"json big compressed", SaveRequest{State: big, StateType: StateJSON}, StateJSON, true},
		{"bytes", SaveRequest{State: []byte{0, 1, 2, 255}, StateType: StateBytes}, StateBytes, false},
		{"bytes empty", SaveRequest{State: []byte{}, StateType: StateBytes}, StateBytes, false},
		{"random bytes incompressible", SaveRequest{State: randBytes(rng, 100<<10), StateType: StateBytes}, StateBytes, false},
		{"none", SaveRequest{}, StateNone, false},
		{"none explicit", SaveRequest{StateType: StateNone}, StateNone, false},
	}
	s := openTest(t)
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.WorkflowID = "wf-" + tc.name
			req.Namespace = "ns"
			req.ParentID = "parent"
			req.Phase = PhaseFailed
			req.Step = int64(i)
			req.StepName = "step"
			req.Error = &StepError{Message: "boom", Retryable: true}
			req.CompletedTasks = json.RawMessage(`[{"id":"a"}, {"id":"b"}]`)
			req.PendingTasks = json.RawMessage(` [ "x" ] `)
			req.WorkflowHash = "sha256:abc"
			req.Metadata = json.RawMessage(`{"source": "loop", "n": 1}`)
			res := mustSave(t, s, req)
			require.NotEmpty(t, res.CheckpointID)
			require.Equal(t, int64(1), res.Seq)
			require.Equal(t, int64(len(req.State)), res.SizeBytes)
			// Compression is deferred: the save stores the state raw, the compactor shrinks it.
			require.Equal(t, res.SizeBytes, res.StoredBytes)
			require.NoError(t, s.Compact(ctx))
			cp, err := s.Load(ctx, res.CheckpointID)
			require.NoError(t, err)
			if tc.compress {
				require.Less(t, cp.StoredBytes, cp.SizeBytes)
			} else {
				require.Equal(t, cp.SizeBytes, cp.StoredBytes)
			}
			require.Equal(t, tc.wantType, cp.StateType)
			if tc.wantType == StateNone {
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
			require.Equal(t, PhaseFailed, cp.Phase)
			require.Equal(t, int64(i), cp.Step)
			require.Equal(t, "step", cp.StepName)
			require.Equal(t, &StepError{Message: "boom", Retryable: true}, cp.Error)
			require.Equal(t, "sha256:abc", cp.WorkflowHash)
			require.JSONEq(t, `{"source":"loop","n":1}`, string(cp.Metadata))
			require.Equal(t, `[{"id":"a"}, {"id":"b"}]`, string(cp.CompletedTasks))
			require.Equal(t, ` [ "x" ] `, string(cp.PendingTasks))
			require.Equal(t, 2, cp.CompletedTaskCount)
			require.Equal(t, 1, cp.PendingTaskCount)
			require.Equal(t, res.CreatedAt, cp.CreatedAt)
			require.Equal(t, FormatVersion, cp.FormatVersion)

			lr, err := s.LoadLatest(ctx, req.WorkflowID, "ns")
			require.NoError(t, err)
			require.Equal(t, res.CheckpointID, lr.CheckpointID)
			require.Empty(t, lr.RecoveredFrom)
		})
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestCompressionThreshold(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	state := checkpointJSON(rng, 50<<10)
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
				s := openTest(t, func(o *Options) { o.CompressThreshold, o.CompressInline = tc.threshold, inline })
				res := mustSave(t, s, SaveRequest{WorkflowID: "w", State: state})
				require.Equal(t, tc.compressed && inline, res.StoredBytes < res.SizeBytes, "stored %d of %d", res.StoredBytes, res.SizeBytes)
				require.NoError(t, s.Compact(context.Background()))
				cp, err := s.Load(context.Background(), res.CheckpointID)
				require.NoError(t, err)
				require.Equal(t, state, cp.State)
				require.Equal(t, tc.compressed, cp.StoredBytes < cp.SizeBytes, "stored %d of %d", cp.StoredBytes, cp.SizeBytes)
			})
		}
	}
}

func TestDedup(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	state := checkpointJSON(rand.New(rand.NewPCG(5, 6)), 20<<10)
	a := mustSave(t, s, SaveRequest{WorkflowID: "a", State: state})
	b := mustSave(t, s, SaveRequest{WorkflowID: "b", State: state})
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

func TestIdempotentAndConflict(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	req := SaveRequest{WorkflowID: "w", CheckpointID: "c1", State: []byte(`{"x":1}`), Metadata: json.RawMessage(`{"a":1,"b":"x"}`)}
	first := mustSave(t, s, req)
	require.False(t, first.Existing)
	mustSave(t, s, SaveRequest{WorkflowID: "w", State: []byte(`{"x":2}`)})

	again := req
	again.Metadata = json.RawMessage(`{ "b" : "x", "a" : 1.0 }`) // same content, other spelling
	rep := mustSave(t, s, again)
	require.True(t, rep.Existing)
	require.Equal(t, first.Seq, rep.Seq)
	require.Equal(t, first.CreatedAt, rep.CreatedAt)
	require.Equal(t, first.SHA256, rep.SHA256)

	for name, mod := range map[string]func(*SaveRequest){
		"state":    func(r *SaveRequest) { r.State = []byte(`{"x":3}`) },
		"step":     func(r *SaveRequest) { r.Step = 5 },
		"metadata": func(r *SaveRequest) { r.Metadata = json.RawMessage(`{"a":"1","b":"x"}`) },
		"phase":    func(r *SaveRequest) { r.Phase = PhaseFailed },
		"workflow": func(r *SaveRequest) { r.WorkflowID = "other" },
	} {
		t.Run(name, func(t *testing.T) {
			r := req
			mod(&r)
			_, err := s.Save(ctx, r)
			require.ErrorIs(t, err, ErrConflict)
			require.Contains(t, err.Error(), "c1")
		})
	}
	// the workflow "other" got no row/seq from the failed save
	lst, err := s.List(ctx, ListFilter{WorkflowID: "other"})
	require.NoError(t, err)
	require.Empty(t, lst)
}

func TestSeqMonotonic(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var last SaveResult
	for i := 0; i < 5; i++ {
		ns := ""
		if i%2 == 1 {
			ns = "sub"
		}
		r := mustSave(t, s, SaveRequest{WorkflowID: "w", Namespace: ns})
		require.Equal(t, int64(i+1), r.Seq)
		last = r
	}
	_, err := s.Delete(ctx, last.CheckpointID)
	require.NoError(t, err)
	r := mustSave(t, s, SaveRequest{WorkflowID: "w"})
	require.Equal(t, int64(6), r.Seq, "seq never reused after delete")
	// another workflow has its own sequence
	require.Equal(t, int64(1), mustSave(t, s, SaveRequest{WorkflowID: "w2"}).Seq)
}

func TestInvalidRequests(t *testing.T) {
	s := openTest(t, func(o *Options) { o.MaxStateBytes = 1000 })
	ctx := context.Background()
	long := string(bytes.Repeat([]byte("x"), 600))
	for _, tc := range []struct {
		name  string
		req   SaveRequest
		field string
	}{
		{"no workflow", SaveRequest{}, "workflowId"},
		{"long workflow", SaveRequest{WorkflowID: long}, "workflowId"},
		{"long id", SaveRequest{WorkflowID: "w", CheckpointID: long}, "checkpointId"},
		{"phase", SaveRequest{WorkflowID: "w", Phase: "done"}, "phase"},
		{"step", SaveRequest{WorkflowID: "w", Step: -1}, "step"},
		{"metadata array", SaveRequest{WorkflowID: "w", Metadata: json.RawMessage(`[1]`)}, "metadata"},
		{"metadata string", SaveRequest{WorkflowID: "w", Metadata: json.RawMessage(`"x"`)}, "metadata"},
		{"metadata broken", SaveRequest{WorkflowID: "w", Metadata: json.RawMessage(`{"a":`)}, "metadata"},
		{"tasks object", SaveRequest{WorkflowID: "w", PendingTasks: json.RawMessage(`{}`)}, "pendingTasks"},
		{"tasks unterminated", SaveRequest{WorkflowID: "w", CompletedTasks: json.RawMessage(`[1,`)}, "completedTasks"},
		{"state type", SaveRequest{WorkflowID: "w", State: []byte("x"), StateType: "xml"}, "stateType"},
		{"none with bytes", SaveRequest{WorkflowID: "w", State: []byte("x"), StateType: StateNone}, "stateType"},
		{"empty json", SaveRequest{WorkflowID: "w", State: []byte(" "), StateType: StateJSON}, "state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Save(ctx, tc.req)
			var ie *InvalidError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, tc.field, ie.Field)
		})
	}
	_, err := s.Save(ctx, SaveRequest{WorkflowID: "w", State: make([]byte, 1001), StateType: StateBytes})
	require.ErrorIs(t, err, ErrTooLarge)
	var tl *TooLargeError
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

func TestNotFound(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	_, err := s.Load(ctx, "nope")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.LoadLatest(ctx, "nope", "")
	require.ErrorIs(t, err, ErrNotFound)
	n, err := s.Delete(ctx, "nope")
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = s.DeleteWorkflow(ctx, "nope")
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = s.Complete(ctx, "nope", false)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.PutWrites(ctx, "w", "", "nope", []Write{{TaskID: "t", Channel: "c"}})
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.List(ctx, ListFilter{Before: "nope"})
	require.ErrorIs(t, err, ErrNotFound)
	// namespace matters for LoadLatest
	mustSave(t, s, SaveRequest{WorkflowID: "w", Namespace: "a"})
	_, err = s.LoadLatest(ctx, "w", "")
	require.ErrorIs(t, err, ErrNotFound)
}

// corruptState overwrites the stored blob of a checkpoint through a separate connection.
func corruptState(t *testing.T, s *Store, checkpointID string, data []byte) {
	t.Helper()
	db := rawDB(t, s.Path())
	res, err := db.Exec(`UPDATE states SET data = ? WHERE hash = (SELECT state_hash FROM checkpoints WHERE checkpoint_id = ?)`, data, checkpointID)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

func TestCorruption(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, mustSave(t, s, SaveRequest{WorkflowID: "w", State: checkpointJSON(rng, 8<<10)}).CheckpointID)
	}
	require.NoError(t, s.Compact(ctx))
	// 3: compressed blob with garbage (does not decompress); 2: raw-length bytes that mismatch
	corruptState(t, s, ids[3], []byte("garbage that is not zstd"))
	cp2, err := s.Load(ctx, ids[2])
	require.NoError(t, err)
	flipped := bytes.Clone(cp2.State)
	flipped[100] ^= 1
	compressed, enc := s.codec.compress(flipped, 0)
	require.Equal(t, encZstd, enc)
	corruptState(t, s, ids[2], compressed)

	for _, id := range ids[2:] {
		_, err := s.Load(ctx, id)
		var ce *CorruptError
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

	// a missing state row is corruption too
	extra := mustSave(t, s, SaveRequest{WorkflowID: "w", State: []byte(`{"extra":1}`)})
	_, err = rawDB(t, s.Path()).Exec(`DELETE FROM states WHERE hash = (SELECT state_hash FROM checkpoints WHERE checkpoint_id = ?)`, extra.CheckpointID)
	require.NoError(t, err)
	_, err = s.Load(ctx, extra.CheckpointID)
	var missing *CorruptError
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
	corruptState(t, s, ids[1], []byte("x"))
	corruptState(t, s, ids[0], []byte("y"))
	_, err = s.LoadLatest(ctx, "w", "")
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, ids[3], ce.CheckpointID)
	require.False(t, errors.Is(err, ErrNotFound))
	// ... naming the older ones too, newest first
	var also []string
	for _, r := range ce.AlsoCorrupt {
		also = append(also, r.CheckpointID)
		require.NotEmpty(t, r.Reason)
	}
	require.Equal(t, []string{ids[2], ids[1], ids[0]}, also)
}
