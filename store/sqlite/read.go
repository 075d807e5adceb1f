package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ckptd/ckptd/store"
)

// summaryCols are the checkpoint columns of a Summary, in scanSummary's order.
const summaryCols = `c.id, c.checkpoint_id, c.workflow_id, c.namespace, c.seq, c.parent_id, c.phase, c.step, c.step_name,
	c.error, c.workflow_hash, c.metadata, c.created_at, c.state_type, c.size, c.stored_size, c.state_hash,
	c.completed_count, c.pending_count, c.format_version, c.validation_status, c.validation`

type summaryScan struct {
	rowid                               int64
	parent, stepName, errJSON, wfHash   sql.NullString
	phase, stateType                    string
	meta, hash                          []byte
	created                             int64
	completedN, pendingN, formatVersion int64
	validationStatus                    sql.NullString
	validation                          []byte
	sm                                  store.Summary
}

func (x *summaryScan) dest() []any {
	return []any{&x.rowid, &x.sm.CheckpointID, &x.sm.WorkflowID, &x.sm.Namespace, &x.sm.Seq, &x.parent, &x.phase,
		&x.sm.Step, &x.stepName, &x.errJSON, &x.wfHash, &x.meta, &x.created, &x.stateType, &x.sm.SizeBytes,
		&x.sm.StoredBytes, &x.hash, &x.completedN, &x.pendingN, &x.formatVersion, &x.validationStatus, &x.validation}
}

// finish fills sm from the scanned columns; a stored value that does not decode is corruption.
func (x *summaryScan) finish() (store.Summary, error) {
	sm := x.sm
	sm.ParentID = x.parent.String
	sm.Phase = store.Phase(x.phase)
	sm.StepName = x.stepName.String
	sm.WorkflowHash = x.wfHash.String
	if len(x.meta) > 0 {
		sm.Metadata = json.RawMessage(bytes.Clone(x.meta))
	}
	sm.CreatedAt = time.UnixMicro(x.created).UTC()
	sm.StateType = store.StateType(x.stateType)
	if x.hash != nil {
		sm.SHA256 = hex.EncodeToString(x.hash)
	}
	sm.CompletedTaskCount = int(x.completedN)
	sm.PendingTaskCount = int(x.pendingN)
	sm.FormatVersion = int(x.formatVersion)
	if x.errJSON.Valid {
		var e store.StepError
		if err := json.Unmarshal([]byte(x.errJSON.String), &e); err != nil {
			return sm, &store.CorruptError{CheckpointID: sm.CheckpointID, Reason: "stored error does not decode: " + err.Error()}
		}
		sm.Error = &e
	}
	if x.validationStatus.Valid {
		v, err := store.DecodeValidation(sm.CheckpointID, x.validationStatus.String, x.validation)
		if err != nil {
			return sm, err
		}
		sm.Validation = v
	}
	return sm, nil
}

// query runs q inside tx through tx's connection's prepared statement for it (see readpool.go).
func (s *Store) query(ctx context.Context, tx *rtx, q string, args ...any) (*sql.Rows, error) {
	return tx.cached(ctx, q, args...)
}

// retryRead runs a read, retrying while the database is busy, and wraps errors.
func (s *Store) retryRead(ctx context.Context, op string, f func() error) error {
	if err := s.retry(ctx, f); err != nil {
		var ce *store.CorruptError
		if errors.As(err, &ce) || errors.Is(err, store.ErrNotFound) {
			return err
		}
		return wrapDB(op, err)
	}
	return nil
}

// loadQuery reads a checkpoint with its state, and whether it has pending writes (most have
// none: their query is then not run).
const loadQuery = `SELECT ` + summaryCols + `, c.completed_tasks, c.pending_tasks, s.encoding, s.size, s.data,
	EXISTS (SELECT 1 FROM writes w WHERE w.checkpoint_id = c.checkpoint_id)
	FROM checkpoints c LEFT JOIN states s ON s.hash = c.state_hash WHERE `

// loadOne reads and verifies one checkpoint by rowid or checkpoint id inside tx.
func (s *Store) loadOne(ctx context.Context, tx *rtx, where string, arg any) (_ store.Checkpoint, err error) {
	var x summaryScan
	defer func() {
		var ce *store.CorruptError
		if errors.As(err, &ce) && ce.WorkflowID == "" { // named in checkpoint/corrupted
			ce.WorkflowID = x.sm.WorkflowID
		}
		// A damaged database page under this checkpoint's rows (SQLITE_CORRUPT, e.g. a wrecked
		// b-tree page of its state) is this checkpoint's corruption, reported like a failed
		// hash: an explicit load answers -32002 naming it and a latest-load falls back to an
		// older checkpoint, instead of a storage error (-32006) that names nothing.
		if isCorrupt(err) {
			s.observe(err) // and the file is damaged: the store stops writing
			ce := &store.CorruptError{CheckpointID: fmt.Sprint(arg), Reason: "database page corrupt: " + err.Error()}
			var id, wf string // best effort: the checkpoint's own row may still be readable
			if tx.QueryRowContext(ctx, `SELECT c.checkpoint_id, c.workflow_id FROM checkpoints c WHERE `+where, arg).Scan(&id, &wf) == nil {
				ce.CheckpointID, ce.WorkflowID = id, wf
			}
			err = ce
		}
	}()
	rows, err := s.query(ctx, tx, loadQuery+where, arg)
	if err != nil {
		return store.Checkpoint{}, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return store.Checkpoint{}, err
		}
		return store.Checkpoint{}, fmt.Errorf("checkpoint %v: %w", arg, store.ErrNotFound)
	}
	var completed, pending, index []byte
	var enc, size sql.NullInt64
	var data sql.RawBytes
	var hasWrites bool
	if err := rows.Scan(append(x.dest(), &completed, &pending, &enc, &size, &data, &hasWrites)...); err != nil {
		return store.Checkpoint{}, err // SQLITE_CORRUPT: see the defer above
	}
	sm, err := x.finish()
	if err != nil {
		return store.Checkpoint{}, err
	}
	cp := store.Checkpoint{Summary: sm}
	if len(completed) > 0 {
		cp.CompletedTasks = json.RawMessage(completed)
	}
	if len(pending) > 0 {
		cp.PendingTasks = json.RawMessage(pending)
	}
	if sm.StateType != store.StateNone {
		if x.hash == nil {
			return store.Checkpoint{}, &store.CorruptError{CheckpointID: sm.CheckpointID, Reason: "state hash missing"}
		}
		if !enc.Valid {
			return store.Checkpoint{}, &store.CorruptError{CheckpointID: sm.CheckpointID, Reason: "state blob missing"}
		}
		if enc.Int64 == store.EncChunked {
			index = bytes.Clone(data) // read once the row is closed: the runs and chunks take more queries
		} else {
			state, err := s.codec.OpenState(data, int(enc.Int64), size.Int64, x.hash)
			if err != nil {
				return store.Checkpoint{}, &store.CorruptError{CheckpointID: sm.CheckpointID, Reason: err.Error()}
			}
			cp.State = state
		}
	}
	if err := rows.Close(); err != nil {
		return store.Checkpoint{}, err
	}
	if index != nil {
		if cp.State, err = s.openChunked(ctx, tx.cached, index, size.Int64, x.hash); err != nil {
			return store.Checkpoint{}, chunkedCorrupt(sm.CheckpointID, err)
		}
	}
	if sm.StateType != store.StateNone && int64(len(cp.State)) != sm.SizeBytes {
		return store.Checkpoint{}, &store.CorruptError{CheckpointID: sm.CheckpointID, Reason: "state size mismatch"}
	}
	if hasWrites {
		if cp.PendingWrites, err = s.readWrites(ctx, tx, sm.CheckpointID); err != nil {
			return store.Checkpoint{}, err
		}
	}
	return cp, nil
}

func (s *Store) readWrites(ctx context.Context, tx *rtx, checkpointID string) ([]store.Write, error) {
	return s.readWritesWith(ctx, tx.cached, checkpointID, true)
}

// writesQuery reads a checkpoint's pending writes in (task_id, idx) order.
const writesQuery = `SELECT task_id, task_path, idx, channel, type, is_bytes, encoding, size, sha256, value FROM writes
	WHERE checkpoint_id = ? ORDER BY task_id, idx`

// readWritesWith reads a checkpoint's pending writes through query, reassembling chunked
// values. A damaged chunked value is the checkpoint's *store.CorruptError when strict; else its
// Value is left nil.
func (s *Store) readWritesWith(ctx context.Context, query queryFunc, checkpointID string, strict bool) ([]store.Write, error) {
	rows, err := query(ctx, writesQuery, checkpointID)
	if err != nil {
		return nil, err
	}
	type chunked struct {
		i     int
		size  int64
		sha   []byte
		index []byte
	}
	var out []store.Write
	var later []chunked
	err = eachRow(ctx, rows, func(rows *sql.Rows) error {
		var w store.Write
		var typ sql.NullString
		var enc int
		var size sql.NullInt64
		var sha []byte
		if err := rows.Scan(&w.TaskID, &w.TaskPath, &w.Idx, &w.Channel, &typ, &w.IsBytes, &enc, &size, &sha, &w.Value); err != nil {
			return err
		}
		w.Type = typ.String
		if enc == store.EncChunked {
			later = append(later, chunked{len(out), size.Int64, sha, w.Value})
			w.Value = nil
		}
		out = append(out, w)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, c := range later {
		v, err := s.openChunked(ctx, query, c.index, c.size, c.sha)
		if err != nil {
			if _, ok := store.ChunkedReason(err); ok && !strict {
				continue
			}
			w := out[c.i]
			if reason, ok := store.ChunkedReason(err); ok {
				return nil, &store.CorruptError{CheckpointID: checkpointID,
					Reason: fmt.Sprintf("pending write %s/%d: %s", w.TaskID, w.Idx, reason)}
			}
			return nil, err
		}
		out[c.i].Value = v
	}
	return out, nil
}

// Load returns the verified checkpoint checkpointID. A checkpoint that fails verification gives
// a *CorruptError; an unknown one ErrNotFound.
func (s *Store) Load(ctx context.Context, checkpointID string) (store.Checkpoint, error) {
	var cp store.Checkpoint
	err := s.readTxHot(ctx, recentCheckpoint(checkpointID), func(tx *rtx) error {
		var err error
		cp, err = s.loadOne(ctx, tx, "c.checkpoint_id = ?", checkpointID)
		return err
	})
	if err != nil {
		var ce *store.CorruptError
		switch {
		case errors.As(err, &ce):
			if ce.CheckpointID == "" {
				ce.CheckpointID = checkpointID
			}
			return store.Checkpoint{}, err
		case errors.Is(err, store.ErrNotFound):
			return store.Checkpoint{}, fmt.Errorf("checkpoint %q: %w", checkpointID, store.ErrNotFound)
		}
		return store.Checkpoint{}, wrapDB(fmt.Sprintf("load checkpoint %q", checkpointID), err)
	}
	return cp, nil
}

// LoadLatest returns the newest (highest seq) intact checkpoint of (workflowID, namespace),
// listing newer corrupt ones it skipped in RecoveredFrom. ErrNotFound if there is none; if every
// one is corrupt, the *CorruptError of the newest.
func (s *Store) LoadLatest(ctx context.Context, workflowID, namespace string) (store.LoadResult, error) {
	var res store.LoadResult
	err := s.readTxHot(ctx, recentWorkflow(workflowID, namespace), func(tx *rtx) error {
		res = store.LoadResult{}
		rows, err := s.query(ctx, tx, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = ? AND namespace = ?
			ORDER BY seq DESC`, workflowID, namespace)
		if err != nil {
			return err
		}
		var refs []ckRef
		for rows.Next() {
			var r ckRef
			if err := rows.Scan(&r.rowid, &r.id); err != nil {
				rows.Close()
				return err
			}
			refs = append(refs, r)
			if len(refs) == 1 {
				break // usually the newest is intact: read more only if needed
			}
		}
		rows.Close()
		if len(refs) == 0 {
			return fmt.Errorf("workflow %q namespace %q has no checkpoints: %w", workflowID, namespace, store.ErrNotFound)
		}
		var first *store.CorruptError
		fetchedAll := false
		for i := 0; ; i++ {
			if i == len(refs) {
				if fetchedAll {
					break
				}
				fetchedAll = true
				more, err := s.refsAfter(ctx, tx, workflowID, namespace, refs[0].rowid)
				if err != nil {
					return err
				}
				refs = append(refs, more...)
				if i == len(refs) {
					break
				}
			}
			cp, err := s.loadOne(ctx, tx, "c.id = ?", refs[i].rowid)
			var ce *store.CorruptError
			if errors.As(err, &ce) {
				ce.CheckpointID = refs[i].id
				if first == nil {
					first = ce
				}
				res.RecoveredFrom = append(res.RecoveredFrom, store.Recovery{CheckpointID: refs[i].id, Reason: ce.Reason})
				continue
			}
			if err != nil {
				return err
			}
			res.Checkpoint = cp
			return nil
		}
		first.AlsoCorrupt = res.RecoveredFrom[1:]
		return first
	})
	if err != nil {
		var ce *store.CorruptError
		if errors.As(err, &ce) || errors.Is(err, store.ErrNotFound) {
			return store.LoadResult{}, err
		}
		return store.LoadResult{}, wrapDB(fmt.Sprintf("load latest of workflow %q", workflowID), err)
	}
	if len(res.RecoveredFrom) > 0 {
		s.log.Warn("ckptd store: skipped corrupt checkpoints", "workflowId", workflowID, "recoveredFrom", res.RecoveredFrom,
			"loaded", res.CheckpointID)
	}
	return res, nil
}

func (s *Store) refsAfter(ctx context.Context, tx *rtx, wf, ns string, rowid int64) ([]ckRef, error) {
	return scanRefs(s.query(ctx, tx, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = ? AND namespace = ?
		AND seq < (SELECT seq FROM checkpoints WHERE id = ?) ORDER BY seq DESC`, wf, ns, rowid))
}

// listQuery builds the SQL for f. Every shape walks an index in the ORDER BY order (no temp
// b-tree): within a workflow seq order equals save (rowid) order, which lets metadata queries
// order by the rowid stored in checkpoint_meta.
func listQuery(f store.ListFilter, beforeRowid, beforeSeq int64, beforeSameWf bool) (string, []any, error) {
	var where []string
	var args []any
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	type kv struct{ k, v string }
	var meta []kv
	for k, raw := range f.Metadata {
		c, err := store.CanonicalJSON(raw)
		if err != nil {
			return "", nil, invalid("metadata", "key %q: %v", k, err)
		}
		meta = append(meta, kv{k, c})
	}
	sort.Slice(meta, func(a, b int) bool { return meta[a].k < meta[b].k })

	var from, order string
	switch {
	case f.WorkflowID != "":
		// (workflow_id, seq, namespace): a namespace filter is read from the index itself.
		from = `checkpoints c INDEXED BY checkpoints_wf_seq`
		add(`c.workflow_id = ?`, f.WorkflowID)
		if f.Namespace != nil {
			add(`c.namespace = ?`, *f.Namespace)
		}
		order = `c.seq DESC`
		if f.Before != "" {
			if beforeSameWf {
				add(`c.seq < ?`, beforeSeq)
			} else {
				add(`c.id < ?`, beforeRowid)
			}
		}
		for _, m := range meta {
			add(`EXISTS (SELECT 1 FROM checkpoint_meta m WHERE m.key = ? AND m.value = ? AND m.ckpt = c.id)`, m.k, m.v)
		}
	case len(meta) > 0:
		from = `checkpoint_meta m0 CROSS JOIN checkpoints c`
		add(`m0.key = ?`, meta[0].k)
		add(`m0.value = ?`, meta[0].v)
		add(`c.id = m0.ckpt`)
		order = `m0.ckpt DESC`
		if f.Before != "" {
			add(`m0.ckpt < ?`, beforeRowid)
		}
		if f.Namespace != nil {
			add(`c.namespace = ?`, *f.Namespace)
		}
		for _, m := range meta[1:] {
			add(`EXISTS (SELECT 1 FROM checkpoint_meta m WHERE m.key = ? AND m.value = ? AND m.ckpt = c.id)`, m.k, m.v)
		}
	case f.Namespace != nil && *f.Namespace != "":
		// checkpoints_ns_id holds only namespace <> '' (schema step 8): a list of the default
		// namespace, where most checkpoints are, takes one of the shapes below.
		from = `checkpoints c INDEXED BY checkpoints_ns_id`
		add(`c.namespace <> ''`) // the partial index's condition, spelt out so that it applies
		add(`c.namespace = ?`, *f.Namespace)
		order = `c.id DESC`
		if f.Before != "" {
			add(`c.id < ?`, beforeRowid)
		}
	case f.Validation != "":
		from = `checkpoints c INDEXED BY checkpoints_validation_id`
		order = `c.id DESC`
		if f.Before != "" {
			add(`c.id < ?`, beforeRowid)
		}
	case f.Phase != "" && f.Phase != store.PhaseCompleted:
		// checkpoints_phase_id leaves out phase 'completed' (schema step 8), like the namespace
		// index the default namespace.
		from = `checkpoints c INDEXED BY checkpoints_phase_id`
		add(`c.phase <> 'completed'`)
		order = `c.id DESC`
		if f.Before != "" {
			add(`c.id < ?`, beforeRowid)
		}
	default:
		// Everything, the default namespace or phase 'completed': the table newest first,
		// stopping at the limit.
		from = `checkpoints c NOT INDEXED`
		order = `c.id DESC`
		if f.Before != "" {
			add(`c.id < ?`, beforeRowid)
		}
	}
	if f.Namespace != nil && *f.Namespace == "" && f.WorkflowID == "" && len(meta) == 0 {
		add(`c.namespace = ?`, "")
	}
	if f.Phase != "" {
		add(`c.phase = ?`, string(f.Phase))
	}
	if f.Validation != "" {
		add(`c.validation_status = ?`, f.Validation)
	}
	q := `SELECT ` + summaryCols + ` FROM ` + from
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY ` + order + ` LIMIT ?`
	args = append(args, f.Limit)
	return q, args, nil
}

// List returns checkpoint summaries newest first (by seq within a workflow, by save order across
// workflows). Limit defaults to 100 and is capped at 10000.
func (s *Store) List(ctx context.Context, f store.ListFilter) ([]store.Summary, error) {
	if f.Limit <= 0 {
		f.Limit = store.DefaultListLimit
	}
	if f.Limit > store.MaxListLimit {
		f.Limit = store.MaxListLimit
	}
	if f.Phase != "" && !f.Phase.Valid() {
		return nil, invalid("phase", "%q is not one of before_step, completed, failed, interrupted", string(f.Phase))
	}
	if f.Validation != "" && !store.ValidationStatusValid(f.Validation) {
		return nil, invalid("validation", "%q is not one of passed, warning, failed", f.Validation)
	}
	var out []store.Summary
	err := s.readTx(ctx, func(tx *rtx) error {
		out = nil
		var bRowid, bSeq int64
		same := false
		if f.Before != "" {
			var wf string
			err := tx.QueryRowContext(ctx, `SELECT id, seq, workflow_id FROM checkpoints WHERE checkpoint_id = ?`, f.Before).
				Scan(&bRowid, &bSeq, &wf)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("before: checkpoint %q: %w", f.Before, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			same = wf == f.WorkflowID
		}
		q, args, err := listQuery(f, bRowid, bSeq, same)
		if err != nil {
			return err
		}
		rows, err := s.query(ctx, tx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var x summaryScan
			if err := rows.Scan(x.dest()...); err != nil {
				return err
			}
			sm, err := x.finish()
			if err != nil { // listed anyway; loading it reports the corruption
				s.log.Warn("ckptd store: corrupt checkpoint summary", "checkpointId", sm.CheckpointID, "err", err)
			}
			out = append(out, sm)
		}
		return rows.Err()
	})
	if err != nil {
		var ie *store.InvalidError
		if errors.As(err, &ie) || errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		return nil, wrapDB("list checkpoints", err)
	}
	return out, nil
}

// summaryByRowid reads one summary (no verification).
func summaryByRowid(ctx context.Context, tx *rtx, rowid int64) (store.Summary, error) {
	var x summaryScan
	if err := tx.cachedRow(ctx, `SELECT `+summaryCols+` FROM checkpoints c WHERE c.id = ?`, rowid).Scan(x.dest()...); err != nil {
		return store.Summary{}, err
	}
	sm, _ := x.finish() // a bad stored error is reported when the checkpoint is loaded
	return sm, nil
}

// PutWrites stores pending writes of a task against checkpointID (which must exist in
// workflowID). idx >= 0: stored once (a repeat is ignored); idx < 0: replaced. stored counts rows
// inserted or replaced.
func (s *Store) PutWrites(ctx context.Context, workflowID, namespace, checkpointID string, writes []store.Write) (int, error) {
	return s.PutWritesFenced(ctx, workflowID, namespace, checkpointID, writes, 0)
}

// PutWritesFenced is PutWrites under fencing token (0: none), checked in its transaction.
func (s *Store) PutWritesFenced(ctx context.Context, workflowID, namespace, checkpointID string, writes []store.Write, token int64) (int, error) {
	if workflowID == "" {
		return 0, invalid("workflowId", "required")
	}
	if checkpointID == "" {
		return 0, invalid("checkpointId", "required")
	}
	for i, w := range writes {
		if w.TaskID == "" {
			return 0, invalid(fmt.Sprintf("writes[%d].taskId", i), "required")
		}
		if w.Channel == "" {
			return 0, invalid(fmt.Sprintf("writes[%d].channel", i), "required")
		}
	}
	prepared := s.prepareWrites(writes)
	stored := 0
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		stored = 0
		if err := s.fence(ctx, w, workflowID, token); err != nil {
			return err
		}
		var wf string
		err := w.queryRow(ctx, `SELECT workflow_id FROM checkpoints WHERE checkpoint_id = ?`, checkpointID).Scan(&wf)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("checkpoint %q: %w", checkpointID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if wf != workflowID {
			return fmt.Errorf("checkpoint %q belongs to workflow %q: %w", checkpointID, wf, store.ErrConflict)
		}
		for _, pw := range prepared {
			ok, err := s.putWrite(ctx, w, checkpointID, workflowID, namespace, pw, pw.Idx < 0)
			if err != nil {
				return err
			}
			if ok {
				stored++
			}
		}
		return nil
	})
	if err != nil {
		return 0, wrapDB(fmt.Sprintf("put writes for checkpoint %q", checkpointID), err)
	}
	return stored, nil
}

// scanRows runs q (with args) in tx and calls each for every row.
func scanRows(ctx context.Context, tx *rtx, q string, each func(rows *sql.Rows) error, args ...any) error {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	return eachRow(ctx, rows, each)
}

// scanCached is scanRows through tx's connection's prepared statement for q: for queries of a
// fixed text (no placeholders that vary in number).
func scanCached(ctx context.Context, tx *rtx, q string, each func(rows *sql.Rows) error, args ...any) error {
	rows, err := tx.cached(ctx, q, args...)
	if err != nil {
		return err
	}
	return eachRow(ctx, rows, each)
}

func eachRow(ctx context.Context, rows *sql.Rows, each func(rows *sql.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return rows.Err()
}
