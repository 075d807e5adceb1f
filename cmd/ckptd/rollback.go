package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/saga"
	"github.com/ckptd/ckptd/store"
)

const rollbackUsage = `usage: ckptd rollback WORKFLOW [flags]

Shows a workflow's rollback: the unfinished one (begun with rollback/plan) with its progress,
or, when none is unfinished, what a rollback begun now would run: every compensation registered
after the target checkpoint (the newest whose validation did not fail, or --to), in the order a
rollback runs them (newest registration first), with its status (pending, done, failed). It
never runs an action and never begins a rollback: your client does both (compensation/done
records each action's outcome).

examples:
  ckptd rollback wf-1
  ckptd rollback wf-1 --namespace sub --json
  ckptd rollback wf-1 --to c-3
`

func runRollback(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "rollback", rollbackUsage)
	registerDBFlags(fs, &g)
	asJSON := fs.Bool("json", false, "print JSON")
	namespace := fs.String("namespace", "", "the workflow's `namespace`")
	to := fs.String("to", "", "with no rollback unfinished: preview one to this checkpoint `id`")
	full := fs.Bool("full", false, "with no rollback unfinished: preview a full rollback")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError{"missing WORKFLOW"}
	case len(pos) > 1:
		return usageError{fmt.Sprintf("unexpected argument %q (rollback takes one WORKFLOW)", pos[1])}
	case *to != "" && *full:
		return usageError{"--to and --full exclude each other"}
	}
	wf := pos[0]
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		if _, err := st.Workflow(ctx, wf); err != nil {
			return err
		}
		log, err := g.logger(e)
		if err != nil {
			return err
		}
		view, err := engine.New(st, log).PreviewRollback(ctx, wf, *namespace, saga.Request{ToCheckpointID: *to, Full: *full})
		if err != nil {
			return rollbackCLIError(err)
		}
		r := newRollbackReport(wf, view)
		if *asJSON {
			return printJSON(e.stdout, r)
		}
		return r.text(e.stdout)
	})
}

// rollbackCLIError turns the rollback use cases' refusals into messages for the shell.
func rollbackCLIError(err error) error {
	var ue *saga.UnfinishedError
	var ww *engine.WrongWorkflowError
	if field, reason, ok := engine.IsSagaInput(err); ok {
		return usageError{fmt.Sprintf("%s: %s", field, reason)}
	}
	switch {
	case errors.As(err, &ue):
		return err
	case errors.As(err, &ww):
		return usageError{ww.Error()}
	}
	return err
}

// rollbackReport is ckptd rollback's answer.
type rollbackReport struct {
	WorkflowID string `json:"workflowId"`
	Namespace  string `json:"namespace"`
	// RollbackID is the unfinished rollback's; empty for a preview.
	RollbackID     string                    `json:"rollbackId,omitempty"`
	Unfinished     bool                      `json:"unfinished"`
	ToCheckpointID string                    `json:"toCheckpointId,omitempty"`
	Full           bool                      `json:"full"`
	CreatedAt      string                    `json:"createdAt,omitempty"`
	Progress       protocol.RollbackProgress `json:"progress"`
	// Actions are every compensation the rollback covers, in the order it runs them.
	Actions []protocol.RollbackAction `json:"actions"`
}

func newRollbackReport(wf string, v engine.RollbackView) rollbackReport {
	r := rollbackReport{WorkflowID: wf, Namespace: v.Rollback.Namespace, RollbackID: v.Rollback.RollbackID, Unfinished: v.Unfinished,
		ToCheckpointID: v.Rollback.ToCheckpointID, Full: v.Rollback.Full(), CreatedAt: engine.Timestamp(v.Rollback.CreatedAt),
		Progress: engine.ProgressOf(v.Progress)}
	all := make([]store.Compensation, len(v.All))
	for i, c := range v.All { // run order: newest registration first
		all[len(all)-1-i] = c
	}
	r.Actions = engine.RollbackActionsOf(all)
	return r
}

func (r rollbackReport) text(w io.Writer) error {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("workflow", r.WorkflowID)
	row("namespace", orDash(r.Namespace))
	if r.Unfinished {
		row("rollback", fmt.Sprintf("%s (unfinished, begun %s)", r.RollbackID, r.CreatedAt))
	} else {
		row("rollback", "none unfinished; a rollback begun now would run what follows")
	}
	target := "full (every compensation of the namespace)"
	if !r.Full {
		target = "checkpoint " + r.ToCheckpointID + " (compensations registered after it)"
	}
	row("target", target)
	p := r.Progress
	row("progress", fmt.Sprintf("%d of %d done, %d failed, %d pending", p.Done, p.Total, p.Failed, p.Pending))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Actions) == 0 {
		fmt.Fprintln(w, "\nno compensations to run")
		return nil
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "SEQ\tCOMPENSATION\tSTEP\tSTATUS\tDESCRIPTION\tACTION")
	for _, a := range r.Actions {
		status := a.Status
		if a.Error != "" {
			status += ": " + oneLine(a.Error)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.Seq, a.CompensationID, orDash(a.StepName), status,
			orDash(oneLine(a.Description)), compactJSON(a.Action))
	}
	return tw.Flush()
}

// fmtConfidence renders a confidence in its shortest exact form.
func fmtConfidence(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// validationLine describes a checkpoint's stored validation on one line (ckptd show).
func validationLine(v *store.Validation) string {
	s := fmt.Sprintf("%s (confidence %s; thresholds min %s, warning %s)", v.Status, fmtConfidence(v.Confidence),
		fmtConfidence(v.Min), fmtConfidence(v.Warning))
	if v.Message != "" {
		s += ": " + oneLine(v.Message)
	}
	if len(v.Details) > 0 {
		s += " " + compactJSON(v.Details)
	}
	return s
}
