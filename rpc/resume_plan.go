package rpc

import (
	"context"
	"errors"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/resume"
	"github.com/ckptd/ckptd/store"
)

func (s *Server) resumePlan(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.ResumePlanParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	if err := optionalID("toCheckpointId", p.ToCheckpointID, maxCheckpointIDBytes); err != nil {
		return reply{}, err
	}
	if p.CheckpointID != "" && (p.Rollback || p.ToCheckpointID != "") {
		return reply{}, invalidParams("checkpointId", "a rollback plan starts from its target: give toCheckpointId, not checkpointId")
	}
	rp, err := s.engine.PlanResume(ctx, engine.ResumeRequest{
		WorkflowID:     p.WorkflowID,
		Namespace:      p.Namespace,
		CheckpointID:   p.CheckpointID,
		WorkflowHash:   p.WorkflowHash,
		DriftAsWarning: p.DriftAsWarning,
		Rollback:       p.Rollback,
		ToCheckpointID: p.ToCheckpointID,
	})
	var ww *engine.WrongWorkflowError
	var me *engine.MissingError
	switch {
	case errors.As(err, &ww) && p.ToCheckpointID != "":
		return reply{}, invalidParams("toCheckpointId", "belongs to workflow "+quote(ww.WorkflowID)+", not "+quote(p.WorkflowID))
	case errors.As(err, &ww):
		return reply{}, invalidParams("checkpointId", "belongs to workflow "+quote(ww.WorkflowID)+", not "+quote(p.WorkflowID))
	case errors.As(err, &me):
		return reply{}, sagaError(err)
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return reply{}, sagaError(err)
	case err != nil:
		return reply{}, storeErrorWith(err, "workflowId", p.WorkflowID)
	}
	for _, bad := range rp.Corrupt {
		s.reportCorrupt(p.WorkflowID, &store.CorruptError{CheckpointID: bad.CheckpointID, Reason: bad.Reason})
	}
	if rp.Blocked(p.Force) {
		problems := rp.Problems
		msg := "resume validation failed: " + problems[0].Message
		if len(problems) > 1 {
			msg += " (and " + itoa(len(problems)-1) + " more problems)"
		}
		data := map[string]any{"problems": problems}
		if rp.Drift != nil {
			data["drift"] = rp.Drift
		}
		return reply{}, rpcError(protocol.CodeResumeInvalid, msg, data)
	}
	warnings := append(rp.Problems, rp.Warnings...) // problems forced past are warnings
	if warnings == nil {
		warnings = []resume.Problem{}
	}
	var r reply
	if rp.Checkpoint == nil { // a full rollback: start from scratch once the compensations ran
		r.rawFields = append(r.rawFields, rawField{"state", nil})
		r.result = protocol.ResumePlanResult{WorkflowID: p.WorkflowID, Namespace: p.Namespace, StartStep: rp.Plan.StartStep,
			Reason: rp.Plan.Reason, CompletedTasks: orEmptyArray(nil), PendingTasks: orEmptyArray(nil),
			StateType: string(store.StateNone), Warnings: warnings, Rollback: resumeRollback(rp.Rollback)}
		return r, nil
	}
	cp := rp.Checkpoint
	res := protocol.ResumePlanResult{
		CheckpointID:   cp.CheckpointID,
		WorkflowID:     cp.WorkflowID,
		Namespace:      cp.Namespace,
		Phase:          string(cp.Phase),
		Step:           cp.Step,
		StepName:       cp.StepName,
		StartStep:      rp.Plan.StartStep,
		Retry:          rp.Plan.Retry,
		Reason:         rp.Plan.Reason,
		CompletedTasks: orEmptyArray(cp.CompletedTasks),
		PendingTasks:   orEmptyArray(cp.PendingTasks),
		StateType:      string(cp.StateType),
		Warnings:       warnings,
		RecoveredFrom:  engine.RecoveredOf(cp.RecoveredFrom),
		Drift:          rp.Drift,
		Validation:     rp.Validation,
		Rollback:       resumeRollback(rp.Rollback),
	}
	res.StateBase64, res.StateAttachment = stateReply(&r, cp.StateType, cp.State, p.Attachment)
	r.result = res
	return r, nil
}
