package sqlite

// Read-only helpers for the ckptd command line (ls, show, stats, rm). Additive: nothing here
// changes how checkpoints are saved or loaded.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ckptd/ckptd/store"
)

// Workflow summarises one workflow like Workflows does; ErrNotFound if it is unknown.
func (s *Store) Workflow(ctx context.Context, workflowID string) (store.WorkflowInfo, error) {
	var info store.WorkflowInfo
	err := s.readTx(ctx, func(tx *rtx) error {
		info = store.WorkflowInfo{WorkflowID: workflowID}
		var updated int64
		var completed, latest sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT w.updated_at, w.completed_at,
			(SELECT count(*) FROM checkpoints c WHERE c.workflow_id = w.workflow_id),
			(SELECT coalesce(sum(c.stored_size), 0) FROM checkpoints c WHERE c.workflow_id = w.workflow_id),
			(SELECT c.id FROM checkpoints c WHERE c.workflow_id = w.workflow_id ORDER BY c.seq DESC LIMIT 1)
			FROM workflows w WHERE w.workflow_id = ?`, workflowID).
			Scan(&updated, &completed, &info.Count, &info.StoredBytes, &latest)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("workflow %q: %w", workflowID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		info.UpdatedAt = time.UnixMicro(updated).UTC()
		info.Completed = completed.Valid
		info.Resumable = info.Count > 0 && !completed.Valid
		if latest.Valid {
			sm, err := summaryByRowid(ctx, tx, latest.Int64)
			if err != nil {
				return err
			}
			info.Latest = &sm
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.WorkflowInfo{}, err
		}
		return store.WorkflowInfo{}, wrapDB(fmt.Sprintf("workflow %q", workflowID), err)
	}
	return info, nil
}

// Inspect reads checkpointID like Load but reports a failed verification in Corrupt instead of
// failing, so the checkpoint's metadata can still be shown. ErrNotFound if it does not exist.
func (s *Store) Inspect(ctx context.Context, checkpointID string) (store.Inspection, error) {
	var in store.Inspection
	err := s.readTx(ctx, func(tx *rtx) error {
		in = store.Inspection{}
		cp, err := s.loadOne(ctx, tx, "c.checkpoint_id = ?", checkpointID)
		var ce *store.CorruptError
		switch {
		case errors.As(err, &ce):
			in.Corrupt = ce.Reason
			if cp, err = s.readUnverified(ctx, tx, checkpointID); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		in.Checkpoint = cp
		if cp.SHA256 == "" {
			return nil
		}
		var enc sql.NullInt64
		err = tx.QueryRowContext(ctx, `SELECT (SELECT s.encoding FROM states s WHERE s.hash = c.state_hash),
			(SELECT count(*) - 1 FROM checkpoints o WHERE o.state_hash = c.state_hash)
			FROM checkpoints c WHERE c.checkpoint_id = ?`, checkpointID).Scan(&enc, &in.SharedWith)
		if err != nil {
			return err
		}
		if enc.Valid {
			in.Encoding = store.EncodingName(int(enc.Int64))
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.Inspection{}, fmt.Errorf("checkpoint %q: %w", checkpointID, store.ErrNotFound)
		}
		return store.Inspection{}, wrapDB(fmt.Sprintf("inspect checkpoint %q", checkpointID), err)
	}
	return in, nil
}

// readUnverified reads a checkpoint's summary, task lists and pending writes without its state.
func (s *Store) readUnverified(ctx context.Context, tx *rtx, checkpointID string) (store.Checkpoint, error) {
	var x summaryScan
	var completed, pending []byte
	err := tx.QueryRowContext(ctx, `SELECT `+summaryCols+`, c.completed_tasks, c.pending_tasks
		FROM checkpoints c WHERE c.checkpoint_id = ?`, checkpointID).Scan(append(x.dest(), &completed, &pending)...)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Checkpoint{}, store.ErrNotFound
	}
	if err != nil {
		return store.Checkpoint{}, err
	}
	sm, ferr := x.finish()
	if ferr != nil {
		sm.Error = &store.StepError{Message: "(corrupt: " + ferr.Error() + ")"}
	}
	cp := store.Checkpoint{Summary: sm}
	if len(completed) > 0 {
		cp.CompletedTasks = json.RawMessage(completed)
	}
	if len(pending) > 0 {
		cp.PendingTasks = json.RawMessage(pending)
	}
	cp.PendingWrites, err = s.readWritesWith(ctx, tx.cached, checkpointID, false)
	return cp, err
}

// Usage adds up checkpoint sizes and counts workflows by state.
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	var u store.Usage
	err := s.readTx(ctx, func(tx *rtx) error {
		u = store.Usage{}
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(size), 0), coalesce(sum(stored_size), 0) FROM checkpoints`).
			Scan(&u.StateBytes, &u.CheckpointStored); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM workflows w WHERE w.completed_at IS NULL
				AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.workflow_id = w.workflow_id)),
			(SELECT count(*) FROM workflows WHERE completed_at IS NOT NULL)`).
			Scan(&u.ResumableWorkflow, &u.CompletedWorkflow); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return store.Usage{}, wrapDB("usage", err)
	}
	return u, nil
}

// Summaries returns the stored summaries (not verified) of those of ids that exist, by id.
func (s *Store) Summaries(ctx context.Context, ids []string) (map[string]store.Summary, error) {
	out := map[string]store.Summary{}
	err := s.readTx(ctx, func(tx *rtx) error {
		clear(out)
		for _, id := range ids {
			var x summaryScan
			err := tx.cachedRow(ctx, `SELECT `+summaryCols+` FROM checkpoints c WHERE c.checkpoint_id = ?`, id).Scan(x.dest()...)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			sm, ferr := x.finish()
			if ferr != nil {
				sm.Error = &store.StepError{Message: "(corrupt: " + ferr.Error() + ")"}
			}
			out[id] = sm
		}
		return nil
	})
	if err != nil {
		return nil, wrapDB("read summaries", err)
	}
	return out, nil
}
