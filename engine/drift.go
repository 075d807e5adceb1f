package engine

// A checkpoint's drift: what drift/status, `ckptd drift` and the drift part of a resume plan
// answer.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// driftProblemPaths is how many paths a resume plan's drift problem names.
const driftProblemPaths = 5

// DriftStatus answers drift/status for ref's checkpoint (base: its manifest, Engine.Manifest)
// within lim (nil: the limits of the workflow's configured sources, else the defaults):
// CheckpointDrift, with a failed check said as a *SourcesError or an *UnavailableError.
func (e *Engine) DriftStatus(ctx context.Context, ref store.ManifestRef, base *drift.Manifest, lim *drift.Limits) (protocol.DriftStatus, error) {
	return e.DriftStatusAt(ctx, ref, base, lim, "")
}

// DriftStatusAt is DriftStatus comparing the recorded sources with the same tree checked out
// at root (CheckSourcesRoot; "": at the recorded root), as CheckpointDriftAt.
func (e *Engine) DriftStatusAt(ctx context.Context, ref store.ManifestRef, base *drift.Manifest, lim *drift.Limits, root string) (protocol.DriftStatus, error) {
	st, err := e.CheckpointDriftAt(ctx, ref, base, lim, root)
	if err != nil {
		if root == "" {
			root = base.Spec.Root
		}
		return st, fingerprintError("sources", limitsField(lim), root, err)
	}
	return st, nil
}

// checkLimits are the bounds of a check of a workflow's tree at root: explicit, else those of
// the workflow's configured sources if they are on the same root, else nil (the defaults).
func (e *Engine) checkLimits(ctx context.Context, workflowID, root string, explicit *drift.Limits) *drift.Limits {
	if explicit != nil {
		return explicit
	}
	cfg, err := e.store.WorkflowSources(ctx, workflowID)
	if err != nil {
		return nil
	}
	return ConfiguredLimits(cfg, root)
}

// CheckpointDrift compares ref's checkpoint's recorded sources (base: its manifest) with the
// tree: from an active watch on it if there is one, else by drift.Check against base within lim
// (nil: the limits of the workflow's configured sources, else the defaults). The error is the
// check's own.
func (e *Engine) CheckpointDrift(ctx context.Context, ref store.ManifestRef, base *drift.Manifest, lim *drift.Limits) (protocol.DriftStatus, error) {
	return e.CheckpointDriftAt(ctx, ref, base, lim, "")
}

// CheckpointDriftAt is CheckpointDrift against the same tree checked out at root (absolute and
// clean, CheckSourcesRoot): another machine's checkout of the recorded tree. A manifest
// records paths relative to its root, so only the root moves (the idea of `ckptd import
// --sources-root`, cmd/ckptd/rebase.go); the check is a full scan compared by content and mode,
// since stat data recorded on another machine says nothing about this one. The status names
// the root compared, and the recorded one in RecordedRoot. root "" (or the recorded root) is
// CheckpointDrift.
func (e *Engine) CheckpointDriftAt(ctx context.Context, ref store.ManifestRef, base *drift.Manifest, lim *drift.Limits, root string) (protocol.DriftStatus, error) {
	if root == "" || root == base.Spec.Root {
		return e.checkpointDrift(ctx, ref, base, lim)
	}
	key := lastKey{ref.WorkflowID, root}
	last, _ := e.drift.lastFor(key)
	rep, cur, err := checkDriftAt(ctx, base, root, last, e.checkLimits(ctx, ref.WorkflowID, base.Spec.Root, lim), e.log)
	if err != nil {
		return protocol.DriftStatus{}, err
	}
	e.drift.remember(key, cur, nil)
	if rep.FullScan && last == nil {
		rep.Reason = fmt.Sprintf("compared at %s (recorded at %s)", root, base.Spec.Root)
	}
	st := newDriftStatus(ref, root, rep)
	st.RecordedRoot = base.Spec.Root
	return st, nil
}

func (e *Engine) checkpointDrift(ctx context.Context, ref store.ManifestRef, base *drift.Manifest, lim *drift.Limits) (protocol.DriftStatus, error) {
	if w := e.watchOn(ref.Key); w != nil {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rep, err := w.w.Status(wctx)
		cancel()
		if err == nil {
			st := newDriftStatus(ref, base.Spec.Root, rep)
			st.Watched = true
			return st, nil
		}
		e.log.Debug("drift watch status failed; checking instead", "watchId", w.ID, "error", err)
	}
	key := lastKey{ref.WorkflowID, base.Spec.Root}
	last, _ := e.drift.lastFor(key)
	rep, cur, err := checkDrift(ctx, base, last, e.checkLimits(ctx, ref.WorkflowID, base.Spec.Root, lim), e.log)
	if err != nil {
		return protocol.DriftStatus{}, err
	}
	e.drift.remember(key, cur, nil)
	return newDriftStatus(ref, base.Spec.Root, rep), nil
}

// checkDrift compares the tree with base, using last (optional) as a newer manifest of it so
// that files which drifted long ago are not re-hashed, within lim (nil: the defaults). A root
// that no longer exists (or is no longer a directory) is reported as every file deleted, with
// a warning; the returned manifest is then nil.
func checkDrift(ctx context.Context, base, last *drift.Manifest, lim *drift.Limits, log *slog.Logger) (drift.Report, *drift.Manifest, error) {
	return checkDriftAt(ctx, base, base.Spec.Root, last, lim, log)
}

// checkDriftAt is checkDrift against the tree at root. For another root than base's, drift.Check
// scans the whole tree (its rules differ from base's by the root) unless last is a manifest
// taken at root, and compares what it finds with base by path, content and mode.
func checkDriftAt(ctx context.Context, base *drift.Manifest, root string, last *drift.Manifest, lim *drift.Limits, log *slog.Logger) (drift.Report, *drift.Manifest, error) {
	if last != nil && last.Spec.Root != root {
		last = nil
	}
	spec := base.Spec
	spec.Root = root
	spec.Limits = lim
	rep, cur, err := drift.Check(ctx, spec, base, drift.CheckOptions{ScanOptions: drift.ScanOptions{Logger: log}, Last: last})
	if errors.Is(err, drift.ErrRootNotFound) || errors.Is(err, drift.ErrRootNotDir) {
		t0 := time.Now()
		rep = drift.Diff(base, &drift.Manifest{})
		rep.Warnings = []string{fmt.Sprintf("source root %s no longer exists or is not a directory", root)}
		rep.Elapsed = time.Since(t0)
		return rep, nil, nil
	}
	return rep, cur, err
}

// newDriftStatus turns a drift report on ref's checkpoint into the protocol's shape.
func newDriftStatus(ref store.ManifestRef, root string, rep drift.Report) protocol.DriftStatus {
	conv := func(fcs []drift.FileChange) []protocol.DriftFileChange {
		out := make([]protocol.DriftFileChange, 0, len(fcs))
		for _, fc := range fcs {
			d := protocol.DriftFileChange{Path: fc.Path, OldSize: fc.OldSize, NewSize: fc.NewSize}
			if len(fc.OldHash) > 0 {
				d.OldHash = fc.OldHash.String()
			}
			if len(fc.NewHash) > 0 {
				d.NewHash = fc.NewHash.String()
			}
			if fc.OldType != 0 {
				d.OldType, d.OldMode = fc.OldType.String(), fmt.Sprintf("%04o", fc.OldMode)
			}
			if fc.NewType != 0 {
				d.NewType, d.NewMode = fc.NewType.String(), fmt.Sprintf("%04o", fc.NewMode)
			}
			out = append(out, d)
		}
		return out
	}
	return protocol.DriftStatus{
		CheckpointID: ref.CheckpointID,
		WorkflowID:   ref.WorkflowID,
		Namespace:    ref.Namespace,
		Root:         root,
		Drifted:      rep.Drifted,
		Changed:      conv(rep.Changed),
		Added:        conv(rep.Added),
		Deleted:      conv(rep.Deleted),
		FilesChecked: rep.FilesChecked,
		ElapsedMs:    ms(rep.Elapsed),
		FullScan:     rep.FullScan,
		Reason:       rep.Reason,
		Warnings:     rep.Warnings,
		Unreadable:   rep.Unreadable,
	}
}

// driftProblem is the message of a resume plan's drift problem ("" when st did not drift).
func driftProblem(st protocol.DriftStatus) string {
	if !st.Drifted {
		return ""
	}
	var paths []string
	for _, l := range []struct {
		kind string
		fcs  []protocol.DriftFileChange
	}{{"changed", st.Changed}, {"added", st.Added}, {"deleted", st.Deleted}} {
		for _, fc := range l.fcs {
			paths = append(paths, fc.Path+" ("+l.kind+")")
		}
	}
	list := func(paths []string) string {
		if n := len(paths); n > driftProblemPaths {
			return strings.Join(paths[:driftProblemPaths], ", ") + fmt.Sprintf(" and %d more", n-driftProblemPaths)
		}
		return strings.Join(paths, ", ")
	}
	unreadable := ""
	if n := len(st.Unreadable); n > 0 {
		unreadable = fmt.Sprintf("%d could not be read, so they may have changed: %s", n, list(st.Unreadable))
	}
	if len(paths) == 0 {
		return fmt.Sprintf("sources under %s could not all be checked against checkpoint %s: %s",
			st.Root, st.CheckpointID, unreadable)
	}
	msg := fmt.Sprintf("sources under %s changed since checkpoint %s was saved: %d changed, %d added, %d deleted: %s",
		st.Root, st.CheckpointID, len(st.Changed), len(st.Added), len(st.Deleted), list(paths))
	if unreadable != "" {
		msg += "; " + unreadable
	}
	return msg
}

// planDrift is a resume plan's drift check of the checkpoint it plans from: nil and "" when no
// sources were recorded with it; otherwise the status and, if it drifted (or could not be
// checked), the problem message.
func (e *Engine) planDrift(ctx context.Context, checkpointID, root string) (*protocol.DriftStatus, string) {
	ref, err := e.store.CheckpointManifestRef(ctx, checkpointID)
	if err != nil || !ref.HasManifest {
		return nil, ""
	}
	base, err := e.Manifest(ctx, ref)
	if err != nil {
		return nil, "could not read the sources recorded with checkpoint " + checkpointID + ": " + err.Error()
	}
	st, err := e.CheckpointDriftAt(ctx, ref, base, nil, root)
	if err != nil {
		if root == "" {
			root = base.Spec.Root
		}
		return nil, fmt.Sprintf("could not check the sources under %s for drift: %v", root, err)
	}
	return &st, driftProblem(st)
}
