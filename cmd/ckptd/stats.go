package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

const statsUsage = `usage: ckptd stats [flags]

Describes the database as a whole: its size (SQLite: file and WAL sizes, free pages;
PostgreSQL: ckptd's tables, the whole database, dead rows, connections), workflows, checkpoints,
distinct states and their size as saved and as stored (after deduplication and compression),
LangGraph threads (when there are any), and the largest workflows. --json prints the "db"
object of the stats RPC plus these.

examples:
  ckptd stats
  ckptd stats --top 3 --json
`

type statsWorkflow struct {
	WorkflowID  string `json:"workflowId"`
	Count       int    `json:"count"`
	StoredBytes int64  `json:"storedBytes"`
	UpdatedAt   string `json:"updatedAt"`
	Resumable   bool   `json:"resumable"`

	updated time.Time
}

type statsReport struct {
	DB                 protocol.DBStats `json:"db"`
	FreeBytes          int64            `json:"freeBytes"`
	StateBytes         int64            `json:"stateBytes"` // every checkpoint's state as saved, before dedup and compression
	ResumableWorkflows int              `json:"resumableWorkflows"`
	CompletedWorkflows int              `json:"completedWorkflows"`
	LargestWorkflows   []statsWorkflow  `json:"largestWorkflows"`
	LangGraph          statsLangGraph   `json:"langgraph"`

	backend string         // About().Name
	figures []store.Figure // the backend's own (Health), shown for backends other than SQLite
}

// statsLangGraph sums the LangGraph threads (lg/* methods; 'ckptd threads' lists them).
type statsLangGraph struct {
	Threads     int   `json:"threads"`
	Checkpoints int   `json:"checkpoints"`
	Writes      int   `json:"writes"`
	StoredBytes int64 `json:"storedBytes"`
}

func runStats(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "stats", statsUsage)
	registerDBFlags(fs, &g)
	asJSON := fs.Bool("json", false, "print JSON")
	top := fs.Int("top", 10, "list the `n` largest workflows (0: none)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
	}
	if *top < 0 {
		return usageError{"--top must be >= 0"}
	}
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		db, err := st.Stats(ctx)
		if err != nil {
			return err
		}
		u, err := st.Usage(ctx)
		if err != nil {
			return err
		}
		health, err := st.Health(ctx)
		if err != nil {
			return err
		}
		var ws []store.WorkflowInfo
		if *top > 0 { // the largest, by their kept figures
			page, err := st.ListWorkflows(ctx, store.WorkflowFilter{Order: store.OrderStored, Limit: min(*top, store.MaxWorkflowPage)})
			if err != nil {
				return err
			}
			ws = page.Workflows
		}
		threads, err := st.LGThreads(ctx)
		if err != nil {
			return err
		}
		rep := statsReport{
			DB: protocol.DBStats{Path: db.Path, SizeBytes: db.SizeBytes, WALBytes: health.Figure("walBytes"), Workflows: db.Workflows,
				Checkpoints: db.Checkpoints, States: db.States, StatesStoredBytes: db.StatesStoredBytes},
			FreeBytes:          health.Figure("freeBytes"),
			StateBytes:         u.StateBytes,
			ResumableWorkflows: u.ResumableWorkflow,
			CompletedWorkflows: u.CompletedWorkflow,
			LargestWorkflows:   []statsWorkflow{},
			backend:            st.About().Name,
			figures:            health.Figures,
		}
		for _, w := range ws[:min(*top, len(ws))] {
			rep.LargestWorkflows = append(rep.LargestWorkflows, statsWorkflow{WorkflowID: w.WorkflowID, Count: w.Count,
				StoredBytes: w.StoredBytes, UpdatedAt: timestamp(w.UpdatedAt), Resumable: w.Resumable, updated: w.UpdatedAt})
		}
		rep.LangGraph.Threads = len(threads)
		for _, t := range threads {
			rep.LangGraph.Checkpoints += t.Checkpoints
			rep.LangGraph.Writes += t.Writes
			rep.LangGraph.StoredBytes += t.StoredBytes
		}
		if *asJSON {
			return printJSON(e.stdout, rep)
		}
		return rep.text(e)
	})
}

func (r statsReport) text(e *env) error {
	tw := newTable(e.stdout)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("database", r.DB.Path)
	if r.backend == "SQLite" {
		row("file", fmt.Sprintf("%s (WAL %s, %s free)", fmtBytes(r.DB.SizeBytes), fmtBytes(r.DB.WALBytes), fmtBytes(r.FreeBytes)))
	} else {
		var figs []string
		for _, f := range r.figures {
			v := strconv.FormatInt(f.Value, 10)
			if strings.HasSuffix(f.Name, "Bytes") {
				v = fmtBytes(f.Value)
			}
			figs = append(figs, f.Name+" "+v)
		}
		row("size", fmt.Sprintf("%s (%s)", fmtBytes(r.DB.SizeBytes), strings.Join(figs, ", ")))
	}
	row("workflows", fmt.Sprintf("%d (%d resumable, %d completed)", r.DB.Workflows, r.ResumableWorkflows, r.CompletedWorkflows))
	row("checkpoints", fmt.Sprint(r.DB.Checkpoints))
	states := fmt.Sprintf("%d distinct, %s as saved, %s stored", r.DB.States, fmtBytes(r.StateBytes), fmtBytes(r.DB.StatesStoredBytes))
	if r.StateBytes > 0 {
		states += fmt.Sprintf(" (%.0f%% saved by dedup and compression)",
			100*(1-float64(r.DB.StatesStoredBytes)/float64(r.StateBytes)))
	}
	row("states", states)
	if lg := r.LangGraph; lg.Threads > 0 {
		row("langgraph", fmt.Sprintf("%s, %s, %s, %s stored", plural(lg.Threads, "thread", "threads"),
			plural(lg.Checkpoints, "checkpoint", "checkpoints"), plural(lg.Writes, "pending write", "pending writes"),
			fmtBytes(lg.StoredBytes)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.LargestWorkflows) == 0 {
		return nil
	}
	fmt.Fprintln(e.stdout, "\nlargest workflows:")
	tw = newTable(e.stdout)
	fmt.Fprintln(tw, "  WORKFLOW\tCHECKPOINTS\tSTORED\tUPDATED")
	for _, w := range r.LargestWorkflows {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", w.WorkflowID, w.Count, fmtBytes(w.StoredBytes), fmtTime(w.updated))
	}
	return tw.Flush()
}
