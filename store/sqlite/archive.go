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

// Import writes a workflow's checkpoints, as Export produced them, in ONE transaction: if cps
// yields an error, a checkpoint is invalid or conflicts, or ctx ends, nothing is written.
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
	callerCtx := ctx
	var res store.ImportResult
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		res = store.ImportResult{WorkflowID: wf.WorkflowID, DryRun: opts.DryRun}
		return s.importTx(callerCtx, ctx, w, wf, cps, &res, opts)
	})
	if errors.Is(err, errImportDryRun) {
		return res, nil
	}
	if err != nil {
		var ie *store.InvalidError
		var ce *store.CorruptError
		if errors.As(err, &ie) || errors.As(err, &ce) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrTooLarge) {
			return store.ImportResult{}, fmt.Errorf("import workflow %q: %w", wf.WorkflowID, err)
		}
		return store.ImportResult{}, wrapDB(fmt.Sprintf("import workflow %q", wf.WorkflowID), err)
	}
	return res, nil
}

func (s *Store) importTx(callerCtx, ctx context.Context, w *wtx, wf store.WorkflowRecord, cps iter.Seq2[store.Checkpoint, error],
	res *store.ImportResult, opts store.ImportOptions) error {
	if s.ws == nil {
		return fmt.Errorf("database schema is older than this ckptd writes")
	}
	now := s.now()
	var nextSeq int64
	err := w.queryRow(ctx, `SELECT next_seq FROM workflows WHERE workflow_id = ?`, wf.WorkflowID).Scan(&nextSeq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		res.CreatedWorkflow = true
		var ret, cfg, completed any
		if wf.Retention != nil {
			b, err := json.Marshal(wf.Retention)
			if err != nil {
				return err
			}
			ret = string(b)
		}
		if len(wf.Config) > 0 {
			cfg = string(wf.Config)
		}
		if !wf.CompletedAt.IsZero() {
			completed = wf.CompletedAt.UnixMicro()
		}
		created := wf.CreatedAt
		if created.IsZero() {
			created = now
		}
		if _, err := w.exec(ctx, `INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at, completed_at,
			retention, config) VALUES (?, 1, ?, ?, ?, ?, ?)`, wf.WorkflowID, created.UnixMicro(), now.UnixMicro(),
			completed, ret, cfg); err != nil {
			return err
		}
		nextSeq = 1
	case err != nil:
		return err
	}
	var maxSeq int64
	if err := w.queryRow(ctx, `SELECT coalesce(max(seq), 0) FROM checkpoints WHERE workflow_id = ?`, wf.WorkflowID).
		Scan(&maxSeq); err != nil {
		return err
	}

	var lastOriginal int64
	first := true
	for cp, err := range cps {
		if err != nil {
			return err
		}
		if err := callerCtx.Err(); err != nil {
			return err
		}
		if cp.WorkflowID != wf.WorkflowID {
			return invalid("workflowId", "checkpoint %q belongs to workflow %q, not %q", cp.CheckpointID, cp.WorkflowID, wf.WorkflowID)
		}
		if cp.CheckpointID == "" {
			return invalid("checkpointId", "required")
		}
		if !first && cp.Seq <= lastOriginal {
			return invalid("seq", "checkpoint %q: seq %d does not follow %d", cp.CheckpointID, cp.Seq, lastOriginal)
		}
		first, lastOriginal = false, cp.Seq

		sj := &saveJob{compressNow: true} // a bulk load: nothing waits on each row
		sj.Req = store.ImportRequest(&cp)
		if err := s.prepare(sj); err != nil {
			return fmt.Errorf("checkpoint %q: %w", cp.CheckpointID, err)
		}
		if err := sj.CheckImported(&cp); err != nil {
			return err
		}

		var exWf string
		var exHash []byte
		var exSeq int64
		err := w.queryRow(ctx, `SELECT workflow_id, content_hash, seq FROM checkpoints WHERE checkpoint_id = ?`,
			cp.CheckpointID).Scan(&exWf, &exHash, &exSeq)
		switch {
		case err == nil:
			if exWf != wf.WorkflowID {
				return fmt.Errorf("checkpoint %q already exists in workflow %q: %w", cp.CheckpointID, exWf, store.ErrConflict)
			}
			if string(exHash) != string(sj.ContentHash) {
				return fmt.Errorf("checkpoint %q already exists with different content: %w", cp.CheckpointID, store.ErrConflict)
			}
			res.Checkpoints = append(res.Checkpoints, store.ImportedCheckpoint{CheckpointID: cp.CheckpointID, Status: store.ImportSkipped,
				OriginalSeq: cp.Seq, Seq: exSeq})
			res.Skipped++
			continue
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}

		seq := cp.Seq
		if seq <= maxSeq || seq <= 0 {
			seq = maxSeq + 1
			res.Renumbered++
		}
		maxSeq = seq
		if err := s.importInsert(ctx, w, sj, cp, seq, now); err != nil {
			return fmt.Errorf("checkpoint %q: %w", cp.CheckpointID, err)
		}
		res.Checkpoints = append(res.Checkpoints, store.ImportedCheckpoint{CheckpointID: cp.CheckpointID, Status: store.ImportAdded,
			OriginalSeq: cp.Seq, Seq: seq})
		res.Imported++
	}
	if res.Imported > 0 {
		if _, err := w.exec(ctx, `UPDATE workflows SET next_seq = max(next_seq, ?), updated_at = ? WHERE workflow_id = ?`,
			maxSeq+1, now.UnixMicro(), wf.WorkflowID); err != nil {
			return err
		}
	}
	if opts.DryRun {
		return errImportDryRun
	}
	return nil
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
