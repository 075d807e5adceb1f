package postgres

// Validation checkpoints and the compensation log on PostgreSQL (schema version 4): the
// validation saved with a checkpoint (two columns of its row, written by saveSQL and importSQL),
// compensations registered per workflow and rollbacks. The rules are package saga's, applied
// by package engine; this file keeps the rows, with SQLite's semantics (store/sqlite/saga.go).
//
// Concurrency: every write here runs under the workflow's advisory lock, the one saves,
// retention, deletion and idle expiry of the workflow take. So a compensation's seq (max + 1)
// and after_seq (the workflow's newest checkpoint seq) are handed out in one order across
// processes, a rollback's max_seq covers exactly the compensations committed before it, at
// most one rollback per workflow and namespace is unfinished (also a unique index), and a
// rollback that completes cannot interleave with one marking its progress. MarkCompensation
// and CompleteRollback learn the workflow from the rollback, so they run alone and take the
// lock themselves, then read the rollback again.
//
// Retention and the compensation log: checkpoint retention (keepLast, maxAge, prune) deletes
// checkpoints only and never a compensation, and keeps the checkpoints a rollback goes back to
// (holdsJoin, withoutRetentionHolds): the newest one of each workflow and namespace whose
// validation did not fail, and the target of an unfinished rollback. Idle expiry skips a
// workflow with a compensation not done or an unfinished rollback (sagaHeld). Deleting or
// completing a workflow without preserve deletes its compensations and rollbacks
// (queueDeleteSagaRows); rollback/complete with prune deletes the rolled-back checkpoints and
// the compensations that rollback ran.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// holdsJoin joins, to a query on checkpoints c of workflow $1 and namespace $2, the one row h
// naming the checkpoints retention keeps for rollbacks: h.good, the newest whose validation
// did not fail (what a failed validation recommends rolling back to), and h.target, the target
// of the unfinished rollback. heldCol is true for those.
const (
	holdsJoin = ` CROSS JOIN (SELECT
		(SELECT checkpoint_id FROM checkpoints WHERE workflow_id = $1 AND namespace = $2
			AND validation_status IN ('passed', 'warning') ORDER BY seq DESC LIMIT 1) AS good,
		(SELECT to_checkpoint_id FROM rollbacks WHERE workflow_id = $1 AND namespace = $2 AND completed_at IS NULL) AS target) h`
	heldCol = `((c.checkpoint_id = h.good) IS TRUE OR (c.checkpoint_id = h.target) IS TRUE)`
)

// sagaHeld is true for a workflow w that holds a compensation still needed: one not done, or
// an unfinished rollback. Idle expiry skips it.
const sagaHeld = `(EXISTS (SELECT 1 FROM compensations k WHERE k.workflow_id = w.workflow_id AND k.status <> 'done')
	OR EXISTS (SELECT 1 FROM rollbacks r WHERE r.workflow_id = w.workflow_id AND r.completed_at IS NULL))`

// withoutRetentionHolds drops from ids (checkpoints of wf, ns retention selected) those kept for
// rollbacks.
func withoutRetentionHolds(ctx context.Context, w *wtx, wf, ns string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return ids, nil
	}
	var good, target *string
	if err := w.queryRow(ctx, `SELECT h.good, h.target FROM (SELECT 1) AS one`+holdsJoin, wf, ns).Scan(&good, &target); err != nil {
		return nil, err
	}
	if good == nil && target == nil {
		return ids, nil
	}
	out := ids[:0:0]
	for _, id := range ids {
		if (good == nil || id != *good) && (target == nil || id != *target) {
			out = append(out, id)
		}
	}
	return out, nil
}

// queueDeleteSagaRows queues the deletion of a workflow's compensations and rollbacks (with the
// workflow; the caller holds its lock).
func queueDeleteSagaRows(w *wtx, workflowID string) {
	w.queue(`DELETE FROM compensations WHERE workflow_id = $1`, workflowID)
	w.queue(`DELETE FROM rollbacks WHERE workflow_id = $1`, workflowID)
}

// SagaConfig returns a workflow's validation and compensation config (the "validation" and
// "compensation" members of workflows.config); zero for unknown workflows.
func (s *Store) SagaConfig(ctx context.Context, workflowID string) (store.SagaConfig, error) {
	var cfg *string
	err := s.readRow(ctx, `SELECT config FROM workflows WHERE workflow_id = $1`, []any{workflowID}, &cfg)
	if noRows(err) {
		return store.SagaConfig{}, nil
	}
	if err != nil {
		return store.SagaConfig{}, wrapDB("workflow "+workflowID, err)
	}
	if cfg == nil || *cfg == "" {
		return store.SagaConfig{}, nil
	}
	var c struct {
		Validation   json.RawMessage `json:"validation"`
		Compensation json.RawMessage `json:"compensation"`
	}
	if err := json.Unmarshal([]byte(*cfg), &c); err != nil {
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

// SetSagaConfig stores the members of cfg that are set in the workflow's config, creating the
// workflow if needed; members left nil, and the config's other members (sources), are kept. A
// stored config that is not a JSON object is replaced by one (as SQLite's json_set does).
func (s *Store) SetSagaConfig(ctx context.Context, workflowID string, cfg store.SagaConfig) error {
	if workflowID == "" {
		return invalid("workflowId", "required")
	}
	if err := noNUL("workflowId", workflowID); err != nil {
		return err
	}
	set := map[string]json.RawMessage{}
	if cfg.Validation != nil {
		set["validation"] = cfg.Validation
	}
	if cfg.Compensation != nil {
		set["compensation"] = cfg.Compensation
	}
	for _, name := range []string{"validation", "compensation"} {
		v, ok := set[name]
		if !ok {
			continue
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, v); err != nil {
			return invalid(name, "not valid JSON")
		}
		set[name] = compact.Bytes()
	}
	if len(set) == 0 {
		return nil
	}
	err := s.do(ctx, []int64{wfKey(workflowID)}, func(ctx context.Context, w *wtx) error {
		var stored *string
		if err := w.queryRow(ctx, `SELECT config FROM workflows WHERE workflow_id = $1`, workflowID).Scan(&stored); err != nil && !noRows(err) {
			return err
		}
		members := map[string]json.RawMessage{}
		if stored != nil {
			var m map[string]json.RawMessage
			if json.Unmarshal([]byte(*stored), &m) == nil && m != nil {
				members = m
			}
		}
		for name, v := range set {
			members[name] = v
		}
		out, err := json.Marshal(members)
		if err != nil {
			return err
		}
		_, err = w.exec(ctx, `INSERT INTO workflows (workflow_id, next_seq, created_at, updated_at, config)
			VALUES ($1, 1, $2, $2, $3) ON CONFLICT (workflow_id) DO UPDATE SET config = $3`, workflowID, s.now(), string(out))
		return err
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
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		out = nil
		return scanRows(ctx, tx, `SELECT checkpoint_id, seq, validation_status FROM checkpoints
			WHERE workflow_id = $1 AND namespace = $2 AND validation_status IS NOT NULL AND seq < $3 ORDER BY seq DESC LIMIT $4`,
			func(rows pgx.Rows) error {
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
// workflow's newest checkpoint seq at this moment (both under the workflow's lock).
func (s *Store) RegisterCompensation(ctx context.Context, req store.CompensationRequest) (store.Compensation, error) {
	if err := store.CheckCompensation(req); err != nil {
		return store.Compensation{}, err
	}
	if err := noNUL("workflowId", req.WorkflowID, "namespace", req.Namespace, "checkpointId", req.CheckpointID,
		"stepName", req.StepName, "taskId", req.TaskID, "description", req.Description); err != nil {
		return store.Compensation{}, err
	}
	u, err := uuid.NewV7()
	if err != nil {
		return store.Compensation{}, fmt.Errorf("register compensation: new id: %w", err)
	}
	c := store.Compensation{CompensationID: u.String(), WorkflowID: req.WorkflowID, Namespace: req.Namespace,
		CheckpointID: req.CheckpointID, StepName: req.StepName, TaskID: req.TaskID, Action: req.Action,
		Description: req.Description, Status: store.CompensationPending}
	err = s.do(ctx, []int64{wfKey(req.WorkflowID)}, func(ctx context.Context, w *wtx) error {
		c.CreatedAt = time.UnixMicro(s.now().UnixMicro()).UTC()
		w.queue(`INSERT INTO workflows (workflow_id, next_seq, created_at, updated_at) VALUES ($1, 1, $2, $2)
			ON CONFLICT (workflow_id) DO NOTHING`, req.WorkflowID, c.CreatedAt)
		return w.queryRow(ctx, `INSERT INTO compensations (compensation_id, workflow_id, namespace, seq, after_seq, checkpoint_id,
				step_name, task_id, description, status, created_at, action)
			SELECT $1, $2, $3, (SELECT coalesce(max(seq), 0) + 1 FROM compensations WHERE workflow_id = $2), w.next_seq - 1,
				$4, $5, $6, $7, $8, $9, $10
			FROM workflows w WHERE w.workflow_id = $2
			RETURNING seq, after_seq`,
			c.CompensationID, c.WorkflowID, c.Namespace, nullStr(c.CheckpointID), nullStr(c.StepName), nullStr(c.TaskID),
			c.Description, c.Status, c.CreatedAt, []byte(c.Action)).Scan(&c.Seq, &c.AfterSeq)
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
	err := s.readRow(ctx, `SELECT EXISTS (SELECT 1 FROM compensations WHERE workflow_id = $1 AND namespace = $2
		AND step_name = $3 AND status <> 'done' AND after_seq >= coalesce((SELECT seq FROM checkpoints
			WHERE workflow_id = $1 AND namespace = $2 AND step_name = $3 AND phase = 'completed' ORDER BY seq DESC LIMIT 1), 0))`,
		[]any{workflowID, namespace, step}, &ok)
	if err != nil {
		return false, wrapDB("compensations of "+workflowID, err)
	}
	return ok, nil
}

const compensationCols = `compensation_id, workflow_id, namespace, seq, after_seq, checkpoint_id, step_name, task_id,
	description, status, error, rollback_id, created_at, done_at, action`

func scanCompensation(row pgx.Row) (store.Compensation, error) {
	var c store.Compensation
	var cp, step, task, errMsg, rb *string
	var done *time.Time
	var action []byte
	if err := row.Scan(&c.CompensationID, &c.WorkflowID, &c.Namespace, &c.Seq, &c.AfterSeq, &cp, &step, &task,
		&c.Description, &c.Status, &errMsg, &rb, &c.CreatedAt, &done, &action); err != nil {
		return store.Compensation{}, err
	}
	c.CheckpointID, c.StepName, c.TaskID, c.Error, c.RollbackID = deref(cp), deref(step), deref(task), deref(errMsg), deref(rb)
	c.CreatedAt = c.CreatedAt.UTC()
	if done != nil {
		c.DoneAt = done.UTC()
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
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		out = nil
		return scanRows(ctx, tx, `SELECT `+compensationCols+` FROM compensations
			WHERE workflow_id = $1 AND namespace = $2 AND after_seq >= $3 AND seq <= $4 ORDER BY seq`,
			func(rows pgx.Rows) error {
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
	if s.isClosed() {
		return store.Compensation{}, store.ErrClosed
	}
	var c store.Compensation
	err := s.retry(ctx, func() error {
		var err error
		c, err = scanCompensation(s.pool.QueryRow(ctx, `SELECT `+compensationCols+` FROM compensations WHERE compensation_id = $1`, compensationID))
		return err
	})
	if noRows(err) {
		return store.Compensation{}, fmt.Errorf("compensation %q: %w", compensationID, store.ErrNotFound)
	}
	if err != nil {
		return store.Compensation{}, wrapDB("compensation "+compensationID, err)
	}
	return c, nil
}

const rollbackCols = `rollback_id, workflow_id, namespace, to_checkpoint_id, to_seq, max_seq, created_at, completed_at`

func scanRollback(row pgx.Row) (store.Rollback, error) {
	var r store.Rollback
	var to *string
	var completed *time.Time
	if err := row.Scan(&r.RollbackID, &r.WorkflowID, &r.Namespace, &to, &r.ToSeq, &r.MaxSeq, &r.CreatedAt, &completed); err != nil {
		return store.Rollback{}, err
	}
	r.ToCheckpointID = deref(to)
	r.CreatedAt = r.CreatedAt.UTC()
	if completed != nil {
		r.CompletedAt = completed.UTC()
	}
	return r, nil
}

// readRollback runs one single-statement read of a rollback (q selects rollbackCols).
func (s *Store) readRollback(ctx context.Context, q string, args ...any) (store.Rollback, error) {
	if s.isClosed() {
		return store.Rollback{}, store.ErrClosed
	}
	var r store.Rollback
	err := s.retry(ctx, func() error {
		var err error
		r, err = scanRollback(s.pool.QueryRow(ctx, q, args...))
		return err
	})
	return r, err
}

// Rollback returns one rollback; store.ErrNotFound if it does not exist.
func (s *Store) Rollback(ctx context.Context, rollbackID string) (store.Rollback, error) {
	r, err := s.readRollback(ctx, `SELECT `+rollbackCols+` FROM rollbacks WHERE rollback_id = $1`, rollbackID)
	if noRows(err) {
		return store.Rollback{}, fmt.Errorf("rollback %q: %w", rollbackID, store.ErrNotFound)
	}
	if err != nil {
		return store.Rollback{}, wrapDB("rollback "+rollbackID, err)
	}
	return r, nil
}

// LatestRollback returns the newest rollback of (workflowID, namespace), unfinished or not;
// nil if there was none. An unfinished one is always the newest; otherwise the one begun last
// (begin order: rollbacks of a workflow begin under its lock, whatever the hosts' clocks say).
func (s *Store) LatestRollback(ctx context.Context, workflowID, namespace string) (*store.Rollback, error) {
	r, err := s.readRollback(ctx, `SELECT `+rollbackCols+` FROM rollbacks WHERE workflow_id = $1 AND namespace = $2
		ORDER BY completed_at IS NULL DESC, id DESC LIMIT 1`, workflowID, namespace)
	if noRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrapDB("rollbacks of "+workflowID, err)
	}
	return &r, nil
}

// BeginRollback starts a rollback of (workflowID, namespace) to the checkpoint toCheckpointID
// with seq toSeq ("" and 0: a full rollback), covering the compensations registered so far. If
// one is unfinished already, it returns that one instead with began false (at most one is
// unfinished per workflow and namespace).
func (s *Store) BeginRollback(ctx context.Context, workflowID, namespace, toCheckpointID string, toSeq int64) (r store.Rollback, began bool, err error) {
	if workflowID == "" {
		return store.Rollback{}, false, invalid("workflowId", "required")
	}
	if err := noNUL("workflowId", workflowID, "namespace", namespace, "toCheckpointId", toCheckpointID); err != nil {
		return store.Rollback{}, false, err
	}
	err = s.do(ctx, []int64{wfKey(workflowID)}, func(ctx context.Context, w *wtx) error {
		began = false
		u, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new rollback id: %w", err)
		}
		r = store.Rollback{RollbackID: u.String(), WorkflowID: workflowID, Namespace: namespace, ToCheckpointID: toCheckpointID,
			ToSeq: toSeq, CreatedAt: time.UnixMicro(s.now().UnixMicro()).UTC()}
		err = w.queryRow(ctx, `INSERT INTO rollbacks (rollback_id, workflow_id, namespace, to_checkpoint_id, to_seq, max_seq, created_at)
			SELECT $1, $2, $3, $4, $5, (SELECT coalesce(max(seq), 0) FROM compensations WHERE workflow_id = $2), $6
			ON CONFLICT (workflow_id, namespace) WHERE completed_at IS NULL DO NOTHING
			RETURNING max_seq`, r.RollbackID, workflowID, namespace, nullStr(toCheckpointID), toSeq, r.CreatedAt).Scan(&r.MaxSeq)
		if err == nil {
			began = true
			return nil
		}
		if !noRows(err) {
			return err
		}
		// one is unfinished: it stays the one (the lock keeps it from completing meanwhile)
		r, err = scanRollback(w.queryRow(ctx, `SELECT `+rollbackCols+` FROM rollbacks
			WHERE workflow_id = $1 AND namespace = $2 AND completed_at IS NULL`, workflowID, namespace))
		return err
	})
	if err != nil {
		return store.Rollback{}, false, wrapDB("begin rollback of "+workflowID, err)
	}
	return r, began, nil
}

// lockRollback takes the advisory lock of rollbackID's workflow (in a job that runs alone) and
// then reads the rollback: what it is once no other writer of the workflow can change it.
func lockRollback(ctx context.Context, w *wtx, rollbackID string) (store.Rollback, error) {
	var wf string
	err := w.queryRow(ctx, `SELECT workflow_id FROM rollbacks WHERE rollback_id = $1`, rollbackID).Scan(&wf)
	if err == nil {
		if err = w.lock(ctx, []int64{wfKey(wf)}); err == nil {
			var r store.Rollback
			r, err = scanRollback(w.queryRow(ctx, `SELECT `+rollbackCols+` FROM rollbacks WHERE rollback_id = $1`, rollbackID))
			if err == nil {
				return r, nil
			}
		}
	}
	if noRows(err) { // unknown, or deleted with its workflow while we waited for the lock
		return store.Rollback{}, fmt.Errorf("rollback %q: %w", rollbackID, store.ErrNotFound)
	}
	return store.Rollback{}, err
}

// MarkCompensation records that rollbackID ran compensationID: status done or failed (with
// errMsg). A compensation already done stays done. store.ErrNotFound for an unknown rollback or
// compensation, store.ErrConflict when the rollback is complete.
func (s *Store) MarkCompensation(ctx context.Context, compensationID, rollbackID, status, errMsg string) (store.Compensation, error) {
	if status != store.CompensationDone && status != store.CompensationFailed {
		return store.Compensation{}, invalid("status", "%q is not done or failed", status)
	}
	if err := noNUL("error", errMsg); err != nil {
		return store.Compensation{}, err
	}
	var c store.Compensation
	err := s.do(ctx, nil, func(ctx context.Context, w *wtx) error {
		r, err := lockRollback(ctx, w, rollbackID)
		if err != nil {
			return err
		}
		if !r.CompletedAt.IsZero() {
			return fmt.Errorf("rollback %q is complete: %w", rollbackID, store.ErrConflict)
		}
		w.queue(`UPDATE compensations SET status = $1, error = $2, rollback_id = $3, done_at = $4
			WHERE compensation_id = $5 AND status <> 'done'`, status, nullStr(errMsg), rollbackID, s.now(), compensationID)
		c, err = scanCompensation(w.queryRow(ctx, `SELECT `+compensationCols+` FROM compensations WHERE compensation_id = $1`, compensationID))
		if noRows(err) {
			return fmt.Errorf("compensation %q: %w", compensationID, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
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
	err := s.do(ctx, nil, func(ctx context.Context, w *wtx) error {
		pruned = nil
		var err error
		if r, err = lockRollback(ctx, w, rollbackID); err != nil {
			return err
		}
		if !r.CompletedAt.IsZero() {
			return nil
		}
		r.CompletedAt = time.UnixMicro(s.now().UnixMicro()).UTC()
		w.queue(`UPDATE rollbacks SET completed_at = $1 WHERE rollback_id = $2`, r.CompletedAt, rollbackID)
		if !prune {
			return w.flush(ctx)
		}
		refs, err := collectRefs(w.query(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = $1 AND namespace = $2
			AND seq > $3 ORDER BY seq`, r.WorkflowID, r.Namespace, r.ToSeq))
		if err != nil {
			return err
		}
		if pruned, _, err = deleteRefs(ctx, w, refs); err != nil {
			return err
		}
		w.queue(`DELETE FROM compensations WHERE rollback_id = $1 AND status = 'done'`, rollbackID)
		s.pruned(w, r.WorkflowID, pruned, "rollback")
		return w.flush(ctx)
	})
	if err != nil {
		return store.Rollback{}, nil, wrapDB("complete rollback "+rollbackID, err)
	}
	return r, pruned, nil
}
