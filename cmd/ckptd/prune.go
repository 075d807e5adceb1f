package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/ckptd/ckptd/store"
)

const pruneUsage = `usage: ckptd prune (--keep-last N | --older-than AGE)... [flags]

Deletes old checkpoints of every workflow (or of --workflow WF), per workflow and namespace,
like checkpoint/prune: --keep-last N keeps the newest N; --older-than AGE deletes those older
than AGE (units s, m, h, d, w: 7d, 36h, 1d12h); both together delete what either selects except
the newest N. The newest checkpoint of a workflow is never pruned. Freed space goes back to the
file system. --dry-run lists what would be deleted and deletes nothing.

The prune runs in small transactions (a few milliseconds each), so agents saving to the same
database meanwhile wait at most that long; on a terminal, stderr shows its progress. Stopped
half-way (Ctrl-C, a crash), it leaves a consistent database: run it again to finish. The table
lists the first 50 workflows it pruned; --json lists every checkpoint id.

examples:
  ckptd prune --keep-last 5 --dry-run
  ckptd prune --older-than 7d
  ckptd prune --workflow wf-1 --keep-last 1 --json
`

func runPrune(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "prune", pruneUsage)
	registerDBFlags(fs, &g)
	keepLast := fs.Int("keep-last", 0, "keep the newest `n` checkpoints of each workflow and namespace")
	olderThan := fs.String("older-than", "", "delete checkpoints older than `age` (e.g. 7d, 36h, 90m)")
	dryRun := fs.Bool("dry-run", false, "only list what would be deleted")
	workflow := fs.String("workflow", "", "prune only this `workflow`")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (use --workflow WF to prune one workflow)", pos[0])}
	}
	req := store.PruneRequest{WorkflowID: *workflow, KeepLast: *keepLast, DryRun: *dryRun}
	if isSet(fs, "keep-last") && *keepLast < 1 {
		return usageError{"--keep-last must be >= 1"}
	}
	if *olderThan != "" {
		d, err := parseAge(*olderThan)
		if err != nil {
			return usageError{"--older-than: " + err.Error()}
		}
		if d < time.Second {
			return usageError{"--older-than: must be at least 1s"}
		}
		req.OlderThanSeconds = int64(d / time.Second)
	}
	if req.KeepLast == 0 && req.OlderThanSeconds == 0 {
		return usageError{"give --keep-last N and/or --older-than AGE"}
	}
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		if req.WorkflowID != "" {
			if _, err := st.Workflow(ctx, req.WorkflowID); err != nil {
				return err
			}
		}
		if isTerminal(e.stderr) && !*asJSON {
			pp := &pruneProgress{w: e.stderr, start: time.Now(), dry: req.DryRun}
			req.Progress = pp.update
			defer pp.end()
		}
		res, err := st.Prune(ctx, req)
		if err != nil {
			return err
		}
		wfs := make([]string, 0, len(res.IDs))
		for wf, ids := range res.IDs {
			if len(ids) > 0 {
				wfs = append(wfs, wf)
			}
		}
		sort.Strings(wfs)
		if *asJSON {
			ids := res.IDs
			if ids == nil {
				ids = map[string][]string{}
			}
			return printJSON(e.stdout, struct {
				Deleted       int                 `json:"deleted"`
				FreedBytes    int64               `json:"freedBytes"`
				DryRun        bool                `json:"dryRun"`
				CheckpointIDs map[string][]string `json:"checkpointIds"`
			}{res.Deleted, res.FreedBytes, req.DryRun, ids})
		}
		verb := "deleted"
		if req.DryRun {
			verb = "would delete"
		}
		if res.Deleted == 0 {
			fmt.Fprintln(e.stdout, "nothing to prune")
			return nil
		}
		fmt.Fprintf(e.stdout, "%s %s from %s, freeing %s\n", verb, plural(res.Deleted, "checkpoint", "checkpoints"),
			plural(len(wfs), "workflow", "workflows"), fmtBytes(res.FreedBytes))
		tw := newTable(e.stdout)
		fmt.Fprintln(tw, "WORKFLOW\tDELETED\tCHECKPOINTS")
		for _, wf := range wfs[:min(len(wfs), lsDefault)] {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", wf, len(res.IDs[wf]), strings.Join(res.IDs[wf], " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(wfs) > lsDefault {
			fmt.Fprintf(e.stdout, "... and %d more workflows (--json lists every checkpoint id)\n", len(wfs)-lsDefault)
		}
		if req.DryRun {
			fmt.Fprintln(e.stdout, "dry run: nothing was deleted")
		}
		return nil
	})
}

// pruneProgress shows the progress of a prune that takes more than one transaction ("bite") on a
// terminal, redrawn in place at most every 100ms: checkpoints deleted, workflows gone through
// of how many, elapsed time. The line is cleared when the prune ends.
type pruneProgress struct {
	w     io.Writer
	start time.Time
	last  time.Time
	dry   bool
	drawn bool
	bites int
}

func (p *pruneProgress) update(pr store.PruneProgress) {
	p.bites++
	now := time.Now()
	if p.bites < 2 || (p.drawn && now.Sub(p.last) < 100*time.Millisecond) {
		return
	}
	p.last, p.drawn = now, true
	verb := "deleted"
	if p.dry {
		verb = "would delete"
	}
	pct := 0
	if pr.Total > 0 {
		pct = pr.Workflows * 100 / pr.Total
	}
	fmt.Fprintf(p.w, "\r\x1b[Kpruning: %s %d checkpoints (%s), %d/%d workflows (%d%%), %s",
		verb, pr.Deleted, fmtBytes(pr.FreedBytes), pr.Workflows, pr.Total, pct, now.Sub(p.start).Round(time.Second))
}

func (p *pruneProgress) end() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
