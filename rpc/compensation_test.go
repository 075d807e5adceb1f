package rpc

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// newSagaConn is a Server on pipes (like newLGConn) that keeps every checkpoint.
func newSagaConn(t *testing.T) *lgConn {
	t.Helper()
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "saga.db")})
	require.NoError(t, err)
	srv := New(st, Options{Version: "test", Durability: "full"})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &lgConn{t: t, in: inW, r: framing.NewReader(outR, framing.Limits{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		_ = srv.Serve(context.Background(), inR, outW)
		_ = outW.Close()
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
		require.NoError(t, st.Close())
	})
	return c
}

// errData calls method expecting code and returns the error's data.
func (c *lgConn) errData(method string, params any, code int) map[string]any {
	c.t.Helper()
	r := c.call(method, params, nil)
	require.NotNil(c.t, r.Error, "%s should fail", method)
	require.Equal(c.t, code, r.Error.Code, r.Error.Message)
	var d map[string]any
	if len(r.Error.Data) > 0 {
		require.NoError(c.t, json.Unmarshal(r.Error.Data, &d))
	}
	return d
}

func TestSagaSaveValidationRPC(t *testing.T) {
	c := newSagaConn(t)
	var cfg protocol.ConfigureResult
	c.ok("workflow/configure", map[string]any{"workflowId": "wf", "validation": map[string]any{
		"minConfidence": 0.6, "steps": map[string]any{"search": map[string]any{"minConfidence": 0.3, "warningThreshold": 0.5}}}}, nil, &cfg)
	require.NotNil(t, cfg.Validation)
	assert.Equal(t, protocol.EffectiveValidation{MinConfidence: 0.6, WarningThreshold: 0.85, RollbackOnFailure: true,
		Steps: map[string]protocol.StepValidationConfig{"search": {MinConfidence: ptr(0.3), WarningThreshold: ptr(0.5)}}}, *cfg.Validation)
	assert.Nil(t, cfg.Compensation)

	save := func(id, step string, conf any) protocol.SaveResult {
		t.Helper()
		var r protocol.SaveResult
		c.ok("checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": id, "stepName": step, "state": map[string]any{"id": id},
			"validation": map[string]any{"confidence": conf, "message": "scored " + id, "details": map[string]any{"by": "test"}}}, nil, &r)
		require.NotNil(t, r.Validation)
		return r
	}
	r := save("c1", "plan", 0.85)
	assert.Equal(t, protocol.ValidationResult{Status: "passed", Confidence: 0.85, Thresholds: protocol.ValidationThresholds{Min: 0.6, Warning: 0.85}}, *r.Validation)
	r = save("c2", "search", 0.3)
	assert.Equal(t, "warning", r.Validation.Status, "exactly at the step's minimum")
	r = save("c3", "edit", 0.59)
	assert.Equal(t, "failed", r.Validation.Status)
	assert.Equal(t, &protocol.Recommendation{Kind: "to_checkpoint", CheckpointID: "c2"}, r.Validation.Recommendation)

	// stored: load and list show it, list filters on it
	var ld protocol.LoadResult
	c.ok("checkpoint/load", map[string]any{"checkpointId": "c3"}, nil, &ld)
	require.NotNil(t, ld.Validation)
	assert.Equal(t, protocol.ValidationInfo{Status: "failed", Confidence: 0.59, Thresholds: protocol.ValidationThresholds{Min: 0.6, Warning: 0.85},
		Message: "scored c3", Details: json.RawMessage(`{"by":"test"}`)}, *ld.Validation)
	c.ok("checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "c4"}, nil, nil)
	for status, want := range map[string][]string{"passed": {"c1"}, "warning": {"c2"}, "failed": {"c3"}} {
		var l protocol.ListResult
		c.ok("checkpoint/list", map[string]any{"workflowId": "wf", "validation": status}, nil, &l)
		got := []string{}
		for _, sm := range l.Checkpoints {
			got = append(got, sm.CheckpointID)
		}
		assert.Equal(t, want, got, status)
	}
	var all protocol.ListResult
	c.ok("checkpoint/list", map[string]any{"workflowId": "wf"}, nil, &all)
	require.Len(t, all.Checkpoints, 4)
	assert.Nil(t, all.Checkpoints[0].Validation, "c4 has none")
	raw := c.call("checkpoint/list", map[string]any{"workflowId": "wf", "limit": 1}, nil)
	assert.NotContains(t, string(raw.Result), "validation", "omitted, not null, when absent")

	// bad input: -32602 naming the field, nothing stored
	for _, tc := range []struct {
		method string
		params map[string]any
		field  string
		reason string
	}{
		{"checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "x", "validation": map[string]any{"confidence": "NaN"}}, "validation.confidence", "NaN is not a number in [0, 1]"},
		{"checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "x", "validation": map[string]any{"confidence": "Infinity"}}, "validation.confidence", "Infinity is not a number in [0, 1]"},
		{"checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "x", "validation": map[string]any{"confidence": "-Infinity"}}, "validation.confidence", "-Infinity is not a number in [0, 1]"},
		{"checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "x", "validation": map[string]any{"confidence": 1.5}}, "validation.confidence", "1.5 is out of range [0, 1]"},
		{"checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "x", "validation": map[string]any{"confidence": -0.5}}, "validation.confidence", "-0.5 is out of range [0, 1]"},
		{"checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "x", "validation": map[string]any{"confidence": json.RawMessage("1e400")}}, "validation.confidence", "Infinity is not a number in [0, 1]"},
		{"checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "x", "validation": map[string]any{"confidence": "0.5"}}, "validation.confidence", `must be a number in [0, 1], not the string "0.5"`},
		{"checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "x", "validation": map[string]any{}}, "validation.confidence", "required (a number in [0, 1])"},
		{"checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "x", "validation": map[string]any{"confidence": true}}, "validation.confidence", "must be a number in [0, 1]"},
		{"checkpoint/list", map[string]any{"validation": "meh"}, "validation", `"meh" is not one of passed, warning, failed`},
		{"workflow/configure", map[string]any{"workflowId": "wf", "validation": map[string]any{"minConfidence": 2}}, "validation.minConfidence", "2 is out of range [0, 1]"},
		{"workflow/configure", map[string]any{"workflowId": "wf", "validation": map[string]any{"steps": map[string]any{"s": map[string]any{"warningThreshold": 0.1}}}},
			"validation.steps.s.minConfidence", "0.7 is above the step's warningThreshold 0.1"},
		{"workflow/configure", map[string]any{"workflowId": "wf", "compensation": map[string]any{"required": []string{""}}}, "compensation.required[0]", "a step name must not be empty"},
	} {
		d := c.errData(tc.method, tc.params, protocol.CodeInvalidParams)
		assert.Equal(t, tc.field, d["field"], "%v", tc.params)
		assert.Equal(t, tc.reason, d["reason"], "%v", tc.params)
	}
	c.fail("checkpoint/load", map[string]any{"checkpointId": "x"}, nil, protocol.CodeNotFound, "")
	// the refused configures changed nothing
	c.ok("workflow/configure", map[string]any{"workflowId": "wf"}, nil, &cfg)
	assert.Equal(t, 0.6, cfg.Validation.MinConfidence)
	// {} resets to the defaults
	var reset protocol.ConfigureResult
	c.ok("workflow/configure", map[string]any{"workflowId": "wf", "validation": map[string]any{}}, nil, &reset)
	assert.Equal(t, protocol.EffectiveValidation{MinConfidence: 0.7, WarningThreshold: 0.85, RollbackOnFailure: true}, *reset.Validation)
}

func ptr[T any](v T) *T { return &v }

func TestSagaRequiredCompensationRPC(t *testing.T) {
	c := newSagaConn(t)
	var cfg protocol.ConfigureResult
	c.ok("workflow/configure", map[string]any{"workflowId": "wf", "compensation": map[string]any{"required": []string{"write"}}}, nil, &cfg)
	assert.Equal(t, &protocol.CompensationConfig{Required: []string{"write"}}, cfg.Compensation)
	c.ok("checkpoint/save", map[string]any{"workflowId": "wf", "phase": "before_step", "stepName": "write"}, nil, nil)
	d := c.errData("checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "w1", "stepName": "write"}, protocol.CodeResumeInvalid)
	problems := d["problems"].([]any)
	require.Len(t, problems, 1)
	p := problems[0].(map[string]any)
	assert.Equal(t, "compensation_required", p["code"])
	assert.Equal(t, "write", p["stepName"])
	assert.Contains(t, p["message"], `"write"`)
	c.fail("checkpoint/load", map[string]any{"checkpointId": "w1"}, nil, protocol.CodeNotFound, "")

	var reg protocol.CompensationRegisterResult
	c.ok("compensation/register", map[string]any{"workflowId": "wf", "stepName": "write", "action": map[string]any{"kind": "delete_file", "path": "/tmp/f"},
		"description": "remove /tmp/f"}, nil, &reg)
	assert.NotEmpty(t, reg.CompensationID)
	assert.Equal(t, int64(1), reg.Seq)
	c.ok("checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "w1", "stepName": "write"}, nil, nil)
	c.ok("checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "w1", "stepName": "write"}, nil, nil) // idempotent repeat
}

func TestSagaRollbackRPC(t *testing.T) {
	c := newSagaConn(t)
	save := func(id string, conf any) {
		p := map[string]any{"workflowId": "wf", "checkpointId": id, "stepName": "s"}
		if conf != nil {
			p["validation"] = map[string]any{"confidence": conf}
		}
		c.ok("checkpoint/save", p, nil, nil)
	}
	save("c1", 0.9)
	var regs []protocol.CompensationRegisterResult
	for i := 0; i < 4; i++ {
		var r protocol.CompensationRegisterResult
		c.ok("compensation/register", map[string]any{"workflowId": "wf", "checkpointId": "c1", "stepName": "s", "taskId": "t",
			"action": map[string]any{"n": i}, "description": "undo " + string(rune('a'+i))}, nil, &r)
		regs = append(regs, r)
		save("c"+string(rune('2'+i)), nil)
	}
	save("c6", 0.1)

	var preview protocol.ResumePlanResult
	c.ok("resume/plan", map[string]any{"workflowId": "wf", "rollback": true}, nil, &preview)
	assert.Equal(t, "c1", preview.CheckpointID)
	assert.Equal(t, int64(1), preview.StartStep)
	require.NotNil(t, preview.Rollback)
	assert.Empty(t, preview.Rollback.RollbackID)
	assert.Len(t, preview.Rollback.Actions, 4)

	var plan protocol.RollbackPlanResult
	c.ok("rollback/plan", map[string]any{"workflowId": "wf"}, nil, &plan)
	require.NotEmpty(t, plan.RollbackID)
	assert.Equal(t, "c1", plan.ToCheckpointID)
	assert.False(t, plan.Full)
	require.Len(t, plan.Actions, 4)
	for i, a := range plan.Actions { // newest registration first
		want := regs[3-i]
		assert.Equal(t, want.CompensationID, a.CompensationID)
		assert.Equal(t, want.Seq, a.Seq)
		assert.Equal(t, "pending", a.Status)
		assert.Equal(t, "s", a.StepName)
		assert.Equal(t, "t", a.TaskID)
		assert.Equal(t, "c1", a.CheckpointID)
		assert.JSONEq(t, `{"n":`+string(rune('0'+3-i))+`}`, string(a.Action))
	}
	assert.Equal(t, protocol.RollbackProgress{Total: 4, Pending: 4}, plan.Progress)

	var done protocol.CompensationDoneResult
	c.ok("compensation/done", map[string]any{"compensationId": plan.Actions[0].CompensationID, "rollbackId": plan.RollbackID, "ok": true}, nil, &done)
	assert.Equal(t, protocol.CompensationDoneResult{CompensationID: plan.Actions[0].CompensationID, Status: "done", Remaining: 3}, done)
	c.ok("compensation/done", map[string]any{"compensationId": plan.Actions[1].CompensationID, "rollbackId": plan.RollbackID, "ok": false,
		"error": "EACCES"}, nil, &done)
	assert.Equal(t, "failed", done.Status)

	var again protocol.RollbackPlanResult
	c.ok("rollback/plan", map[string]any{"workflowId": "wf", "toCheckpointId": "c1"}, nil, &again)
	assert.Equal(t, plan.RollbackID, again.RollbackID)
	require.Len(t, again.Actions, 3)
	assert.Equal(t, plan.Actions[1].CompensationID, again.Actions[0].CompensationID)
	assert.Equal(t, "failed", again.Actions[0].Status)
	assert.Equal(t, "EACCES", again.Actions[0].Error)

	d := c.errData("rollback/plan", map[string]any{"workflowId": "wf", "full": true}, protocol.CodeConflict)
	assert.Equal(t, plan.RollbackID, d["rollbackId"])
	d = c.errData("rollback/complete", map[string]any{"rollbackId": plan.RollbackID}, protocol.CodeConflict)
	assert.Len(t, d["pending"], 2)

	var rp protocol.ResumePlanResult
	c.ok("resume/plan", map[string]any{"workflowId": "wf"}, nil, &rp)
	assert.Equal(t, "c6", rp.CheckpointID)
	require.NotNil(t, rp.Validation)
	assert.Equal(t, "failed", rp.Validation.Status)
	assert.Equal(t, "c1", rp.Validation.Recommendation.CheckpointID)
	require.NotNil(t, rp.Rollback, "the unfinished rollback is reported")
	assert.Equal(t, plan.RollbackID, rp.Rollback.RollbackID)
	assert.Len(t, rp.Rollback.Actions, 3)

	for _, a := range again.Actions {
		c.ok("compensation/done", map[string]any{"compensationId": a.CompensationID, "rollbackId": plan.RollbackID, "ok": true}, nil, &done)
	}
	assert.Equal(t, 0, done.Remaining)
	var comp protocol.RollbackCompleteResult
	c.ok("rollback/complete", map[string]any{"rollbackId": plan.RollbackID, "prune": true}, nil, &comp)
	assert.Equal(t, protocol.RollbackCompleteResult{RollbackID: plan.RollbackID, Progress: protocol.RollbackProgress{Total: 4, Done: 4}, Pruned: 5}, comp)
	c.ok("rollback/complete", map[string]any{"rollbackId": plan.RollbackID}, nil, &comp)
	assert.Equal(t, 0, comp.Pruned, "again: nothing more")
	var after protocol.ResumePlanResult
	c.ok("resume/plan", map[string]any{"workflowId": "wf"}, nil, &after)
	assert.Equal(t, "c1", after.CheckpointID)
	assert.Nil(t, after.Rollback)
	d = c.errData("compensation/done", map[string]any{"compensationId": plan.Actions[0].CompensationID, "rollbackId": plan.RollbackID, "ok": true}, protocol.CodeConflict)
	assert.Equal(t, plan.RollbackID, d["rollbackId"])

	// a full rollback's resume plan starts from scratch, without a checkpoint
	var reg protocol.CompensationRegisterResult
	c.ok("compensation/register", map[string]any{"workflowId": "fresh", "action": "rm -rf build", "description": "clean"}, nil, &reg)
	raw := c.call("resume/plan", map[string]any{"workflowId": "fresh", "rollback": true}, nil)
	require.Nil(t, raw.Error)
	var full map[string]any
	require.NoError(t, json.Unmarshal(raw.Result, &full))
	assert.Equal(t, "", full["checkpointId"])
	assert.Equal(t, float64(0), full["startStep"])
	assert.Equal(t, "none", full["stateType"])
	assert.Contains(t, full, "state")
	assert.Nil(t, full["state"])
	rb := full["rollback"].(map[string]any)
	assert.Equal(t, true, rb["full"])
	assert.Len(t, rb["actions"], 1)
}

func TestSagaRPCErrors(t *testing.T) {
	c := newSagaConn(t)
	c.ok("checkpoint/save", map[string]any{"workflowId": "wf", "checkpointId": "c1"}, nil, nil)
	c.ok("checkpoint/save", map[string]any{"workflowId": "other", "checkpointId": "o1"}, nil, nil)
	for _, tc := range []struct {
		method string
		params map[string]any
		code   int
		key    string // data key: the field (-32602) or the id named (-32001)
		want   string
	}{
		{"compensation/register", map[string]any{"action": 1, "description": ""}, protocol.CodeInvalidParams, "field", "workflowId"},
		{"compensation/register", map[string]any{"workflowId": "wf", "description": "x"}, protocol.CodeInvalidParams, "field", "action"},
		{"compensation/register", map[string]any{"workflowId": "wf", "action": nil, "description": "x"}, protocol.CodeInvalidParams, "field", "action"},
		{"compensation/register", map[string]any{"workflowId": "wf", "action": 1}, protocol.CodeInvalidParams, "field", "description"},
		{"compensation/register", map[string]any{"workflowId": "wf", "action": 1, "description": 5}, protocol.CodeInvalidParams, "field", "description"},
		{"rollback/plan", map[string]any{}, protocol.CodeInvalidParams, "field", "workflowId"},
		{"rollback/plan", map[string]any{"workflowId": "wf", "toCheckpointId": "c1", "full": true}, protocol.CodeInvalidParams, "field", "full"},
		{"rollback/plan", map[string]any{"workflowId": "wf", "toCheckpointId": "nope"}, protocol.CodeNotFound, "checkpointId", "nope"},
		{"rollback/plan", map[string]any{"workflowId": "wf", "toCheckpointId": "o1"}, protocol.CodeInvalidParams, "field", "toCheckpointId"},
		{"compensation/done", map[string]any{"rollbackId": "r", "ok": true}, protocol.CodeInvalidParams, "field", "compensationId"},
		{"compensation/done", map[string]any{"compensationId": "c", "ok": true}, protocol.CodeInvalidParams, "field", "rollbackId"},
		{"compensation/done", map[string]any{"compensationId": "c", "rollbackId": "r"}, protocol.CodeInvalidParams, "field", "ok"},
		{"compensation/done", map[string]any{"compensationId": "c", "rollbackId": "nope", "ok": true}, protocol.CodeNotFound, "rollbackId", "nope"},
		{"rollback/complete", map[string]any{}, protocol.CodeInvalidParams, "field", "rollbackId"},
		{"rollback/complete", map[string]any{"rollbackId": "nope"}, protocol.CodeNotFound, "rollbackId", "nope"},
		{"resume/plan", map[string]any{"workflowId": "wf", "rollback": true, "checkpointId": "c1"}, protocol.CodeInvalidParams, "field", "checkpointId"},
		{"resume/plan", map[string]any{"workflowId": "wf", "toCheckpointId": "o1"}, protocol.CodeInvalidParams, "field", "toCheckpointId"},
	} {
		d := c.errData(tc.method, tc.params, tc.code)
		assert.Equal(t, tc.want, d[tc.key], "%s %v: %v", tc.method, tc.params, d)
	}
	// an unknown compensation of a real rollback; one of another workflow
	var plan protocol.RollbackPlanResult
	c.ok("rollback/plan", map[string]any{"workflowId": "wf", "full": true}, nil, &plan)
	d := c.errData("compensation/done", map[string]any{"compensationId": "nope", "rollbackId": plan.RollbackID, "ok": true}, protocol.CodeNotFound)
	assert.Equal(t, "nope", d["compensationId"])
	var reg protocol.CompensationRegisterResult
	c.ok("compensation/register", map[string]any{"workflowId": "other", "action": 1, "description": "x"}, nil, &reg)
	d = c.errData("compensation/done", map[string]any{"compensationId": reg.CompensationID, "rollbackId": plan.RollbackID, "ok": true}, protocol.CodeInvalidParams)
	assert.Equal(t, "compensationId", d["field"])
}
