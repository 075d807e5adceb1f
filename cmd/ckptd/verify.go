package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
)

const verifyUsage = `usage: ckptd verify [flags]

Checks the whole database: every stored state is decompressed and its SHA-256 compared with the
one recorded at save time (a state shared by several checkpoints is checked once, and a problem
is reported for each of them), likewise every LangGraph checkpoint, channel value and pending
write (lg/* methods) and every source manifest recorded for drift (each file entry against its
BLAKE3 content address), then the database's own integrity check runs (SQLite: PRAGMA
integrity_check; PostgreSQL: amcheck, where the extension is available), and the figures ckptd
keeps (each workflow's checkpoint count, stored bytes and newest checkpoint; the totals stats
reports) are recounted from the rows they count. Progress goes to
stderr (a bar on a terminal). Exits 0 when everything is intact, 1 listing what is not.
Reads only: safe while a sidecar is using the database.

examples:
  ckptd verify
  ckptd verify --db /var/lib/agent/ckptd.db --json
`

type verifyProblem struct {
	CheckpointID string `json:"checkpointId"`
	WorkflowID   string `json:"workflowId"`
	Seq          int64  `json:"seq"`
	Reason       string `json:"reason"`
}

type verifyReport struct {
	OK          bool            `json:"ok"`
	Checkpoints int             `json:"checkpoints"`
	States      int             `json:"states"`
	StoredBytes int64           `json:"storedBytes"`
	Corrupt     []verifyProblem `json:"corrupt"`
	Database    []string        `json:"database"` // integrity_check (and other database-level) problems
	LangGraph   lgVerifyReport  `json:"langgraph"`
	Sources     srcVerifyReport `json:"sourceManifests"`

	backend     string // names the integrity check ("SQLite")
	integrityNA bool   // the backend has no integrity check to run (About().Integrity says why)
}

// srcVerifyReport covers the drift manifests recorded with checkpoints.
type srcVerifyReport struct {
	Manifests int             `json:"manifests"`
	Entries   int             `json:"entries"` // distinct file entries stored for them
	Corrupt   []verifyProblem `json:"corrupt"`
}

// lgVerifyReport covers the LangGraph tables (lg/put, lg/putWrites).
type lgVerifyReport struct {
	Checkpoints int               `json:"checkpoints"`
	Values      int               `json:"values"`
	Writes      int               `json:"writes"`
	Corrupt     []lgVerifyProblem `json:"corrupt"`
}

type lgVerifyProblem struct {
	Kind         string `json:"kind"` // checkpoint | blob | write | table
	ThreadID     string `json:"threadId,omitempty"`
	Namespace    string `json:"namespace"`
	CheckpointID string `json:"checkpointId,omitempty"`
	Channel      string `json:"channel,omitempty"`
	Version      string `json:"version,omitempty"`
	TaskID       string `json:"taskId,omitempty"`
	Idx          *int64 `json:"idx,omitempty"`
	Reason       string `json:"reason"`
}

// what names a LangGraph problem's row for people.
func (p lgVerifyProblem) what() string {
	switch p.Kind {
	case "checkpoint":
		return "lg checkpoint " + p.CheckpointID
	case "blob":
		return fmt.Sprintf("lg value %s@%s", p.Channel, p.Version)
	case "write":
		return fmt.Sprintf("lg write %s/%s/%d", p.CheckpointID, p.TaskID, *p.Idx)
	}
	return "(lg table)"
}

func runVerify(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "verify", verifyUsage)
	registerDBFlags(fs, &g)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (verify checks the whole database)", pos[0])}
	}
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		// Stats can fail on a database with damaged pages; verify must still go on and list
		// what it can, so its failure is reported as database damage rather than fatal.
		stats, statsErr := st.Stats(ctx)
		about := st.About()
		rep := verifyReport{Checkpoints: stats.Checkpoints, States: stats.States, StoredBytes: stats.StatesStoredBytes,
			Corrupt: []verifyProblem{}, Database: []string{}, backend: about.Name,
			integrityNA: strings.HasPrefix(about.Integrity, "not available")}
		if statsErr != nil {
			rep.Database = append(rep.Database, "reading database statistics: "+statsErr.Error())
		}
		var p *progress
		var onProgress func(done, total int)
		if !*quiet {
			p = newProgress(e.stderr, isTerminal(e.stderr), "states", stats.StatesStoredBytes)
			if !p.tty {
				fmt.Fprintf(e.stderr, "verify: checking %s (%s) and %s integrity\n",
					plural(stats.States, "state", "states"), fmtBytes(stats.StatesStoredBytes), about.Name)
			}
			integrity := false
			startIntegrity := func() {
				if !integrity {
					integrity = true
					p.phase(fmt.Sprintf("checking %s integrity (%s)", about.Name, about.Integrity))
				}
			}
			onProgress = func(done, total int) {
				p.update(done, total)
				if done >= total {
					startIntegrity()
				}
			}
			if stats.States == 0 {
				startIntegrity()
			}
		}
		bad, err := st.Verify(ctx, onProgress)
		var integrity, figures []string
		if err == nil {
			integrity, err = st.IntegrityCheck(ctx)
		}
		if err == nil && len(integrity) == 0 {
			figures, err = st.CheckFigures(ctx)
		}
		if p != nil {
			if err != nil {
				p.abort()
			}
			p.endPhase()
		}
		if err != nil {
			return err
		}
		lgCounts, lgBad, err := st.VerifyLG(ctx)
		if err != nil {
			return err
		}
		rep.LangGraph = lgVerifyReport{Checkpoints: lgCounts.Checkpoints, Values: lgCounts.Blobs, Writes: lgCounts.Writes,
			Corrupt: []lgVerifyProblem{}}
		for _, b := range lgBad {
			lp := lgVerifyProblem{Kind: b.Kind, ThreadID: b.ThreadID, Namespace: b.Namespace, CheckpointID: b.CheckpointID,
				Channel: b.Channel, Version: b.Version, TaskID: b.TaskID, Reason: b.Reason}
			if b.Kind == "write" {
				idx := b.Idx
				lp.Idx = &idx
			}
			rep.LangGraph.Corrupt = append(rep.LangGraph.Corrupt, lp)
		}
		srcCounts, srcBad, err := store.VerifyManifests(ctx, st, drift.StoredChecker{})
		if err != nil {
			return err
		}
		rep.Sources = srcVerifyReport{Manifests: srcCounts.Manifests, Entries: srcCounts.Entries, Corrupt: []verifyProblem{}}
		for _, b := range srcBad {
			rep.Sources.Corrupt = append(rep.Sources.Corrupt, verifyProblem{CheckpointID: b.CheckpointID,
				WorkflowID: b.WorkflowID, Seq: b.Seq, Reason: b.Reason})
		}
		var ids []string
		for _, b := range bad {
			if b.CheckpointID != "" {
				ids = append(ids, b.CheckpointID)
			}
		}
		sums, err := st.Summaries(ctx, ids)
		if err != nil {
			return err
		}
		for _, b := range bad {
			if b.CheckpointID == "" {
				rep.Database = append(rep.Database, b.Reason)
				continue
			}
			sm := sums[b.CheckpointID]
			rep.Corrupt = append(rep.Corrupt, verifyProblem{CheckpointID: b.CheckpointID, WorkflowID: sm.WorkflowID,
				Seq: sm.Seq, Reason: b.Reason})
		}
		rep.Database = append(rep.Database, integrity...)
		rep.Database = append(rep.Database, figures...)
		rep.OK = len(bad) == 0 && len(integrity) == 0 && len(figures) == 0 && len(lgBad) == 0 && len(srcBad) == 0
		if *asJSON {
			err = printJSON(e.stdout, rep)
		} else {
			err = rep.text(e)
		}
		if err != nil {
			return err
		}
		if !rep.OK {
			return errProblemFound
		}
		return nil
	})
}

func (r verifyReport) text(e *env) error {
	checked := fmt.Sprintf("%s, %s (%s stored)", plural(r.Checkpoints, "checkpoint", "checkpoints"),
		plural(r.States, "state", "states"), fmtBytes(r.StoredBytes))
	if lg := r.LangGraph; lg.Checkpoints+lg.Values+lg.Writes > 0 {
		checked += fmt.Sprintf(", %s (%s, %s)", plural(lg.Checkpoints, "LangGraph checkpoint", "LangGraph checkpoints"),
			plural(lg.Values, "value", "values"), plural(lg.Writes, "write", "writes"))
	}
	if src := r.Sources; src.Manifests > 0 {
		checked += fmt.Sprintf(", %s (%s)", plural(src.Manifests, "source manifest", "source manifests"),
			plural(src.Entries, "file entry", "file entries"))
	}
	if r.OK {
		if r.integrityNA {
			fmt.Fprintf(e.stdout, "ok: %s (%s integrity check not available)\n", checked, r.backend)
			return nil
		}
		fmt.Fprintf(e.stdout, "ok: %s, %s integrity ok\n", checked, r.backend)
		return nil
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "CORRUPT\tWORKFLOW\tSEQ\tPROBLEM")
	for _, c := range r.Corrupt {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", c.CheckpointID, orDash(c.WorkflowID), c.Seq, c.Reason)
	}
	for _, c := range r.Sources.Corrupt {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", c.CheckpointID, c.WorkflowID, c.Seq, c.Reason)
	}
	for _, c := range r.LangGraph.Corrupt {
		fmt.Fprintf(tw, "%s\t%s\t-\t%s\n", c.what(), orDash(c.ThreadID), c.Reason)
	}
	for _, d := range r.Database {
		fmt.Fprintf(tw, "(database)\t-\t-\t%s\n", d)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	extra := ""
	if n := len(r.Sources.Corrupt); n > 0 {
		extra = ", " + plural(n, "corrupt source manifest", "corrupt source manifests")
	}
	if n := len(r.LangGraph.Corrupt); n > 0 {
		extra += ", " + plural(n, "corrupt LangGraph row", "corrupt LangGraph rows")
	}
	n := len(r.Corrupt) + len(r.Sources.Corrupt) + len(r.LangGraph.Corrupt) + len(r.Database)
	fmt.Fprintf(e.stdout, "%s (%s%s, %s) in %s\n", plural(n, "problem", "problems"),
		plural(len(r.Corrupt), "corrupt checkpoint", "corrupt checkpoints"), extra,
		plural(len(r.Database), "database integrity error", "database integrity errors"), checked)
	return nil
}
