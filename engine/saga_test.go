package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/saga"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

func sagaEngine(t *testing.T) (*Engine, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "saga.db")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return New(st, nil), st
}

// step saves a completed checkpoint of step name with a confidence (NaN: no validation).
func step(t *testing.T, e *Engine, wf, id, name string, conf float64) StepSave {
	t.Helper()
	var v *ValidationInput
	if !math.IsNaN(conf) {
		v = &ValidationInput{Confidence: conf}
	}
	res, err := e.SaveStep(context.Background(), store.SaveRequest{WorkflowID: wf, CheckpointID: id, StepName: name,
		Phase: store.PhaseCompleted, State: []byte(`{"id":"` + id + `"}`)}, nil, v, nil)
	require.NoError(t, err)
	return res
}

func register(t *testing.T, st *sqlite.Store, wf, name string, action any) store.Compensation {
	t.Helper()
	b, _ := json.Marshal(action)
	c, err := st.RegisterCompensation(context.Background(), store.CompensationRequest{WorkflowID: wf, StepName: name, Action: b,
		Description: fmt.Sprint(action)})
	require.NoError(t, err)
	return c
}

func TestSaveStepClassifiesAndRecommends(t *testing.T) {
	e, st := sagaEngine(t)
	ctx := context.Background()
	require.NoError(t, st.SetSagaConfig(ctx, "wf", store.SagaConfig{Validation: json.RawMessage(
		`{"minConfidence": 0.6, "steps": {"search": {"minConfidence": 0.3, "warningThreshold": 0.5}, "lenient": {"rollbackOnFailure": false}}}`)}))

	r := step(t, e, "wf", "c1", "plan", 0.9)
	require.NotNil(t, r.Validation)
	assert.Equal(t, "passed", r.Validation.Status)
	assert.Equal(t, 0.6, r.Validation.Thresholds.Min)
	assert.Equal(t, 0.85, r.Validation.Thresholds.Warning, "default warning threshold")
	assert.Nil(t, r.Validation.Recommendation)

	r = step(t, e, "wf", "c2", "search", 0.4) // per-step thresholds: a warning
	assert.Equal(t, "warning", r.Validation.Status)
	assert.Equal(t, 0.3, r.Validation.Thresholds.Min)

	step(t, e, "wf", "c3", "edit", math.NaN()) // no validation: no target
	r = step(t, e, "wf", "c4", "lenient", 0.1)
	assert.Equal(t, "failed", r.Validation.Status)
	assert.Nil(t, r.Validation.Recommendation, "rollbackOnFailure false for this step")

	r = step(t, e, "wf", "c5", "edit", 0.2) // failed: back past c4 (failed) and c3 (unvalidated) to c2
	assert.Equal(t, "failed", r.Validation.Status)
	assert.Equal(t, &protocol.Recommendation{Kind: saga.KindToCheckpoint, CheckpointID: "c2"}, r.Validation.Recommendation)

	r = step(t, e, "other", "o1", "x", 0.1)
	assert.Equal(t, &protocol.Recommendation{Kind: saga.KindFull}, r.Validation.Recommendation, "nothing earlier: full")

	// the status is stored with the checkpoint
	cp, err := st.Load(ctx, "c5")
	require.NoError(t, err)
	require.NotNil(t, cp.Validation)
	assert.Equal(t, "failed", cp.Validation.Status)
	vr, err := e.ValidationOf(ctx, cp.Summary)
	require.NoError(t, err)
	assert.Equal(t, "c2", vr.Recommendation.CheckpointID, "the recommendation is made again on read")

	// NaN and out-of-range confidences are refused naming the field; nothing is stored
	for _, bad := range []float64{math.NaN(), -0.1, 1.1, math.Inf(1)} {
		_, err := e.SaveStep(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "bad"}, nil, &ValidationInput{Confidence: bad}, nil)
		field, _, ok := IsSagaInput(err)
		require.True(t, ok, "%v: %v", bad, err)
		assert.Equal(t, "validation.confidence", field)
	}
	_, err = st.Load(ctx, "bad")
	assert.ErrorIs(t, err, store.ErrNotFound)
}

func TestSaveStepRecommendationPages(t *testing.T) {
	e, _ := sagaEngine(t)
	step(t, e, "wf", "good", "s", 0.99)
	for i := 0; i < historyPage+10; i++ { // more failures than one page holds
		r, err := e.SaveStep(context.Background(), store.SaveRequest{WorkflowID: "wf", StepName: "s"}, nil,
			&ValidationInput{Confidence: 0.1}, nil)
		require.NoError(t, err)
		require.NotNil(t, r.Validation.Recommendation)
		require.Equal(t, "good", r.Validation.Recommendation.CheckpointID)
	}
}

func TestSaveStepRequiresCompensation(t *testing.T) {
	e, st := sagaEngine(t)
	ctx := context.Background()
	require.NoError(t, st.SetSagaConfig(ctx, "wf", store.SagaConfig{Compensation: json.RawMessage(`{"required": ["write"]}`)}))
	save := func(phase store.Phase, name string) error {
		_, err := e.SaveStep(ctx, store.SaveRequest{WorkflowID: "wf", Phase: phase, StepName: name}, nil, nil, nil)
		return err
	}
	require.NoError(t, save(store.PhaseBeforeStep, "write"))
	err := save(store.PhaseCompleted, "write")
	var re *RequiredError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "write", re.Problem.StepName)
	assert.Equal(t, saga.CodeCompensationRequired, re.Problem.Code)
	require.NoError(t, save(store.PhaseFailed, "write"), "only completed needs one")
	require.NoError(t, save(store.PhaseCompleted, "read"))
	register(t, st, "wf", "write", "undo")
	require.NoError(t, save(store.PhaseCompleted, "write"))
	require.ErrorAs(t, save(store.PhaseCompleted, "write"), &re, "the next run registers its own")
	n, err := st.List(ctx, store.ListFilter{WorkflowID: "wf"})
	require.NoError(t, err)
	assert.Len(t, n, 4, "refused saves stored nothing")
}

func TestPlanRollbackLifecycle(t *testing.T) {
	e, st := sagaEngine(t)
	ctx := context.Background()
	step(t, e, "wf", "c1", "a", 0.95)
	var comps []store.Compensation
	for i := 2; i <= 5; i++ {
		comps = append(comps, register(t, st, "wf", "w", fmt.Sprintf("undo-%d", i)))
		step(t, e, "wf", fmt.Sprintf("c%d", i), "w", math.NaN())
	}
	failed := step(t, e, "wf", "c6", "w", 0.1)
	require.Equal(t, "c1", failed.Validation.Recommendation.CheckpointID)

	ids := func(cs []store.Compensation) []string {
		out := []string{}
		for _, c := range cs {
			out = append(out, c.CompensationID)
		}
		return out
	}
	reversed := []string{comps[3].CompensationID, comps[2].CompensationID, comps[1].CompensationID, comps[0].CompensationID}

	// resume/plan {rollback: true} previews without beginning
	rp, err := e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf", Rollback: true})
	require.NoError(t, err)
	require.NotNil(t, rp.Checkpoint)
	assert.Equal(t, "c1", rp.Checkpoint.CheckpointID)
	assert.Equal(t, int64(1), rp.Plan.StartStep)
	require.NotNil(t, rp.Rollback)
	assert.Empty(t, rp.Rollback.Rollback.RollbackID)
	assert.Equal(t, reversed, ids(rp.Rollback.Actions))

	v, err := e.PlanRollback(ctx, "wf", "", saga.Request{})
	require.NoError(t, err)
	require.NotEmpty(t, v.Rollback.RollbackID)
	assert.Equal(t, "c1", v.Rollback.ToCheckpointID)
	assert.Equal(t, reversed, ids(v.Actions))
	assert.Equal(t, saga.Progress{Total: 4, Pending: 4}, v.Progress)

	// a compensation registered now is not part of it
	late := register(t, st, "wf", "w", "late")
	_, _, err = e.MarkDone(ctx, late.CompensationID, v.Rollback.RollbackID, true, "")
	var ni *NotInRollbackError
	require.ErrorAs(t, err, &ni)

	c, remaining, err := e.MarkDone(ctx, reversed[0], v.Rollback.RollbackID, true, "")
	require.NoError(t, err)
	assert.Equal(t, "done", c.Status)
	assert.Equal(t, 3, remaining)
	_, remaining, err = e.MarkDone(ctx, reversed[1], v.Rollback.RollbackID, false, "permission denied")
	require.NoError(t, err)
	assert.Equal(t, 3, remaining, "a failed action is still to run")

	// planning again: the same rollback, only what is not done (the failed one again)
	again, err := e.PlanRollback(ctx, "wf", "", saga.Request{ToCheckpointID: "c1"})
	require.NoError(t, err)
	assert.Equal(t, v.Rollback.RollbackID, again.Rollback.RollbackID)
	assert.Equal(t, reversed[1:], ids(again.Actions))
	assert.Equal(t, "failed", again.Actions[0].Status)
	assert.Equal(t, "permission denied", again.Actions[0].Error)
	assert.Equal(t, saga.Progress{Total: 4, Done: 1, Failed: 1, Pending: 2}, again.Progress)
	_, err = e.PlanRollback(ctx, "wf", "", saga.Request{Full: true})
	var ue *saga.UnfinishedError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, v.Rollback.RollbackID, ue.Rollback.ID)

	// a plain resume plan reports the unfinished rollback
	rp, err = e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf"})
	require.NoError(t, err)
	assert.Equal(t, "c6", rp.Checkpoint.CheckpointID)
	require.NotNil(t, rp.Validation)
	assert.Equal(t, "failed", rp.Validation.Status)
	require.NotNil(t, rp.Rollback)
	assert.Equal(t, v.Rollback.RollbackID, rp.Rollback.Rollback.RollbackID)
	assert.Len(t, rp.Rollback.Actions, 3)

	_, _, err = e.CompleteRollback(ctx, v.Rollback.RollbackID, true)
	var pe *PendingError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, reversed[2:], pe.Pending)
	for _, id := range reversed[2:] {
		_, _, err := e.MarkDone(ctx, id, v.Rollback.RollbackID, true, "")
		require.NoError(t, err)
	}
	done, pruned, err := e.CompleteRollback(ctx, v.Rollback.RollbackID, true)
	require.NoError(t, err, "a failed action does not keep a rollback open")
	assert.Equal(t, []string{"c2", "c3", "c4", "c5", "c6"}, pruned)
	assert.Equal(t, saga.Progress{Total: 4, Done: 3, Failed: 1}, done.Progress)
	_, _, err = e.MarkDone(ctx, reversed[1], v.Rollback.RollbackID, true, "")
	require.ErrorIs(t, err, store.ErrConflict)

	// after the rollback the plan starts after c1 again; the failed and the late compensations
	// are what a next rollback would run
	rp, err = e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf"})
	require.NoError(t, err)
	assert.Equal(t, "c1", rp.Checkpoint.CheckpointID)
	assert.Nil(t, rp.Rollback)
	next, err := e.PreviewRollback(ctx, "wf", "", saga.Request{})
	require.NoError(t, err)
	assert.Equal(t, []string{late.CompensationID, reversed[1]}, ids(next.Actions))

	// errors naming the target
	_, err = e.PlanRollback(ctx, "wf", "", saga.Request{ToCheckpointID: "nope"})
	var me *MissingError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "checkpointId", me.Key)
	step(t, e, "other", "o1", "x", 0.9)
	_, err = e.PlanRollback(ctx, "wf", "", saga.Request{ToCheckpointID: "o1"})
	var ww *WrongWorkflowError
	require.ErrorAs(t, err, &ww)
	_, err = st.Save(ctx, store.SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "s1"})
	require.NoError(t, err)
	_, err = e.PlanRollback(ctx, "wf", "", saga.Request{ToCheckpointID: "s1"})
	field, _, ok := IsSagaInput(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, "toCheckpointId", field)
	_, _, err = e.MarkDone(ctx, reversed[0], "nope", true, "")
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "rollbackId", me.Key)
}

func TestPlanResumeFullRollback(t *testing.T) {
	e, st := sagaEngine(t)
	ctx := context.Background()
	a := register(t, st, "wf", "w", "a")
	step(t, e, "wf", "c1", "w", math.NaN())
	b := register(t, st, "wf", "w", "b")
	r := step(t, e, "wf", "c2", "w", 0.1)
	assert.Equal(t, saga.KindFull, r.Validation.Recommendation.Kind)
	rp, err := e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf", Rollback: true})
	require.NoError(t, err)
	assert.Nil(t, rp.Checkpoint)
	assert.False(t, rp.Blocked(false))
	assert.Equal(t, int64(0), rp.Plan.StartStep)
	require.NotNil(t, rp.Rollback)
	assert.True(t, rp.Rollback.Rollback.Full())
	require.Len(t, rp.Rollback.Actions, 2)
	assert.Equal(t, b.CompensationID, rp.Rollback.Actions[0].CompensationID)
	assert.Equal(t, a.CompensationID, rp.Rollback.Actions[1].CompensationID)
	// an explicit target
	rp, err = e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf", ToCheckpointID: "c1"})
	require.NoError(t, err)
	assert.Equal(t, "c1", rp.Checkpoint.CheckpointID)
	require.Len(t, rp.Rollback.Actions, 1)
	assert.Equal(t, b.CompensationID, rp.Rollback.Actions[0].CompensationID)
}
