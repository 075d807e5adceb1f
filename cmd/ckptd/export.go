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

	"github.com/ckptd/ckptd/store"
)

const exportUsage = `usage: ckptd export WORKFLOW -o FILE [flags]

Writes a workflow (its configuration and every checkpoint: state, task lists, pending writes,
ids, seqs, creation times, SHA-256s) to a portable, self-verifying archive that 'ckptd import'
reads on another machine (format: docs/archive.md). Every checkpoint is verified first: a
corrupt one stops the export and no file is written. FILE is replaced atomically; "-o -" writes
the archive to stdout (not to a terminal).

examples:
  ckptd export wf-1 -o wf-1.ckpt
  ckptd export wf-1 -o - | ssh other-host ckptd import -
`

func runExport(ctx context.Context, e *env, args []string) error {
	var g globalFlags
	fs := newFlagSet(e, "export", exportUsage)
	registerDBFlags(fs, &g)
	out := fs.String("o", "", "archive `file` to write (\"-\": stdout)")
	compression := fs.String("compression", "zstd", "`zstd` or none")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError{"missing WORKFLOW"}
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
	wf := pos[0]
	return withStore(ctx, e, &g, false, func(st *store.Store) error {
		var dst io.Writer
		var tmp *os.File
		if *out == "-" {
			dst = e.stdout
		} else {
			tmp, err = os.CreateTemp(filepath.Dir(*out), ".ckptd-export-*")
			if err != nil {
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
		var aw *archiveWriter
		var n, manifests int
		var stateBytes int64
		err := st.Export(ctx, wf, func(rec store.WorkflowRecord, count int) error {
			var err error
			if aw, err = newArchiveWriter(bw, comp); err != nil {
				return err
			}
			return aw.begin(archiveHeader{Format: archiveFormat, Version: archiveVersion, ExportedAt: timestamp(time.Now()),
				CkptdVersion: version, WorkflowID: wf, Checkpoints: count}, rec)
		}, func(cp store.Checkpoint) error {
			n++
			stateBytes += int64(len(cp.State))
			if cp.Manifest != nil {
				manifests++
			}
			return aw.checkpoint(cp)
		})
		var ce *store.CorruptError
		if errors.As(err, &ce) {
			return fmt.Errorf("checkpoint %s of workflow %s is CORRUPT (%s): nothing was exported "+
				"(see 'ckptd verify'; remove it with 'ckptd rm %s' to export the rest)", ce.CheckpointID, wf, ce.Reason, ce.CheckpointID)
		}
		if err != nil {
			return err
		}
		if err := aw.finish(); err != nil {
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
			if err := os.Rename(tmp.Name(), *out); err != nil {
				return err
			}
			tmp = nil
		} else {
			report = e.stderr
		}
		withSources := ""
		if manifests > 0 {
			withSources = fmt.Sprintf(" (%d with sources)", manifests)
		}
		fmt.Fprintf(report, "exported workflow %s to %s: %s%s, %s of state\n", wf, *out,
			plural(n, "checkpoint", "checkpoints"), withSources, fmtBytes(stateBytes))
		return nil
	})
}
