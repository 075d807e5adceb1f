package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/resume"
	"github.com/ckptd/ckptd/saga"
	"github.com/ckptd/ckptd/store"
)

const planUsage = `usage: ckptd plan WORKFLOW [flags]

Answers what resume/plan would: the checkpoint a resume starts from, the step to start at, and
every problem found (corrupt checkpoints, a checkpoint format newer than this ckptd, a changed
workflow hash, a failure that is not retryable, a completed workflow, source files that
drifted from the sources recorded with the checkpoint). Exits 1 when a problem
blocks the resume (resume/plan would answer -32005 unless called with force: true).

--rollback answers resume/plan {rollback: true}: the plan starts from the rollback's target
(the unfinished rollback's, else --to, else the newest checkpoint whose validation did not
fail; none: from scratch) and lists the compensations to run first, newest registration first.
It runs none of them (see ckptd rollback).

examples:
  ckptd plan wf-1
  ckptd plan wf-1 --namespace sub --workflow-hash sha256:ab12
  ckptd plan wf-1 --checkpoint c-7 --json
  ckptd plan wf-1 --rollback
  ckptd plan wf-1 --rollback --to c-3
`

func runPlan(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "plan", planUsage)
	registerDBFlags(fs, &g)
	asJSON := fs.Bool("json", false, "print JSON")
	var req engine.ResumeRequest
	fs.StringVar(&req.Namespace, "namespace", "", "plan from the latest checkpoint of this `namespace`")
	fs.StringVar(&req.WorkflowHash, "workflow-hash", "", "your current workflow `hash`, compared with the checkpoint's")
	fs.StringVar(&req.CheckpointID, "checkpoint", "", "plan from this checkpoint `id` instead of the latest")
	fs.BoolVar(&req.DriftAsWarning, "drift-as-warning", false, "report source drift as a warning, not a problem (resume/plan's driftAsWarning)")
	fs.BoolVar(&req.Rollback, "rollback", false, "plan from a rollback's target and list the compensations to run first")
	fs.StringVar(&req.ToCheckpointID, "to", "", "with --rollback: the rollback's target checkpoint `id`")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError{"missing WORKFLOW"}
	case len(pos) > 1:
		return usageError{fmt.Sprintf("unexpected argument %q (plan takes one WORKFLOW)", pos[1])}
	case req.CheckpointID != "" && isSet(fs, "namespace"):
		return usageError{"--checkpoint and --namespace exclude each other"}
	case req.ToCheckpointID != "" && !req.Rollback:
		return usageError{"--to needs --rollback"}
	case req.CheckpointID != "" && req.Rollback:
		return usageError{"--checkpoint and --rollback exclude each other (give the target with --to)"}
	}
	req.WorkflowID = pos[0]
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		log, err := g.logger(e)
		if err != nil {
			return err
		}
		rp, err := engine.New(st, log).PlanResume(ctx, req) // what resume/plan answers
		var ww *engine.WrongWorkflowError
		switch {
		case errors.As(err, &ww):
			return usageError{ww.Error()}
		case errors.As(err, new(*engine.MissingError)): // --to names no checkpoint
			return err
		case err != nil && req.Rollback && !errors.Is(err, store.ErrNotFound):
			return rollbackCLIError(err)
		case errors.Is(err, store.ErrNotFound) && req.CheckpointID == "":
			msg := fmt.Sprintf("workflow %s has no checkpoints", req.WorkflowID)
			if req.Namespace != "" {
				msg = fmt.Sprintf("workflow %s has no checkpoints in namespace %q", req.WorkflowID, req.Namespace)
			}
			return errors.New(msg)
		case err != nil:
			return err
		}
		r := newPlanReport(req.WorkflowID, rp)
		if *asJSON {
			err = printJSON(e.stdout, r)
		} else {
			err = r.text(e.stdout)
		}
		if err != nil {
			return err
		}
		if !r.OK {
			return errProblemFound
		}
		return nil
	})
}

type planCheckpoint struct {
	CheckpointID   string `json:"checkpointId"`
	Namespace      string `json:"namespace"`
	Seq            int64  `json:"seq"`
	Phase          string `json:"phase"`
	Step           int64  `json:"step"`
	StepName       string `json:"stepName"`
	CompletedTasks int    `json:"completedTaskCount"`
	PendingTasks   int    `json:"pendingTaskCount"`
}

type planReport struct {
	WorkflowID    string                `json:"workflowId"`
	OK            bool                  `json:"ok"` // no problem blocks the resume
	Checkpoint    *planCheckpoint       `json:"checkpoint"`
	Plan          *resume.Plan          `json:"plan"`
	Problems      []resume.Problem      `json:"problems"`
	Warnings      []resume.Problem      `json:"warnings"`
	RecoveredFrom []protocol.Recovered  `json:"recoveredFrom,omitempty"`
	Drift         *protocol.DriftStatus `json:"drift,omitempty"`
	// Validation is the checkpoint's stored validation and its recommendation.
	Validation *protocol.ValidationResult `json:"validation,omitempty"`
	// Rollback lists the compensations to run first (--rollback, or an unfinished rollback).
	Rollback *protocol.ResumeRollback `json:"rollback,omitempty"`
}

func newPlanReport(workflowID string, rp engine.ResumePlan) planReport {
	r := planReport{
		WorkflowID: workflowID,
		OK:         !rp.Blocked(false),
		Problems:   rp.Problems,
		Warnings:   rp.Warnings,
		Drift:      rp.Drift,
		Validation: rp.Validation,
	}
	if v := rp.Rollback; v != nil {
		r.Rollback = &protocol.ResumeRollback{RollbackID: v.Rollback.RollbackID, ToCheckpointID: v.Rollback.ToCheckpointID,
			Full: v.Rollback.Full(), Actions: engine.RollbackActionsOf(v.Actions)}
	}
	if r.Problems == nil {
		r.Problems = []resume.Problem{}
	}
	if r.Warnings == nil {
		r.Warnings = []resume.Problem{}
	}
	if cp := rp.Checkpoint; cp != nil {
		r.Checkpoint = &planCheckpoint{CheckpointID: cp.CheckpointID, Namespace: cp.Namespace, Seq: cp.Seq,
			Phase: string(cp.Phase), Step: cp.Step, StepName: cp.StepName,
			CompletedTasks: cp.CompletedTaskCount, PendingTasks: cp.PendingTaskCount}
		plan := rp.Plan
		r.Plan = &plan
		r.RecoveredFrom = engine.RecoveredOf(cp.RecoveredFrom)
	} else if r.Rollback != nil && r.Rollback.Full { // a full rollback: from scratch
		plan := rp.Plan
		r.Plan = &plan
	}
	return r
}

func (r planReport) text(w io.Writer) error {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("workflow", r.WorkflowID)
	if cp := r.Checkpoint; cp != nil {
		row("namespace", orDash(cp.Namespace))
		step := fmt.Sprintf("step %d", cp.Step)
		if cp.StepName != "" {
			step += fmt.Sprintf(" %q", cp.StepName)
		}
		row("checkpoint", fmt.Sprintf("%s (seq %d, %s, %s)", cp.CheckpointID, cp.Seq, step, cp.Phase))
		for _, rec := range r.RecoveredFrom {
			row("skipped", fmt.Sprintf("%s: corrupt (%s)", rec.CheckpointID, rec.Reason))
		}
		resumeAt := fmt.Sprintf("start at step %d", r.Plan.StartStep)
		if r.Plan.Retry {
			resumeAt = fmt.Sprintf("retry step %d", r.Plan.StartStep)
		}
		row("resume", resumeAt)
		row("reason", r.Plan.Reason)
		row("tasks", fmt.Sprintf("%d completed, %d pending", cp.CompletedTasks, cp.PendingTasks))
	} else if r.Plan != nil { // a full rollback
		row("checkpoint", "none (full rollback)")
		row("resume", "start at step 0")
		row("reason", r.Plan.Reason)
	} else {
		row("checkpoint", "none intact")
		row("resume", "-")
	}
	if v := r.Validation; v != nil {
		line := fmt.Sprintf("%s (confidence %s; thresholds min %s, warning %s)", v.Status, fmtConfidence(v.Confidence),
			fmtConfidence(v.Thresholds.Min), fmtConfidence(v.Thresholds.Warning))
		if rec := v.Recommendation; rec != nil {
			if rec.Kind == saga.KindFull {
				line += "; recommends a full rollback"
			} else {
				line += "; recommends a rollback to " + rec.CheckpointID
			}
		}
		row("validation", line)
	}
	if rb := r.Rollback; rb != nil {
		what := "rollback (preview)"
		if rb.RollbackID != "" {
			what = "rollback " + rb.RollbackID + " (unfinished)"
		}
		target := "full"
		if !rb.Full {
			target = "to " + rb.ToCheckpointID
		}
		row("rollback", fmt.Sprintf("%s %s: %s to run first", what, target, plural(len(rb.Actions), "compensation", "compensations")))
	}
	if len(r.Problems) == 0 {
		row("problems", "none")
	}
	if len(r.Warnings) == 0 {
		row("warnings", "none")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	list := func(title string, ps []resume.Problem) error {
		if len(ps) == 0 {
			return nil
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		tw := newTable(w)
		fmt.Fprintln(tw, "  CODE\tCHECKPOINT\tMESSAGE")
		for _, p := range ps {
			msg := p.Message
			if p.Expected != "" || p.Actual != "" {
				msg += fmt.Sprintf(" (expected %s, got %s)", orDash(p.Expected), orDash(p.Actual))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", p.Code, orDash(p.CheckpointID), msg)
		}
		return tw.Flush()
	}
	if rb := r.Rollback; rb != nil && len(rb.Actions) > 0 {
		fmt.Fprintf(w, "\ncompensations to run first (newest first; ckptd runs none):\n")
		tw := newTable(w)
		fmt.Fprintln(tw, "  SEQ\tCOMPENSATION\tSTEP\tSTATUS\tDESCRIPTION\tACTION")
		for _, a := range rb.Actions {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", a.Seq, a.CompensationID, orDash(a.StepName), a.Status,
				orDash(oneLine(a.Description)), compactJSON(a.Action))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	blocked := fmt.Sprintf("%s, resume blocked", plural(len(r.Problems), "problem", "problems"))
	if err := list(blocked, r.Problems); err != nil {
		return err
	}
	return list(plural(len(r.Warnings), "warning", "warnings"), r.Warnings)
}
