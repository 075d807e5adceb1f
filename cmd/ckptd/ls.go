package main

import (
	"context"
	"fmt"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

const lsUsage = `usage: ckptd ls [WORKFLOW] [flags]

Without WORKFLOW: every workflow, most recently updated first (checkpoints, latest phase and
step, last update, whether it can be resumed, stored size). With WORKFLOW: its checkpoints,
newest first, with the status of the validation saved with each (a VALIDATION column, when any
has one); --validation keeps those of one status. --json prints the same objects as
workflow/list and checkpoint/list.

examples:
  ckptd ls
  ckptd ls wf-1
  ckptd ls wf-1 --namespace sub --json | jq '.checkpoints[0].checkpointId'
  ckptd ls wf-1 --validation failed
`

func runLs(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "ls", lsUsage)
	registerDBFlags(fs, &g)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	namespace := fs.String("namespace", "", "with WORKFLOW: only this `namespace` (default: every namespace)")
	limit := fs.Int("limit", 0, "with WORKFLOW: at most `n` checkpoints, newest first (0 = all)")
	resumable := fs.Bool("resumable", false, "without WORKFLOW: only workflows that can be resumed")
	validation := fs.String("validation", "", "with WORKFLOW: only checkpoints whose validation `status` is passed, warning or failed")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError{fmt.Sprintf("unexpected argument %q (ls takes at most one WORKFLOW)", pos[1])}
	}
	if *limit < 0 {
		return usageError{"--limit must be >= 0"}
	}
	nsSet := isSet(fs, "namespace")
	if len(pos) == 0 && (nsSet || *limit > 0 || *validation != "") {
		return usageError{"--namespace, --limit and --validation need a WORKFLOW"}
	}
	if *validation != "" && !store.ValidationStatusValid(*validation) {
		return usageError{fmt.Sprintf("--validation %q: want passed, warning or failed", *validation)}
	}
	if len(pos) == 1 && *resumable {
		return usageError{"--resumable lists workflows: give no WORKFLOW"}
	}
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		if len(pos) == 0 {
			return lsWorkflows(ctx, e, st, *resumable, *asJSON)
		}
		var ns *string
		if nsSet {
			ns = namespace
		}
		return lsCheckpoints(ctx, e, st, pos[0], ns, *validation, *limit, *asJSON)
	})
}

func lsWorkflows(ctx context.Context, e *env, st store.Backend, resumableOnly, asJSON bool) error {
	ws, err := st.Workflows(ctx, resumableOnly)
	if err != nil {
		return err
	}
	if asJSON {
		out := protocol.WorkflowListResult{Workflows: make([]protocol.WorkflowInfo, 0, len(ws))}
		for _, w := range ws {
			out.Workflows = append(out.Workflows, engine.WorkflowInfoOf(w))
		}
		return printJSON(e.stdout, out)
	}
	if len(ws) == 0 {
		fmt.Fprintln(e.stderr, "no workflows")
		return nil
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "WORKFLOW\tCHECKPOINTS\tLATEST\tUPDATED\tRESUMABLE\tSTORED")
	for _, w := range ws {
		latest := "-"
		if w.Latest != nil {
			latest = fmt.Sprintf("step %d (%s)", w.Latest.Step, w.Latest.Phase)
		}
		resumable := "yes"
		switch {
		case w.Completed:
			resumable = "no (completed)"
		case w.Count == 0:
			resumable = "no (empty)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", w.WorkflowID, w.Count, latest, fmtTime(w.UpdatedAt), resumable,
			fmtBytes(w.StoredBytes))
	}
	return tw.Flush()
}

func lsCheckpoints(ctx context.Context, e *env, st store.Backend, wf string, ns *string, validation string, limit int, asJSON bool) error {
	if _, err := st.Workflow(ctx, wf); err != nil {
		return err
	}
	var all []store.Summary
	before := ""
	for {
		page := store.MaxListLimit
		if limit > 0 && limit-len(all) < page {
			page = limit - len(all)
		}
		sms, err := st.List(ctx, store.ListFilter{WorkflowID: wf, Namespace: ns, Before: before, Limit: page, Validation: validation})
		if err != nil {
			return err
		}
		all = append(all, sms...)
		if len(sms) < page || (limit > 0 && len(all) >= limit) {
			break
		}
		before = sms[len(sms)-1].CheckpointID
	}
	if asJSON {
		out := protocol.ListResult{Checkpoints: make([]protocol.Summary, 0, len(all))}
		for _, sm := range all {
			out.Checkpoints = append(out.Checkpoints, engine.SummaryOf(sm))
		}
		return printJSON(e.stdout, out)
	}
	if len(all) == 0 {
		fmt.Fprintf(e.stderr, "workflow %s has no checkpoints\n", wf)
		return nil
	}
	validated := false // the VALIDATION column only for workflows that use validation checkpoints
	for _, sm := range all {
		validated = validated || sm.Validation != nil
	}
	tw := newTable(e.stdout)
	header := "SEQ\tCHECKPOINT\tNAMESPACE\tPHASE\tSTEP\tNAME\tCREATED\tSIZE\tSTORED\tSHA256"
	if validated {
		header += "\tVALIDATION"
	}
	fmt.Fprintln(tw, header)
	for _, sm := range all {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s", sm.Seq, sm.CheckpointID, orDash(sm.Namespace), sm.Phase,
			sm.Step, orDash(sm.StepName), fmtTime(sm.CreatedAt), fmtBytes(sm.SizeBytes), fmtBytes(sm.StoredBytes),
			shortHash(sm.SHA256))
		if validated {
			v := "-"
			if sm.Validation != nil {
				v = fmt.Sprintf("%s (%s)", sm.Validation.Status, fmtConfidence(sm.Validation.Confidence))
			}
			fmt.Fprintf(tw, "\t%s", v)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
