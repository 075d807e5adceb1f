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
	g, err := resume.Gather(ctx, s.store, resume.Request{
		WorkflowID:   p.WorkflowID,
		Namespace:    p.Namespace,
		CheckpointID: p.CheckpointID,
		WorkflowHash: p.WorkflowHash,
	})
	var ww *resume.WrongWorkflowError
	switch {
	case errors.As(err, &ww):
		return reply{}, invalidParams("checkpointId", "belongs to workflow "+quote(ww.WorkflowID)+", not "+quote(p.WorkflowID))
	case err != nil:
		return reply{}, storeErrorWith(err, "workflowId", p.WorkflowID)
	}
	for _, bad := range g.Input.Corrupt {
		s.reportCorrupt(p.WorkflowID, &store.CorruptError{CheckpointID: bad.CheckpointID, Reason: bad.Reason})
	}
	in, cp := g.Input, g.Checkpoint
	var driftSt *protocol.DriftStatus
	if cp != nil { // sources recorded with the checkpoint: drift is a problem (rpc/drift.go)
		driftSt, in.Drift = s.planDrift(ctx, cp.CheckpointID)
		in.DriftAsWarning = p.DriftAsWarning
	}
	plan, problems, warnings := resume.Decide(in)
	if len(problems) > 0 && (!p.Force || cp == nil) {
		msg := "resume validation failed: " + problems[0].Message
		if len(problems) > 1 {
			msg += " (and " + itoa(len(problems)-1) + " more problems)"
		}
		data := map[string]any{"problems": problems}
		if driftSt != nil {
			data["drift"] = driftSt
		}
		return reply{}, rpcError(protocol.CodeResumeInvalid, msg, data)
	}
	warnings = append(problems, warnings...)
	if warnings == nil {
		warnings = []resume.Problem{}
	}
	var r reply
	res := protocol.ResumePlanResult{
		CheckpointID:   cp.CheckpointID,
		WorkflowID:     cp.WorkflowID,
		Namespace:      cp.Namespace,
		Phase:          string(cp.Phase),
		Step:           cp.Step,
		StepName:       cp.StepName,
		StartStep:      plan.StartStep,
		Retry:          plan.Retry,
		Reason:         plan.Reason,
		CompletedTasks: orEmptyArray(cp.CompletedTasks),
		PendingTasks:   orEmptyArray(cp.PendingTasks),
		StateType:      string(cp.StateType),
		Warnings:       warnings,
		RecoveredFrom:  engine.RecoveredOf(cp.RecoveredFrom),
		Drift:          driftSt,
	}
	res.StateBase64, res.StateAttachment = stateReply(&r, cp.StateType, cp.State, p.Attachment)
	r.result = res
	return r, nil
}
