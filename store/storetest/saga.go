package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func init() {
	add(
		testCase{"SagaValidationStoredAndListed", testSagaValidationStoredAndListed},
		testCase{"SagaListValidationFilter", testSagaListValidationFilter},
		testCase{"SagaValidationHistory", testSagaValidationHistory},
		testCase{"SagaRegisterAndConfig", testSagaRegisterAndConfig},
		testCase{"SagaOpenCompensationForStep", testSagaOpenCompensationForStep},
		testCase{"SagaRollbackLifecycle", testSagaRollbackLifecycle},
		testCase{"SagaRetentionKeepsNeededCompensations", testSagaRetentionKeepsNeededCompensations},
		testCase{"SagaRetentionKeepsRollbackTargets", testSagaRetentionKeepsRollbackTargets},
		testCase{"SagaValidationExportImport", testSagaValidationExportImport},
		testCase{"SagaTwoBackendsOneDatabase", testSagaTwoBackendsOneDatabase},
	)
}

func validated(status string, conf float64) *store.Validation {
	return &store.Validation{Status: status, Confidence: conf, Min: 0.7, Warning: 0.85}
}

func testSagaValidationStoredAndListed(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	v := &store.Validation{Status: "warning", Confidence: 0.8, Min: 0.7, Warning: 0.85, Message: "looks plausible",
		Details: json.RawMessage(`{"checks": [1, 2], "z": "a"}`)}
	res := mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c1", StepName: "search", State: []byte(`{}`), Validation: v})
	cp, err := s.Load(ctx, "c1")
	require.NoError(t, err)
	require.NotNil(t, cp.Validation)
	assert.Equal(t, "warning", cp.Validation.Status)
	assert.Equal(t, 0.8, cp.Validation.Confidence)
	assert.Equal(t, 0.7, cp.Validation.Min)
	assert.Equal(t, 0.85, cp.Validation.Warning)
	assert.Equal(t, "looks plausible", cp.Validation.Message)
	assert.JSONEq(t, `{"checks": [1, 2], "z": "a"}`, string(cp.Validation.Details))

	// idempotent repeat; a different validation under the same id is a conflict
	again := mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c1", StepName: "search", State: []byte(`{}`), Validation: v})
	assert.True(t, again.Existing)
	assert.Equal(t, res.Seq, again.Seq)
	_, err = s.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c1", StepName: "search", State: []byte(`{}`),
		Validation: validated("failed", 0.1)})
	assert.ErrorIs(t, err, store.ErrConflict)
	_, err = s.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c1", StepName: "search", State: []byte(`{}`)})
	assert.ErrorIs(t, err, store.ErrConflict, "with and without a validation differ")

	// a checkpoint without one has none
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c2", State: []byte(`{}`)})
	cp, err = s.Load(ctx, "c2")
	require.NoError(t, err)
	assert.Nil(t, cp.Validation)

	for _, bad := range []struct {
		v     *store.Validation
		field string
	}{
		{&store.Validation{Status: "great", Confidence: 0.5}, "validation.status"},
		{&store.Validation{Status: "passed", Confidence: 1.5}, "validation.confidence"},
		{&store.Validation{Status: "passed", Confidence: 0.9, Min: -1}, "validation.min"},
		{&store.Validation{Status: "passed", Confidence: 0.9, Details: json.RawMessage(`{`)}, "validation.details"},
	} {
		_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "wf", State: []byte(`{}`), Validation: bad.v})
		var ie *store.InvalidError
		require.ErrorAs(t, err, &ie, bad.field)
		assert.Equal(t, bad.field, ie.Field)
	}
}

// TestSagaListValidationFilter: checkpoint/list's validation filter, alone and with every other
// filter, walks an index in list order.
func testSagaListValidationFilter(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	statuses := []string{"passed", "", "warning", "failed", "passed", "failed", ""}
	want := map[string][]string{} // status -> ids newest first (every workflow)
	wantWF := map[string][]string{}
	for i, st := range statuses {
		for _, wf := range []string{"a", "b"} {
			id := fmt.Sprintf("%s-%d", wf, i)
			req := store.SaveRequest{WorkflowID: wf, CheckpointID: id, Metadata: json.RawMessage(`{"k": 1}`)}
			if st != "" {
				req.Validation = validated(st, 0.5)
			}
			mustSave(t, s, req)
			if st != "" {
				want[st] = append([]string{id}, want[st]...)
				if wf == "a" {
					wantWF[st] = append([]string{id}, wantWF[st]...)
				}
			}
		}
	}
	ids := func(f store.ListFilter) []string {
		t.Helper()
		sms, err := s.List(ctx, f)
		require.NoError(t, err)
		out := []string{}
		for _, sm := range sms {
			out = append(out, sm.CheckpointID)
			require.NotNil(t, sm.Validation)
			require.Equal(t, f.Validation, sm.Validation.Status)
		}
		return out
	}
	ns := ""
	for _, st := range []string{"passed", "warning", "failed"} {
		assert.Equal(t, want[st], ids(store.ListFilter{Validation: st}), st)
		assert.Equal(t, wantWF[st], ids(store.ListFilter{Validation: st, WorkflowID: "a"}), st)
		assert.Equal(t, wantWF[st], ids(store.ListFilter{Validation: st, WorkflowID: "a", Namespace: &ns}), st)
		assert.Equal(t, want[st], ids(store.ListFilter{Validation: st, Namespace: &ns}), st)
		assert.Equal(t, want[st], ids(store.ListFilter{Validation: st, Metadata: map[string]json.RawMessage{"k": json.RawMessage("1")}}), st)
		assert.Equal(t, want[st][1:], ids(store.ListFilter{Validation: st, Before: want[st][0]}), st)
		assert.Equal(t, want[st][:1], ids(store.ListFilter{Validation: st, Limit: 1}), st)
	}
	assert.Empty(t, ids(store.ListFilter{Validation: "failed", Phase: store.PhaseFailed}))
	_, err := s.List(ctx, store.ListFilter{Validation: "bad"})
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, "validation", ie.Field)

}

func testSagaValidationHistory(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	for i, st := range []string{"passed", "", "failed", "warning", ""} {
		req := store.SaveRequest{WorkflowID: "wf", CheckpointID: fmt.Sprintf("c%d", i+1)}
		if st != "" {
			req.Validation = validated(st, 0.5)
		}
		mustSave(t, s, req)
	}
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "other", Validation: validated("passed", 1)})
	hist, err := s.ValidationHistory(ctx, "wf", "", 0, 10)
	require.NoError(t, err)
	assert.Equal(t, []store.ValidationRef{{CheckpointID: "c4", Seq: 4, Status: "warning"}, {CheckpointID: "c3", Seq: 3, Status: "failed"}, {CheckpointID: "c1", Seq: 1, Status: "passed"}}, hist)
	hist, err = s.ValidationHistory(ctx, "wf", "", 4, 1)
	require.NoError(t, err)
	assert.Equal(t, []store.ValidationRef{{CheckpointID: "c3", Seq: 3, Status: "failed"}}, hist)
	hist, err = s.ValidationHistory(ctx, "wf", "sub", 0, 10)
	require.NoError(t, err)
	assert.Equal(t, []store.ValidationRef{{CheckpointID: "other", Seq: 6, Status: "passed"}}, hist)
}

func testSagaRegisterAndConfig(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	reg := func(wf, ns, step string) store.Compensation {
		t.Helper()
		c, err := s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: wf, Namespace: ns, StepName: step,
			Action: json.RawMessage(`{"kind": "delete_file", "path": "/tmp/x"}`), Description: "remove /tmp/x"})
		require.NoError(t, err)
		return c
	}
	c1 := reg("wf", "", "write") // before any checkpoint: creates the workflow
	assert.Equal(t, int64(1), c1.Seq)
	assert.Equal(t, int64(0), c1.AfterSeq)
	info, err := s.Workflow(ctx, "wf")
	require.NoError(t, err)
	assert.Zero(t, info.Count)
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c1"})
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "c2"})
	c2 := reg("wf", "", "write")
	assert.Equal(t, int64(2), c2.Seq)
	assert.Equal(t, int64(2), c2.AfterSeq, "after the workflow's newest checkpoint, any namespace")
	c3 := reg("wf", "sub", "")
	assert.Equal(t, int64(3), c3.Seq)
	assert.Equal(t, int64(1), reg("other", "", "").Seq, "seq is per workflow")

	got, err := s.Compensation(ctx, c2.CompensationID)
	require.NoError(t, err)
	assert.Equal(t, "pending", got.Status)
	assert.JSONEq(t, `{"kind": "delete_file", "path": "/tmp/x"}`, string(got.Action))
	assert.Equal(t, "remove /tmp/x", got.Description)
	assert.Equal(t, "write", got.StepName)
	_, err = s.Compensation(ctx, "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)

	all, err := s.Compensations(ctx, "wf", "", 0, 0)
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.Equal(t, []string{c1.CompensationID, c2.CompensationID}, []string{all[0].CompensationID, all[1].CompensationID})
	after, err := s.Compensations(ctx, "wf", "", 1, 0)
	require.NoError(t, err)
	require.Len(t, after, 1)
	upTo, err := s.Compensations(ctx, "wf", "", 0, 1)
	require.NoError(t, err)
	require.Len(t, upTo, 1)
	assert.Equal(t, c1.CompensationID, upTo[0].CompensationID)

	for _, bad := range []struct {
		req   store.CompensationRequest
		field string
	}{
		{store.CompensationRequest{Action: json.RawMessage(`{}`)}, "workflowId"},
		{store.CompensationRequest{WorkflowID: "wf"}, "action"},
		{store.CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`null`)}, "action"},
		{store.CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`{`)}, "action"},
	} {
		_, err := s.RegisterCompensation(ctx, bad.req)
		var ie *store.InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, bad.field, ie.Field)
	}
	_, err = s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`"` + strings.Repeat("x", store.MaxCompensationActionBytes) + `"`)})
	assert.ErrorIs(t, err, store.ErrTooLarge)

	// the saga config lives beside the sources in workflows.config
	require.NoError(t, s.SetWorkflowSources(ctx, "wf", json.RawMessage(`{"root": "/src"}`)))
	require.NoError(t, s.SetSagaConfig(ctx, "wf", store.SagaConfig{Validation: json.RawMessage(`{"minConfidence": 0.5}`)}))
	require.NoError(t, s.SetSagaConfig(ctx, "wf", store.SagaConfig{Compensation: json.RawMessage(`{"required": ["write"]}`)}))
	cfg, err := s.SagaConfig(ctx, "wf")
	require.NoError(t, err)
	assert.JSONEq(t, `{"minConfidence": 0.5}`, string(cfg.Validation))
	assert.JSONEq(t, `{"required": ["write"]}`, string(cfg.Compensation))
	src, err := s.WorkflowSources(ctx, "wf")
	require.NoError(t, err)
	assert.JSONEq(t, `{"root": "/src"}`, string(src))
	require.NoError(t, s.SetWorkflowSources(ctx, "wf", nil))
	cfg, err = s.SagaConfig(ctx, "wf")
	require.NoError(t, err)
	assert.NotNil(t, cfg.Validation, "removing the sources keeps the rest")
	cfg, err = s.SagaConfig(ctx, "unknown")
	require.NoError(t, err)
	assert.Equal(t, store.SagaConfig{}, cfg)
	require.NoError(t, s.SetSagaConfig(ctx, "fresh", store.SagaConfig{Validation: json.RawMessage(`{}`)}))
	_, err = s.Workflow(ctx, "fresh")
	require.NoError(t, err, "configuring creates the workflow")
}

// TestSagaOpenCompensationForStep: a required step's completed save needs a compensation
// registered since that step last completed, not yet done.
func testSagaOpenCompensationForStep(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	open := func(step string) bool {
		t.Helper()
		ok, err := s.OpenCompensationForStep(ctx, "wf", "", step)
		require.NoError(t, err)
		return ok
	}
	reg := func(step string) store.Compensation {
		c, err := s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf", StepName: step, Action: json.RawMessage(`1`)})
		require.NoError(t, err)
		return c
	}
	assert.False(t, open("write"))
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Phase: store.PhaseBeforeStep, StepName: "write"})
	reg("write")
	assert.True(t, open("write"))
	assert.False(t, open("read"))
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Phase: store.PhaseCompleted, StepName: "write"})
	assert.False(t, open("write"), "the next run of the step needs its own")
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Phase: store.PhaseBeforeStep, StepName: "write"})
	c := reg("write")
	assert.True(t, open("write"))
	// one done by a rollback no longer counts
	r, _, err := s.BeginRollback(ctx, "wf", "", "", 0)
	require.NoError(t, err)
	_, err = s.MarkCompensation(ctx, c.CompensationID, r.RollbackID, store.CompensationDone, "")
	require.NoError(t, err)
	assert.False(t, open("write"))
	// another namespace is another workflow run
	_, err = s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf", Namespace: "sub", StepName: "write", Action: json.RawMessage(`1`)})
	require.NoError(t, err)
	assert.False(t, open("write"))
}

func testSagaRollbackLifecycle(t *testing.T, h *harness) {
	var notes []string
	s := h.db(t)
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		notes = append(notes, wf+" "+reason+" "+strings.Join(ids, ","))
	})
	ctx := context.Background()
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c1"})
	target := mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c2", Validation: validated("passed", 0.9)})
	var comps []store.Compensation
	for i := 0; i < 3; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: fmt.Sprintf("c%d", 3+i)})
		c, err := s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(fmt.Sprint(i))})
		require.NoError(t, err)
		comps = append(comps, c)
	}
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "s1"})

	none, err := s.LatestRollback(ctx, "wf", "")
	require.NoError(t, err)
	assert.Nil(t, none)
	r, began, err := s.BeginRollback(ctx, "wf", "", "c2", target.Seq)
	require.NoError(t, err)
	require.True(t, began)
	assert.Equal(t, int64(3), r.MaxSeq)
	assert.Equal(t, "c2", r.ToCheckpointID)
	assert.False(t, r.Full())
	// registered later: not covered (MaxSeq), and a second begin returns the unfinished one
	_, err = s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`9`)})
	require.NoError(t, err)
	r2, began, err := s.BeginRollback(ctx, "wf", "", "", 0)
	require.NoError(t, err)
	assert.False(t, began)
	assert.Equal(t, r.RollbackID, r2.RollbackID)
	latest, err := s.LatestRollback(ctx, "wf", "")
	require.NoError(t, err)
	require.NotNil(t, latest)
	assert.Equal(t, r.RollbackID, latest.RollbackID)
	other, began, err := s.BeginRollback(ctx, "wf", "sub", "", 0)
	require.NoError(t, err)
	assert.True(t, began, "one unfinished rollback per namespace")
	assert.NotEqual(t, r.RollbackID, other.RollbackID)

	c, err := s.MarkCompensation(ctx, comps[2].CompensationID, r.RollbackID, store.CompensationFailed, "disk busy")
	require.NoError(t, err)
	assert.Equal(t, "failed", c.Status)
	assert.Equal(t, "disk busy", c.Error)
	assert.Equal(t, r.RollbackID, c.RollbackID)
	c, err = s.MarkCompensation(ctx, comps[2].CompensationID, r.RollbackID, store.CompensationDone, "")
	require.NoError(t, err)
	assert.Equal(t, "done", c.Status)
	c, err = s.MarkCompensation(ctx, comps[2].CompensationID, r.RollbackID, store.CompensationFailed, "late")
	require.NoError(t, err)
	assert.Equal(t, "done", c.Status, "done stays done")
	_, err = s.MarkCompensation(ctx, "nope", r.RollbackID, store.CompensationDone, "")
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.MarkCompensation(ctx, comps[1].CompensationID, "nope", store.CompensationDone, "")
	assert.ErrorIs(t, err, store.ErrNotFound)
	for _, cc := range comps[:2] {
		_, err = s.MarkCompensation(ctx, cc.CompensationID, r.RollbackID, store.CompensationDone, "")
		require.NoError(t, err)
	}

	done, pruned, err := s.CompleteRollback(ctx, r.RollbackID, true)
	require.NoError(t, err)
	assert.False(t, done.CompletedAt.IsZero())
	assert.Equal(t, []string{"c3", "c4", "c5"}, pruned, "the checkpoints after the target, its namespace only")
	assert.Equal(t, []string{"wf rollback c3,c4,c5"}, notes)
	sms, err := s.List(ctx, store.ListFilter{WorkflowID: "wf"})
	require.NoError(t, err)
	var left []string
	for _, sm := range sms {
		left = append(left, sm.CheckpointID)
	}
	assert.Equal(t, []string{"s1", "c2", "c1"}, left)
	rest, err := s.Compensations(ctx, "wf", "", 0, 0)
	require.NoError(t, err)
	require.Len(t, rest, 1, "the done ones went with the rollback; the later one stays")
	assert.Equal(t, "pending", rest[0].Status)

	again, pruned, err := s.CompleteRollback(ctx, r.RollbackID, true)
	require.NoError(t, err)
	assert.Nil(t, pruned)
	assert.Equal(t, done.CompletedAt, again.CompletedAt)
	_, err = s.MarkCompensation(ctx, rest[0].CompensationID, r.RollbackID, store.CompensationDone, "")
	assert.ErrorIs(t, err, store.ErrConflict, "a complete rollback takes no more progress")
	_, _, err = s.CompleteRollback(ctx, "nope", false)
	assert.ErrorIs(t, err, store.ErrNotFound)
	latest, err = s.LatestRollback(ctx, "wf", "")
	require.NoError(t, err)
	assert.Equal(t, r.RollbackID, latest.RollbackID)
	assert.False(t, latest.CompletedAt.IsZero())

	// a new rollback may begin now; a full one without prune keeps the checkpoints
	full, began, err := s.BeginRollback(ctx, "wf", "", "", 0)
	require.NoError(t, err)
	require.True(t, began)
	assert.True(t, full.Full())
	_, pruned, err = s.CompleteRollback(ctx, full.RollbackID, false)
	require.NoError(t, err)
	assert.Empty(t, pruned)
	latest, err = s.LatestRollback(ctx, "wf", "")
	require.NoError(t, err)
	assert.Equal(t, full.RollbackID, latest.RollbackID)
}

// TestSagaRetentionKeepsNeededCompensations: keepLast / maxAge retention after saves, explicit
// prunes and idle expiry never delete a compensation an unfinished rollback or a live
// checkpoint needs; deleting or completing the workflow (without preserve) removes them.
func testSagaRetentionKeepsNeededCompensations(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock), withRetention(store.Retention{KeepLast: 2}))
	ctx := context.Background()
	count := func(wf string) (pending, total int) {
		t.Helper()
		cs, err := s.Compensations(ctx, wf, "", 0, 0)
		require.NoError(t, err)
		for _, c := range cs {
			if c.Status != store.CompensationDone {
				pending++
			}
		}
		return pending, len(cs)
	}
	// 10 steps, each registering a compensation: keepLast 2 prunes 8 checkpoints, no compensation
	for i := 0; i < 10; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Validation: validated("passed", 0.9)})
		_, err := s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(fmt.Sprint(i))})
		require.NoError(t, err)
	}
	info, err := s.Workflow(ctx, "wf")
	require.NoError(t, err)
	assert.Equal(t, 2, info.Count)
	p, n := count("wf")
	assert.Equal(t, 10, p)
	assert.Equal(t, 10, n)
	_, err = s.Configure(ctx, "wf", &store.Retention{KeepLast: 1, MaxAgeSeconds: 1})
	require.NoError(t, err)
	res, err := s.Prune(ctx, store.PruneRequest{KeepLast: 1})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Deleted)
	clock.Advance(time.Hour)
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Validation: validated("passed", 0.9)}) // maxAge: the older one goes
	info, err = s.Workflow(ctx, "wf")
	require.NoError(t, err)
	assert.Equal(t, 1, info.Count)
	p, n = count("wf")
	assert.Equal(t, 10, p, "retention and prune delete checkpoints only")
	assert.Equal(t, 10, n)

	// a rollback half-way: idle expiry keeps the whole workflow
	r, _, err := s.BeginRollback(ctx, "wf", "", "", 0)
	require.NoError(t, err)
	cs, err := s.Compensations(ctx, "wf", "", 0, 0)
	require.NoError(t, err)
	for _, c := range cs[5:] {
		_, err := s.MarkCompensation(ctx, c.CompensationID, r.RollbackID, store.CompensationDone, "")
		require.NoError(t, err)
	}
	_, err = s.Configure(ctx, "wf", &store.Retention{KeepLast: 1, IdleTTLSeconds: 60})
	require.NoError(t, err)
	clock.Advance(time.Hour)
	expired, err := s.ExpireIdle(ctx)
	require.NoError(t, err)
	assert.NotContains(t, expired, "wf")
	p, n = count("wf")
	assert.Equal(t, 5, p)
	assert.Equal(t, 10, n, "the done ones too: the unfinished rollback shows them as its progress")

	// every action done but the rollback not completed: still kept
	for _, c := range cs[:5] {
		_, err := s.MarkCompensation(ctx, c.CompensationID, r.RollbackID, store.CompensationDone, "")
		require.NoError(t, err)
	}
	expired, err = s.ExpireIdle(ctx)
	require.NoError(t, err)
	assert.NotContains(t, expired, "wf")
	_, _, err = s.CompleteRollback(ctx, r.RollbackID, false)
	require.NoError(t, err)
	// a workflow with a compensation still pending is kept too
	_, err = s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`"new"`)})
	require.NoError(t, err)
	clock.Advance(time.Hour)
	expired, err = s.ExpireIdle(ctx)
	require.NoError(t, err)
	assert.NotContains(t, expired, "wf")
	p, _ = count("wf")
	assert.Equal(t, 1, p)

	// nothing needed any more: expiry deletes the workflow with its log
	r, _, err = s.BeginRollback(ctx, "wf", "", "", 0)
	require.NoError(t, err)
	cs, err = s.Compensations(ctx, "wf", "", 0, 0)
	require.NoError(t, err)
	_, err = s.MarkCompensation(ctx, cs[len(cs)-1].CompensationID, r.RollbackID, store.CompensationDone, "")
	require.NoError(t, err)
	_, _, err = s.CompleteRollback(ctx, r.RollbackID, false)
	require.NoError(t, err)
	clock.Advance(time.Hour)
	expired, err = s.ExpireIdle(ctx)
	require.NoError(t, err)
	assert.Contains(t, expired, "wf")
	_, n = count("wf")
	assert.Zero(t, n)
	none, err := s.LatestRollback(ctx, "wf", "")
	require.NoError(t, err)
	assert.Nil(t, none)

	// complete with preserve keeps the log; without it, and delete, remove it
	for _, wf := range []string{"keep", "drop", "del"} {
		mustSave(t, s, store.SaveRequest{WorkflowID: wf})
		_, err := s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: wf, Action: json.RawMessage(`1`)})
		require.NoError(t, err)
		_, _, err = s.BeginRollback(ctx, wf, "", "", 0)
		require.NoError(t, err)
	}
	_, err = s.Complete(ctx, "keep", true)
	require.NoError(t, err)
	_, err = s.Complete(ctx, "drop", false)
	require.NoError(t, err)
	_, err = s.DeleteWorkflow(ctx, "del")
	require.NoError(t, err)
	_, n = count("keep")
	assert.Equal(t, 1, n)
	for _, wf := range []string{"drop", "del"} {
		_, n = count(wf)
		assert.Zero(t, n, wf)
		r, err := s.LatestRollback(ctx, wf, "")
		require.NoError(t, err)
		assert.Nil(t, r, wf)
	}
}

// TestSagaRetentionKeepsRollbackTargets: retention (after saves, keepLast alone or with maxAge,
// and checkpoint/prune) keeps the newest checkpoint whose validation did not fail and the
// target of an unfinished rollback: what a failed validation recommends rolling back to.
func testSagaRetentionKeepsRollbackTargets(t *testing.T, h *harness) {
	clock := NewClock()
	s := h.db(t, withClock(clock), withRetention(store.Retention{KeepLast: 2}))
	ctx := context.Background()
	left := func() []string {
		t.Helper()
		sms, err := s.List(ctx, store.ListFilter{WorkflowID: "wf"})
		require.NoError(t, err)
		var ids []string
		for _, sm := range sms {
			ids = append(ids, sm.CheckpointID)
		}
		return ids
	}
	save := func(id string, v *store.Validation) {
		t.Helper()
		mustSave(t, s, store.SaveRequest{WorkflowID: "wf", CheckpointID: id, Validation: v})
	}
	save("c1", validated("passed", 0.9))
	for _, id := range []string{"c2", "c3", "c4", "c5"} {
		save(id, nil)
	}
	save("c6", validated("failed", 0.1))
	assert.Equal(t, []string{"c6", "c5", "c1"}, left(), "keepLast 2, and the newest good one")
	save("c7", validated("warning", 0.75))
	assert.Equal(t, []string{"c7", "c6"}, left(), "c7 is the newest good one now")

	// an unfinished rollback keeps its target, whatever its validation
	_, _, err := s.BeginRollback(ctx, "wf", "", "c6", 6)
	require.NoError(t, err)
	save("c8", validated("failed", 0.1))
	save("c9", nil)
	assert.Equal(t, []string{"c9", "c8", "c7", "c6"}, left())
	_, err = s.Configure(ctx, "wf", &store.Retention{KeepLast: 1, MaxAgeSeconds: 60})
	require.NoError(t, err)
	clock.Advance(time.Hour)
	save("c10", nil)
	assert.Equal(t, []string{"c10", "c7", "c6"}, left(), "the keepLast + maxAge path too")
	res, err := s.Prune(ctx, store.PruneRequest{KeepLast: 1})
	require.NoError(t, err)
	assert.Zero(t, res.Deleted)
	assert.Equal(t, []string{"c10", "c7", "c6"}, left(), "and checkpoint/prune")

	// once the rollback is complete its target may go; the newest good one stays
	r, err := s.LatestRollback(ctx, "wf", "")
	require.NoError(t, err)
	_, _, err = s.CompleteRollback(ctx, r.RollbackID, false)
	require.NoError(t, err)
	res, err = s.Prune(ctx, store.PruneRequest{KeepLast: 1})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Deleted)
	assert.Equal(t, []string{"c10", "c7"}, left())
}

// TestSagaValidationExportImport: an archive carries each checkpoint's validation and the
// workflow's saga config; the imported checkpoints are what a failed validation's rollback
// recommendation chooses among, as they were at the source.
func testSagaValidationExportImport(t *testing.T, h *harness) {
	ctx := context.Background()
	src := h.db(t)
	v := &store.Validation{Status: "warning", Confidence: 0.8, Min: 0.7, Warning: 0.85, Message: "close",
		Details: json.RawMessage(`{"checks": [1, 2]}`)}
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c1", State: []byte(`{}`), Validation: validated("passed", 0.9)})
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c2", State: []byte(`{}`)})
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c3", State: []byte(`{}`), Validation: v})
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c4", Validation: validated("failed", 0.1)})
	require.NoError(t, src.SetSagaConfig(ctx, "wf", store.SagaConfig{Validation: json.RawMessage(`{"minConfidence": 0.7}`)}))
	rec, cps := exportAll(t, src, "wf")
	require.Len(t, cps, 4)
	require.NotNil(t, cps[2].Validation)
	assert.Equal(t, "close", cps[2].Validation.Message)

	dst := h.db(t)
	res, err := dst.Import(ctx, rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, 4, res.Imported)
	_, again := exportAll(t, dst, "wf")
	assert.Equal(t, cps, again, "validations survive the round trip")
	want, err := src.ValidationHistory(ctx, "wf", "", 0, 10)
	require.NoError(t, err)
	got, err := dst.ValidationHistory(ctx, "wf", "", 0, 10)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Len(t, got, 3)
	sms, err := dst.List(ctx, store.ListFilter{Validation: "failed"})
	require.NoError(t, err)
	require.Len(t, sms, 1)
	assert.Equal(t, "c4", sms[0].CheckpointID)
	cfg, err := dst.SagaConfig(ctx, "wf")
	require.NoError(t, err)
	assert.JSONEq(t, `{"minConfidence": 0.7}`, string(cfg.Validation))

	// a repeated save of an imported validated checkpoint is idempotent; another validation conflicts
	r, err := dst.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c3", State: []byte(`{}`), Validation: v})
	require.NoError(t, err)
	assert.True(t, r.Existing)
	_, err = dst.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c3", State: []byte(`{}`)})
	assert.ErrorIs(t, err, store.ErrConflict)
}

// TestSagaTwoBackendsOneDatabase: two backends on one database (two ckptd processes) save and
// register compensations for one workflow at once: registration seqs are 1..n without a gap or
// a repeat, each follows the checkpoint its caller saved before (AfterSeq), and AfterSeq never
// goes back in registration order. Rollbacks begun from both at once: one begins, the others
// get it; progress marked from both is kept, and completing it with prune from either removes
// what it ran.
func testSagaTwoBackendsOneDatabase(t *testing.T, h *harness) {
	ctx := context.Background()
	first := h.db(t, func(o *Options) { o.Durability = store.DurabilityNormal })
	stores := []store.Backend{first, h.reopen(t, first, func(o *Options) { o.Durability = store.DurabilityNormal })}
	const goroutines, per = 4, 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	savedBefore := map[string]int64{} // compensation id -> seq of the save its caller made first
	errs := make(chan error, goroutines*per*2)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(s store.Backend, g int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				res, err := s.Save(ctx, store.SaveRequest{WorkflowID: "wf", State: []byte(fmt.Sprintf(`{"g":%d,"i":%d}`, g, i))})
				if err != nil {
					errs <- err
					return
				}
				c, err := s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf", StepName: fmt.Sprint("s", g),
					Action: json.RawMessage(fmt.Sprintf(`{"g":%d,"i":%d}`, g, i))})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				savedBefore[c.CompensationID] = res.Seq
				mu.Unlock()
			}
		}(stores[g%2], g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	cs, err := stores[1].Compensations(ctx, "wf", "", 0, 0)
	require.NoError(t, err)
	require.Len(t, cs, goroutines*per)
	for i, c := range cs {
		require.Equal(t, int64(i+1), c.Seq, "registration seqs are 1..n")
		require.GreaterOrEqual(t, c.AfterSeq, savedBefore[c.CompensationID], "registered after its caller's save")
		if i > 0 {
			require.GreaterOrEqual(t, c.AfterSeq, cs[i-1].AfterSeq, "AfterSeq follows registration order")
		}
	}

	type begun struct {
		r     store.Rollback
		began bool
		err   error
	}
	out := make(chan begun, 6)
	for i := 0; i < cap(out); i++ {
		wg.Add(1)
		go func(s store.Backend) {
			defer wg.Done()
			r, b, err := s.BeginRollback(ctx, "wf", "", "", 0)
			out <- begun{r, b, err}
		}(stores[i%2])
	}
	wg.Wait()
	close(out)
	var id string
	n := 0
	for b := range out {
		require.NoError(t, b.err)
		if b.began {
			n++
		}
		if id == "" {
			id = b.r.RollbackID
		}
		require.Equal(t, id, b.r.RollbackID, "one unfinished rollback")
		require.Equal(t, int64(goroutines*per), b.r.MaxSeq)
	}
	require.Equal(t, 1, n, "exactly one begins")

	for i, c := range cs {
		wg.Add(1)
		go func(s store.Backend, c store.Compensation) {
			defer wg.Done()
			if _, err := s.MarkCompensation(ctx, c.CompensationID, id, store.CompensationDone, ""); err != nil {
				t.Error(err)
			}
		}(stores[i%2], c)
	}
	wg.Wait()
	_, pruned, err := stores[1].CompleteRollback(ctx, id, true)
	require.NoError(t, err)
	assert.Len(t, pruned, goroutines*per, "a full rollback prunes every checkpoint")
	left, err := stores[0].Compensations(ctx, "wf", "", 0, 0)
	require.NoError(t, err)
	assert.Empty(t, left, "the compensations it ran went with it")
}
