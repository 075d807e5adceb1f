package store

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func validated(status string, conf float64) *Validation {
	return &Validation{Status: status, Confidence: conf, Min: 0.7, Warning: 0.85}
}

func TestSagaValidationStoredAndListed(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	v := &Validation{Status: "warning", Confidence: 0.8, Min: 0.7, Warning: 0.85, Message: "looks plausible",
		Details: json.RawMessage(`{"checks": [1, 2], "z": "a"}`)}
	res := mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "c1", StepName: "search", State: []byte(`{}`), Validation: v})
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
	again := mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "c1", StepName: "search", State: []byte(`{}`), Validation: v})
	assert.True(t, again.Existing)
	assert.Equal(t, res.Seq, again.Seq)
	_, err = s.Save(ctx, SaveRequest{WorkflowID: "wf", CheckpointID: "c1", StepName: "search", State: []byte(`{}`),
		Validation: validated("failed", 0.1)})
	assert.ErrorIs(t, err, ErrConflict)
	_, err = s.Save(ctx, SaveRequest{WorkflowID: "wf", CheckpointID: "c1", StepName: "search", State: []byte(`{}`)})
	assert.ErrorIs(t, err, ErrConflict, "with and without a validation differ")

	// a checkpoint without one has none
	mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "c2", State: []byte(`{}`)})
	cp, err = s.Load(ctx, "c2")
	require.NoError(t, err)
	assert.Nil(t, cp.Validation)

	for _, bad := range []struct {
		v     *Validation
		field string
	}{
		{&Validation{Status: "great", Confidence: 0.5}, "validation.status"},
		{&Validation{Status: "passed", Confidence: 1.5}, "validation.confidence"},
		{&Validation{Status: "passed", Confidence: 0.9, Min: -1}, "validation.min"},
		{&Validation{Status: "passed", Confidence: 0.9, Details: json.RawMessage(`{`)}, "validation.details"},
	} {
		_, err := s.Save(ctx, SaveRequest{WorkflowID: "wf", State: []byte(`{}`), Validation: bad.v})
		var ie *InvalidError
		require.ErrorAs(t, err, &ie, bad.field)
		assert.Equal(t, bad.field, ie.Field)
	}
}

// TestSagaListValidationFilter: checkpoint/list's validation filter, alone and with every other
// filter, walks an index in list order.
func TestSagaListValidationFilter(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	statuses := []string{"passed", "", "warning", "failed", "passed", "failed", ""}
	want := map[string][]string{} // status -> ids newest first (every workflow)
	wantWF := map[string][]string{}
	for i, st := range statuses {
		for _, wf := range []string{"a", "b"} {
			id := fmt.Sprintf("%s-%d", wf, i)
			req := SaveRequest{WorkflowID: wf, CheckpointID: id, Metadata: json.RawMessage(`{"k": 1}`)}
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
	ids := func(f ListFilter) []string {
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
		assert.Equal(t, want[st], ids(ListFilter{Validation: st}), st)
		assert.Equal(t, wantWF[st], ids(ListFilter{Validation: st, WorkflowID: "a"}), st)
		assert.Equal(t, wantWF[st], ids(ListFilter{Validation: st, WorkflowID: "a", Namespace: &ns}), st)
		assert.Equal(t, want[st], ids(ListFilter{Validation: st, Namespace: &ns}), st)
		assert.Equal(t, want[st], ids(ListFilter{Validation: st, Metadata: map[string]json.RawMessage{"k": json.RawMessage("1")}}), st)
		assert.Equal(t, want[st][1:], ids(ListFilter{Validation: st, Before: want[st][0]}), st)
		assert.Equal(t, want[st][:1], ids(ListFilter{Validation: st, Limit: 1}), st)
	}
	assert.Empty(t, ids(ListFilter{Validation: "failed", Phase: PhaseFailed}))
	_, err := s.List(ctx, ListFilter{Validation: "bad"})
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, "validation", ie.Field)

	conn, err := s.rdb.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for _, f := range []ListFilter{{Validation: "failed"}, {Validation: "failed", Before: "a-3"}, {Validation: "failed", Phase: PhaseCompleted},
		{Validation: "failed", WorkflowID: "a"}, {Validation: "failed", Namespace: &ns}} {
		f.Limit = 10
		q, args, err := listQuery(f, 10, 5, false)
		require.NoError(t, err)
		rows, err := conn.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Close())
		joined := strings.Join(plan, "; ")
		require.NotContains(t, joined, "TEMP B-TREE", "%+v: %s", f, joined)
		require.Contains(t, joined, "USING", "%+v: %s", f, joined)
	}
}

func TestSagaValidationHistory(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for i, st := range []string{"passed", "", "failed", "warning", ""} {
		req := SaveRequest{WorkflowID: "wf", CheckpointID: fmt.Sprintf("c%d", i+1)}
		if st != "" {
			req.Validation = validated(st, 0.5)
		}
		mustSave(t, s, req)
	}
	mustSave(t, s, SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "other", Validation: validated("passed", 1)})
	h, err := s.ValidationHistory(ctx, "wf", "", 0, 10)
	require.NoError(t, err)
	assert.Equal(t, []ValidationRef{{"c4", 4, "warning"}, {"c3", 3, "failed"}, {"c1", 1, "passed"}}, h)
	h, err = s.ValidationHistory(ctx, "wf", "", 4, 1)
	require.NoError(t, err)
	assert.Equal(t, []ValidationRef{{"c3", 3, "failed"}}, h)
	h, err = s.ValidationHistory(ctx, "wf", "sub", 0, 10)
	require.NoError(t, err)
	assert.Equal(t, []ValidationRef{{"other", 6, "passed"}}, h)
}

func TestSagaRegisterAndConfig(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	reg := func(wf, ns, step string) Compensation {
		t.Helper()
		c, err := s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: wf, Namespace: ns, StepName: step,
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
	mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "c1"})
	mustSave(t, s, SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "c2"})
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
	assert.ErrorIs(t, err, ErrNotFound)

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
		req   CompensationRequest
		field string
	}{
		{CompensationRequest{Action: json.RawMessage(`{}`)}, "workflowId"},
		{CompensationRequest{WorkflowID: "wf"}, "action"},
		{CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`null`)}, "action"},
		{CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`{`)}, "action"},
	} {
		_, err := s.RegisterCompensation(ctx, bad.req)
		var ie *InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, bad.field, ie.Field)
	}
	_, err = s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`"` + strings.Repeat("x", MaxCompensationActionBytes) + `"`)})
	assert.ErrorIs(t, err, ErrTooLarge)

	// the saga config lives beside the sources in workflows.config
	require.NoError(t, s.SetWorkflowSources(ctx, "wf", json.RawMessage(`{"root": "/src"}`)))
	require.NoError(t, s.SetSagaConfig(ctx, "wf", SagaConfig{Validation: json.RawMessage(`{"minConfidence": 0.5}`)}))
	require.NoError(t, s.SetSagaConfig(ctx, "wf", SagaConfig{Compensation: json.RawMessage(`{"required": ["write"]}`)}))
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
	assert.Equal(t, SagaConfig{}, cfg)
	require.NoError(t, s.SetSagaConfig(ctx, "fresh", SagaConfig{Validation: json.RawMessage(`{}`)}))
	_, err = s.Workflow(ctx, "fresh")
	require.NoError(t, err, "configuring creates the workflow")
}

// TestSagaOpenCompensationForStep: a required step's completed save needs a compensation
// registered since that step last completed, not yet done.
func TestSagaOpenCompensationForStep(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	open := func(step string) bool {
		t.Helper()
		ok, err := s.OpenCompensationForStep(ctx, "wf", "", step)
		require.NoError(t, err)
		return ok
	}
	reg := func(step string) Compensation {
		c, err := s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: "wf", StepName: step, Action: json.RawMessage(`1`)})
		require.NoError(t, err)
		return c
	}
	assert.False(t, open("write"))
	mustSave(t, s, SaveRequest{WorkflowID: "wf", Phase: PhaseBeforeStep, StepName: "write"})
	reg("write")
	assert.True(t, open("write"))
	assert.False(t, open("read"))
	mustSave(t, s, SaveRequest{WorkflowID: "wf", Phase: PhaseCompleted, StepName: "write"})
	assert.False(t, open("write"), "the next run of the step needs its own")
	mustSave(t, s, SaveRequest{WorkflowID: "wf", Phase: PhaseBeforeStep, StepName: "write"})
	c := reg("write")
	assert.True(t, open("write"))
	// one done by a rollback no longer counts
	r, _, err := s.BeginRollback(ctx, "wf", "", "", 0)
	require.NoError(t, err)
	_, err = s.MarkCompensation(ctx, c.CompensationID, r.RollbackID, CompensationDone, "")
	require.NoError(t, err)
	assert.False(t, open("write"))
	// another namespace is another workflow run
	_, err = s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: "wf", Namespace: "sub", StepName: "write", Action: json.RawMessage(`1`)})
	require.NoError(t, err)
	assert.False(t, open("write"))
}

func TestSagaRollbackLifecycle(t *testing.T) {
	var notes []string
	s := openTest(t)
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		notes = append(notes, wf+" "+reason+" "+strings.Join(ids, ","))
	})
	ctx := context.Background()
	mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "c1"})
	target := mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "c2", Validation: validated("passed", 0.9)})
	var comps []Compensation
	for i := 0; i < 3; i++ {
		mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: fmt.Sprintf("c%d", 3+i)})
		c, err := s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(fmt.Sprint(i))})
		require.NoError(t, err)
		comps = append(comps, c)
	}
	mustSave(t, s, SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "s1"})

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
	_, err = s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`9`)})
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

	c, err := s.MarkCompensation(ctx, comps[2].CompensationID, r.RollbackID, CompensationFailed, "disk busy")
	require.NoError(t, err)
	assert.Equal(t, "failed", c.Status)
	assert.Equal(t, "disk busy", c.Error)
	assert.Equal(t, r.RollbackID, c.RollbackID)
	c, err = s.MarkCompensation(ctx, comps[2].CompensationID, r.RollbackID, CompensationDone, "")
	require.NoError(t, err)
	assert.Equal(t, "done", c.Status)
	c, err = s.MarkCompensation(ctx, comps[2].CompensationID, r.RollbackID, CompensationFailed, "late")
	require.NoError(t, err)
	assert.Equal(t, "done", c.Status, "done stays done")
	_, err = s.MarkCompensation(ctx, "nope", r.RollbackID, CompensationDone, "")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = s.MarkCompensation(ctx, comps[1].CompensationID, "nope", CompensationDone, "")
	assert.ErrorIs(t, err, ErrNotFound)
	for _, cc := range comps[:2] {
		_, err = s.MarkCompensation(ctx, cc.CompensationID, r.RollbackID, CompensationDone, "")
		require.NoError(t, err)
	}

	done, pruned, err := s.CompleteRollback(ctx, r.RollbackID, true)
	require.NoError(t, err)
	assert.False(t, done.CompletedAt.IsZero())
	assert.Equal(t, []string{"c3", "c4", "c5"}, pruned, "the checkpoints after the target, its namespace only")
	assert.Equal(t, []string{"wf rollback c3,c4,c5"}, notes)
	sms, err := s.List(ctx, ListFilter{WorkflowID: "wf"})
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
	_, err = s.MarkCompensation(ctx, rest[0].CompensationID, r.RollbackID, CompensationDone, "")
	assert.ErrorIs(t, err, ErrConflict, "a complete rollback takes no more progress")
	_, _, err = s.CompleteRollback(ctx, "nope", false)
	assert.ErrorIs(t, err, ErrNotFound)
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
func TestSagaRetentionKeepsNeededCompensations(t *testing.T) {
	clock := newClock()
	s := openTest(t, func(o *Options) {
		o.Now = clock.Now
		o.DefaultRetention = Retention{KeepLast: 2}
	})
	ctx := context.Background()
	count := func(wf string) (pending, total int) {
		t.Helper()
		cs, err := s.Compensations(ctx, wf, "", 0, 0)
		require.NoError(t, err)
		for _, c := range cs {
			if c.Status != CompensationDone {
				pending++
			}
		}
		return pending, len(cs)
	}
	// 10 steps, each registering a compensation: keepLast 2 prunes 8 checkpoints, no compensation
	for i := 0; i < 10; i++ {
		mustSave(t, s, SaveRequest{WorkflowID: "wf", Validation: validated("passed", 0.9)})
		_, err := s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(fmt.Sprint(i))})
		require.NoError(t, err)
	}
	info, err := s.Workflow(ctx, "wf")
	require.NoError(t, err)
	assert.Equal(t, 2, info.Count)
	p, n := count("wf")
	assert.Equal(t, 10, p)
	assert.Equal(t, 10, n)
	_, err = s.Configure(ctx, "wf", &Retention{KeepLast: 1, MaxAgeSeconds: 1})
	require.NoError(t, err)
	res, err := s.Prune(ctx, PruneRequest{KeepLast: 1})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Deleted)
	clock.Advance(time.Hour)
	mustSave(t, s, SaveRequest{WorkflowID: "wf", Validation: validated("passed", 0.9)}) // maxAge: the older one goes
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
		_, err := s.MarkCompensation(ctx, c.CompensationID, r.RollbackID, CompensationDone, "")
		require.NoError(t, err)
	}
	_, err = s.Configure(ctx, "wf", &Retention{KeepLast: 1, IdleTTLSeconds: 60})
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
		_, err := s.MarkCompensation(ctx, c.CompensationID, r.RollbackID, CompensationDone, "")
		require.NoError(t, err)
	}
	expired, err = s.ExpireIdle(ctx)
	require.NoError(t, err)
	assert.NotContains(t, expired, "wf")
	_, _, err = s.CompleteRollback(ctx, r.RollbackID, false)
	require.NoError(t, err)
	// a workflow with a compensation still pending is kept too
	_, err = s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`"new"`)})
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
	_, err = s.MarkCompensation(ctx, cs[len(cs)-1].CompensationID, r.RollbackID, CompensationDone, "")
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
		mustSave(t, s, SaveRequest{WorkflowID: wf})
		_, err := s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: wf, Action: json.RawMessage(`1`)})
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

// TestSagaMigrateFromV5: a database of the schema before validation and compensations migrates;
// its checkpoints list without a validation and it takes the new rows.
func TestSagaMigrateFromV5(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckptd.db")
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: path, maxSchema: 5, noBackground: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = rawDB(t, path).Exec(`INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at) VALUES ('wf', 2, 1, 1);
		INSERT INTO checkpoints(checkpoint_id, workflow_id, namespace, seq, phase, step, state_type, size, stored_size, dedup,
		completed_count, pending_count, created_at, format_version, content_hash) VALUES ('old', 'wf', '', 1, 'completed', 0,
		'none', 0, 0, 0, 0, 0, 1, 1, X'00')`)
	require.NoError(t, err)
	s, err = Open(ctx, Options{Path: path, noBackground: true})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, SchemaVersion, userVersion(t, path))
	sms, err := s.List(ctx, ListFilter{WorkflowID: "wf"})
	require.NoError(t, err)
	require.Len(t, sms, 1)
	assert.Nil(t, sms[0].Validation)
	c, err := s.RegisterCompensation(ctx, CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`1`)})
	require.NoError(t, err)
	assert.Equal(t, int64(1), c.AfterSeq)
	res := mustSave(t, s, SaveRequest{WorkflowID: "wf", Validation: validated("failed", 0.2)})
	assert.Equal(t, int64(2), res.Seq)
}

// TestSagaRetentionKeepsRollbackTargets: retention (after saves, keepLast alone or with maxAge,
// and checkpoint/prune) keeps the newest checkpoint whose validation did not fail and the
// target of an unfinished rollback: what a failed validation recommends rolling back to.
func TestSagaRetentionKeepsRollbackTargets(t *testing.T) {
	clock := newClock()
	s := openTest(t, func(o *Options) {
		o.Now = clock.Now
		o.DefaultRetention = Retention{KeepLast: 2}
	})
	ctx := context.Background()
	left := func() []string {
		t.Helper()
		sms, err := s.List(ctx, ListFilter{WorkflowID: "wf"})
		require.NoError(t, err)
		var ids []string
		for _, sm := range sms {
			ids = append(ids, sm.CheckpointID)
		}
		return ids
	}
	save := func(id string, v *Validation) {
		t.Helper()
		mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: id, Validation: v})
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
	_, err = s.Configure(ctx, "wf", &Retention{KeepLast: 1, MaxAgeSeconds: 60})
	require.NoError(t, err)
	clock.Advance(time.Hour)
	save("c10", nil)
	assert.Equal(t, []string{"c10", "c7", "c6"}, left(), "the keepLast + maxAge path too")
	res, err := s.Prune(ctx, PruneRequest{KeepLast: 1})
	require.NoError(t, err)
	assert.Zero(t, res.Deleted)
	assert.Equal(t, []string{"c10", "c7", "c6"}, left(), "and checkpoint/prune")

	// once the rollback is complete its target may go; the newest good one stays
	r, err := s.LatestRollback(ctx, "wf", "")
	require.NoError(t, err)
	_, _, err = s.CompleteRollback(ctx, r.RollbackID, false)
	require.NoError(t, err)
	res, err = s.Prune(ctx, PruneRequest{KeepLast: 1})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Deleted)
	assert.Equal(t, []string{"c10", "c7"}, left())
}
