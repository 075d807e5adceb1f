package sqlite

// Read-only helpers for the ckptd command line (ls, show, stats, rm). Additive: nothing here
// changes how checkpoints are saved or loaded.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ckptd/ckptd/store"
)

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
		_, t, err := readCounters(ctx, tx) // kept counters (figures.go)
		if err != nil {
			return err
		}
		u.StateBytes, u.CheckpointStored = t.stateBytes, t.ckptStored
		// Counted through the partial indexes (schema step 9): the resumable workflows, and the
		// completed ones among the rest.
		return tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM workflows INDEXED BY workflows_claimable
				WHERE completed_at IS NULL AND ckpt_count > 0),
			(SELECT count(*) FROM workflows INDEXED BY workflows_rest
				WHERE (completed_at IS NOT NULL OR ckpt_count = 0) AND completed_at IS NOT NULL)`).
			Scan(&u.ResumableWorkflow, &u.CompletedWorkflow)
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
