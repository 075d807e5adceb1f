package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func init() {
	add(testCase{"ConditionWritable", testConditionWritable}, testCase{"WritesStopped", testWritesStopped})
}

// testConditionWritable: a new database, and the same database reopened, accept writes
// (Condition is the zero value), and a checkpoint whose stored bytes fail verification is that
// checkpoint's corruption, not the storage's: the backend keeps writing. The Condition type's
// own rules hold whatever the backend.
func testConditionWritable(t *testing.T, h *harness) {
	ctx := context.Background()
	s := h.db(t)
	require.Equal(t, store.Condition{}, s.Condition())
	id := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":1}`)}).CheckpointID
	corrupter(t, s).SetStateBytes(t, id, []byte(`{"a":2}`))
	_, err := s.Load(ctx, id)
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.True(t, s.Condition().Writable(), "a corrupt checkpoint must not stop writes: %+v", s.Condition())
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":3}`)})
	require.NoError(t, s.Close())

	again := h.db(t, func(o *Options) { o.Same = s })
	assert.Equal(t, store.Condition{}, again.Condition())
	mustSave(t, again, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":4}`)})

	// the contract's value type
	for _, c := range []struct {
		cond           store.Condition
		writable, fail bool
	}{
		{store.Condition{}, true, false},
		{store.Condition{Reason: store.ReasonDamaged, Detail: "d"}, false, true},
		{store.Condition{Reason: store.ReasonRemoved}, false, true},
		{store.Condition{Reason: store.ReasonReplaced}, false, true},
		{store.Condition{Reason: store.ReasonDiskFull}, false, false},
		{store.Condition{Reason: store.ReasonReadOnly}, false, false},
	} {
		assert.Equal(t, c.writable, c.cond.Writable(), c.cond.Reason)
		assert.Equal(t, c.fail, c.cond.Failed(), c.cond.Reason)
		err := c.cond.Err()
		if c.writable {
			assert.NoError(t, err)
			continue
		}
		var ue *store.UnavailableError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, c.cond.Reason, ue.Reason)
		assert.True(t, errors.Is(err, store.ErrUnavailable))
	}
}

// testWritesStopped: once a backend stops writing (a damaged database, on SQLite a database
// file removed or replaced), every write fails with an *store.UnavailableError carrying the
// reason, nothing is written, reads keep answering, Condition says why and since when, and
// the backend still closes cleanly.
func testWritesStopped(t *testing.T, h *harness) {
	ctx := context.Background()
	s := h.db(t)
	first := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":1}`)})
	PutLG(t, s, "t", "", "c1", "", map[string]any{"x": 1}, map[string]string{"x": `"v"`}, "")
	before := time.Now()
	corrupter(t, s).StopWrites(t, store.ReasonDamaged, "page 7 is not a b-tree page")

	c := s.Condition()
	require.Equal(t, store.ReasonDamaged, c.Reason)
	assert.Equal(t, "page 7 is not a b-tree page", c.Detail)
	assert.False(t, c.Since.Before(before.Add(-time.Second)), "since %v", c.Since)
	assert.True(t, c.Failed())

	keep := 1
	writes := []struct {
		name string
		do   func() error
	}{
		{"Save", func() error {
			_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":2}`)})
			return err
		}},
		{"Save of a new workflow", func() error {
			_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "new", State: []byte(`{}`)})
			return err
		}},
		{"Delete", func() error { _, err := s.Delete(ctx, first.CheckpointID); return err }},
		{"Prune", func() error { _, err := s.Prune(ctx, store.PruneRequest{WorkflowID: "w", KeepLast: 1}); return err }},
		{"Configure", func() error { _, err := s.Configure(ctx, "w", &store.Retention{KeepLast: keep}); return err }},
		{"Complete", func() error { _, err := s.Complete(ctx, "w", true); return err }},
		{"DeleteWorkflow", func() error { _, err := s.DeleteWorkflow(ctx, "w"); return err }},
		{"SetWorkflowSources", func() error { return s.SetWorkflowSources(ctx, "w", json.RawMessage(`{"root":"/x"}`)) }},
		{"PutWrites", func() error {
			_, err := s.PutWrites(ctx, "w", "", first.CheckpointID, []store.Write{{TaskID: "t", Idx: 0, Channel: "c", Type: "json", Value: []byte(`1`)}})
			return err
		}},
		{"RegisterCompensation", func() error {
			_, err := s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "w", Action: json.RawMessage(`{}`), Description: "undo"})
			return err
		}},
		{"SetSagaConfig", func() error {
			return s.SetSagaConfig(ctx, "w", store.SagaConfig{Validation: json.RawMessage(`{"minConfidence":0.5}`)})
		}},
		{"LGPut", func() error {
			p, _ := s.LGPut(store.LGPutRequest{ThreadID: "t", CheckpointID: "c2", ParentID: "c1", Type: "json",
				Checkpoint: []byte(`{"id":"c2"}`), ChannelVersions: json.RawMessage(`{}`)})
			return p.Wait(ctx)
		}},
		{"LGDeleteThread", func() error { _, err := s.LGDeleteThread(ctx, "t"); return err }},
		{"LGCopyThread", func() error { _, err := s.LGCopyThread(ctx, "t", "t2"); return err }},
	}
	for _, w := range writes {
		err := w.do()
		var ue *store.UnavailableError
		if assert.ErrorAs(t, err, &ue, w.name) {
			assert.Equal(t, store.ReasonDamaged, ue.Reason, w.name)
			assert.ErrorIs(t, err, store.ErrUnavailable, w.name)
		}
	}

	// nothing was written, and reads answer
	cps, err := s.List(ctx, store.ListFilter{WorkflowID: "w"})
	require.NoError(t, err)
	require.Len(t, cps, 1)
	assert.Equal(t, first.CheckpointID, cps[0].CheckpointID)
	cp, err := s.Load(ctx, first.CheckpointID)
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":1}`, string(cp.State))
	wf, err := s.Workflow(ctx, "w")
	require.NoError(t, err)
	assert.False(t, wf.Completed)
	_, err = s.Workflow(ctx, "new")
	assert.ErrorIs(t, err, store.ErrNotFound)
	tup, err := s.LGGet(ctx, "t", "", "")
	require.NoError(t, err)
	require.NotNil(t, tup)
	assert.Equal(t, "c1", tup.CheckpointID)
	comps, err := s.Compensations(ctx, "w", "", 0, 0)
	require.NoError(t, err)
	assert.Empty(t, comps)
	_, err = s.Stats(ctx)
	assert.NoError(t, err)
	assert.Equal(t, c, s.Condition(), "the condition stays until the backend is closed")
	require.NoError(t, s.Close())
}
