package sqlite

// Validation checkpoints and the compensation log in SQLite (schema step 6): the validation
// saved with a checkpoint (two columns of its row), compensations registered per workflow and
// rollbacks. The rules (classification, what a rollback covers, in which order it runs them)
// are package saga's, applied by package engine; this file keeps the rows.
//
// Retention and the compensation log: checkpoint retention (keepLast, maxAge, prune) deletes
// checkpoints only and never touches a compensation, and it keeps the checkpoints a rollback
// goes back to (retentionHolds): the newest one of each workflow and namespace whose validation
// did not fail, and the target of an unfinished rollback; idle expiry skips a workflow with a
// compensation not yet done or an unfinished rollback (withoutSagaHolds); deleting or
// completing a workflow without preserve deletes its compensations and rollbacks with it
// (deleteSagaRows); rollback/complete with prune deletes the rolled-back checkpoints and the
// compensations that rollback ran.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/ckptd/ckptd/store"
)

// insertValidation stores the validation (status, store.EncodeValidation record) of the
// checkpoint just inserted as rowid.
func (s *Store) insertValidation(ctx context.Context, w *wtx, rowid int64, status string, rec []byte) error {
	_, err := w.exec(ctx, `UPDATE checkpoints SET validation_status = ?, validation = ? WHERE id = ?`, status, rec, rowid)
	return err
}

// deleteSagaRows deletes a workflow's compensations and rollbacks (with the workflow).
func deleteSagaRows(ctx context.Context, w *wtx, workflowID string) error {
	if _, err := w.exec(ctx, `DELETE FROM compensations WHERE workflow_id = ?`, workflowID); err != nil {
		return err
	}
	_, err := w.exec(ctx, `DELETE FROM rollbacks WHERE workflow_id = ?`, workflowID)
	return err
}

// withoutSagaHolds returns the workflows of wfs that hold no compensation still needed: none
// pending or failed, no unfinished rollback.
func withoutSagaHolds(ctx context.Context, w *wtx, wfs []string) ([]string, error) {
	out := wfs[:0:0]
	for _, wf := range wfs {
		var held bool
		if err := w.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM compensations WHERE workflow_id = ?1 AND status != 'done')
			OR EXISTS (SELECT 1 FROM rollbacks WHERE workflow_id = ?1 AND completed_at IS NULL)`, wf).Scan(&held); err != nil {
			return nil, err
		}
		if !held {
			out = append(out, wf)
		}
	}
	return out, nil
}

// retentionHolds returns the checkpoints of (wf, ns) retention must keep for rollbacks: the
// newest whose validation did not fail (the target a failed validation recommends) and the
// target of the unfinished rollback.
func retentionHolds(ctx context.Context, w *wtx, wf, ns string) (map[string]bool, error) {
	var good, target sql.NullString
	err := w.queryRow(ctx, `SELECT (SELECT checkpoint_id FROM checkpoints INDEXED BY checkpoints_validation
			WHERE workflow_id = ?1 AND namespace = ?2 AND validation_status IN ('passed', 'warning') ORDER BY seq DESC LIMIT 1),
		(SELECT to_checkpoint_id FROM rollbacks WHERE workflow_id = ?1 AND namespace = ?2 AND completed_at IS NULL)`,
		wf, ns).Scan(&good, &target)
	if err != nil {
		return nil, err
	}
	holds := map[string]bool{}
	if good.Valid {
		holds[good.String] = true
	}
	if target.Valid {
		holds[target.String] = true
	}
	return holds, nil
}

// withoutRetentionHolds drops from ids (checkpoints of wf, ns retention selected) those it keeps
// for rollbacks.
func (s *Store) withoutRetentionHolds(ctx context.Context, w *wtx, wf, ns string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return ids, nil
	}
	holds, err := retentionHolds(ctx, w, wf, ns)
	if err != nil || len(holds) == 0 {
		return ids, err
	}
	out := ids[:0:0]
	for _, id := range ids {
		if !holds[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// refsWithoutRetentionHolds is withoutRetentionHolds for the keepLast fast path.
func (s *Store) refsWithoutRetentionHolds(ctx context.Context, w *wtx, wf, ns string, refs []ckRef) ([]ckRef, error) {
	if len(refs) == 0 {
		return refs, nil
	}
	holds, err := retentionHolds(ctx, w, wf, ns)
	if err != nil || len(holds) == 0 {
		return refs, err
	}
	out := refs[:0:0]
	for _, r := range refs {
		if !holds[r.id] {
			out = append(out, r)
		}
	}
	return out, nil
}

// SagaConfig returns a workflow's validation and compensation config (the "validation" and
// "compensation" members of workflows.config); zero for unknown workflows.
func (s *Store) SagaConfig(ctx context.Context, workflowID string) (store.SagaConfig, error) {
	var cfg sql.NullString
	err := s.readAuto(ctx, func(tx *rtx) error {
		return tx.cachedRow(ctx, `SELECT config FROM workflows WHERE workflow_id = ?`, workflowID).Scan(&cfg)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.SagaConfig{}, nil
	}
	if err != nil {
		return store.SagaConfig{}, wrapDB("workflow "+workflowID, err)
	}
	if !cfg.Valid || cfg.String == "" {
		return store.SagaConfig{}, nil
	}
	var c struct {
		Validation   json.RawMessage `json:"validation"`
		Compensation json.RawMessage `json:"compensation"`
	}
	if err := json.Unmarshal([]byte(cfg.String), &c); err != nil {
		s.log.Warn("ckptd store: workflow config does not decode, ignoring it", "workflowId", workflowID, "err", err)
		return store.SagaConfig{}, nil
	}
	out := store.SagaConfig{}
	if len(c.Validation) > 0 && string(c.Validation) != "null" {
		out.Validation = c.Validation
	}
	if len(c.Compensation) > 0 && string(c.Compensation) != "null" {
		out.Compensation = c.Compensation
	}
	return out, nil
}

// SetSagaConfig stores the members of cfg that are set (JSON objects) in the workflow's
// config, creating the workflow if needed; members left nil are kept as they are.
func (s *Store) SetSagaConfig(ctx context.Context, workflowID string, cfg store.SagaConfig) error {
	if workflowID == "" {
		return invalid("workflowId", "required")
	}
	set := map[string]json.RawMessage{}
	if cfg.Validation != nil {
		set["validation"] = cfg.Validation
	}
	if cfg.Compensation != nil {
		set["compensation"] = cfg.Compensation
	}
	for name, v := range set {
		if !json.Valid(v) {
			return invalid(name, "not valid JSON")
		}
	}
	if len(set) == 0 {
		return nil
	}
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		now := s.now().UnixMicro()
		if _, err := w.exec(ctx, `INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at, config)
			VALUES (?1, 1, ?2, ?2, '{}') ON CONFLICT(workflow_id) DO NOTHING`, workflowID, now); err != nil {
			return err
		}
		for _, name := range []string{"validation", "compensation"} {
			v, ok := set[name]
			if !ok {
				continue
			}
			if _, err := w.exec(ctx, `UPDATE workflows SET config = json_set(
				CASE WHEN json_valid(config) THEN CASE WHEN json_type(config) = 'object' THEN config ELSE '{}' END ELSE '{}' END,
				'$.`+name+`', json(?2)) WHERE workflow_id = ?1`, workflowID, string(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return wrapDB("configure "+workflowID, err)
	}
	return nil
}

// ValidationHistory returns up to limit checkpoints of (workflowID, namespace) saved with a
// validation and older than beforeSeq (0: any), newest first.
func (s *Store) ValidationHistory(ctx context.Context, workflowID, namespace string, beforeSeq int64, limit int) ([]store.ValidationRef, error) {
	if beforeSeq <= 0 {
		beforeSeq = math.MaxInt64
	}
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	var out []store.ValidationRef
	err := s.readAuto(ctx, func(tx *rtx) error {
		out = nil
		return scanCached(ctx, tx, `SELECT checkpoint_id, seq, validation_status FROM checkpoints INDEXED BY checkpoints_validation
			WHERE workflow_id = ? AND namespace = ? AND validation_status IS NOT NULL AND seq < ? ORDER BY seq DESC LIMIT ?`,
			func(rows *sql.Rows) error {
				var r store.ValidationRef
				if err := rows.Scan(&r.CheckpointID, &r.Seq, &r.Status); err != nil {
					return err
				}
				out = append(out, r)
				return nil
			}, workflowID, namespace, beforeSeq, limit)
	})
	if err != nil {
		return nil, wrapDB("validation history of "+workflowID, err)
	}
	return out, nil
}

// RegisterCompensation stores a compensation, durably once it returns; the workflow is created
// if needed. Its Seq follows the workflow's previous registration, its AfterSeq is the
// workflow's newest checkpoint seq at this moment.
func (s *Store) RegisterCompensation(ctx context.Context, req store.CompensationRequest) (store.Compensation, error) {
	if err := store.CheckCompensation(req); err != nil {
		return store.Compensation{}, err
	}
	u, err := uuid.NewV7()
	if err != nil {
		return store.Compensation{}, fmt.Errorf("register compensation: new id: %w", err)
	}
	c := store.Compensation{CompensationID: u.String(), WorkflowID: req.WorkflowID, Namespace: req.Namespace,
		CheckpointID: req.CheckpointID, StepName: req.StepName, TaskID: req.TaskID, Action: req.Action,
		Description: req.Description, Status: store.CompensationPending}
	err = s.do(ctx, func(ctx context.Context, w *wtx) error {
		now := s.now()
		c.CreatedAt = time.UnixMicro(now.UnixMicro()).UTC()
		if _, err := w.exec(ctx, `INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at) VALUES (?1, 1, ?2, ?2)
			ON CONFLICT(workflow_id) DO NOTHING`, req.WorkflowID, now.UnixMicro()); err != nil {
			return err
		}
		if err := w.queryRow(ctx, `SELECT (SELECT next_seq - 1 FROM workflows WHERE workflow_id = ?1),
			(SELECT coalesce(max(seq), 0) + 1 FROM compensations WHERE workflow_id = ?1)`, req.WorkflowID).Scan(&c.AfterSeq, &c.Seq); err != nil {
			return err
		}
		_, err := w.exec(ctx, `INSERT INTO compensations(compensation_id, workflow_id, namespace, seq, after_seq, checkpoint_id,
			step_name, task_id, description, status, created_at, action) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
			c.CompensationID, c.WorkflowID, c.Namespace, c.Seq, c.AfterSeq, nullStr(c.CheckpointID), nullStr(c.StepName),
			nullStr(c.TaskID), c.Description, c.Status, now.UnixMicro(), []byte(c.Action))
		return err
	})
	if err != nil {
		return store.Compensation{}, wrapDB("register compensation for "+req.WorkflowID, err)
	}
	return c, nil
}

// OpenCompensationForStep reports whether a compensation not yet done was registered for step
// in (workflowID, namespace) since the step's newest completed checkpoint (ever, if it never
// completed): what a required step must have before it saves completed.
func (s *Store) OpenCompensationForStep(ctx context.Context, workflowID, namespace, step string) (bool, error) {
	var ok bool
	err := s.readAuto(ctx, func(tx *rtx) error {
		return tx.cachedRow(ctx, `SELECT EXISTS (SELECT 1 FROM compensations WHERE workflow_id = ?1 AND namespace = ?2
			AND step_name = ?3 AND status != 'done' AND after_seq >= coalesce((SELECT seq FROM checkpoints
				WHERE workflow_id = ?1 AND namespace = ?2 AND step_name = ?3 AND phase = 'completed' ORDER BY seq DESC LIMIT 1), 0))`,
			workflowID, namespace, step).Scan(&ok)
	})
	if err != nil {
		return false, wrapDB("compensations of "+workflowID, err)
	}
	return ok, nil
}

const compensationCols = `compensation_id, workflow_id, namespace, seq, after_seq, checkpoint_id, step_name, task_id,
	description, status, error, rollback_id, created_at, done_at, action`

func scanCompensation(sc interface{ Scan(...any) error }) (store.Compensation, error) {
	var c store.Compensation
	var cp, step, task, errMsg, rb sql.NullString
	var created int64
	var done sql.NullInt64
	var action []byte
	if err := sc.Scan(&c.CompensationID, &c.WorkflowID, &c.Namespace, &c.Seq, &c.AfterSeq, &cp, &step, &task,
		&c.Description, &c.Status, &errMsg, &rb, &created, &done, &action); err != nil {
		return store.Compensation{}, err
	}
	c.CheckpointID, c.StepName, c.TaskID, c.Error, c.RollbackID = cp.String, step.String, task.String, errMsg.String, rb.String
	c.CreatedAt = time.UnixMicro(created).UTC()
	if done.Valid {
		c.DoneAt = time.UnixMicro(done.Int64).UTC()
	}
	c.Action = json.RawMessage(action)
	return c, nil
}

// Compensations returns the compensations of (workflowID, namespace) registered after the
// checkpoint with seq toSeq (AfterSeq >= toSeq; 0: every one) and no later than the one with
// seq maxSeq (0: any), in registration order.
func (s *Store) Compensations(ctx context.Context, workflowID, namespace string, toSeq, maxSeq int64) ([]store.Compensation, error) {
	if maxSeq <= 0 {
		maxSeq = math.MaxInt64
	}
	var out []store.Compensation
	err := s.readAuto(ctx, func(tx *rtx) error {
		out = nil
		return scanCached(ctx, tx, `SELECT `+compensationCols+` FROM compensations
			WHERE workflow_id = ? AND namespace = ? AND after_seq >= ? AND seq <= ? ORDER BY seq`,
			func(rows *sql.Rows) error {
				c, err := scanCompensation(rows)
				if err != nil {
					return err
				}
				out = append(out, c)
				return nil
			}, workflowID, namespace, toSeq, maxSeq)
	})
	if err != nil {
		return nil, wrapDB("compensations of "+workflowID, err)
	}
	return out, nil
}

// Compensation returns one compensation; store.ErrNotFound if it does not exist.
func (s *Store) Compensation(ctx context.Context, compensationID string) (store.Compensation, error) {
	var c store.Compensation
	err := s.readAuto(ctx, func(tx *rtx) error {
		var err error
		c, err = scanCompensation(tx.cachedRow(ctx, `SELECT `+compensationCols+` FROM compensations WHERE compensation_id = ?`, compensationID))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Compensation{}, fmt.Errorf("compensation %q: %w", compensationID, store.ErrNotFound)
	}
	if err != nil {
		return store.Compensation{}, wrapDB("compensation "+compensationID, err)
	}
	return c, nil
}

const rollbackCols = `rollback_id, workflow_id, namespace, to_checkpoint_id, to_seq, max_seq, created_at, completed_at`

func scanRollback(sc interface{ Scan(...any) error }) (store.Rollback, error) {
	var r store.Rollback
	var to sql.NullString
	var created int64
	var completed sql.NullInt64
	if err := sc.Scan(&r.RollbackID, &r.WorkflowID, &r.Namespace, &to, &r.ToSeq, &r.MaxSeq, &created, &completed); err != nil {
		return store.Rollback{}, err
	}
	r.ToCheckpointID = to.String
	r.CreatedAt = time.UnixMicro(created).UTC()
	if completed.Valid {
		r.CompletedAt = time.UnixMicro(completed.Int64).UTC()
	}
	return r, nil
}

// Rollback returns one rollback; store.ErrNotFound if it does not exist.
func (s *Store) Rollback(ctx context.Context, rollbackID string) (store.Rollback, error) {
	var r store.Rollback
	err := s.readAuto(ctx, func(tx *rtx) error {
		var err error
		r, err = scanRollback(tx.cachedRow(ctx, `SELECT `+rollbackCols+` FROM rollbacks WHERE rollback_id = ?`, rollbackID))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Rollback{}, fmt.Errorf("rollback %q: %w", rollbackID, store.ErrNotFound)
	}
	if err != nil {
		return store.Rollback{}, wrapDB("rollback "+rollbackID, err)
	}
	return r, nil
}

// LatestRollback returns the newest rollback of (workflowID, namespace), unfinished or not;
// nil if there was none. An unfinished one is always the newest.
func (s *Store) LatestRollback(ctx context.Context, workflowID, namespace string) (*store.Rollback, error) {
	var r *store.Rollback
	err := s.readAuto(ctx, func(tx *rtx) error {
		got, err := scanRollback(tx.cachedRow(ctx, `SELECT `+rollbackCols+` FROM rollbacks
			WHERE workflow_id = ? AND namespace = ? ORDER BY completed_at IS NULL DESC, created_at DESC, rowid DESC LIMIT 1`,
			workflowID, namespace))
		if errors.Is(err, sql.ErrNoRows) {
			r = nil
			return nil
		}
		if err != nil {
			return err
		}
		r = &got
		return nil
	})
	if err != nil {
		return nil, wrapDB("rollbacks of "+workflowID, err)
	}
	return r, nil
}

// BeginRollback starts a rollback of (workflowID, namespace) to the checkpoint toCheckpointID
// with seq toSeq ("" and 0: a full rollback), covering the compensations registered so far. If
// one is unfinished already, it returns that one instead with began false (at most one is
// unfinished per workflow and namespace).
func (s *Store) BeginRollback(ctx context.Context, workflowID, namespace, toCheckpointID string, toSeq int64) (r store.Rollback, began bool, err error) {
	if workflowID == "" {
		return store.Rollback{}, false, invalid("workflowId", "required")
	}
	err = s.do(ctx, func(ctx context.Context, w *wtx) error {
		began = false
		got, err := scanRollback(w.queryRow(ctx, `SELECT `+rollbackCols+` FROM rollbacks
			WHERE workflow_id = ? AND namespace = ? AND completed_at IS NULL`, workflowID, namespace))
		if err == nil {
			r = got
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		u, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new rollback id: %w", err)
		}
		r = store.Rollback{RollbackID: u.String(), WorkflowID: workflowID, Namespace: namespace, ToCheckpointID: toCheckpointID,
			ToSeq: toSeq, CreatedAt: time.UnixMicro(s.now().UnixMicro()).UTC()}
		if err := w.queryRow(ctx, `SELECT coalesce(max(seq), 0) FROM compensations WHERE workflow_id = ?`, workflowID).Scan(&r.MaxSeq); err != nil {
			return err
		}
		if _, err := w.exec(ctx, `INSERT INTO rollbacks(rollback_id, workflow_id, namespace, to_checkpoint_id, to_seq, max_seq,
			created_at) VALUES (?,?,?,?,?,?,?)`, r.RollbackID, workflowID, namespace, nullStr(toCheckpointID), toSeq, r.MaxSeq,
			r.CreatedAt.UnixMicro()); err != nil {
			return err
		}
		began = true
		return nil
	})
	if err != nil {
		return store.Rollback{}, false, wrapDB("begin rollback of "+workflowID, err)
	}
	return r, began, nil
}

// MarkCompensation records that rollbackID ran compensationID: status done or failed (with
// errMsg). A compensation already done stays done. store.ErrNotFound for an unknown rollback or
// compensation, store.ErrConflict when the rollback is complete.
func (s *Store) MarkCompensation(ctx context.Context, compensationID, rollbackID, status, errMsg string) (store.Compensation, error) {
	if status != store.CompensationDone && status != store.CompensationFailed {
		return store.Compensation{}, invalid("status", "%q is not done or failed", status)
	}
	var c store.Compensation
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		var completed sql.NullInt64
		err := w.queryRow(ctx, `SELECT completed_at FROM rollbacks WHERE rollback_id = ?`, rollbackID).Scan(&completed)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("rollback %q: %w", rollbackID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if completed.Valid {
			return fmt.Errorf("rollback %q is complete: %w", rollbackID, store.ErrConflict)
		}
		if _, err := w.exec(ctx, `UPDATE compensations SET status = ?, error = ?, rollback_id = ?, done_at = ?
			WHERE compensation_id = ? AND status != 'done'`, status, nullStr(errMsg), rollbackID, s.now().UnixMicro(), compensationID); err != nil {
			return err
		}
		c, err = scanCompensation(w.queryRow(ctx, `SELECT `+compensationCols+` FROM compensations WHERE compensation_id = ?`, compensationID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("compensation %q: %w", compensationID, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			return store.Compensation{}, err
		}
		return store.Compensation{}, wrapDB("mark compensation "+compensationID, err)
	}
	return c, nil
}

// CompleteRollback ends a rollback. With prune it deletes the rolled-back checkpoints (those of
// its workflow and namespace newer than its target; every one for a full rollback) and the
// compensations it ran; it returns their ids. Completing a complete rollback again changes
// nothing. store.ErrNotFound for an unknown rollback.
func (s *Store) CompleteRollback(ctx context.Context, rollbackID string, prune bool) (store.Rollback, []string, error) {
	var (
		r      store.Rollback
		pruned []string
	)
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		pruned = nil
		got, err := scanRollback(w.queryRow(ctx, `SELECT `+rollbackCols+` FROM rollbacks WHERE rollback_id = ?`, rollbackID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("rollback %q: %w", rollbackID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		r = got
		if !r.CompletedAt.IsZero() {
			return nil
		}
		r.CompletedAt = time.UnixMicro(s.now().UnixMicro()).UTC()
		if _, err := w.exec(ctx, `UPDATE rollbacks SET completed_at = ? WHERE rollback_id = ?`, r.CompletedAt.UnixMicro(), rollbackID); err != nil {
			return err
		}
		if !prune {
			return nil
		}
		refs, err := w.refs(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = ? AND namespace = ? AND seq > ?
			ORDER BY seq`, r.WorkflowID, r.Namespace, r.ToSeq)
		if err != nil {
			return err
		}
		if pruned, err = s.deleteRefs(ctx, w, refs); err != nil {
			return err
		}
		if _, err := w.exec(ctx, `DELETE FROM compensations WHERE rollback_id = ? AND status = 'done'`, rollbackID); err != nil {
			return err
		}
		if len(pruned) > 0 {
			w.vacuumAfter()
			wf, ids := r.WorkflowID, pruned
			w.after(func() {
				s.deletes.Add(uint64(len(ids)))
				s.notifyPruned(wf, ids, "rollback")
			})
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.Rollback{}, nil, err
		}
		return store.Rollback{}, nil, wrapDB("complete rollback "+rollbackID, err)
	}
	return r, pruned, nil
}
