package engine

// Validation checkpoints and the compensation log, composed: a save classifies its validation
// against the workflow's rules (package saga), refuses a required step's completed save that
// registered no compensation, and recommends a rollback target; rollback plans, progress and
// completion run the saga rules over the stored rows. Shared by the RPC handlers
// (rpc/compensation.go, rpc/checkpoint.go, rpc/resume_plan.go) and the commands (ckptd plan
// --rollback, ckptd rollback).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/saga"
	"github.com/ckptd/ckptd/store"
)

// Saga is what the engine needs of validation and compensation storage: the store's Saga role
// (every store.Backend implements it) and the checkpoint summaries a rollback target is read
// from.
type Saga interface {
	store.Saga
	// Summaries returns the stored summaries of those of ids that exist.
	Summaries(ctx context.Context, ids []string) (map[string]store.Summary, error)
}

// historyPage is how many validated checkpoints a recommendation reads at a time.
const historyPage = 256

// SagaRules decodes a workflow's stored config into the saga rules (defaults when none).
func SagaRules(c store.SagaConfig) (saga.Config, saga.CompensationConfig, error) {
	var v saga.Config
	var comp saga.CompensationConfig
	if len(c.Validation) > 0 {
		if err := json.Unmarshal(c.Validation, &v); err != nil {
			return v, comp, fmt.Errorf("stored validation config does not decode: %w", err)
		}
	}
	if len(c.Compensation) > 0 {
		if err := json.Unmarshal(c.Compensation, &comp); err != nil {
			return v, comp, fmt.Errorf("stored compensation config does not decode: %w", err)
		}
	}
	return v, comp, nil
}

func (e *Engine) rules(ctx context.Context, workflowID string) (saga.Config, saga.CompensationConfig, error) {
	c, err := e.store.SagaConfig(ctx, workflowID)
	if err != nil {
		return saga.Config{}, saga.CompensationConfig{}, err
	}
	v, comp, err := SagaRules(c)
	if err != nil { // never refuse the agent's save for a config it cannot change: defaults
		e.log.Warn("workflow saga config ignored", "workflowId", workflowID, "error", err.Error())
		return saga.Config{}, saga.CompensationConfig{}, nil
	}
	return v, comp, nil
}

// ValidationInput is checkpoint/save's validation: the step's confidence in its result.
type ValidationInput struct {
	Confidence float64
	Message    string
	Details    json.RawMessage
}

// RequiredError refuses a required step's completed save without a registered compensation.
type RequiredError struct {
	Problem saga.Problem
}

func (e *RequiredError) Error() string { return e.Problem.Message }

// StepSave is what a save with a validation reports.
type StepSave struct {
	Result     store.SaveResult
	Sources    *protocol.SourcesInfo
	Validation *protocol.ValidationResult // when the save had a validation
}

// SaveStep is Save for a step's checkpoint: it classifies v (if given) against the rules of the
// workflow and step and stores the status with the checkpoint, refuses (*RequiredError) a
// completed save of a step configured to require a compensation when none was registered, saves
// (Save), and for a failed validation recommends a rollback target. Errors: *saga.FieldError
// for a bad confidence, *RequiredError, and Save's.
func (e *Engine) SaveStep(ctx context.Context, req store.SaveRequest, sources *drift.Spec, v *ValidationInput, queued func()) (StepSave, error) {
	phase := req.Phase
	if phase == "" {
		phase = store.PhaseCompleted
	}
	needRequired := phase == store.PhaseCompleted && req.StepName != ""
	var (
		vcfg saga.Config
		rl   saga.Rules
	)
	if v != nil || needRequired {
		var comp saga.CompensationConfig
		var err error
		if vcfg, comp, err = e.rules(ctx, req.WorkflowID); err != nil {
			return StepSave{}, err
		}
		if needRequired && comp.Requires(req.StepName) {
			registered, err := e.store.OpenCompensationForStep(ctx, req.WorkflowID, req.Namespace, req.StepName)
			if err != nil {
				return StepSave{}, err
			}
			if !registered && req.CheckpointID != "" { // a repeat of a stored save: the store decides
				saved, err := e.store.Summaries(ctx, []string{req.CheckpointID})
				if err != nil {
					return StepSave{}, err
				}
				_, registered = saved[req.CheckpointID]
			}
			if p := saga.CheckRequired(comp, string(phase), req.StepName, registered); p != nil {
				return StepSave{}, &RequiredError{Problem: *p}
			}
		}
	}
	if v != nil {
		rl = vcfg.Rules(req.StepName)
		status, err := saga.Classify(v.Confidence, rl.Thresholds)
		if err != nil {
			return StepSave{}, err
		}
		req.Validation = &store.Validation{Status: string(status), Confidence: v.Confidence, Min: rl.Min, Warning: rl.Warning,
			Message: v.Message, Details: v.Details}
	}
	res, info, err := e.Save(ctx, req, sources, queued)
	if err != nil {
		return StepSave{}, err
	}
	out := StepSave{Result: res, Sources: info}
	if req.Validation != nil {
		vr := &protocol.ValidationResult{Status: req.Validation.Status, Confidence: v.Confidence,
			Thresholds: protocol.ValidationThresholds{Min: rl.Min, Warning: rl.Warning}}
		rec, err := e.recommend(ctx, req.WorkflowID, req.Namespace, saga.Status(req.Validation.Status), rl, res.Seq)
		if err != nil {
			return StepSave{}, err
		}
		vr.Recommendation = rec
		out.Validation = vr
	}
	return out, nil
}

// recommend is saga.Recommend over the validated checkpoints of (workflowID, namespace) older
// than seq, read a page at a time until a target is found.
func (e *Engine) recommend(ctx context.Context, workflowID, namespace string, status saga.Status, rl saga.Rules, seq int64) (*protocol.Recommendation, error) {
	if r := saga.Recommend(status, rl, seq, nil); r == nil {
		return nil, nil
	}
	c, err := e.goodCheckpoint(ctx, workflowID, namespace, seq)
	if err != nil {
		return nil, err
	}
	var cands []saga.Candidate
	if c != nil {
		cands = []saga.Candidate{*c}
	}
	r := saga.Recommend(status, rl, seq, cands)
	return &protocol.Recommendation{Kind: r.Kind, CheckpointID: r.CheckpointID}, nil
}

// goodCheckpoint returns saga.Target over the validated checkpoints of (workflowID, namespace)
// older than before (0: any): the newest whose validation did not fail; nil if there is none.
func (e *Engine) goodCheckpoint(ctx context.Context, workflowID, namespace string, before int64) (*saga.Candidate, error) {
	for {
		page, err := e.store.ValidationHistory(ctx, workflowID, namespace, before, historyPage)
		if err != nil {
			return nil, err
		}
		cands := make([]saga.Candidate, len(page))
		for i, r := range page {
			cands[i] = saga.Candidate{CheckpointID: r.CheckpointID, Seq: r.Seq, Status: saga.Status(r.Status)}
		}
		if c, ok := saga.Target(cands, before); ok {
			return &c, nil
		}
		if len(page) < historyPage {
			return nil, nil
		}
		before = page[len(page)-1].Seq
	}
}

// ValidationOf renders a checkpoint's stored validation with the recommendation it makes under
// the workflow's current rules (resume/plan); nil when it was saved without one.
func (e *Engine) ValidationOf(ctx context.Context, sm store.Summary) (*protocol.ValidationResult, error) {
	v := sm.Validation
	if v == nil {
		return nil, nil
	}
	cfg, _, err := e.rules(ctx, sm.WorkflowID)
	if err != nil {
		return nil, err
	}
	out := &protocol.ValidationResult{Status: v.Status, Confidence: v.Confidence,
		Thresholds: protocol.ValidationThresholds{Min: v.Min, Warning: v.Warning}}
	rec, err := e.recommend(ctx, sm.WorkflowID, sm.Namespace, saga.Status(v.Status), cfg.Rules(sm.StepName), sm.Seq)
	if err != nil {
		return nil, err
	}
	out.Recommendation = rec
	return out, nil
}

// TargetError says a rollback target is not a checkpoint of the workflow and namespace.
type TargetError struct {
	Field  string // "toCheckpointId"
	Reason string
}

func (e *TargetError) Error() string { return e.Field + ": " + e.Reason }

// RollbackView is a rollback (begun, continued, or only previewed) and its compensations.
type RollbackView struct {
	// Rollback is the stored rollback; RollbackID is empty for a preview of one not begun.
	Rollback store.Rollback
	// Unfinished: Rollback is the workflow and namespace's unfinished rollback.
	Unfinished bool
	// Actions are the compensations still to run, newest registration first.
	Actions []store.Compensation
	// All are the compensations the rollback covers, in registration order (done ones too).
	All      []store.Compensation
	Progress saga.Progress
}

// PlanRollback answers rollback/plan: it continues the unfinished rollback of (workflowID,
// namespace) when req names no target or its target, else begins one to req's target (by
// default the newest checkpoint whose validation did not fail; full when there is none), and
// returns the actions still to run. Errors: *saga.UnfinishedError, *TargetError,
// *WrongWorkflowError, store.ErrNotFound (no such checkpoint) and storage errors.
func (e *Engine) PlanRollback(ctx context.Context, workflowID, namespace string, req saga.Request) (RollbackView, error) {
	return e.rollbackView(ctx, workflowID, namespace, req, true)
}

// PreviewRollback is PlanRollback without beginning anything: the unfinished rollback, or what
// one planned now would cover (resume/plan {rollback: true}, ckptd rollback).
func (e *Engine) PreviewRollback(ctx context.Context, workflowID, namespace string, req saga.Request) (RollbackView, error) {
	return e.rollbackView(ctx, workflowID, namespace, req, false)
}

func (e *Engine) rollbackView(ctx context.Context, workflowID, namespace string, req saga.Request, begin bool) (RollbackView, error) {
	unfinished, err := e.unfinishedRollback(ctx, workflowID, namespace)
	if err != nil {
		return RollbackView{}, err
	}
	var def *saga.Candidate
	if unfinished == nil && !req.Full && req.ToCheckpointID == "" {
		if def, err = e.goodCheckpoint(ctx, workflowID, namespace, 0); err != nil {
			return RollbackView{}, err
		}
	}
	dec, err := saga.Choose(req, sagaRollback(unfinished), def)
	if err != nil {
		return RollbackView{}, err
	}
	var view RollbackView
	if dec.Reuse {
		view.Rollback, view.Unfinished = *unfinished, true
	} else {
		var toSeq int64
		if !dec.Full {
			if toSeq, err = e.targetSeq(ctx, workflowID, namespace, dec.ToCheckpointID); err != nil {
				return RollbackView{}, err
			}
		}
		if begin {
			r, began, err := e.store.BeginRollback(ctx, workflowID, namespace, dec.ToCheckpointID, toSeq)
			if err != nil {
				return RollbackView{}, err
			}
			if !began { // another process began one meanwhile: the same rules decide
				if _, err := saga.Choose(req, sagaRollback(&r), def); err != nil {
					return RollbackView{}, err
				}
			}
			view.Rollback, view.Unfinished = r, true
		} else {
			view.Rollback = store.Rollback{WorkflowID: workflowID, Namespace: namespace, ToCheckpointID: dec.ToCheckpointID, ToSeq: toSeq}
		}
	}
	if err := e.fillActions(ctx, &view); err != nil {
		return RollbackView{}, err
	}
	return view, nil
}

func sagaRollback(r *store.Rollback) *saga.Rollback {
	if r == nil {
		return nil
	}
	return &saga.Rollback{ID: r.RollbackID, ToCheckpointID: r.ToCheckpointID, Full: r.Full()}
}

func (e *Engine) unfinishedRollback(ctx context.Context, workflowID, namespace string) (*store.Rollback, error) {
	r, err := e.store.LatestRollback(ctx, workflowID, namespace)
	if err != nil || r == nil || !r.CompletedAt.IsZero() {
		return nil, err
	}
	return r, nil
}

// targetSeq returns the seq of the rollback target checkpointID, which must be a checkpoint of
// (workflowID, namespace).
func (e *Engine) targetSeq(ctx context.Context, workflowID, namespace, checkpointID string) (int64, error) {
	sms, err := e.store.Summaries(ctx, []string{checkpointID})
	if err != nil {
		return 0, err
	}
	sm, ok := sms[checkpointID]
	switch {
	case !ok:
		return 0, missing("checkpointId", checkpointID, fmt.Errorf("checkpoint %q: %w", checkpointID, store.ErrNotFound))
	case sm.WorkflowID != workflowID:
		return 0, &WrongWorkflowError{CheckpointID: checkpointID, WorkflowID: sm.WorkflowID, Requested: workflowID}
	case sm.Namespace != namespace:
		return 0, &TargetError{Field: "toCheckpointId", Reason: fmt.Sprintf("checkpoint %q is in namespace %q, not %q", checkpointID, sm.Namespace, namespace)}
	}
	return sm.Seq, nil
}

// fillActions reads the compensations view's rollback covers and orders those still to run.
func (e *Engine) fillActions(ctx context.Context, view *RollbackView) error {
	r := view.Rollback
	var all []store.Compensation
	if r.RollbackID == "" || r.MaxSeq > 0 { // a begun rollback with MaxSeq 0 covers nothing
		var err error
		if all, err = e.store.Compensations(ctx, r.WorkflowID, r.Namespace, r.ToSeq, r.MaxSeq); err != nil {
			return err
		}
	}
	maxSeq := r.MaxSeq
	if r.RollbackID == "" { // a preview covers everything registered so far
		for _, c := range all {
			maxSeq = max(maxSeq, c.Seq)
		}
	}
	scope := saga.Scope{ToSeq: r.ToSeq, MaxSeq: maxSeq}
	comps := make([]saga.Compensation, len(all))
	byID := make(map[string]store.Compensation, len(all))
	for i, c := range all {
		comps[i] = sagaComp(c)
		byID[c.CompensationID] = c
	}
	view.All = all
	view.Actions = nil
	for _, c := range saga.ToRun(comps, scope) {
		view.Actions = append(view.Actions, byID[c.ID])
	}
	view.Progress = saga.Count(comps, scope)
	return nil
}

func sagaComp(c store.Compensation) saga.Compensation {
	return saga.Compensation{ID: c.CompensationID, Seq: c.Seq, AfterSeq: c.AfterSeq, Status: saga.CompStatus(c.Status)}
}

// MissingError says which of a request's ids names nothing (it wraps store.ErrNotFound).
type MissingError struct {
	Key, Value string // e.g. "rollbackId", "r-1"
	Err        error
}

func (e *MissingError) Error() string { return e.Err.Error() }
func (e *MissingError) Unwrap() error { return e.Err }

func missing(key, value string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &MissingError{Key: key, Value: value, Err: err}
	}
	return err
}

// NotInRollbackError refuses to mark a compensation the rollback does not cover.
type NotInRollbackError struct {
	CompensationID, RollbackID string
}

func (e *NotInRollbackError) Error() string {
	return fmt.Sprintf("compensation %s is not one of rollback %s's actions", e.CompensationID, e.RollbackID)
}

// MarkDone answers compensation/done: it records durably that rollbackID ran compensationID
// (ok: done; else failed with errMsg, to be run again) and returns the compensation and how
// many of the rollback's actions are not done yet. Errors: store.ErrNotFound (rollback or
// compensation), store.ErrConflict (the rollback is complete), *NotInRollbackError.
func (e *Engine) MarkDone(ctx context.Context, compensationID, rollbackID string, ok bool, errMsg string) (store.Compensation, int, error) {
	r, err := e.store.Rollback(ctx, rollbackID)
	if err != nil {
		return store.Compensation{}, 0, missing("rollbackId", rollbackID, err)
	}
	if !r.CompletedAt.IsZero() {
		return store.Compensation{}, 0, fmt.Errorf("rollback %q is complete: %w", rollbackID, store.ErrConflict)
	}
	c, err := e.store.Compensation(ctx, compensationID)
	if err != nil {
		return store.Compensation{}, 0, missing("compensationId", compensationID, err)
	}
	scope := saga.Scope{ToSeq: r.ToSeq, MaxSeq: r.MaxSeq}
	if c.WorkflowID != r.WorkflowID || c.Namespace != r.Namespace || !scope.Covers(sagaComp(c)) {
		return store.Compensation{}, 0, &NotInRollbackError{CompensationID: compensationID, RollbackID: rollbackID}
	}
	status := store.CompensationDone
	if !ok {
		status = store.CompensationFailed
	}
	if c, err = e.store.MarkCompensation(ctx, compensationID, rollbackID, status, errMsg); err != nil {
		return store.Compensation{}, 0, missing("compensationId", compensationID, err)
	}
	view := RollbackView{Rollback: r}
	if err := e.fillActions(ctx, &view); err != nil {
		return store.Compensation{}, 0, err
	}
	return c, len(view.Actions), nil
}

// PendingError refuses to complete a rollback with actions it never ran.
type PendingError struct {
	RollbackID string
	Pending    []string // compensation ids, in the order the rollback runs them
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("rollback %s has %d actions not run yet (compensation/done each first)", e.RollbackID, len(e.Pending))
}

// CompleteRollback answers rollback/complete: it ends the rollback once every action was run
// (done, or failed and reported), and with prune deletes the rolled-back checkpoints.
// Completing a complete rollback again reports it. Errors: store.ErrNotFound, *PendingError.
func (e *Engine) CompleteRollback(ctx context.Context, rollbackID string, prune bool) (RollbackView, []string, error) {
	r, err := e.store.Rollback(ctx, rollbackID)
	if err != nil {
		return RollbackView{}, nil, missing("rollbackId", rollbackID, err)
	}
	view := RollbackView{Rollback: r}
	if err := e.fillActions(ctx, &view); err != nil {
		return RollbackView{}, nil, err
	}
	if r.CompletedAt.IsZero() {
		var pending []string
		for _, c := range view.Actions {
			if c.Status == store.CompensationPending {
				pending = append(pending, c.CompensationID)
			}
		}
		if len(pending) > 0 {
			return view, nil, &PendingError{RollbackID: rollbackID, Pending: pending}
		}
	}
	done, pruned, err := e.store.CompleteRollback(ctx, rollbackID, prune)
	if err != nil {
		return RollbackView{}, nil, missing("rollbackId", rollbackID, err)
	}
	view.Rollback = done
	return view, pruned, nil
}

// RollbackActionsOf renders compensations in the protocol's shape.
func RollbackActionsOf(cs []store.Compensation) []protocol.RollbackAction {
	out := make([]protocol.RollbackAction, 0, len(cs))
	for _, c := range cs {
		out = append(out, protocol.RollbackAction{CompensationID: c.CompensationID, Seq: c.Seq, Action: c.Action,
			Description: c.Description, Status: c.Status, StepName: c.StepName, TaskID: c.TaskID,
			CheckpointID: c.CheckpointID, Error: c.Error})
	}
	return out
}

// ProgressOf renders a rollback's progress.
func ProgressOf(p saga.Progress) protocol.RollbackProgress {
	return protocol.RollbackProgress{Total: p.Total, Done: p.Done, Failed: p.Failed, Pending: p.Pending}
}

// IsSagaInput reports whether err is bad input to a saga operation (a -32602 naming a field)
// and returns its field and reason.
func IsSagaInput(err error) (field, reason string, ok bool) {
	var fe *saga.FieldError
	if errors.As(err, &fe) {
		return fe.Field, fe.Reason, true
	}
	var te *TargetError
	if errors.As(err, &te) {
		return te.Field, te.Reason, true
	}
	return "", "", false
}
