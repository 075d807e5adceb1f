package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

const driftUsage = `usage: ckptd drift WORKFLOW [flags]

Compares the source files recorded with a workflow's latest checkpoint (the sources given to
checkpoint/save, or set with workflow/configure) with the files on disk now, and lists what
changed, was added or was deleted: what drift/status answers. Exits 0 when nothing drifted,
1 when something did, 3 when the checkpoint has no sources recorded (nothing to compare: neither
"no drift" nor "drifted"), 2 on usage errors.

examples:
  ckptd drift wf-1
  ckptd drift wf-1 --namespace sub --json
  ckptd drift wf-1 --checkpoint c-7
  ckptd drift wf-1 --sources-root ~/checkout/agent   # the same tree checked out elsewhere
`

func runDrift(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "drift", driftUsage)
	registerDBFlags(fs, &g)
	asJSON := fs.Bool("json", false, "print JSON (drift/status's result)")
	namespace := fs.String("namespace", "", "check the latest checkpoint of this `namespace`")
	checkpoint := fs.String("checkpoint", "", "check this checkpoint `id` instead of the latest")
	sourcesRoot := fs.String("sources-root", "", "compare with the same tree checked out at `dir` (drift/status's sourcesRoot)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	root, err := engine.CheckSourcesRoot("--sources-root", *sourcesRoot)
	if err != nil {
		return sourcesRootError(err)
	}
	switch {
	case len(pos) == 0:
		return usageError{"missing WORKFLOW"}
	case len(pos) > 1:
		return usageError{fmt.Sprintf("unexpected argument %q (drift takes one WORKFLOW)", pos[1])}
	case *checkpoint != "" && isSet(fs, "namespace"):
		return usageError{"--checkpoint and --namespace exclude each other"}
	}
	wf := pos[0]
	log, err := g.logger(e)
	if err != nil {
		return err
	}
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		eng := engine.New(st, log)
		var ref store.ManifestRef
		var err error
		if *checkpoint != "" {
			ref, err = st.CheckpointManifestRef(ctx, *checkpoint)
			if err == nil && ref.WorkflowID != wf {
				return usageError{fmt.Sprintf("checkpoint %s belongs to workflow %s, not %s", ref.CheckpointID, ref.WorkflowID, wf)}
			}
		} else {
			ref, err = st.LatestManifestRef(ctx, wf, *namespace)
		}
		switch {
		case errors.Is(err, store.ErrNotFound) && *checkpoint != "":
			return fmt.Errorf("no checkpoint %s", *checkpoint)
		case errors.Is(err, store.ErrNotFound) && *namespace != "":
			return fmt.Errorf("workflow %s has no checkpoints in namespace %q", wf, *namespace)
		case errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("workflow %s has no checkpoints", wf)
		case err != nil:
			return err
		case !ref.HasManifest:
			return driftNoSources(e, ref, *asJSON)
		}
		base, err := eng.Manifest(ctx, ref)
		if err != nil {
			return err
		}
		ds, err := eng.CheckpointDriftAt(ctx, ref, base, nil, root) // what drift/status answers (within the configured limits)
		if err != nil {
			if root == "" {
				root = base.Spec.Root
			}
			return fmt.Errorf("checking %s: %w", root, err)
		}
		if *asJSON {
			err = printJSON(e.stdout, ds)
		} else {
			err = driftText(e.stdout, ref, ds)
		}
		if err != nil {
			return err
		}
		if ds.Drifted {
			return errProblemFound
		}
		return nil
	})
}

func driftText(w io.Writer, ref store.ManifestRef, ds protocol.DriftStatus) error {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("workflow", ref.WorkflowID)
	row("namespace", orDash(ref.Namespace))
	step := fmt.Sprintf("step %d", ref.Step)
	if ref.StepName != "" {
		step += fmt.Sprintf(" %q", ref.StepName)
	}
	row("checkpoint", fmt.Sprintf("%s (seq %d, %s, %s)", ref.CheckpointID, ref.Seq, step, ref.Phase))
	row("sources", fmt.Sprintf("%s (%s checked)", ds.Root, plural(ds.FilesChecked, "file", "files")))
	if ds.RecordedRoot != "" {
		row("recorded at", ds.RecordedRoot)
	}
	if ds.Drifted {
		row("drifted", fmt.Sprintf("yes: %d changed, %d added, %d deleted", len(ds.Changed), len(ds.Added), len(ds.Deleted)))
		if len(ds.Unreadable) > 0 {
			row("unreadable", strings.Join(ds.Unreadable, ", ")+" (could not be read: they may have changed)")
		}
	} else {
		row("drifted", "no")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ds.Drifted {
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "  KIND\tPATH\tOLD SIZE\tNEW SIZE")
		size := func(n int64, present bool) string {
			if !present {
				return "-"
			}
			return fmtBytes(n)
		}
		for _, l := range []struct {
			kind string
			fcs  []protocol.DriftFileChange
		}{{"changed", ds.Changed}, {"added", ds.Added}, {"deleted", ds.Deleted}} {
			for _, fc := range l.fcs {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", l.kind, fc.Path, size(fc.OldSize, fc.OldType != ""), size(fc.NewSize, fc.NewType != ""))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(ds.Warnings) > 0 {
		fmt.Fprintf(w, "\n%s:\n", plural(len(ds.Warnings), "warning", "warnings"))
		for _, s := range ds.Warnings {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	return nil
}

// driftNoSources reports a checkpoint saved without sources: there is nothing to compare, which
// is neither "no drift" nor "drifted" (exit status 3).
func driftNoSources(e *env, ref store.ManifestRef, asJSON bool) error {
	const hint = "save checkpoints with sources (checkpoint/save's sources), or set them for the workflow with workflow/configure"
	if asJSON {
		if err := printJSON(e.stdout, map[string]any{"checkpointId": ref.CheckpointID, "workflowId": ref.WorkflowID,
			"namespace": ref.Namespace, "sourcesRecorded": false, "drifted": nil, "reason": "no sources recorded: " + hint}); err != nil {
			return err
		}
		return exitStatus(exitNoSources)
	}
	tw := newTable(e.stdout)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("workflow", ref.WorkflowID)
	row("namespace", orDash(ref.Namespace))
	step := fmt.Sprintf("step %d", ref.Step)
	if ref.StepName != "" {
		step += fmt.Sprintf(" %q", ref.StepName)
	}
	row("checkpoint", fmt.Sprintf("%s (seq %d, %s, %s)", ref.CheckpointID, ref.Seq, step, ref.Phase))
	row("sources", "none recorded")
	row("drifted", "unknown: nothing to compare")
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nTo check drift, %s.\n", hint)
	return exitStatus(exitNoSources)
}

// sourcesRootError is a usage error for a --sources-root that is not a directory.
func sourcesRootError(err error) error {
	var se *engine.SourcesError
	if errors.As(err, &se) {
		return usageError{se.Field + ": " + se.Reason}
	}
	return err
}
