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

// Import writes a workflow's checkpoints, as Export produced them, in bites
// (store/importing.go): batches are read and prepared outside any transaction, then written in
// bounded transactions under the workflow's lock. If cps yields an error, a checkpoint is
// invalid or conflicts, or ctx ends, what earlier bites wrote is deleted again (and the
// workflow, if the import created it): nothing is left imported. (The rules:
// store/sqlite/archive.go, Import.)
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
	if len(wf.Config) > 0 {
		if err := noNUL("config", string(wf.Config)); err != nil {
			return store.ImportResult{}, err
		}
	}
	im := &importer{s: s, wf: wf, src: cps, opts: opts, now: time.UnixMicro(s.now().UnixMicro()).UTC(),
		res: store.ImportResult{WorkflowID: wf.WorkflowID, DryRun: opts.DryRun}}
	err := im.run(ctx)
	if err != nil {
		if uerr := im.undo(ctx); uerr != nil {
			s.log.Error("ckptd store: undoing a failed import failed: run the import again, or delete what it left",
				"workflowId", wf.WorkflowID, "err", uerr)
			err = fmt.Errorf("%w (and undoing the %d checkpoints imported before failed: %v)", err, len(im.written), uerr)
		}
		var ie *store.InvalidError
		if errors.As(err, &ie) || asCorrupt(err) != nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrTooLarge) ||
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
	started bool     // the first bite committed
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
			sj := &saveJob{}
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
	k := 0
	var (
		n       int
		entries []store.ImportedCheckpoint
		written []string
		maxSeq  int64
		created bool
	)
	return s.runBites(ctx, []int64{wfKey(im.wf.WorkflowID)}, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		n, entries, written, maxSeq, created = k, entries[:0], written[:0], im.maxSeq, false
		if im.opts.DryRun {
			w.queue(`SAVEPOINT dryrun`)
		}
		var err error
		created, maxSeq, err = im.begin(ctx, w, maxSeq)
		if err != nil {
			return false, err
		}
		for n < len(batch) && !b.Full() {
			entry, err := im.one(ctx, w, batch[n], jobs[n], &maxSeq)
			if err != nil {
				return false, err
			}
			entries = append(entries, entry)
			if entry.Status == store.ImportAdded {
				written = append(written, batch[n].CheckpointID)
			}
			n++
			b.Spend(1)
		}
		if len(written) > 0 {
			w.queue(`UPDATE workflows SET next_seq = greatest(next_seq, $1), updated_at = greatest(updated_at, $2) WHERE workflow_id = $3`,
				maxSeq+1, im.now, im.wf.WorkflowID)
		}
		if im.opts.DryRun {
			w.queue(`ROLLBACK TO SAVEPOINT dryrun`)
			w.queue(`RELEASE SAVEPOINT dryrun`)
			w.tot = totals{}
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
		err := w.queryRow(ctx, `SELECT 1 FROM workflows WHERE workflow_id = $1`, wf.WorkflowID).Scan(&one)
		switch {
		case noRows(err):
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
				completed = wf.CompletedAt
			}
			createdAt := wf.CreatedAt
			if createdAt.IsZero() {
				createdAt = im.now
			}
			if _, err := w.exec(ctx, `INSERT INTO workflows (workflow_id, next_seq, created_at, updated_at, completed_at, retention, config)
				VALUES ($1, 1, $2, $3, $4, $5, $6)`, wf.WorkflowID, createdAt, im.now, completed, ret, cfg); err != nil {
				return false, 0, err
			}
		case err != nil:
			return false, 0, err
		}
	}
	var have int64
	if err := w.queryRow(ctx, `SELECT coalesce(max(seq), 0) FROM checkpoints WHERE workflow_id = $1`, wf.WorkflowID).Scan(&have); err != nil {
		return false, 0, err
	}
	return created, max(have, maxSeq), nil
}

// one writes (or skips) one prepared checkpoint.
func (im *importer) one(ctx context.Context, w *wtx, cp store.Checkpoint, sj *saveJob, maxSeq *int64) (store.ImportedCheckpoint, error) {
	var exWf string
	var exHash []byte
	var exSeq int64
	err := w.queryRow(ctx, `SELECT workflow_id, content_hash, seq FROM checkpoints WHERE checkpoint_id = $1`,
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
	case !noRows(err):
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
	return s.runBites(ctx, []int64{wfKey(im.wf.WorkflowID)}, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		n = k
		for n < len(im.written) && !b.Full() {
			end := min(len(im.written), n+biteRows)
			refs, err := collectRefs(w.query(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE checkpoint_id = ANY($1)`, im.written[n:end]))
			if err != nil {
				return false, err
			}
			if _, _, err := deleteRefs(ctx, w, refs); err != nil {
				return false, err
			}
			b.Spend(end - n)
			n = end
		}
		if n < len(im.written) {
			return false, nil
		}
		if im.created {
			w.queue(`DELETE FROM workflows WHERE workflow_id = $1 AND ckpt_count = 0
				AND NOT EXISTS (SELECT 1 FROM compensations WHERE workflow_id = $1)`, im.wf.WorkflowID)
		}
		return true, nil
	}, func() { k = n })
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
	RETURNING id, stored_size, dedup
), meta AS (
	INSERT INTO checkpoint_meta (key, value, ckpt)
	SELECT m.k, m.v, ck.id FROM ck, unnest($24::text[], $25::text[]) AS m(k, v)
), f AS (
	UPDATE workflows AS w SET ckpt_count = w.ckpt_count + 1, stored_bytes = w.stored_bytes + ck.stored_size,
		latest_seq = greatest(w.latest_seq, $28)
	FROM ck WHERE w.workflow_id = $1
)
SELECT id, stored_size, dedup FROM ck`

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
	var rowid, stored int64
	var dedup bool
	if err := w.queryRow(ctx, importSQL, append(insertArgs(sj, created, format), seq)...).Scan(&rowid, &stored, &dedup); err != nil {
		return err
	}
	if sj.Chunked != nil && !dedup { // the first listing of this state: count its runs
		var err error
		if stored, err = storeChunked(ctx, w, sj, rowid); err != nil {
			return err
		}
	}
	w.tot.inserted(int64(len(sj.Req.State)), stored, sj.HasState && !dedup)
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
