package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/store"
)

const importUsage = `usage: ckptd import FILE [flags]

Reads an archive written by 'ckptd export' (a workflow, or a LangGraph thread with --thread)
into the database (created if missing). The whole archive is verified first (magic, version,
every record, every state's SHA-256, the file's SHA-256): a damaged or truncated archive imports
nothing. Then it is written in small transactions (a workflow's; a thread's in one), which a
conflict undoes; interrupted, importing again finishes it. Checkpoint ids, creation times and
SHA-256s are kept; seqs too, unless the workflow already has checkpoints at or after them here
(then they follow the existing ones, in their original order). A checkpoint (or LangGraph row)
already present with the same content is skipped, so importing twice is a no-op; the same id
with different content refuses the whole import. FILE "-" reads the archive from stdin.

Source manifests (what drift compares against) come along with their checkpoints and name the
sources' absolute directory. When the sources live elsewhere here, --sources-root OLD=NEW moves
every manifest whose root is OLD or below it (and the workflow's configured sources, when the
import creates the workflow) to NEW.

examples:
  ckptd import wf-1.ckpt
  ckptd import --dry-run wf-1.ckpt
  ckptd import wf-1.ckpt --sources-root /home/ci/agent=/srv/agent
  ssh build-host ckptd export wf-1 -o - | ckptd import -
`

type importReport struct {
	WorkflowID      string                     `json:"workflowId"`
	File            string                     `json:"file"`
	CreatedWorkflow bool                       `json:"createdWorkflow"`
	Imported        int                        `json:"imported"`
	Skipped         int                        `json:"skipped"`
	Renumbered      int                        `json:"renumbered"`
	SourcesRebased  int                        `json:"sourcesRebased,omitempty"` // manifests moved by --sources-root
	DryRun          bool                       `json:"dryRun"`
	Checkpoints     []importReportedCheckpoint `json:"checkpoints"`
}

type importReportedCheckpoint struct {
	CheckpointID string `json:"checkpointId"`
	Status       string `json:"status"`
	Seq          int64  `json:"seq"`
	OriginalSeq  int64  `json:"originalSeq"`
}

func runImport(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "import", importUsage)
	registerDBFlags(fs, &g)
	dryRun := fs.Bool("dry-run", false, "verify the archive and report what would be imported; write nothing")
	asJSON := fs.Bool("json", false, "print JSON")
	sourcesRoot := fs.String("sources-root", "", "move source manifests rooted at or below `OLD=NEW` (absolute directories)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError{"missing FILE"}
	case len(pos) > 1:
		return usageError{fmt.Sprintf("unexpected argument %q (import takes one FILE)", pos[1])}
	}
	var rebase *rootRebase
	if *sourcesRoot != "" {
		if rebase, err = parseRootRebase(*sourcesRoot); err != nil {
			return usageError{"--sources-root: " + err.Error()}
		}
	}
	name := pos[0]
	f, err := openImportFile(e, name)
	if err != nil {
		return err
	}
	defer f.close()

	// Pass 1: verify everything before the database is even opened.
	thread, roots, err := verifyArchive(f.f, f.size)
	if err != nil {
		return importFailed(name, err)
	}
	if thread != "" {
		if rebase != nil {
			return usageError{fmt.Sprintf("--sources-root: %s holds LangGraph thread %s, which records no sources", name, thread)}
		}
		return withStore(ctx, e, &g, !*dryRun, func(st store.Backend) error {
			return importThread(ctx, e, st, f, name, *dryRun, *asJSON)
		})
	}
	if rebase != nil && !slices.ContainsFunc(roots, rebase.matches) {
		have := "it has none"
		if len(roots) > 0 {
			have = "theirs: " + strings.Join(roots, ", ")
		}
		return usageError{fmt.Sprintf("--sources-root: no source manifest in %s has its root at or below %s (%s)",
			name, rebase.old, have)}
	}
	// A dry run does not create a missing database.
	return withStore(ctx, e, &g, !*dryRun, func(st store.Backend) error {
		// Pass 2: read again (verifying again) straight into one transaction.
		ar, err := openArchive(f.f, f.size)
		if err != nil {
			return importFailed(name, err)
		}
		defer ar.close()
		rec, err := ar.workflow()
		if err != nil {
			return importFailed(name, err)
		}
		cps := ar.checkpoints()
		moved := map[string]bool{}
		if rebase != nil {
			if rec.Config, err = rebase.config(rec.Config); err != nil {
				return importFailed(name, err)
			}
			cps = rebase.manifests(cps, moved)
		}
		res, err := st.Import(ctx, rec, engine.ImportManifests(cps), store.ImportOptions{DryRun: *dryRun})
		if err != nil {
			return importFailed(name, err)
		}
		rebased := 0 // manifests stored at their new root: skipped checkpoints keep theirs
		for _, c := range res.Checkpoints {
			if c.Status == store.ImportAdded && moved[c.CheckpointID] {
				rebased++
			}
		}
		rep := importReport{WorkflowID: res.WorkflowID, File: name, CreatedWorkflow: res.CreatedWorkflow,
			Imported: res.Imported, Skipped: res.Skipped, Renumbered: res.Renumbered, DryRun: res.DryRun,
			SourcesRebased: rebased, Checkpoints: make([]importReportedCheckpoint, 0, len(res.Checkpoints))}
		for _, c := range res.Checkpoints {
			rep.Checkpoints = append(rep.Checkpoints, importReportedCheckpoint{CheckpointID: c.CheckpointID,
				Status: c.Status, Seq: c.Seq, OriginalSeq: c.OriginalSeq})
		}
		if *asJSON {
			return printJSON(e.stdout, rep)
		}
		return rep.text(e)
	})
}

func importFailed(name string, err error) error {
	var ae *archiveError
	if errors.As(err, &ae) {
		return fmt.Errorf("%s: %v; nothing was imported", name, ae)
	}
	return fmt.Errorf("%w; nothing was imported", err)
}

// verifyArchive reads a whole archive, checking everything, without keeping it. It returns the
// thread of a LangGraph thread archive (else "") and the distinct roots of a workflow archive's
// source manifests, sorted.
func verifyArchive(src io.ReaderAt, size int64) (thread string, roots []string, err error) {
	ar, err := openArchive(src, size)
	if err != nil {
		return "", nil, err
	}
	defer ar.close()
	if ar.isThread() {
		for _, err := range ar.lgRecords() {
			if err != nil {
				return "", nil, err
			}
		}
		return ar.thread.ThreadID, nil, nil
	}
	if _, err := ar.workflow(); err != nil {
		return "", nil, err
	}
	for cp, err := range ar.checkpoints() {
		if err != nil {
			return "", nil, err
		}
		if cp.Sources != nil && !slices.Contains(roots, cp.Sources.Spec.Root) {
			roots = append(roots, cp.Sources.Spec.Root)
		}
	}
	slices.Sort(roots)
	return "", roots, nil
}

// threadImportReport is what 'ckptd import' says of a LangGraph thread archive.
type threadImportReport struct {
	ThreadID      string             `json:"threadId"`
	File          string             `json:"file"`
	CreatedThread bool               `json:"createdThread"`
	Imported      threadImportCounts `json:"imported"`
	Skipped       threadImportCounts `json:"skipped"`
	DryRun        bool               `json:"dryRun"`
}

type threadImportCounts struct {
	Checkpoints int `json:"checkpoints"`
	Values      int `json:"values"`
	Writes      int `json:"writes"`
}

// importThread is pass 2 for a LangGraph thread archive: read again (verifying again) straight
// into one transaction.
func importThread(ctx context.Context, e *env, st store.Backend, f *importFile, name string, dryRun, asJSON bool) error {
	ar, err := openArchive(f.f, f.size)
	if err != nil {
		return importFailed(name, err)
	}
	defer ar.close()
	res, err := st.LGImport(ctx, ar.thread.ThreadID, ar.lgRecords(), store.ImportOptions{DryRun: dryRun})
	if err != nil {
		return importFailed(name, err)
	}
	rep := threadImportReport{ThreadID: res.ThreadID, File: name, CreatedThread: res.CreatedThread, DryRun: res.DryRun,
		Imported: threadImportCounts(res.Imported), Skipped: threadImportCounts(res.Skipped)}
	if asJSON {
		return printJSON(e.stdout, rep)
	}
	where := "already here: rows with the same keys are kept"
	if rep.CreatedThread {
		where = "new here"
	}
	verb := "imported"
	if rep.DryRun {
		verb = "dry run: would import"
	}
	fmt.Fprintf(e.stdout, "%s LangGraph thread %s (%s) from %s\n", verb, rep.ThreadID, where, name)
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "\tIMPORTED\tSKIPPED (already here, same content)")
	fmt.Fprintf(tw, "checkpoints\t%d\t%d\n", rep.Imported.Checkpoints, rep.Skipped.Checkpoints)
	fmt.Fprintf(tw, "channel values\t%d\t%d\n", rep.Imported.Values, rep.Skipped.Values)
	fmt.Fprintf(tw, "pending writes\t%d\t%d\n", rep.Imported.Writes, rep.Skipped.Writes)
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.DryRun {
		fmt.Fprintln(e.stdout, "dry run: nothing was written")
	}
	return nil
}

type importFile struct {
	f    *os.File
	size int64
	tmp  string
}

func (f *importFile) close() {
	_ = f.f.Close()
	if f.tmp != "" {
		_ = os.Remove(f.tmp)
	}
}

// openImportFile opens the archive; "-" spools stdin to a temporary file (the archive is read
// twice: verified, then imported).
func openImportFile(e *env, name string) (*importFile, error) {
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			_ = f.Close()
			return nil, fmt.Errorf("%s is not a regular file (use - to read stdin)", name)
		}
		return &importFile{f: f, size: fi.Size()}, nil
	}
	f, err := os.CreateTemp("", "ckptd-import-*")
	if err != nil {
		return nil, err
	}
	out := &importFile{f: f, tmp: f.Name()}
	n, err := io.Copy(f, e.stdin)
	if err != nil {
		out.close()
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	out.size = n
	return out, nil
}

func (r importReport) text(e *env) error {
	where := "already here: its configuration is kept"
	if r.CreatedWorkflow {
		where = "new here"
	}
	verb := "imported"
	if r.DryRun {
		verb = "dry run: would import"
	}
	fmt.Fprintf(e.stdout, "%s workflow %s (%s) from %s: %d imported, %d skipped\n", verb, r.WorkflowID, where, r.File,
		r.Imported, r.Skipped)
	if r.SourcesRebased > 0 {
		moved := "moved"
		if r.DryRun {
			moved = "would move"
		}
		fmt.Fprintf(e.stdout, "%s %s to the new sources root\n", plural(r.SourcesRebased, "source manifest", "source manifests"), moved)
	}
	if len(r.Checkpoints) == 0 {
		return nil
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "SEQ\tCHECKPOINT\tRESULT")
	for _, c := range r.Checkpoints {
		res := c.Status
		switch {
		case c.Status == store.ImportSkipped:
			res = "skipped (already here, same content)"
		case c.Seq != c.OriginalSeq:
			res = fmt.Sprintf("imported (seq was %d)", c.OriginalSeq)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", c.Seq, c.CheckpointID, res)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.DryRun {
		fmt.Fprintln(e.stdout, "dry run: nothing was written")
	}
	return nil
}
