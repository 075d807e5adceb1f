package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ckptd/ckptd/store"
)

// Configure sets workflowID's retention (creating the workflow if needed) and returns it; with a
// nil r it only returns the effective retention (the default for unknown workflows).
func (s *Store) Configure(ctx context.Context, workflowID string, r *store.Retention) (store.Retention, error) {
	if workflowID == "" {
		return store.Retention{}, invalid("workflowId", "required")
	}
	if r == nil {
		var js []byte
		err := s.readRow(ctx, `SELECT retention FROM workflows WHERE workflow_id = $1`, []any{workflowID}, &js)
		if noRows(err) {
			return s.defRet, nil
		}
		if err != nil {
			return store.Retention{}, wrapDB("configure "+workflowID, err)
		}
		return s.parseRetention(workflowID, js), nil
	}
	if err := r.Validate(); err != nil {
		return store.Retention{}, err
	}
	if err := noNUL("workflowId", workflowID); err != nil {
		return store.Retention{}, err
	}
	js, err := json.Marshal(r)
	if err != nil {
		return store.Retention{}, err
	}
	err = s.do(ctx, []int64{wfKey(workflowID)}, func(ctx context.Context, w *wtx) error {
		_, err := w.exec(ctx, `INSERT INTO workflows (workflow_id, next_seq, created_at, updated_at, retention)
			VALUES ($1, 1, $2, $2, $3) ON CONFLICT (workflow_id) DO UPDATE SET retention = $3`, workflowID, s.now(), string(js))
		return err
	})
	if err != nil {
		return store.Retention{}, wrapDB("configure "+workflowID, err)
	}
	return *r, nil
}

// IsCompleted reports whether workflowID was marked completed (and not saved to since).
func (s *Store) IsCompleted(ctx context.Context, workflowID string) (bool, error) {
	var c *time.Time
	err := s.readRow(ctx, `SELECT completed_at FROM workflows WHERE workflow_id = $1`, []any{workflowID}, &c)
	if noRows(err) {
		return false, nil
	}
	if err != nil {
		return false, wrapDB("workflow "+workflowID, err)
	}
	return c != nil, nil
}

// deleteRefs deletes checkpoints and returns the ids of those it deleted, in refs' order.
func deleteRefs(ctx context.Context, w *wtx, refs []ckRef) ([]string, int64, error) {
	gone, freed, err := deleteCheckpoints(ctx, w, refs)
	if err != nil {
		return nil, 0, err
	}
	ids := make([]string, 0, len(gone))
	for _, r := range refs {
		if gone[r.rowid] {
			ids = append(ids, r.id)
		}
	}
	return ids, freed, nil
}

// Delete removes one checkpoint (with its pending writes); 0 if it does not exist.
func (s *Store) Delete(ctx context.Context, checkpointID string) (int, error) {
	n := 0
	err := s.do(ctx, nil, func(ctx context.Context, w *wtx) error {
		n = 0
		var wf string
		var rowid int64
		err := w.queryRow(ctx, `SELECT workflow_id, id FROM checkpoints WHERE checkpoint_id = $1`, checkpointID).Scan(&wf, &rowid)
		if noRows(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := w.lock(ctx, []int64{wfKey(wf)}); err != nil {
			return err
		}
		ids, _, err := deleteRefs(ctx, w, []ckRef{{rowid, checkpointID}})
		n = len(ids)
		return err
	})
	if err != nil {
		return 0, wrapDB(fmt.Sprintf("delete checkpoint %q", checkpointID), err)
	}
	return n, nil
}
func workflowIDs(ctx context.Context, w *wtx, q string, args ...any) ([]string, error) {
	rows, err := w.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}
