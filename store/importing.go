package store

import (
	"context"
	"iter"
)

// Import in bites: a backend reads the archive's checkpoints in batches (ImportReader), prepares
// them outside any transaction, and writes each batch in bites. Checkpoints written by earlier
// bites are complete; if the import then fails (a conflict, an invalid checkpoint, the caller
// giving up), the backend deletes them again (ImportUndo), so that a failed import leaves
// nothing behind, as the single transaction it replaces did. A crash in between leaves what
// was written: importing again skips it (same content) and writes the rest.

// Import batch bounds: a batch is read and prepared before its bites are written.
const (
	ImportBatchItems = BiteUnits
	ImportBatchBytes = 8 << 20
)

// ImportReader yields an archive's checkpoints in batches, checking what every backend checks
// first: each belongs to the workflow, has an id, and follows the previous one's seq.
type ImportReader struct {
	wf    string
	next  func() (Checkpoint, error, bool)
	stop  func()
	last  int64
	first bool
	done  bool
}

// NewImportReader reads cps for workflow wf. Close it.
func NewImportReader(wf string, cps iter.Seq2[Checkpoint, error]) *ImportReader {
	next, stop := iter.Pull2(cps)
	return &ImportReader{wf: wf, next: next, stop: stop, first: true}
}

// Close stops the iteration.
func (r *ImportReader) Close() { r.stop() }

// Next returns the next batch; empty at the end.
func (r *ImportReader) Next(ctx context.Context) ([]Checkpoint, error) {
	var out []Checkpoint
	var size int
	for !r.done && len(out) < ImportBatchItems && size < ImportBatchBytes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cp, err, ok := r.next()
		if !ok {
			r.done = true
			break
		}
		if err != nil {
			return nil, err
		}
		if cp.WorkflowID != r.wf {
			return nil, Invalid("workflowId", "checkpoint %q belongs to workflow %q, not %q", cp.CheckpointID, cp.WorkflowID, r.wf)
		}
		if cp.CheckpointID == "" {
			return nil, Invalid("checkpointId", "required")
		}
		if !r.first && cp.Seq <= r.last {
			return nil, Invalid("seq", "checkpoint %q: seq %d does not follow %d", cp.CheckpointID, cp.Seq, r.last)
		}
		r.first, r.last = false, cp.Seq
		out = append(out, cp)
		size += len(cp.State) + len(cp.PendingTasks) + len(cp.CompletedTasks) + len(cp.Metadata)
	}
	return out, nil
}

// ImportSeq is the seq an imported checkpoint gets: its own when it follows every seq the
// workflow has (maxSeq), else the next free one (renumbered).
func ImportSeq(original, maxSeq int64) (seq int64, renumbered bool) {
	if original <= maxSeq || original <= 0 {
		return maxSeq + 1, true
	}
	return original, false
}
