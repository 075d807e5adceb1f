package engine

// The resume plan: gather (the glue between the store and resume.Decide) -> drift -> decide,
// shared by the resume/plan RPC and the `ckptd plan` command so both answer the same.
// resume.Decide itself stays pure.

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/resume"
	"github.com/ckptd/ckptd/saga"
	"github.com/ckptd/ckptd/store"
)

// ResumePlan is a resume plan with what resume/plan and `ckptd plan` make their answers of.
type ResumePlan struct {
	// Checkpoint is the intact checkpoint the plan starts from (nil when there is none); its
	// RecoveredFrom lists newer corrupt checkpoints skipped to reach it.
	Checkpoint *store.LoadResult
	// Corrupt lists the checkpoints found corrupt on the way (for the caller to report).
	Corrupt []resume.Corruption
	Plan    resume.Plan
	// Problems block the resume (unless forced); Warnings do not.
	Problems []resume.Problem
	Warnings []resume.Problem
	// Drift is the drift status of the checkpoint's recorded sources, if sources were recorded
	// with it and could be checked.
	Drift *protocol.DriftStatus
	// Validation is the checkpoint's stored validation with its recommendation, if it has one.
	Validation *protocol.ValidationResult
	// Rollback lists the compensations to run before resuming: asked for (Rollback), or the
	// unfinished rollback of the workflow and namespace. With a full rollback Checkpoint is nil
	// and the plan starts from scratch.
	Rollback *RollbackView
}

// Blocked reports whether a problem blocks the resume: any problem does, unless force is set
// and there is a checkpoint to resume from.
func (p ResumePlan) Blocked(force bool) bool {
	return len(p.Problems) > 0 && (!force || p.Checkpoint == nil)
}

// PlanResume plans where req's workflow must start again: it gathers the checkpoint to start
// from (corrupt ones become problems, not errors), checks its recorded sources for drift, and
// decides (resume.Decide). Errors: store.ErrNotFound (no such checkpoint, or no checkpoints at
// all), *WrongWorkflowError, and storage errors.
func (e *Engine) PlanResume(ctx context.Context, req ResumeRequest) (ResumePlan, error) {
	var view *RollbackView
	if req.Rollback || req.ToCheckpointID != "" { // plan from the rollback's target (engine/saga.go)
		v, err := e.PreviewRollback(ctx, req.WorkflowID, req.Namespace, saga.Request{ToCheckpointID: req.ToCheckpointID})
		if err != nil {
			return ResumePlan{}, err
		}
		view = &v
		if v.Rollback.Full() {
			return e.fullRollbackPlan(ctx, req, view)
		}
		req.CheckpointID = v.Rollback.ToCheckpointID
	}
	g, err := gather(ctx, e.store, req)
	if err != nil {
		return ResumePlan{}, err
	}
	in, cp := g.Input, g.Checkpoint
	rp := ResumePlan{Checkpoint: cp, Corrupt: g.Input.Corrupt, Rollback: view}
	if cp != nil { // sources recorded with the checkpoint: drift is a problem (engine/drift.go)
		rp.Drift, in.Drift = e.planDrift(ctx, cp.CheckpointID)
		in.DriftAsWarning = req.DriftAsWarning
		if rp.Validation, err = e.ValidationOf(ctx, cp.Summary); err != nil {
			return ResumePlan{}, err
		}
	}
	if view == nil { // an unfinished rollback is reported with every plan
		u, err := e.unfinishedRollback(ctx, req.WorkflowID, req.Namespace)
		if err != nil {
			return ResumePlan{}, err
		}
		if u != nil {
			v := RollbackView{Rollback: *u, Unfinished: true}
			if err := e.fillActions(ctx, &v); err != nil {
				return ResumePlan{}, err
			}
			rp.Rollback = &v
		}
	}
	rp.Plan, rp.Problems, rp.Warnings = resume.Decide(in)
	return rp, nil
}

// fullRollbackPlan is the plan after a full rollback: no checkpoint, start from scratch once
// the compensations ran. A completed workflow is still a problem.
func (e *Engine) fullRollbackPlan(ctx context.Context, req ResumeRequest, view *RollbackView) (ResumePlan, error) {
	completed, err := e.store.IsCompleted(ctx, req.WorkflowID)
	if err != nil {
		return ResumePlan{}, err
	}
	rp := ResumePlan{Rollback: view, Plan: resume.Plan{StartStep: 0,
		Reason: "full rollback: no checkpoint whose validation did not fail; run the compensations, then start from the beginning"}}
	if completed {
		rp.Problems = append(rp.Problems, resume.Problem{Code: resume.CodeWorkflowCompleted, Message: "the workflow was marked completed"})
	}
	return rp, nil
}

// ResumeRequest says what to plan.
type ResumeRequest struct {
	WorkflowID   string
	Namespace    string // with no CheckpointID: plan from the latest checkpoint of this namespace
	CheckpointID string // optional: plan from this checkpoint
	WorkflowHash string // the caller's workflow hash; empty: not compared
	// DriftAsWarning reports drift of the recorded sources as a warning, not a problem.
	DriftAsWarning bool
	// Rollback plans from the target of a rollback (ToCheckpointID, else the unfinished
	// rollback's, else the newest checkpoint whose validation did not fail; none: a full
	// rollback) and lists the compensations to run first.
	Rollback       bool
	ToCheckpointID string
}

// gathered is the input for Decide plus the checkpoint it was built from.
type gathered struct {
	Input resume.Input
	// Checkpoint is the intact checkpoint the plan starts from (nil when there is none); its
	// RecoveredFrom lists newer corrupt checkpoints skipped to reach it.
	Checkpoint *store.LoadResult
}

// WrongWorkflowError says the requested checkpoint belongs to another workflow.
type WrongWorkflowError struct {
	CheckpointID string
	WorkflowID   string // the workflow it belongs to
	Requested    string // the workflow the caller named
}

func (e *WrongWorkflowError) Error() string {
	return fmt.Sprintf("checkpoint %q belongs to workflow %q, not %q", e.CheckpointID, e.WorkflowID, e.Requested)
}

// gather loads the checkpoint to plan from (the requested one, or the latest intact one of the
// workflow and namespace), records corrupt checkpoints as Input.Corrupt instead of failing, and
// reads whether the workflow was completed. Errors: store.ErrNotFound (no such checkpoint, or no
// checkpoints at all), *WrongWorkflowError, and storage errors.
func gather(ctx context.Context, src Checkpoints, req ResumeRequest) (gathered, error) {
	g := gathered{Input: resume.Input{CallerHash: req.WorkflowHash, MaxFormatVersion: store.FormatVersion}}
	var ce *store.CorruptError
	if req.CheckpointID != "" {
		got, err := src.Load(ctx, req.CheckpointID)
		switch {
		case errors.As(err, &ce):
			g.Input.Corrupt = append(g.Input.Corrupt, resume.Corruption{CheckpointID: ce.CheckpointID, Reason: ce.Reason})
		case err != nil:
			return gathered{}, err
		case got.WorkflowID != req.WorkflowID:
			return gathered{}, &WrongWorkflowError{CheckpointID: req.CheckpointID, WorkflowID: got.WorkflowID, Requested: req.WorkflowID}
		default:
			g.Checkpoint = &store.LoadResult{Checkpoint: got}
		}
	} else {
		got, err := src.LoadLatest(ctx, req.WorkflowID, req.Namespace)
		switch {
		case errors.As(err, &ce):
			g.Input.Corrupt = append(g.Input.Corrupt, resume.Corruption{CheckpointID: ce.CheckpointID, Reason: ce.Reason})
		case err != nil:
			return gathered{}, err
		default:
			g.Checkpoint = &got
			for _, r := range got.RecoveredFrom {
				g.Input.Corrupt = append(g.Input.Corrupt, resume.Corruption{CheckpointID: r.CheckpointID, Reason: r.Reason})
			}
		}
	}
	completed, err := src.IsCompleted(ctx, req.WorkflowID)
	if err != nil {
		return gathered{}, err
	}
	g.Input.Completed = completed
	if cp := g.Checkpoint; cp != nil {
		g.Input.Checkpoint = &resume.Checkpoint{
			ID:            cp.CheckpointID,
			Phase:         string(cp.Phase),
			Step:          cp.Step,
			WorkflowHash:  cp.WorkflowHash,
			FormatVersion: cp.FormatVersion,
		}
		if cp.Error != nil {
			g.Input.Checkpoint.ErrorMessage = cp.Error.Message
			g.Input.Checkpoint.Retryable = cp.Error.Retryable
		}
	}
	return g, nil
}
