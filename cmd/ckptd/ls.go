package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/resume"
	"github.com/ckptd/ckptd/store"
)

const lsUsage = `usage: ckptd ls [WORKFLOW] [flags]

Without WORKFLOW: the 50 most recently updated workflows (checkpoints, latest phase and step,
last update, whether it can be resumed, its values' size as saved (LOGICAL), the bytes stored
for them (STORED: shared chunks counted in full) and the ratio), and how many more there are;
--limit N shows N, --all every one. RESUMABLE is what 'ckptd plan
WORKFLOW' answers without a workflow hash or source drift: "yes", or "no (why)" (completed,
corrupt checkpoint, failed and not retryable, ...); LATEST says CORRUPT when the latest
checkpoint fails verification. With WORKFLOW: its checkpoints, newest first, with the status of
the validation saved with each (a VALIDATION column, when any has one; STORED is what each save
added), then the workflow's bytes as saved and stored (chunks it shares with other workflows
counted in full); --validation keeps those of one status.
--json prints the same objects as workflow/list (plus footprint: {logicalBytes, storedBytes,
ratio}) and checkpoint/list.

examples:
  ckptd ls
  ckptd ls --limit 200 --resumable
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
	limit := fs.Int("limit", 0, "at most `n` workflows (default 50), or with WORKFLOW checkpoints (default all), newest first")
	all := fs.Bool("all", false, "without WORKFLOW: every workflow")
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
	if len(pos) == 0 && (nsSet || *validation != "") {
		return usageError{"--namespace and --validation need a WORKFLOW"}
	}
	if *all && (len(pos) > 0 || isSet(fs, "limit")) {
		return usageError{"--all lists every workflow: give no WORKFLOW and no --limit"}
	}
	if len(pos) == 0 && isSet(fs, "limit") && *limit < 1 {
		return usageError{"--limit must be >= 1 (--all lists every workflow)"}
	}
	if *validation != "" && !store.ValidationStatusValid(*validation) {
		return usageError{fmt.Sprintf("--validation %q: want passed, warning or failed", *validation)}
	}
	if len(pos) == 1 && *resumable {
		return usageError{"--resumable lists workflows: give no WORKFLOW"}
	}
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		if len(pos) == 0 {
			n := lsDefault
			switch {
			case *all:
				n = 0
			case isSet(fs, "limit"):
				n = *limit
			}
			return lsWorkflows(ctx, e, st, *resumable, n, *asJSON)
		}
		var ns *string
		if nsSet {
			ns = namespace
		}
		return lsCheckpoints(ctx, e, st, pos[0], ns, *validation, *limit, *asJSON)
	})
}

// lsWorkflowJSON is a workflow of ls --json: workflow/list's object plus its footprint.
type lsWorkflowJSON struct {
	protocol.WorkflowInfo
	Footprint protocol.Footprint `json:"footprint"`
}

// footprintOf renders a store footprint.
func footprintOf(f store.Footprint) protocol.Footprint {
	return protocol.Footprint{LogicalBytes: f.LogicalBytes, StoredBytes: f.StoredBytes, Ratio: f.Ratio()}
}

// fmtRatio renders logical / stored as "132x" ("-" when nothing is stored).
func fmtRatio(f store.Footprint) string {
	r := f.Ratio()
	switch {
	case r == 0:
		return "-"
	case r >= 10:
		return fmt.Sprintf("%.0fx", r)
	}
	return fmt.Sprintf("%.1fx", r)
}

// lsDefault is how many workflows (and threads) the listings show without --limit or --all.
const lsDefault = 50

// lsWorkflows lists the newest limit workflows (0: all), page by page, then says how many more
// there are and how to see them (on stderr: stdout stays the table, or the JSON).
func lsWorkflows(ctx context.Context, e *env, st store.Backend, resumableOnly bool, limit int, asJSON bool) error {
	var ws []store.WorkflowInfo
	f := store.WorkflowFilter{ResumableOnly: resumableOnly}
	cursor := ""
	for {
		f.Limit = store.MaxWorkflowPage
		if limit > 0 {
			f.Limit = min(store.MaxWorkflowPage, limit-len(ws))
		}
		page, err := st.ListWorkflows(ctx, f)
		if err != nil {
			return err
		}
		ws = append(ws, page.Workflows...)
		cursor = page.Cursor
		if cursor == "" || (limit > 0 && len(ws) >= limit) {
			break
		}
		f.Cursor = cursor
	}
	more := 0
	if cursor != "" {
		n, err := countWorkflows(ctx, st, resumableOnly)
		if err != nil {
			return err
		}
		more = max(n-len(ws), 1)
	}
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.WorkflowID
	}
	fp, err := st.Footprints(ctx, store.FootprintRequest{Workflows: ids, OmitTotal: true}) // the listed ones only
	if err != nil {
		return err
	}
	if asJSON {
		out := struct {
			Workflows []lsWorkflowJSON `json:"workflows"`
			Cursor    string           `json:"cursor,omitempty"`
		}{Workflows: make([]lsWorkflowJSON, 0, len(ws)), Cursor: cursor}
		for _, w := range ws {
			out.Workflows = append(out.Workflows, lsWorkflowJSON{engine.WorkflowInfoOf(w), footprintOf(fp.Workflows[w.WorkflowID])})
		}
		if err := printJSON(e.stdout, out); err != nil {
			return err
		}
		lsMore(e, more, "workflow", len(ws))
		return nil
	}
	if len(ws) == 0 && !resumableOnly {
		return lsNoWorkflows(ctx, e, st)
	}
	var rows []string
	for _, w := range ws {
		latest, resumable, err := lsResumable(ctx, st, w)
		if err != nil {
			return err
		}
		if resumableOnly && resumable != "yes" {
			continue
		}
		f := fp.Workflows[w.WorkflowID]
		rows = append(rows, fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", w.WorkflowID, w.Count, latest, fmtTime(w.UpdatedAt),
			resumable, fmtBytes(f.LogicalBytes), fmtBytes(f.StoredBytes), fmtRatio(f)))
	}
	if len(rows) == 0 && more == 0 {
		fmt.Fprintln(e.stderr, "no resumable workflows")
		return nil
	}
	if len(rows) > 0 {
		tw := newTable(e.stdout)
		fmt.Fprintln(tw, "WORKFLOW\tCHECKPOINTS\tLATEST\tUPDATED\tRESUMABLE\tLOGICAL\tSTORED\tRATIO")
		for _, r := range rows {
			fmt.Fprint(tw, r)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	lsMore(e, more, "workflow", len(ws))
	return nil
}

// countWorkflows counts the workflows a listing walks: from the kept counters (every workflow),
// or through the index of the resumable ones.
func countWorkflows(ctx context.Context, st store.Backend, resumableOnly bool) (int, error) {
	if resumableOnly {
		u, err := st.Usage(ctx)
		return u.ResumableWorkflow, err
	}
	db, err := st.Stats(ctx)
	return db.Workflows, err
}

// lsMore says how many more items (what: "workflow", "thread") a listing of shown left out,
// and how to see them.
func lsMore(e *env, more int, what string, shown int) {
	if more <= 0 {
		return
	}
	if more != 1 {
		what += "s"
	}
	fmt.Fprintf(e.stderr, "... %d more %s (showing the newest %d): --limit N shows the newest N, --all every one\n",
		more, what, shown)
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
	if err := tw.Flush(); err != nil {
		return err
	}
	if ns != nil || validation != "" || limit > 0 {
		return nil // the footprint is the whole workflow's: shown with the whole list only
	}
	fp, err := st.Footprints(ctx, store.FootprintRequest{Workflows: []string{wf}})
	if err != nil {
		return err
	}
	f := fp.Workflows[wf]
	fmt.Fprintf(e.stdout, "\n%s as saved, %s stored (%s)\n", fmtBytes(f.LogicalBytes), fmtBytes(f.StoredBytes), fmtRatio(f))
	return nil
}

// lsResumable is a workflow's LATEST and RESUMABLE cells: RESUMABLE is what ckptd plan WORKFLOW
// answers (its latest checkpoint verified, without a workflow hash or source drift), LATEST is
// marked CORRUPT when the latest checkpoint fails verification.
func lsResumable(ctx context.Context, st store.Backend, w store.WorkflowInfo) (latest, resumable string, err error) {
	latest = "-"
	if w.Latest == nil {
		if w.Completed {
			return latest, "no (completed)", nil
		}
		return latest, "no (empty)", nil
	}
	latest = fmt.Sprintf("step %d (%s)", w.Latest.Step, w.Latest.Phase)
	req := engine.ResumeRequest{WorkflowID: w.WorkflowID, Namespace: w.Latest.Namespace, NoDrift: true}
	rp, err := engine.New(st, slog.New(slog.DiscardHandler)).PlanResume(ctx, req)
	if err != nil {
		return "", "", fmt.Errorf("workflow %s: %w", w.WorkflowID, err)
	}
	for _, c := range rp.Corrupt {
		if c.CheckpointID == w.Latest.CheckpointID {
			latest += " CORRUPT"
		}
	}
	if !rp.Blocked(false) {
		return latest, "yes", nil
	}
	why := map[string]string{resume.CodeWorkflowCompleted: "completed", resume.CodeCorrupt: "corrupt checkpoint",
		resume.CodeNoIntactCheckpoint: "every checkpoint corrupt", resume.CodeNotRetryable: "failed, not retryable",
		resume.CodeSchemaVersion: "newer format"}
	for _, code := range []string{resume.CodeWorkflowCompleted, resume.CodeNoIntactCheckpoint, resume.CodeCorrupt,
		resume.CodeNotRetryable, resume.CodeSchemaVersion} {
		for _, p := range rp.Problems {
			if p.Code == code {
				return latest, "no (" + why[code] + ")", nil
			}
		}
	}
	return latest, "no (" + rp.Problems[0].Code + ")", nil
}

// lsNoWorkflows says there are no workflows, and where to look when the database holds
// LangGraph threads instead (the LangGraph savers store threads, which ckptd threads lists).
func lsNoWorkflows(ctx context.Context, e *env, st store.Backend) error {
	threads, err := st.ListLGThreads(ctx, 1, "")
	if err != nil {
		return err
	}
	if threads.Total == 0 {
		fmt.Fprintln(e.stderr, "no workflows")
		return nil
	}
	fmt.Fprintf(e.stderr, "no workflows (checkpoint/save); this database holds %s saved by a LangGraph saver: "+
		"run 'ckptd threads' to list them\n", plural(threads.Total, "LangGraph thread", "LangGraph threads"))
	return nil
}
