package resume

// Gather is the glue between the store and Decide, shared by the resume/plan RPC and the
// `ckptd plan` command so both answer the same. Decide itself stays pure.

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckptd/ckptd/store"
)

// Source is what Gather reads; every store.Backend implements it.
type Source interface {
	Load(ctx context.Context, checkpointID string) (store.Checkpoint, error)
	LoadLatest(ctx context.Context, workflowID, namespace string) (store.LoadResult, error)
	IsCompleted(ctx context.Context, workflowID string) (bool, error)
}

// Request says what to plan.
type Request struct {
	WorkflowID   string
	Namespace    string // with no CheckpointID: plan from the latest checkpoint of this namespace
	CheckpointID string // optional: plan from this checkpoint
	WorkflowHash string // the caller's workflow hash; empty: not compared
}

// Gathered is the input for Decide plus the checkpoint it was built from.
type Gathered struct {
	Input Input
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

// Gather loads the checkpoint to plan from (the requested one, or the latest intact one of the
// workflow and namespace), records corrupt checkpoints as Input.Corrupt instead of failing, and
// reads whether the workflow was completed. Errors: store.ErrNotFound (no such checkpoint, or no
// checkpoints at all), *WrongWorkflowError, and storage errors.
func Gather(ctx context.Context, src Source, req Request) (Gathered, error) {
	g := Gathered{Input: Input{CallerHash: req.WorkflowHash, MaxFormatVersion: store.FormatVersion}}
	var ce *store.CorruptError
	if req.CheckpointID != "" {
		got, err := src.Load(ctx, req.CheckpointID)
		switch {
		case errors.As(err, &ce):
			g.Input.Corrupt = append(g.Input.Corrupt, Corruption{CheckpointID: ce.CheckpointID, Reason: ce.Reason})
		case err != nil:
			return Gathered{}, err
		case got.WorkflowID != req.WorkflowID:
			return Gathered{}, &WrongWorkflowError{CheckpointID: req.CheckpointID, WorkflowID: got.WorkflowID, Requested: req.WorkflowID}
		default:
			g.Checkpoint = &store.LoadResult{Checkpoint: got}
		}
	} else {
		got, err := src.LoadLatest(ctx, req.WorkflowID, req.Namespace)
		switch {
		case errors.As(err, &ce):
			g.Input.Corrupt = append(g.Input.Corrupt, Corruption{CheckpointID: ce.CheckpointID, Reason: ce.Reason})
		case err != nil:
			return Gathered{}, err
		default:
			g.Checkpoint = &got
			for _, r := range got.RecoveredFrom {
				g.Input.Corrupt = append(g.Input.Corrupt, Corruption{CheckpointID: r.CheckpointID, Reason: r.Reason})
			}
		}
	}
	completed, err := src.IsCompleted(ctx, req.WorkflowID)
	if err != nil {
		return Gathered{}, err
	}
	g.Input.Completed = completed
	if cp := g.Checkpoint; cp != nil {
		g.Input.Checkpoint = &Checkpoint{
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
