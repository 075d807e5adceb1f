package store

// Read-only helpers for the ckptd command line (ls, show, stats, rm). Additive: nothing here
// changes how checkpoints are saved or loaded.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Workflow summarises one workflow like Workflows does; ErrNotFound if it is unknown.
func (s *Store) Workflow(ctx context.Context, workflowID string) (WorkflowInfo, error) {
	var info WorkflowInfo
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		info = WorkflowInfo{WorkflowID: workflowID}
		var updated int64
		var completed, latest sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT w.updated_at, w.completed_at,
			(SELECT count(*) FROM checkpoints c WHERE c.workflow_id = w.workflow_id),
			(SELECT coalesce(sum(c.stored_size), 0) FROM checkpoints c WHERE c.workflow_id = w.workflow_id),
			(SELECT c.id FROM checkpoints c WHERE c.workflow_id = w.workflow_id ORDER BY c.seq DESC LIMIT 1)
			FROM workflows w WHERE w.workflow_id = ?`, workflowID).
			Scan(&updated, &completed, &info.Count, &info.StoredBytes, &latest)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("workflow %q: %w", workflowID, ErrNotFound)
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
		if errors.Is(err, ErrNotFound) {
			return WorkflowInfo{}, err
		}
		return WorkflowInfo{}, wrapDB(fmt.Sprintf("workflow %q", workflowID), err)
	}
	return info, nil
}

// Inspection is a checkpoint as a debugging tool sees it, intact or not.
type Inspection struct {
	// Checkpoint holds every stored field. State is set only when the checkpoint verifies.
	Checkpoint
	// Corrupt is why verification failed; empty when the checkpoint is intact.
	Corrupt string
	// Encoding is how the state is stored: "raw", "raw (compression pending)", "zstd",
	// "chunked zstd", or "" without state
	// (or when its blob is missing).
	Encoding string
	// SharedWith counts the other checkpoints that refer to the same stored state bytes.
	SharedWith int
}

// Inspect reads checkpointID like Load but reports a failed verification in Corrupt instead of
// failing, so the checkpoint's metadata can still be shown. ErrNotFound if it does not exist.
func (s *Store) Inspect(ctx context.Context, checkpointID string) (Inspection, error) {
	var in Inspection
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		in = Inspection{}
		cp, err := s.loadOne(ctx, tx, "c.checkpoint_id = ?", checkpointID)
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			in.Corrupt = ce.Reason
			if cp, err = readUnverified(ctx, tx, checkpointID); err != nil {
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
		switch {
		case !enc.Valid:
		case enc.Int64 == encZstd:
			in.Encoding = "zstd"
		case enc.Int64 == encZstdChunked:
			in.Encoding = "chunked zstd"
		case enc.Int64 == encRaw:
			in.Encoding = "raw"
		case enc.Int64 == encRawPending:
			in.Encoding = "raw (compression pending)"
		default:
			in.Encoding = fmt.Sprintf("unknown(%d)", enc.Int64)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Inspection{}, fmt.Errorf("checkpoint %q: %w", checkpointID, ErrNotFound)
		}
		return Inspection{}, wrapDB(fmt.Sprintf("inspect checkpoint %q", checkpointID), err)
	}
	return in, nil
}

// readUnverified reads a checkpoint's summary, task lists and pending writes without its state.
func readUnverified(ctx context.Context, tx *sql.Tx, checkpointID string) (Checkpoint, error) {
	var x summaryScan
	var completed, pending []byte
	err := tx.QueryRowContext(ctx, `SELECT `+summaryCols+`, c.completed_tasks, c.pending_tasks
		FROM checkpoints c WHERE c.checkpoint_id = ?`, checkpointID).Scan(append(x.dest(), &completed, &pending)...)
	if errors.Is(err, sql.ErrNoRows) {
		return Checkpoint{}, ErrNotFound
	}
	if err != nil {
		return Checkpoint{}, err
	}
	sm, ferr := x.finish()
	if ferr != nil {
		sm.Error = &StepError{Message: "(corrupt: " + ferr.Error() + ")"}
	}
	cp := Checkpoint{Summary: sm}
	if len(completed) > 0 {
		cp.CompletedTasks = json.RawMessage(completed)
	}
	if len(pending) > 0 {
		cp.PendingTasks = json.RawMessage(pending)
	}
	rows, err := tx.QueryContext(ctx, `SELECT task_id, task_path, idx, channel, type, is_bytes, value FROM writes
		WHERE checkpoint_id = ? ORDER BY task_id, idx`, checkpointID)
	if err != nil {
		return Checkpoint{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var w Write
		var typ sql.NullString
		if err := rows.Scan(&w.TaskID, &w.TaskPath, &w.Idx, &w.Channel, &typ, &w.IsBytes, &w.Value); err != nil {
			return Checkpoint{}, err
		}
		w.Type = typ.String
		cp.PendingWrites = append(cp.PendingWrites, w)
	}
	return cp, rows.Err()
}

// Usage is what DBStats does not say about space.
type Usage struct {
	StateBytes        int64 // sum of every checkpoint's state size as sent (before dedup and compression)
	CheckpointStored  int64 // sum of every checkpoint's stored size (a shared state counts once per checkpoint)
	PageSize          int64
	PageCount         int64
	FreePages         int64 // pages on the free list: reclaimable by incremental_vacuum
	ResumableWorkflow int
	CompletedWorkflow int
}

// Usage adds up checkpoint sizes and reads the page counters.
func (s *Store) Usage(ctx context.Context) (Usage, error) {
	var u Usage
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		u = Usage{}
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
		for _, p := range []struct {
			q   string
			dst *int64
		}{{"PRAGMA page_size", &u.PageSize}, {"PRAGMA page_count", &u.PageCount}, {"PRAGMA freelist_count", &u.FreePages}} {
			if err := tx.QueryRowContext(ctx, p.q).Scan(p.dst); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Usage{}, wrapDB("usage", err)
	}
	return u, nil
}

// Summaries returns the stored summaries (not verified) of those of ids that exist, by id.
func (s *Store) Summaries(ctx context.Context, ids []string) (map[string]Summary, error) {
	out := map[string]Summary{}
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		clear(out)
		for _, id := range ids {
			var x summaryScan
			err := tx.QueryRowContext(ctx, `SELECT `+summaryCols+` FROM checkpoints c WHERE c.checkpoint_id = ?`, id).Scan(x.dest()...)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			sm, ferr := x.finish()
			if ferr != nil {
				sm.Error = &StepError{Message: "(corrupt: " + ferr.Error() + ")"}
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
