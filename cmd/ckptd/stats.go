package main

import (
	"context"
	"fmt"
	"sort"
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
LangGraph threads (when there are any), every value's size as saved against the bytes stored
for them (storage: shared chunks counted once), and the largest workflows and threads by what
they store (LOGICAL as saved, STORED with the chunks they share counted in full, RATIO). --json
prints the "db" object of the stats RPC plus these.

examples:
  ckptd stats
  ckptd stats --top 3 --json
`

type statsWorkflow struct {
	WorkflowID   string  `json:"workflowId"`
	Count        int     `json:"count"`
	LogicalBytes int64   `json:"logicalBytes"`
	StoredBytes  int64   `json:"storedBytes"` // shared chunks counted in full
	Ratio        float64 `json:"ratio"`
	UpdatedAt    string  `json:"updatedAt"`
	Resumable    bool    `json:"resumable"`

	updated time.Time
	fp      store.Footprint
}

type statsThread struct {
	ThreadID     string  `json:"threadId"`
	Checkpoints  int     `json:"checkpoints"`
	LogicalBytes int64   `json:"logicalBytes"`
	StoredBytes  int64   `json:"storedBytes"`
	Ratio        float64 `json:"ratio"`

	fp store.Footprint
}

type statsReport struct {
	DB                 protocol.DBStats `json:"db"`
	FreeBytes          int64            `json:"freeBytes"`
	StateBytes         int64            `json:"stateBytes"` // every checkpoint's state as saved, before dedup and compression
	ResumableWorkflows int              `json:"resumableWorkflows"`
	CompletedWorkflows int              `json:"completedWorkflows"`
	LargestWorkflows   []statsWorkflow  `json:"largestWorkflows"`
	LargestThreads     []statsThread    `json:"largestThreads"`
	LangGraph          statsLangGraph   `json:"langgraph"`

	backend string         // About().Name
	figures []store.Figure // the backend's own (Health), shown for backends other than SQLite
}

// statsLangGraph sums the LangGraph threads (lg/* methods; 'ckptd threads' lists them).
type statsLangGraph struct {
	Threads      int   `json:"threads"`
	Checkpoints  int   `json:"checkpoints"`
	Writes       int   `json:"writes"`
	LogicalBytes int64 `json:"logicalBytes"`
	StoredBytes  int64 `json:"storedBytes"`
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
		ids := make([]string, len(ws))
		for i, w := range ws {
			ids[i] = w.WorkflowID
		}
		fp, err := st.Footprints(ctx, store.FootprintRequest{Workflows: ids, AllThreads: true})
		if err != nil {
			return err
		}
		// chosen by their kept figures (what their saves added), shown by their footprints
		sort.SliceStable(ws, func(i, j int) bool {
			a, b := fp.Workflows[ws[i].WorkflowID].StoredBytes, fp.Workflows[ws[j].WorkflowID].StoredBytes
			if a != b {
				return a > b
			}
			return ws[i].WorkflowID < ws[j].WorkflowID
		})
		rep := statsReport{
			DB: protocol.DBStats{Path: db.Path, SizeBytes: db.SizeBytes, WALBytes: health.Figure("walBytes"), Workflows: db.Workflows,
				Checkpoints: db.Checkpoints, States: db.States, StatesStoredBytes: db.StatesStoredBytes,
				Storage: &protocol.StorageStats{LogicalBytes: fp.Total.LogicalBytes, StoredBytes: fp.Total.StoredBytes,
					Ratio: fp.Total.Ratio(), Chunks: fp.Chunks, Runs: fp.Runs}},
			FreeBytes:          health.Figure("freeBytes"),
			StateBytes:         u.StateBytes,
			ResumableWorkflows: u.ResumableWorkflow,
			CompletedWorkflows: u.CompletedWorkflow,
			LargestWorkflows:   []statsWorkflow{},
			LargestThreads:     []statsThread{},
			backend:            st.About().Name,
			figures:            health.Figures,
		}
		for _, w := range ws[:min(*top, len(ws))] {
			f := fp.Workflows[w.WorkflowID]
			rep.LargestWorkflows = append(rep.LargestWorkflows, statsWorkflow{WorkflowID: w.WorkflowID, Count: w.Count,
				LogicalBytes: f.LogicalBytes, StoredBytes: f.StoredBytes, Ratio: f.Ratio(), UpdatedAt: timestamp(w.UpdatedAt),
				Resumable: w.Resumable, updated: w.UpdatedAt, fp: f})
		}
		rep.LangGraph.Threads = len(threads)
		var ths []statsThread
		for _, t := range threads {
			f := fp.Threads[t.ThreadID]
			rep.LangGraph.Checkpoints += t.Checkpoints
			rep.LangGraph.Writes += t.Writes
			rep.LangGraph.LogicalBytes += f.LogicalBytes
			rep.LangGraph.StoredBytes += f.StoredBytes
			ths = append(ths, statsThread{ThreadID: t.ThreadID, Checkpoints: t.Checkpoints, LogicalBytes: f.LogicalBytes,
				StoredBytes: f.StoredBytes, Ratio: f.Ratio(), fp: f})
		}
		sort.SliceStable(ths, func(i, j int) bool {
			if ths[i].StoredBytes != ths[j].StoredBytes {
				return ths[i].StoredBytes > ths[j].StoredBytes
			}
			return ths[i].ThreadID < ths[j].ThreadID
		})
		rep.LargestThreads = append(rep.LargestThreads, ths[:min(*top, len(ths))]...)
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
		row("langgraph", fmt.Sprintf("%s, %s, %s, %s as saved, %s stored", plural(lg.Threads, "thread", "threads"),
			plural(lg.Checkpoints, "checkpoint", "checkpoints"), plural(lg.Writes, "pending write", "pending writes"),
			fmtBytes(lg.LogicalBytes), fmtBytes(lg.StoredBytes)))
	}
	if st := r.DB.Storage; st != nil {
		f := store.Footprint{LogicalBytes: st.LogicalBytes, StoredBytes: st.StoredBytes}
		row("storage", fmt.Sprintf("%s as saved, %s stored (%s; %s in %s)", fmtBytes(st.LogicalBytes), fmtBytes(st.StoredBytes),
			fmtRatio(f), plural(int(st.Chunks), "chunk", "chunks"), plural(int(st.Runs), "run", "runs")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.LargestWorkflows) > 0 {
		fmt.Fprintln(e.stdout, "\nlargest workflows (STORED counts the chunks a workflow shares in full):")
		tw = newTable(e.stdout)
		fmt.Fprintln(tw, "  WORKFLOW\tCHECKPOINTS\tLOGICAL\tSTORED\tRATIO\tUPDATED")
		for _, w := range r.LargestWorkflows {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", w.WorkflowID, w.Count, fmtBytes(w.LogicalBytes), fmtBytes(w.StoredBytes),
				fmtRatio(w.fp), fmtTime(w.updated))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.LargestThreads) > 0 {
		fmt.Fprintln(e.stdout, "\nlargest LangGraph threads:")
		tw = newTable(e.stdout)
		fmt.Fprintln(tw, "  THREAD\tCHECKPOINTS\tLOGICAL\tSTORED\tRATIO")
		for _, t := range r.LargestThreads {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", t.ThreadID, t.Checkpoints, fmtBytes(t.LogicalBytes), fmtBytes(t.StoredBytes),
				fmtRatio(t.fp))
		}
		return tw.Flush()
	}
	return nil
}
