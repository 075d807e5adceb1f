package rpc

import (
	"context"
	"errors"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/resume"
	"github.com/ckptd/ckptd/store"
)

// formatVersion is the newest checkpoint format this build reads.
const formatVersion = 1

func (s *Server) resumePlan(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p ResumePlanParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	in := resume.Input{CallerHash: p.WorkflowHash, MaxFormatVersion: formatVersion}
	var cp *store.LoadResult
	if p.CheckpointID != "" {
		got, err := s.store.Load(ctx, p.CheckpointID)
		var ce *store.CorruptError
		switch {
		case errors.As(err, &ce):
			s.reportCorrupt(p.WorkflowID, ce)
			in.Corrupt = append(in.Corrupt, resume.Corruption{CheckpointID: ce.CheckpointID, Reason: ce.Reason})
		case err != nil:
			return reply{}, storeError(err)
		case got.WorkflowID != p.WorkflowID:
			return reply{}, invalidParams("checkpointId", "belongs to workflow "+quote(got.WorkflowID)+", not "+quote(p.WorkflowID))
		default:
			cp = &store.LoadResult{Checkpoint: got}
		}
	} else {
		got, err := s.store.LoadLatest(ctx, p.WorkflowID, p.Namespace)
		var ce *store.CorruptError
		switch {
		case errors.As(err, &ce):
			s.reportCorrupt(p.WorkflowID, ce)
			in.Corrupt = append(in.Corrupt, resume.Corruption{CheckpointID: ce.CheckpointID, Reason: ce.Reason})
		case err != nil:
			return reply{}, storeError(err)
		default:
			cp = &got
			for _, r := range got.RecoveredFrom {
				s.reportCorrupt(p.WorkflowID, &store.CorruptError{CheckpointID: r.CheckpointID, Reason: r.Reason})
				in.Corrupt = append(in.Corrupt, resume.Corruption{CheckpointID: r.CheckpointID, Reason: r.Reason})
			}
		}
	}
	completed, err := s.store.IsCompleted(ctx, p.WorkflowID)
	if err != nil {
		return reply{}, storeError(err)
	}
	in.Completed = completed
	if cp != nil {
		in.Checkpoint = &resume.Checkpoint{
			ID:            cp.CheckpointID,
			Phase:         string(cp.Phase),
			Step:          cp.Step,
			WorkflowHash:  cp.WorkflowHash,
			FormatVersion: cp.FormatVersion,
		}
		if cp.Error != nil {
			in.Checkpoint.ErrorMessage = cp.Error.Message
			in.Checkpoint.Retryable = cp.Error.Retryable
		}
	}
	plan, problems, warnings := resume.Decide(in)
	if len(problems) > 0 && (!p.Force || cp == nil) {
		msg := "resume validation failed: " + problems[0].Message
		if len(problems) > 1 {
			msg += " (and " + itoa(len(problems)-1) + " more problems)"
		}
		return reply{}, rpcError(CodeResumeInvalid, msg, map[string]any{"problems": problems})
	}
	warnings = append(problems, warnings...)
	if warnings == nil {
		warnings = []resume.Problem{}
	}
	var r reply
	res := ResumePlanResult{
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
		RecoveredFrom:  recovered(cp.RecoveredFrom),
	}
	res.StateBase64, res.StateAttachment = stateReply(&r, cp.StateType, cp.State, p.Attachment)
	r.result = res
	return r, nil
}
