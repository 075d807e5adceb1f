package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"iter"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

const recoverUsage = `usage: ckptd recover --db BROKEN -o NEW [flags]

Copies everything that still verifies out of a damaged SQLite database into a new one: every
checkpoint (state, task lists, pending writes, ids, seqs, creation times) whose SHA-256 checks,
with its source manifest when that checks too, each workflow's configuration, and every LangGraph
thread's checkpoints, channel values and pending writes (a LangGraph checkpoint only with every
channel value it names), and the compensations and rollbacks registered (as they were). BROKEN is only read, around its damaged pages; NEW must not exist yet.
It then lists what it could not save, and exits 1 if anything was lost (0 if nothing was).

Run it when ckptd says "database damaged" (it stops writing to such a file), then start ckptd
with --db NEW, or move NEW into BROKEN's place while no ckptd runs. It is a tool for SQLite
files: a PostgreSQL database is checked and repaired with PostgreSQL's own tools (pg_amcheck,
REINDEX, a backup).

examples:
  ckptd recover --db ~/.local/state/ckptd/ckptd.db -o ~/.local/state/ckptd/recovered.db
  ckptd recover --db broken.db -o new.db --json
`

// recoverReport is what recover did, in --json and in the summary.
type recoverReport struct {
	Source      string          `json:"source"`
	Target      string          `json:"target"`
	Workflows   recoverCount    `json:"workflows"`
	Checkpoints recoverCount    `json:"checkpoints"`
	Manifests   recoverCount    `json:"sourceManifests"`
	Threads     recoverCount    `json:"threads"`
	LGRows      recoverLGCounts `json:"threadRows"`
	// Compensations and Rollbacks: the saga records (compensation/register, rollback/*).
	Compensations recoverCount      `json:"compensations"`
	Rollbacks     recoverCount      `json:"rollbacks"`
	Lost          []salvageLostItem `json:"lost"`
}

type recoverCount struct {
	Found     int `json:"found"`
	Recovered int `json:"recovered"`
}

type recoverLGCounts struct {
	Checkpoints recoverCount `json:"checkpoints"`
	Values      recoverCount `json:"values"`
	Writes      recoverCount `json:"writes"`
}

type salvageLostItem = sqlite.SalvageProblem

func runRecover(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "recover", recoverUsage)
	registerDBFlags(fs, &g)
	out := fs.String("o", "", "the new database `file` to write (must not exist)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
	}
	if *out == "" {
		return usageError{"missing -o NEW (the database to write)"}
	}
	if err := g.validate(); err != nil {
		return err
	}
	log, err := g.logger(e)
	if err != nil {
		return err
	}
	src, err := g.dbPath(e)
	if err != nil {
		return err
	}
	if isURL(src) {
		return usageError{fmt.Sprintf("--db %s is a PostgreSQL database: ckptd recover reads a damaged SQLite file. "+
			"PostgreSQL keeps its own files: check it with pg_amcheck, rebuild a damaged index with REINDEX or restore a backup",
			displayDB(src))}
	}
	if isURL(*out) {
		return usageError{"-o names the new SQLite file to write, not a database URL (to move what was recovered into PostgreSQL, ckptd export it from the new file and ckptd import it there)"}
	}
	srcAbs, _ := filepath.Abs(src)
	dstAbs, _ := filepath.Abs(*out)
	if _, err := os.Stat(src); errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("no database at %s (use --db PATH)", src)
	}
	if srcAbs == dstAbs {
		return usageError{"-o must name a new file, not the database being recovered"}
	}
	for _, p := range []string{dstAbs, dstAbs + "-wal"} {
		if fi, err := os.Stat(p); err == nil && (fi.Size() > 0 || p == dstAbs && !fi.Mode().IsRegular()) {
			return usageError{fmt.Sprintf("%s already exists: recover writes a new database (remove it or choose another -o)", p)}
		}
	}

	broken, err := sqlite.OpenReadOnly(ctx, store.Options{Path: src, MaxStateBytes: cliMaxStateBytes, Logger: log})
	if err != nil {
		return fmt.Errorf("nothing can be read from %s: %w", src, err)
	}
	defer broken.Close()
	dst, err := sqlite.Open(ctx, store.Options{Path: *out, Durability: g.durability, MaxStateBytes: cliMaxStateBytes,
		Logger: log, NoCompactor: true})
	if err != nil {
		return fmt.Errorf("create %s: %w", *out, err)
	}
	rep := recoverReport{Source: srcAbs, Target: dstAbs, Lost: []salvageLostItem{}}
	err = recoverInto(ctx, e, broken, dst, &rep)
	if cerr := dst.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", *out, cerr)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		printRecoverReport(e.stdout, &rep)
	}
	if len(rep.Lost) > 0 {
		return errProblemFound
	}
	return nil
}

// recoverInto copies what verifies from broken into dst, counting in rep.
func recoverInto(ctx context.Context, e *env, broken *sqlite.Store, dst *sqlite.Store, rep *recoverReport) error {
	sv, err := broken.Survey(ctx)
	if err != nil {
		return fmt.Errorf("list what %s holds: %w", rep.Source, err)
	}
	rep.Lost = append(rep.Lost, sv.Problems...)
	// Rows only the checkpoint-id index names (their workflow is not known): read each, and
	// give the ones that verify to their workflow.
	if orphans := sv.Workflows[""]; orphans != nil {
		delete(sv.Workflows, "")
		for _, c := range orphans.Checkpoints {
			cp, _, err := broken.SalvageCheckpoint(ctx, c.RowID)
			if err != nil {
				rep.Checkpoints.Found++
				rep.lose("checkpoint", orDash(c.CheckpointID), "", err)
				continue
			}
			w := sv.Workflows[cp.WorkflowID]
			if w == nil {
				w = &sqlite.SurveyWorkflow{RecordProblem: "its row is unreadable or missing"}
				sv.Workflows[cp.WorkflowID] = w
			}
			w.Checkpoints = append(w.Checkpoints, sqlite.SurveyCheckpoint{RowID: c.RowID, CheckpointID: cp.CheckpointID, Seq: cp.Seq})
			sort.Slice(w.Checkpoints, func(i, j int) bool { return w.Checkpoints[i].Seq < w.Checkpoints[j].Seq })
		}
	}
	ids := make([]string, 0, len(sv.Workflows))
	for id := range sv.Workflows {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := recoverWorkflow(ctx, broken, dst, id, sv.Workflows[id], rep); err != nil {
			return err
		}
	}
	threads := make([]string, 0, len(sv.Threads))
	for id := range sv.Threads {
		threads = append(threads, id)
	}
	sort.Strings(threads)
	blobsIncomplete := false
	for _, p := range sv.Problems {
		blobsIncomplete = blobsIncomplete || strings.HasPrefix(p.ID, "lg_blobs")
	}
	for _, t := range threads {
		if err := recoverThread(ctx, broken, dst, t, sv.Threads[t], blobsIncomplete, rep); err != nil {
			return err
		}
	}
	return recoverSaga(ctx, broken, dst, rep)
}

// recoverSaga copies the compensation log and the rollbacks as they were (ids, registration
// order, statuses): a workflow's pending compensations are what a later rollback runs.
func recoverSaga(ctx context.Context, broken *sqlite.Store, dst *sqlite.Store, rep *recoverReport) error {
	logs, problems, err := broken.SalvageSaga(ctx)
	rep.Lost = append(rep.Lost, problems...)
	for _, p := range problems {
		if p.Kind == "compensation" {
			rep.Compensations.Found++
		}
	}
	if err != nil {
		return fmt.Errorf("list the compensations of %s: %w", rep.Source, err)
	}
	ids := make([]string, 0, len(logs))
	for id := range logs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		l := logs[id]
		rep.Compensations.Found += len(l.Compensations)
		rep.Rollbacks.Found += len(l.Rollbacks)
		if err := dst.RestoreSaga(ctx, id, *l); err != nil {
			return fmt.Errorf("write the compensations of workflow %q into %s: %w", id, rep.Target, err)
		}
		rep.Compensations.Recovered += len(l.Compensations)
		rep.Rollbacks.Recovered += len(l.Rollbacks)
	}
	return nil
}

func (r *recoverReport) lose(kind, id, owner string, err error) {
	reason := err.Error()
	var ce *store.CorruptError
	if errors.As(err, &ce) {
		reason = ce.Reason
	}
	r.Lost = append(r.Lost, salvageLostItem{Kind: kind, ID: id, Owner: owner, Reason: reason})
}

// recoverWorkflow imports the checkpoints of one workflow that verify, in seq order, in one
// transaction.
func recoverWorkflow(ctx context.Context, broken *sqlite.Store, dst store.Backend, id string, w *sqlite.SurveyWorkflow, rep *recoverReport) error {
	rep.Workflows.Found++
	rep.Checkpoints.Found += len(w.Checkpoints)
	rec := w.Record
	if rec == nil {
		rep.lose("workflow", id, id, errors.New(w.RecordProblem+": its retention, configuration and completion are lost"))
		rec = &store.WorkflowRecord{WorkflowID: id}
		// creation and update times from its checkpoints, when they can be read
		var ckIDs []string
		for _, c := range w.Checkpoints {
			if c.CheckpointID != "" {
				ckIDs = append(ckIDs, c.CheckpointID)
			}
		}
		if sums, err := broken.Summaries(ctx, ckIDs); err == nil {
			for _, s := range sums {
				if rec.CreatedAt.IsZero() || s.CreatedAt.Before(rec.CreatedAt) {
					rec.CreatedAt = s.CreatedAt
				}
				if s.CreatedAt.After(rec.UpdatedAt) {
					rec.UpdatedAt = s.CreatedAt
				}
			}
		}
		if rec.CreatedAt.IsZero() {
			rec.CreatedAt, rec.UpdatedAt = time.Now().UTC(), time.Now().UTC()
		}
	}
	recovered := 0
	var lastSeq int64
	cps := func(yield func(store.Checkpoint, error) bool) {
		for _, c := range w.Checkpoints {
			if err := ctx.Err(); err != nil {
				yield(store.Checkpoint{}, err)
				return
			}
			cp, merr, err := broken.SalvageCheckpoint(ctx, c.RowID)
			if err != nil {
				rep.lose("checkpoint", orDash(c.CheckpointID), id, err)
				continue
			}
			if cp.WorkflowID != id || cp.Seq <= lastSeq {
				rep.lose("checkpoint", cp.CheckpointID, id, fmt.Errorf("its row disagrees with the workflow's index (workflow %q, seq %d)", cp.WorkflowID, cp.Seq))
				continue
			}
			if cp.Manifest != nil || merr != nil {
				rep.Manifests.Found++
			}
			if cp.Manifest != nil {
				if err := store.CheckManifest(drift.StoredChecker{}, *cp.Manifest); err != nil {
					merr, cp.Manifest = err, nil
				}
			}
			if merr != nil { // the checkpoint is copied without it: a drift check then says so
				rep.lose("source manifest", cp.CheckpointID, id, merr)
			} else if cp.Manifest != nil {
				rep.Manifests.Recovered++
			}
			lastSeq = cp.Seq
			recovered++
			if !yield(cp, nil) {
				return
			}
		}
	}
	res, err := dst.Import(ctx, *rec, iter.Seq2[store.Checkpoint, error](cps), store.ImportOptions{})
	if err != nil {
		return fmt.Errorf("write workflow %q into %s: %w", id, rep.Target, err)
	}
	rep.Checkpoints.Recovered += res.Imported + res.Skipped
	if recovered > 0 || w.Record != nil {
		rep.Workflows.Recovered++
	}
	return nil
}

// recoverThread imports a LangGraph thread: all of it when every row verifies, else the rows
// that do, keeping a checkpoint only with every channel value it names.
func recoverThread(ctx context.Context, broken *sqlite.Store, dst store.Backend, thread string, t *sqlite.SurveyThread, blobsIncomplete bool, rep *recoverReport) error {
	rep.Threads.Found++
	rep.LGRows.Checkpoints.Found += len(t.Checkpoints)
	rep.LGRows.Values.Found += len(t.Values)
	rep.LGRows.Writes.Found += len(t.Writes)

	// Pass 1: verify every row on its own.
	type key struct {
		ns, a, b string
		variant  int
	}
	values := map[key]bool{} // (ns, channel, version, variant) -> verified
	kept := map[key]bool{}   // (ns, checkpoint id) of checkpoints kept
	keep := map[int64]bool{} // rowids to copy
	var ckRows []sqlite.SurveyRow
	for _, r := range t.Values {
		_, err := broken.SalvageLGRow(ctx, store.LGKindValue, r.RowID)
		values[key{r.Namespace, r.Channel, r.Version, r.Variant}] = err == nil
		if err != nil {
			rep.lose("thread value", r.Name, thread, err)
			continue
		}
		keep[r.RowID] = true
	}
	for _, r := range t.Checkpoints {
		rec, err := broken.SalvageLGRow(ctx, store.LGKindCheckpoint, r.RowID)
		if err == nil {
			var vs []store.ChanVer
			if vs, err = store.ParseVersions(rec.ChannelVersions); err == nil {
				for _, v := range vs {
					ok, listed := values[key{rec.Namespace, v.Channel, v.Version, rec.ValueRefs[v.Channel]}]
					if !ok && (listed || blobsIncomplete) {
						err = fmt.Errorf("its channel value %s is lost", strings.TrimPrefix(store.LGValueWhat(v.Channel, v.Version, rec.ValueRefs[v.Channel]), "blob "))
						break
					}
				}
			}
		}
		if err != nil {
			rep.lose("thread checkpoint", r.Name, thread, err)
			continue
		}
		kept[key{rec.Namespace, rec.CheckpointID, "", 0}] = true
		keep[r.RowID] = true
		ckRows = append(ckRows, r)
	}
	for _, r := range t.Writes {
		rec, err := broken.SalvageLGRow(ctx, store.LGKindWrite, r.RowID)
		if err == nil && !kept[key{rec.Namespace, rec.CheckpointID, "", 0}] {
			err = errors.New("its checkpoint is lost")
		}
		if err != nil {
			rep.lose("thread write", r.Name, thread, err)
			continue
		}
		keep[r.RowID] = true
	}

	// Pass 2: copy what was kept, reading it again, in one transaction.
	recs := func(yield func(store.LGRecord, error) bool) {
		for _, part := range []struct {
			kind string
			rows []sqlite.SurveyRow
		}{{store.LGKindCheckpoint, ckRows}, {store.LGKindValue, t.Values}, {store.LGKindWrite, t.Writes}} {
			for _, r := range part.rows {
				if !keep[r.RowID] {
					continue
				}
				rec, err := broken.SalvageLGRow(ctx, part.kind, r.RowID)
				if !yield(rec, err) || err != nil {
					return
				}
			}
		}
	}
	res, err := dst.LGImport(ctx, thread, iter.Seq2[store.LGRecord, error](recs), store.ImportOptions{})
	if err != nil {
		var ce *store.CorruptError
		if errors.As(err, &ce) { // a row that verified a moment ago no longer does
			rep.lose("thread", thread, thread, err)
			return nil
		}
		return fmt.Errorf("write LangGraph thread %q into %s: %w", thread, rep.Target, err)
	}
	n := res.Imported.Checkpoints + res.Skipped.Checkpoints
	rep.LGRows.Checkpoints.Recovered += n
	rep.LGRows.Values.Recovered += res.Imported.Values + res.Skipped.Values
	rep.LGRows.Writes.Recovered += res.Imported.Writes + res.Skipped.Writes
	if n > 0 {
		rep.Threads.Recovered++
	}
	return nil
}

func printRecoverReport(w io.Writer, r *recoverReport) {
	fmt.Fprintf(w, "recovered %s\n     into %s\n\n", r.Source, r.Target)
	tw := newTable(w)
	fmt.Fprintln(tw, "\tRECOVERED\tFOUND")
	for _, row := range []struct {
		name string
		c    recoverCount
	}{{"workflows", r.Workflows}, {"checkpoints", r.Checkpoints}, {"source manifests", r.Manifests},
		{"LangGraph threads", r.Threads}, {"  checkpoints", r.LGRows.Checkpoints}, {"  channel values", r.LGRows.Values},
		{"  pending writes", r.LGRows.Writes}, {"compensations", r.Compensations}, {"rollbacks", r.Rollbacks}} {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", row.name, row.c.Recovered, row.c.Found)
	}
	_ = tw.Flush()
	if len(r.Lost) == 0 {
		fmt.Fprintln(w, "\nnothing lost: every row verified")
		return
	}
	fmt.Fprintf(w, "\ncould not save %s:\n", plural(len(r.Lost), "item", "items"))
	tw = newTable(w)
	fmt.Fprintln(tw, "  KIND\tID\tOF\tREASON")
	for _, l := range r.Lost {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", l.Kind, orDash(l.ID), orDash(l.Owner), l.Reason)
	}
	_ = tw.Flush()
}
