package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

const exportUsage = `usage: ckptd export WORKFLOW -o FILE [flags] | ckptd export --thread THREAD -o FILE [flags]

Writes a workflow (its configuration and every checkpoint: state, task lists, pending writes,
source manifests, ids, seqs, creation times, SHA-256s) to a portable, self-verifying archive
that 'ckptd import' reads on another machine (format: docs/archive.md). --thread writes a
LangGraph thread instead (every checkpoint, channel value and pending write of it, in every
namespace). Everything is verified first: a corrupt row stops the export and no file is
written. FILE is replaced atomically; "-o -" writes the archive to stdout (not to a terminal).

examples:
  ckptd export wf-1 -o wf-1.ckpt
  ckptd export wf-1 -o - | ssh other-host ckptd import -
  ckptd export --thread support-42 -o support-42.ckpt
`

func runExport(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "export", exportUsage)
	registerDBFlags(fs, &g)
	out := fs.String("o", "", "archive `file` to write (\"-\": stdout)")
	compression := fs.String("compression", "zstd", "`zstd` or none")
	thread := fs.String("thread", "", "export this LangGraph `thread` instead of a workflow")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *thread != "" && len(pos) > 0:
		return usageError{"give either WORKFLOW or --thread THREAD, not both"}
	case *thread == "" && len(pos) == 0:
		return usageError{"missing WORKFLOW (or --thread THREAD)"}
	case len(pos) > 1:
		return usageError{fmt.Sprintf("unexpected argument %q (export takes one WORKFLOW)", pos[1])}
	case *out == "":
		return usageError{"missing -o FILE"}
	case *out == "-" && isTerminal(e.stdout):
		return usageError{"not writing a binary archive to a terminal: use -o FILE or redirect stdout"}
	}
	var comp byte
	switch *compression {
	case "zstd":
		comp = compressionZstd
	case "none":
		comp = compressionNone
	default:
		return usageError{fmt.Sprintf("--compression %q: want zstd or none", *compression)}
	}
	return withStore(ctx, e, &g, false, func(st store.Backend) error {
		if *thread != "" {
			return writeArchiveFile(e, *out, func(w io.Writer) (string, string, error) {
				return exportThread(ctx, st, *thread, w, comp)
			})
		}
		return writeArchiveFile(e, *out, func(w io.Writer) (string, string, error) {
			return exportWorkflow(ctx, st, pos[0], w, comp)
		})
	})
}

// writeArchiveFile runs write on out ("-": stdout) through a buffer; a file is written to a
// temporary name, synced and renamed into place only if write succeeds. What write says it
// exported, and how much, is reported on stdout (stderr when the archive went to stdout).
func writeArchiveFile(e *env, out string, write func(io.Writer) (what, detail string, err error)) (err error) {
	var dst io.Writer
	var tmp *os.File
	if out == "-" {
		dst = e.stdout
	} else {
		if tmp, err = os.CreateTemp(filepath.Dir(out), ".ckptd-export-*"); err != nil {
			return err
		}
		defer func() {
			if tmp != nil {
				_ = tmp.Close()
				_ = os.Remove(tmp.Name())
			}
		}()
		dst = tmp
	}
	bw := bufio.NewWriterSize(dst, 1<<20)
	what, detail, err := write(bw)
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	report := e.stdout
	if tmp != nil {
		if err := tmp.Sync(); err != nil {
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		if err := os.Rename(tmp.Name(), out); err != nil {
			return err
		}
		tmp = nil
	} else {
		report = e.stderr
	}
	fmt.Fprintf(report, "exported %s to %s: %s\n", what, out, detail)
	return nil
}

// hasChunkedStates reports whether a checkpoint of wf has a state over chunk.InlineMax (stored
// as chunks). A checkpoint saved after this look is exported whole in a version 1 archive: safe.
func hasChunkedStates(ctx context.Context, st store.Backend, wf string) (bool, error) {
	before := ""
	for {
		sms, err := st.List(ctx, store.ListFilter{WorkflowID: wf, Before: before, Limit: store.MaxListLimit})
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return false, nil // Export reports the unknown workflow
			}
			return false, err
		}
		for _, sm := range sms {
			if sm.StateType != store.StateNone && !chunk.Inline(int(sm.SizeBytes)) {
				return true, nil
			}
		}
		if len(sms) < store.MaxListLimit {
			return false, nil
		}
		before = sms[len(sms)-1].CheckpointID
	}
}

// exportWorkflow writes workflow wf as a version 1 archive, or version 3 when states of it are
// stored as chunks.
func exportWorkflow(ctx context.Context, st store.Backend, wf string, w io.Writer, comp byte) (what, detail string, err error) {
	var aw *archiveWriter
	var n, manifests int
	var stateBytes int64
	// A workflow with states stored as chunks is written as version 3 (each chunk once); one
	// without, as version 1, which older readers read too.
	v := uint16(archiveVersion)
	if big, err := hasChunkedStates(ctx, st, wf); err != nil {
		return "", "", err
	} else if big {
		v = archiveChunkVersion
	}
	err = st.Export(ctx, wf, func(rec store.WorkflowRecord, count int) error {
		var err error
		if aw, err = newArchiveWriterVersion(w, v, comp); err != nil {
			return err
		}
		return aw.begin(archiveHeader{Format: archiveFormat, Version: int(v), ExportedAt: timestamp(time.Now()),
			CkptdVersion: version, WorkflowID: wf, Checkpoints: count}, rec)
	}, engine.ExportManifests(func(cp store.Checkpoint, m *drift.Manifest) error {
		n++
		stateBytes += int64(len(cp.State))
		if m != nil {
			manifests++
		}
		return aw.checkpoint(cp, m)
	}))
	var ce *store.CorruptError
	if errors.As(err, &ce) {
		return "", "", fmt.Errorf("checkpoint %s of workflow %s is CORRUPT (%s): nothing was exported "+
			"(see 'ckptd verify'; remove it with 'ckptd rm %s' to export the rest)", ce.CheckpointID, wf, ce.Reason, ce.CheckpointID)
	}
	if err != nil {
		return "", "", err
	}
	if err := aw.finish(); err != nil {
		return "", "", err
	}
	withSources := ""
	if manifests > 0 {
		withSources = fmt.Sprintf(" (%d with sources)", manifests)
	}
	return "workflow " + wf, fmt.Sprintf("%s%s, %s of state", plural(n, "checkpoint", "checkpoints"), withSources,
		fmtBytes(stateBytes)), nil
}

// exportThread writes LangGraph thread as a version 2 archive.
func exportThread(ctx context.Context, st store.Backend, thread string, w io.Writer, comp byte) (what, detail string, err error) {
	var aw *archiveWriter
	var counts store.LGThreadCounts
	var dataBytes int64
	err = st.LGExport(ctx, thread, func(c store.LGThreadCounts) error {
		counts = c
		var err error
		if aw, err = newArchiveWriterVersion(w, archiveThreadVersion, comp); err != nil {
			return err
		}
		return aw.beginThread(archiveThreadHeader{Format: archiveFormat, Version: archiveThreadVersion, Kind: archiveThreadKind,
			ExportedAt: timestamp(time.Now()), CkptdVersion: version, ThreadID: thread, Checkpoints: c.Checkpoints,
			Values: c.Values, Writes: c.Writes})
	}, func(r store.LGRecord) error {
		dataBytes += int64(len(r.Data))
		return aw.lgRow(r)
	})
	var ce *store.CorruptError
	if errors.As(err, &ce) {
		return "", "", fmt.Errorf("LangGraph thread %s has a CORRUPT row (%s): nothing was exported (see 'ckptd verify')", thread, ce.Reason)
	}
	if err != nil {
		return "", "", err
	}
	if err := aw.finish(); err != nil {
		return "", "", err
	}
	return "LangGraph thread " + thread, fmt.Sprintf("%s, %s, %s, %s of data",
		plural(counts.Checkpoints, "checkpoint", "checkpoints"), plural(counts.Values, "channel value", "channel values"),
		plural(counts.Writes, "pending write", "pending writes"), fmtBytes(dataBytes)), nil
}
