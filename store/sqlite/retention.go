package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ckptd/ckptd/store"
)

// parseRetention reads a workflow's stored retention; none (or one that does not decode) is the
// default.
func (s *Store) parseRetention(wf string, js sql.NullString) store.Retention {
	if !js.Valid {
		return s.defRet
	}
	r, err := store.DecodeRetention([]byte(js.String))
	if err != nil {
		s.log.Warn("ckptd store: bad stored retention, using default", "workflowId", wf, "err", err)
		return s.defRet
	}
	return r
}

// Configure sets workflowID's retention (creating the workflow if needed) and returns it; with a
// nil r it only returns the effective retention (the default for unknown workflows).
func (s *Store) Configure(ctx context.Context, workflowID string, r *store.Retention) (store.Retention, error) {
	if workflowID == "" {
		return store.Retention{}, invalid("workflowId", "required")
	}
	if r == nil {
		var js sql.NullString
		err := s.readAuto(ctx, func(tx *rtx) error {
			return tx.cachedRow(ctx, `SELECT retention FROM workflows WHERE workflow_id = ?`, workflowID).Scan(&js)
		})
		if errors.Is(err, sql.ErrNoRows) {
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
	js, err := json.Marshal(r)
	if err != nil {
		return store.Retention{}, err
	}
	err = s.do(ctx, func(ctx context.Context, w *wtx) error {
		now := s.now().UnixMicro()
		_, err := w.exec(ctx, `INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at, retention)
			VALUES (?1, 1, ?2, ?2, ?3) ON CONFLICT(workflow_id) DO UPDATE SET retention = ?3`, workflowID, now, string(js))
		return err
	})
	if err != nil {
		return store.Retention{}, wrapDB("configure "+workflowID, err)
	}
	return *r, nil
}

// IsCompleted reports whether workflowID was marked completed (and not saved to since). Unknown
// workflows are not completed.
func (s *Store) IsCompleted(ctx context.Context, workflowID string) (bool, error) {
	var c sql.NullInt64
	err := s.readAuto(ctx, func(tx *rtx) error {
		return tx.cachedRow(ctx, `SELECT completed_at FROM workflows WHERE workflow_id = ?`, workflowID).Scan(&c)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, wrapDB("workflow "+workflowID, err)
	}
	return c.Valid, nil
}

type ckRef struct {
	rowid int64
	id    string
}

func (w *wtx) refs(ctx context.Context, q string, args ...any) ([]ckRef, error) {
	rows, err := w.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ckRef
	for rows.Next() {
		var r ckRef
		if err := rows.Scan(&r.rowid, &r.id); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *Store) deleteRefs(ctx context.Context, w *wtx, refs []ckRef) ([]string, error) {
	ids := make([]string, 0, len(refs))
	for _, r := range refs {
		ok, err := s.deleteCheckpoint(ctx, w, r.rowid, r.id)
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, r.id)
		}
	}
	return ids, nil
}

// Delete removes one checkpoint (with its pending writes); 0 if it does not exist.
func (s *Store) Delete(ctx context.Context, checkpointID string) (int, error) {
	n := 0
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		n = 0
		refs, err := w.refs(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE checkpoint_id = ?`, checkpointID)
		if err != nil {
			return err
		}
		ids, err := s.deleteRefs(ctx, w, refs)
		if err != nil {
			return err
		}
		n = len(ids)
		if n > 0 {
			w.vacuumAfter()
		}
		return nil
	})
	if err != nil {
		return 0, wrapDB(fmt.Sprintf("delete checkpoint %q", checkpointID), err)
	}
	return n, nil
}
