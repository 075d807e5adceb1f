package postgres

// Export and Import move a workflow between databases (of either backend) with its checkpoint
// ids, seqs, creation times and SHA-256s intact; see store/sqlite/archive.go for the rules,
// which are the contract's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// Export reads workflowID from one snapshot: begin gets the workflow's record and its number
// of checkpoints, then each every checkpoint in seq order, verified and complete (state, task
// lists, pending writes, source manifest). Nothing is retried once begin was called.
func (s *Store) Export(ctx context.Context, workflowID string, begin func(store.WorkflowRecord, int) error, each func(store.Checkpoint) error) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	op := fmt.Sprintf("export workflow %q", workflowID)
	var tx pgx.Tx
	err := s.retry(ctx, func() error {
		var err error
		tx, err = s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		return err
	})
	if err != nil {
		return wrapDB(op, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	rec := store.WorkflowRecord{WorkflowID: workflowID}
	var completed *time.Time
	var ret []byte
	var cfg *string
	err = tx.QueryRow(ctx, `SELECT created_at, updated_at, completed_at, retention, config FROM workflows WHERE workflow_id = $1`,
		workflowID).Scan(&rec.CreatedAt, &rec.UpdatedAt, &completed, &ret, &cfg)
	if noRows(err) {
		return fmt.Errorf("workflow %q: %w", workflowID, store.ErrNotFound)
	}
	if err != nil {
		return wrapDB(op, err)
	}
	rec.CreatedAt, rec.UpdatedAt = rec.CreatedAt.UTC(), rec.UpdatedAt.UTC()
	if completed != nil {
		rec.CompletedAt = completed.UTC()
	}
	if ret != nil {
		var r store.Retention
		if err := json.Unmarshal(ret, &r); err != nil {
			return fmt.Errorf("export workflow %q: stored retention does not decode: %w", workflowID, err)
		}
		rec.Retention = &r
	}
	if cfg != nil && *cfg != "" {
		rec.Config = json.RawMessage(*cfg)
	}
	refs, err := collectRefs(tx.Query(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = $1 ORDER BY seq`, workflowID))
	if err != nil {
		return wrapDB(op, err)
	}
	if err := begin(rec, len(refs)); err != nil {
		return err
	}
	for _, r := range refs {
		if err := ctx.Err(); err != nil {
			return err
		}
		cp, err := s.loadOne(ctx, tx, "c.id = $1", r.rowid)
		if ce := asCorrupt(err); ce != nil {
			ce.CheckpointID = r.id
			return ce
		}
		if err != nil {
			return wrapDB(fmt.Sprintf("export checkpoint %q", r.id), err)
		}
		m, err := loadManifest(ctx, tx, r.rowid)
		switch ce := asCorrupt(err); {
		case err == nil:
			cp.Manifest = &m
		case errors.Is(err, store.ErrNotFound):
		case ce != nil:
			ce.CheckpointID, ce.WorkflowID = r.id, workflowID
			return ce
		default:
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
// (The rules: store/sqlite/archive.go, Import.)
func (s *Store) Import(ctx context.Context, wf store.WorkflowRecord, cps iter.Seq2[store.Checkpoint, error], opts store.ImportOptions) (store.ImportResult, error) {
	if wf.WorkflowID == "" {
		return store.ImportResult{}, invalid("workflowId", "required")
	}
	if len(wf.WorkflowID) > store.MaxWorkflowIDBytes {
		return store.ImportResult{}, invalid("workflowId", "longer than %d bytes", store.MaxWorkflowIDBytes)
	}
	if err := noNUL("workflowId", wf.WorkflowID); err != nil {
		return store.ImportResult{}, err
	}
	if wf.Retention != nil {
		if err := wf.Retention.Validate(); err != nil {
			return store.ImportResult{}, err
		}
	}
	callerCtx := ctx
	var res store.ImportResult
	err := s.do(ctx, []int64{wfKey(wf.WorkflowID)}, func(ctx context.Context, w *wtx) error {
		res = store.ImportResult{WorkflowID: wf.WorkflowID, DryRun: opts.DryRun}
		return s.importTx(callerCtx, ctx, w, wf, cps, &res, opts)
	})
	if errors.Is(err, errImportDryRun) {
		return res, nil
	}
	if err != nil {
		var ie *store.InvalidError
		if errors.As(err, &ie) || asCorrupt(err) != nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrTooLarge) {
			return store.ImportResult{}, fmt.Errorf("import workflow %q: %w", wf.WorkflowID, err)
		}
		return store.ImportResult{}, wrapDB(fmt.Sprintf("import workflow %q", wf.WorkflowID), err)
	}
	return res, nil
}

func (s *Store) importTx(callerCtx, ctx context.Context, w *wtx, wf store.WorkflowRecord, cps iter.Seq2[store.Checkpoint, error],
	res *store.ImportResult, opts store.ImportOptions) error {
	now := time.UnixMicro(s.now().UnixMicro()).UTC()
	var nextSeq int64
	err := w.queryRow(ctx, `SELECT next_seq FROM workflows WHERE workflow_id = $1`, wf.WorkflowID).Scan(&nextSeq)
	switch {
	case noRows(err):
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
			if err := noNUL("config", string(wf.Config)); err != nil {
				return err
			}
			cfg = string(wf.Config)
		}
		if !wf.CompletedAt.IsZero() {
			completed = wf.CompletedAt
		}
		created := wf.CreatedAt
		if created.IsZero() {
			created = now
		}
		if _, err := w.exec(ctx, `INSERT INTO workflows (workflow_id, next_seq, created_at, updated_at, completed_at, retention, config)
			VALUES ($1, 1, $2, $3, $4, $5, $6)`, wf.WorkflowID, created, now, completed, ret, cfg); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	var maxSeq int64
	if err := w.queryRow(ctx, `SELECT coalesce(max(seq), 0) FROM checkpoints WHERE workflow_id = $1`, wf.WorkflowID).Scan(&maxSeq); err != nil {
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

		sj := &saveJob{}
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
		err := w.queryRow(ctx, `SELECT workflow_id, content_hash, seq FROM checkpoints WHERE checkpoint_id = $1`,
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
		case !noRows(err):
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
		if _, err := w.exec(ctx, `UPDATE workflows SET next_seq = greatest(next_seq, $1), updated_at = $2 WHERE workflow_id = $3`,
			maxSeq+1, now, wf.WorkflowID); err != nil {
			return err
		}
	}
	if opts.DryRun {
		return errImportDryRun
	}
	return nil
}

// importSQL inserts one imported checkpoint with its seq ($28) and creation time ($2): saveSQL
// without the workflow's seq counter.
const importSQL = `WITH st AS (
	INSERT INTO states AS s (hash, encoding, size, stored_size, refs, data)
	SELECT $3::bytea, $4, $5, $6, 1, $7::bytea WHERE $3::bytea IS NOT NULL
	ON CONFLICT (hash) DO UPDATE SET refs = s.refs + 1
	RETURNING s.stored_size, s.refs > 1 AS dedup
), ck AS (
	INSERT INTO checkpoints (checkpoint_id, workflow_id, namespace, seq, parent_id, phase, step, step_name, error,
		state_type, state_hash, size, stored_size, dedup, completed_count, pending_count, workflow_hash, created_at,
		format_version, content_hash, metadata, completed_tasks, pending_tasks, validation_status, validation)
	SELECT $8, $1, $9, $28, $10, $11, $12, $13, $14, $15, $3::bytea, $5, coalesce(st.stored_size, 0),
		coalesce(st.dedup, false), $16, $17, $18, $2, $19, $20, $21, $22, $23, $26, $27
	FROM (SELECT 1) AS one LEFT JOIN st ON true
	RETURNING id
), meta AS (
	INSERT INTO checkpoint_meta (key, value, ckpt)
	SELECT m.k, m.v, ck.id FROM ck, unnest($24::text[], $25::text[]) AS m(k, v)
)
SELECT ck.id, coalesce((SELECT dedup FROM st), false) FROM ck`

// importInsert writes one prepared checkpoint with the given seq and its original creation
// time, its pending writes and its manifest.
func (s *Store) importInsert(ctx context.Context, w *wtx, sj *saveJob, cp store.Checkpoint, seq int64, now time.Time) error {
	created := cp.CreatedAt
	if created.IsZero() {
		created = now
	}
	format := cp.FormatVersion
	if format <= 0 {
		format = store.FormatVersion
	}
	var rowid int64
	var dedup bool
	if err := w.queryRow(ctx, importSQL, append(insertArgs(sj, created, format), seq)...).Scan(&rowid, &dedup); err != nil {
		return err
	}
	if sj.Chunked != nil && !dedup {
		if _, err := storeChunked(ctx, w, sj, rowid); err != nil {
			return err
		}
	}
	for _, wr := range cp.PendingWrites {
		if wr.TaskID == "" || wr.Channel == "" {
			return invalid("pendingWrites", "taskId and channel are required")
		}
		if err := noNUL("pendingWrites.taskId", wr.TaskID, "pendingWrites.taskPath", wr.TaskPath, "pendingWrites.channel", wr.Channel,
			"pendingWrites.type", wr.Type); err != nil {
			return err
		}
	}
	for _, pw := range s.prepareWrites(cp.PendingWrites) {
		if _, err := s.putWrite(ctx, w, sj.ID, sj.Req.WorkflowID, sj.Req.Namespace, pw, true); err != nil {
			return err
		}
	}
	if cp.Manifest == nil {
		return w.flush(ctx)
	}
	if err := cp.Manifest.Validate(); err != nil {
		return invalid("manifest", "%v", err)
	}
	return insertManifest(ctx, w, rowid, cp.Manifest)
}
