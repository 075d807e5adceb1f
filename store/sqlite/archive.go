package sqlite

// Export and Import move a workflow between databases with its checkpoint ids, seqs, creation
// times and SHA-256s intact. The archive file format itself lives in cmd/ckptd (docs/archive.md).
// Additive: the save path is untouched; Import reuses store.PreparedSave so imported checkpoints
// get the same validation, compression, metadata index rows and idempotency digest as saved ones.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/ckptd/ckptd/store"
)

// Export reads workflowID from one consistent snapshot: it calls begin with the workflow's
// record and its number of checkpoints, then each with every checkpoint in seq order, verified
// and complete (state, task lists, pending writes, drift manifest). Only one checkpoint is in
// memory at a time.
// A checkpoint that fails verification stops the export with its *CorruptError; an unknown
// workflow gives ErrNotFound. Nothing is retried once begin was called.
func (s *Store) Export(ctx context.Context, workflowID string, begin func(store.WorkflowRecord, int) error, each func(store.Checkpoint) error) error {
	var tx *rtx
	var end func()
	err := s.retry(ctx, func() error {
		var err error
		tx, end, err = s.openRead(ctx, true)
		return err
	})
	if err != nil {
		return wrapDB(fmt.Sprintf("export workflow %q", workflowID), err)
	}
	defer end()

	rec := store.WorkflowRecord{WorkflowID: workflowID}
	var created, updated int64
	var completed sql.NullInt64
	var ret, cfg sql.NullString
	err = tx.QueryRowContext(ctx, `SELECT created_at, updated_at, completed_at, retention, config FROM workflows
		WHERE workflow_id = ?`, workflowID).Scan(&created, &updated, &completed, &ret, &cfg)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("workflow %q: %w", workflowID, store.ErrNotFound)
	}
	if err != nil {
		return wrapDB(fmt.Sprintf("export workflow %q", workflowID), err)
	}
	rec.CreatedAt = time.UnixMicro(created).UTC()
	rec.UpdatedAt = time.UnixMicro(updated).UTC()
	if completed.Valid {
		rec.CompletedAt = time.UnixMicro(completed.Int64).UTC()
	}
	if ret.Valid {
		var r store.Retention
		if err := json.Unmarshal([]byte(ret.String), &r); err != nil {
			return fmt.Errorf("export workflow %q: stored retention does not decode: %w", workflowID, err)
		}
		rec.Retention = &r
	}
	if cfg.Valid && cfg.String != "" {
		rec.Config = json.RawMessage(cfg.String)
	}

	var refs []ckRef
	rows, err := tx.QueryContext(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = ? ORDER BY seq`, workflowID)
	if err != nil {
		return wrapDB(fmt.Sprintf("export workflow %q", workflowID), err)
	}
	for rows.Next() {
		var r ckRef
		if err := rows.Scan(&r.rowid, &r.id); err != nil {
			rows.Close()
			return wrapDB(fmt.Sprintf("export workflow %q", workflowID), err)
		}
		refs = append(refs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return wrapDB(fmt.Sprintf("export workflow %q", workflowID), err)
	}
	if err := begin(rec, len(refs)); err != nil {
		return err
	}
	for _, r := range refs {
		if err := ctx.Err(); err != nil {
			return err
		}
		cp, err := s.loadOne(ctx, tx, "c.id = ?", r.rowid)
		var ce *store.CorruptError
		if errors.As(err, &ce) {
			ce.CheckpointID = r.id
			return ce
		}
		if err != nil {
			return wrapDB(fmt.Sprintf("export checkpoint %q", r.id), err)
		}
		m, err := s.loadManifestTx(ctx, tx, r.rowid)
		switch {
		case err == nil:
			cp.Manifest = &m
		case errors.Is(err, store.ErrNotFound):
		case errors.As(err, &ce):
			ce.CheckpointID, ce.WorkflowID = r.id, workflowID
			return ce
		case err != nil:
			return wrapDB(fmt.Sprintf("export the source manifest of checkpoint %q", r.id), err)
		}
		if err := each(cp); err != nil {
			return err
		}
	}
	return nil
}

var errImportDryRun = errors.New("import dry run")

// Import writes a workflow's checkpoints, as Export produced them, in bites (store/importing.go):
// batches of checkpoints are read and prepared (validated, hashed, compressed) outside any
// transaction, then written in bounded transactions, so that other writers interleave with a
// large import. If cps yields an error, a checkpoint is invalid or conflicts, or ctx ends, the
// checkpoints earlier bites wrote are deleted again (and the workflow, if the import created
// it): nothing is left imported. A crash leaves what committed bites wrote; importing again
// skips it and writes the rest.
//
//   - cps yields checkpoints in strictly increasing Seq order; each keeps its CheckpointID,
//     CreatedAt, FormatVersion and state. A state whose SHA-256 or size differs from the
//     checkpoint's SHA256 / SizeBytes is refused as corrupt.
//   - A checkpoint whose id already exists with identical content (same workflow, same
//     idempotency digest as a repeated checkpoint/save) is skipped: importing twice is a no-op.
//     The same id with different content, or in another workflow, is an ErrConflict.
//   - A new checkpoint keeps its seq when that seq is greater than every seq the workflow
//     already has here; otherwise it gets the next free seq (renumbered), so relative order is
//     kept and imported checkpoints never interleave with existing ones.
//   - A workflow that does not exist here is created with the record's retention, config,
//     creation and completion times; an existing workflow keeps its own. updatedAt becomes the
//     import time when anything was imported (idle expiry starts over). Retention does not run.
func (s *Store) Import(ctx context.Context, wf store.WorkflowRecord, cps iter.Seq2[store.Checkpoint, error], opts store.ImportOptions) (store.ImportResult, error) {
	if wf.WorkflowID == "" {
		return store.ImportResult{}, invalid("workflowId", "required")
	}
	if len(wf.WorkflowID) > store.MaxWorkflowIDBytes {
		return store.ImportResult{}, invalid("workflowId", "longer than %d bytes", store.MaxWorkflowIDBytes)
	}
	if wf.Retention != nil {
		if err := wf.Retention.Validate(); err != nil {
			return store.ImportResult{}, err
		}
	}
	if s.ws == nil {
		return store.ImportResult{}, fmt.Errorf("import workflow %q: database schema is older than this ckptd writes", wf.WorkflowID)
	}
	im := &importer{s: s, wf: wf, src: cps, opts: opts, now: s.now(), res: store.ImportResult{WorkflowID: wf.WorkflowID, DryRun: opts.DryRun}}
	err := im.run(ctx)
	if err != nil {
		if uerr := im.undo(ctx); uerr != nil {
			s.log.Error("ckptd store: undoing a failed import failed: run the import again, or delete what it left",
				"workflowId", wf.WorkflowID, "err", uerr)
			err = fmt.Errorf("%w (and undoing the %d checkpoints imported before failed: %v)", err, len(im.written), uerr)
		}
		var ie *store.InvalidError
		var ce *store.CorruptError
		if errors.As(err, &ie) || errors.As(err, &ce) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrTooLarge) ||
			errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return store.ImportResult{}, fmt.Errorf("import workflow %q: %w", wf.WorkflowID, err)
		}
		return store.ImportResult{}, wrapDB(fmt.Sprintf("import workflow %q", wf.WorkflowID), err)
	}
	return im.res, nil
}

// importer is one Import under way.
type importer struct {
	s       *Store
	wf      store.WorkflowRecord
	src     iter.Seq2[store.Checkpoint, error]
	opts    store.ImportOptions
	now     time.Time
	res     store.ImportResult
	maxSeq  int64    // the highest seq assigned so far (dry runs keep nothing in the database)
	started bool     // the first bite committed (the workflow's row exists, or was seen)
	written []string // ids written by committed bites (undo)
	created bool     // the import created the workflow's row
}

func (im *importer) run(ctx context.Context) error {
	rd := store.NewImportReader(im.wf.WorkflowID, im.src)
	defer rd.Close()
	for {
		batch, err := rd.Next(ctx)
		if err != nil {
			return err
		}
		if len(batch) == 0 && im.started {
			return nil
		}
		jobs := make([]*saveJob, len(batch))
		for i := range batch {
			cp := &batch[i]
			sj := &saveJob{compressNow: true} // a bulk load: nothing waits on each row
			sj.Req = store.ImportRequest(cp)
			if err := im.s.prepare(sj); err != nil {
				return fmt.Errorf("checkpoint %q: %w", cp.CheckpointID, err)
			}
			if err := sj.CheckImported(cp); err != nil {
				return err
			}
			jobs[i] = sj
		}
		if err := im.write(ctx, batch, jobs); err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
	}
}

// write writes a prepared batch in bites.
func (im *importer) write(ctx context.Context, batch []store.Checkpoint, jobs []*saveJob) error {
	s := im.s
	k := 0 // the next checkpoint of the batch to write
	var (
		n       int
		entries []store.ImportedCheckpoint
		written []string
		maxSeq  int64
		created bool
	)
	return s.runBites(ctx, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		n, entries, written, maxSeq, created = k, entries[:0], written[:0], im.maxSeq, false
		fig := w.fig
		var mark wtxMark
		if im.opts.DryRun {
			if _, err := w.exec(ctx, "SAVEPOINT dryrun"); err != nil {
				return false, err
			}
			w.fig = &figures{}
			mark = w.mark()
		}
		var err error
		created, maxSeq, err = im.begin(ctx, w, maxSeq)
		if err != nil {
			return false, err
		}
		for n < len(batch) && !b.Full() {
			cp, sj := batch[n], jobs[n]
			entry, err := im.one(ctx, w, cp, sj, &maxSeq)
			if err != nil {
				return false, err
			}
			entries = append(entries, entry)
			if entry.Status == store.ImportAdded {
				written = append(written, cp.CheckpointID)
			}
			n++
			b.Spend(1)
		}
		if len(written) > 0 {
			if _, err := w.exec(ctx, `UPDATE workflows SET next_seq = max(next_seq, ?), updated_at = max(updated_at, ?) WHERE workflow_id = ?`,
				maxSeq+1, im.now.UnixMicro(), im.wf.WorkflowID); err != nil {
				return false, err
			}
		}
		if im.opts.DryRun {
			if _, err := w.exec(ctx, "ROLLBACK TO dryrun"); err != nil {
				return false, err
			}
			w.restore(mark) // nothing the dry run stored or learned is left
			if _, err := w.exec(ctx, "RELEASE dryrun"); err != nil {
				return false, err
			}
			w.fig = fig
		}
		return n == len(batch), nil
	}, func() {
		k = n
		im.maxSeq = maxSeq
		if !im.started {
			im.started = true
			im.res.CreatedWorkflow = created
			im.created = created && !im.opts.DryRun
		}
		for _, e := range entries {
			im.res.Checkpoints = append(im.res.Checkpoints, e)
			switch {
			case e.Status == store.ImportSkipped:
				im.res.Skipped++
			case e.Seq != e.OriginalSeq:
				im.res.Imported++
				im.res.Renumbered++
			default:
				im.res.Imported++
			}
		}
		if !im.opts.DryRun {
			im.written = append(im.written, written...)
		}
	})
}

// begin creates the workflow's row in the first bite (reporting whether it did) and returns the
// highest seq the workflow has (or the import assigned).
func (im *importer) begin(ctx context.Context, w *wtx, maxSeq int64) (created bool, _ int64, _ error) {
	wf := im.wf
	if !im.started {
		var one int
		err := w.queryRow(ctx, `SELECT 1 FROM workflows WHERE workflow_id = ?`, wf.WorkflowID).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			created = true
			var ret, cfg, completed any
			if wf.Retention != nil {
				b, err := json.Marshal(wf.Retention)
				if err != nil {
					return false, 0, err
				}
				ret = string(b)
			}
			if len(wf.Config) > 0 {
				cfg = string(wf.Config)
			}
			if !wf.CompletedAt.IsZero() {
				completed = wf.CompletedAt.UnixMicro()
			}
			createdAt := wf.CreatedAt
			if createdAt.IsZero() {
				createdAt = im.now
			}
			if _, err := w.exec(ctx, `INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at, completed_at,
				retention, config) VALUES (?, 1, ?, ?, ?, ?, ?)`, wf.WorkflowID, createdAt.UnixMicro(), im.now.UnixMicro(),
				completed, ret, cfg); err != nil {
				return false, 0, err
			}
		case err != nil:
			return false, 0, err
		}
	}
	var have int64
	if err := w.queryRow(ctx, `SELECT coalesce(max(seq), 0) FROM checkpoints WHERE workflow_id = ?`, wf.WorkflowID).Scan(&have); err != nil {
		return false, 0, err
	}
	return created, max(have, maxSeq), nil
}

// one writes (or skips) one prepared checkpoint.
func (im *importer) one(ctx context.Context, w *wtx, cp store.Checkpoint, sj *saveJob, maxSeq *int64) (store.ImportedCheckpoint, error) {
	var exWf string
	var exHash []byte
	var exSeq int64
	err := w.queryRow(ctx, `SELECT workflow_id, content_hash, seq FROM checkpoints WHERE checkpoint_id = ?`,
		cp.CheckpointID).Scan(&exWf, &exHash, &exSeq)
	switch {
	case err == nil:
		if exWf != im.wf.WorkflowID {
			return store.ImportedCheckpoint{}, fmt.Errorf("checkpoint %q already exists in workflow %q: %w", cp.CheckpointID, exWf, store.ErrConflict)
		}
		if string(exHash) != string(sj.ContentHash) {
			return store.ImportedCheckpoint{}, fmt.Errorf("checkpoint %q already exists with different content: %w", cp.CheckpointID, store.ErrConflict)
		}
		return store.ImportedCheckpoint{CheckpointID: cp.CheckpointID, Status: store.ImportSkipped, OriginalSeq: cp.Seq, Seq: exSeq}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return store.ImportedCheckpoint{}, err
	}
	seq, _ := store.ImportSeq(cp.Seq, *maxSeq)
	*maxSeq = seq
	if err := im.s.importInsert(ctx, w, sj, cp, seq, im.now); err != nil {
		return store.ImportedCheckpoint{}, fmt.Errorf("checkpoint %q: %w", cp.CheckpointID, err)
	}
	return store.ImportedCheckpoint{CheckpointID: cp.CheckpointID, Status: store.ImportAdded, OriginalSeq: cp.Seq, Seq: seq}, nil
}

// undo deletes what committed bites of a failed import wrote, in bites, and the workflow's row
// if the import created it and nothing else was saved to it meanwhile.
func (im *importer) undo(ctx context.Context) error {
	if len(im.written) == 0 && !im.created {
		return nil
	}
	s := im.s
	ctx = context.WithoutCancel(ctx)
	k := 0
	var n int
	err := s.runBites(ctx, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		n = k
		for n < len(im.written) && !b.Full() {
			refs, err := w.refs(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE checkpoint_id = ?`, im.written[n])
			if err != nil {
				return false, err
			}
			for _, r := range refs {
				if _, err := s.deleteCheckpoint(ctx, w, r.rowid, r.id); err != nil {
					return false, err
				}
			}
			n++
			b.Spend(1)
		}
		if n < len(im.written) {
			return false, nil
		}
		if im.created {
			if err := s.flushWorkflows(ctx, w); err != nil { // ckpt_count as of the deletions above
				return false, err
			}
			if _, err := w.exec(ctx, `DELETE FROM workflows WHERE workflow_id = ?1 AND ckpt_count = 0
				AND NOT EXISTS (SELECT 1 FROM compensations WHERE workflow_id = ?1)`, im.wf.WorkflowID); err != nil {
				return false, err
			}
		}
		return true, nil
	}, func() { k = n })
	if err == nil {
		s.vacuumBites(ctx)
	}
	return err
}

// importInsert writes one prepared checkpoint with the given seq and its original creation time,
// and its manifest if it has one.
func (s *Store) importInsert(ctx context.Context, w *wtx, sj *saveJob, cp store.Checkpoint, seq int64, now time.Time) error {
	ws := s.ws
	r := &sj.Req
	stored, dedup, err := s.storeState(ctx, w, sj)
	if err != nil {
		return err
	}
	created := cp.CreatedAt
	if created.IsZero() {
		created = now
	}
	format := cp.FormatVersion
	if format <= 0 {
		format = store.FormatVersion
	}
	var rowid int64
	if err := ws.insCkpt.QueryRowContext(ctx, sj.ID, r.WorkflowID, r.Namespace, seq, nullStr(r.ParentID), string(r.Phase),
		r.Step, nullStr(r.StepName), nullBytes(sj.ErrorJSON), string(sj.StateType), nullBytes(sj.SHA), len(r.State), stored,
		dedup, sj.CompletedN, sj.PendingN, nullStr(r.WorkflowHash), created.UnixMicro(), format, sj.ContentHash,
		nullBytes(sj.MetaRaw), nullBytes([]byte(r.CompletedTasks)), nullBytes([]byte(r.PendingTasks))).Scan(&rowid); err != nil {
		return err
	}
	w.fig.added(r.WorkflowID, seq, int64(len(r.State)), stored)
	for _, kv := range sj.Meta {
		if _, err := ws.insMeta.ExecContext(ctx, kv[0], kv[1], rowid); err != nil {
			return err
		}
	}
	if sj.ValidationJSON != nil { // part of the content digest above: stored as a save stores it
		if err := s.insertValidation(ctx, w, rowid, r.Validation.Status, sj.ValidationJSON); err != nil { // store/sqlite/saga.go
			return err
		}
	}
	for _, wr := range cp.PendingWrites {
		if wr.TaskID == "" || wr.Channel == "" {
			return invalid("pendingWrites", "taskId and channel are required")
		}
	}
	for _, pw := range s.prepareWrites(cp.PendingWrites) {
		if _, err := s.putWrite(ctx, w, sj.ID, r.WorkflowID, r.Namespace, pw, true); err != nil {
			return err
		}
	}
	if cp.Manifest == nil {
		return nil
	}
	if err := cp.Manifest.Validate(); err != nil {
		return invalid("manifest", "%v", err)
	}
	return s.insertManifest(ctx, w, rowid, cp.Manifest)
}
