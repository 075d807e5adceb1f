package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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

// DeleteWorkflow removes every checkpoint of workflowID and its configuration; 0 if unknown.
func (s *Store) DeleteWorkflow(ctx context.Context, workflowID string) (int, error) {
	n := 0
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		ids, err := s.deleteWorkflow(ctx, w, workflowID, true)
		n = len(ids)
		return err
	})
	if err != nil {
		return 0, wrapDB(fmt.Sprintf("delete workflow %q", workflowID), err)
	}
	return n, nil
}

func (s *Store) deleteWorkflow(ctx context.Context, w *wtx, workflowID string, dropRow bool) ([]string, error) {
	refs, err := w.refs(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = ? ORDER BY seq`, workflowID)
	if err != nil {
		return nil, err
	}
	ids, err := s.deleteRefs(ctx, w, refs)
	if err != nil {
		return nil, err
	}
	// writes whose checkpoint is already gone (defensive: PutWrites requires the checkpoint)
	if err := w.releaseRows(w.query(ctx, `DELETE FROM writes WHERE workflow_id = ? RETURNING CASE WHEN encoding = 4 THEN value END`,
		workflowID)); err != nil {
		return nil, err
	}
	if err := deleteSagaRows(ctx, w, workflowID); err != nil { // store/sqlite/saga.go
		return nil, err
	}
	if dropRow {
		res, err := w.exec(ctx, `DELETE FROM workflows WHERE workflow_id = ?`, workflowID)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			w.vacuumAfter()
		}
	}
	if len(ids) > 0 {
		w.vacuumAfter()
	}
	return ids, nil
}

// Complete marks workflowID completed (not resumable). Without preserve its checkpoints are deleted.
// A later save makes it resumable again.
func (s *Store) Complete(ctx context.Context, workflowID string, preserve bool) (int, error) {
	return s.CompleteFenced(ctx, workflowID, preserve, 0)
}

// CompleteFenced is Complete under fencing token (0: none), checked in its transaction.
func (s *Store) CompleteFenced(ctx context.Context, workflowID string, preserve bool, token int64) (int, error) {
	n := 0
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		n = 0
		if err := s.fence(ctx, w, workflowID, token); err != nil {
			return err
		}
		res, err := w.exec(ctx, `UPDATE workflows SET completed_at = ? WHERE workflow_id = ?`, s.now().UnixMicro(), workflowID)
		if err != nil {
			return err
		}
		if c, _ := res.RowsAffected(); c == 0 {
			return fmt.Errorf("workflow %q: %w", workflowID, store.ErrNotFound)
		}
		if preserve {
			return nil
		}
		ids, err := s.deleteWorkflow(ctx, w, workflowID, false)
		if err != nil {
			return err
		}
		n = len(ids)
		w.after(func() { s.notifyPruned(workflowID, ids, "complete") })
		return nil
	})
	if err != nil {
		return 0, wrapDB(fmt.Sprintf("complete workflow %q", workflowID), err)
	}
	return n, nil
}

// Prune deletes old checkpoints of one workflow (or all) per (workflow, namespace) using
// SelectExpired with KeepLast and OlderThanSeconds as keepLast and maxAge (both zero: each
// workflow's own retention); keepFirst comes from the workflow's retention. DryRun reports what
// would go without deleting. FreedBytes counts the database pages the deletion frees.
func (s *Store) Prune(ctx context.Context, req store.PruneRequest) (store.PruneResult, error) {
	if err := req.Validate(); err != nil {
		return store.PruneResult{}, err
	}
	var res store.PruneResult
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		res = store.PruneResult{IDs: map[string][]string{}}
		q := `SELECT c.id, c.workflow_id, c.namespace, c.seq, c.checkpoint_id, c.created_at, w.retention
			FROM checkpoints c LEFT JOIN workflows w ON w.workflow_id = c.workflow_id`
		var args []any
		if req.WorkflowID != "" {
			q += ` WHERE c.workflow_id = ?`
			args = append(args, req.WorkflowID)
		}
		q += ` ORDER BY c.workflow_id, c.namespace, c.seq`
		rows, err := w.query(ctx, q, args...)
		if err != nil {
			return err
		}
		type group struct {
			wf    string
			ns    string
			ret   store.Retention
			items []store.RetentionItem
		}
		var groups []*group
		rowids := map[string]int64{}
		var cur *group
		var curNS string
		for rows.Next() {
			var rowid, seq, created int64
			var wf, ns, id string
			var js sql.NullString
			if err := rows.Scan(&rowid, &wf, &ns, &seq, &id, &created, &js); err != nil {
				rows.Close()
				return err
			}
			if cur == nil || cur.wf != wf || curNS != ns {
				cur = &group{wf: wf, ns: ns, ret: req.Retention(s.parseRetention(wf, js))}
				curNS = ns
				groups = append(groups, cur)
			}
			cur.items = append(cur.items, store.RetentionItem{Seq: seq, ID: id, CreatedAt: time.UnixMicro(created)})
			rowids[id] = rowid
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var freeBefore int64
		if err := w.queryRow(ctx, "PRAGMA freelist_count").Scan(&freeBefore); err != nil {
			return err
		}
		if req.DryRun {
			if _, err := w.exec(ctx, "SAVEPOINT dryrun"); err != nil {
				return err
			}
		}
		now := s.now()
		for _, g := range groups {
			expired, err := s.withoutRetentionHolds(ctx, w, g.wf, g.ns, store.SelectExpired(g.items, g.ret, now)) // store/sqlite/saga.go
			if err != nil {
				return err
			}
			for _, id := range expired {
				ok, err := s.deleteCheckpoint(ctx, w, rowids[id], id)
				if err != nil {
					return err
				}
				if ok {
					res.Deleted++
					res.IDs[g.wf] = append(res.IDs[g.wf], id)
				}
			}
		}
		if err := s.flushReleases(ctx, w); err != nil { // the chunks the deletions free count too
			return err
		}
		var freeAfter, pageSize int64
		if err := w.queryRow(ctx, "PRAGMA freelist_count").Scan(&freeAfter); err != nil {
			return err
		}
		if err := w.queryRow(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
			return err
		}
		res.FreedBytes = (freeAfter - freeBefore) * pageSize
		if req.DryRun {
			if _, err := w.exec(ctx, "ROLLBACK TO dryrun"); err != nil {
				return err
			}
			_, err := w.exec(ctx, "RELEASE dryrun")
			return err
		}
		if res.Deleted > 0 {
			w.vacuumAfter()
			ids := res.IDs
			w.after(func() {
				for wf, l := range ids {
					s.notifyPruned(wf, l, "prune")
				}
			})
		}
		return nil
	})
	if err != nil {
		return store.PruneResult{}, wrapDB("prune", err)
	}
	return res, nil
}

// ExpireIdle deletes every workflow whose effective idleTtlSeconds has passed since its last save.
// It returns workflowId -> deleted checkpoint ids.
func (s *Store) ExpireIdle(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	if s.defRet.IdleTTLSeconds <= 0 {
		// only workflows with their own retention can expire: skip the writer when none has a TTL
		var n int
		err := s.readAuto(ctx, func(tx *rtx) error {
			return tx.QueryRowContext(ctx, `SELECT count(*) FROM workflows WHERE retention IS NOT NULL
				AND coalesce(json_extract(retention, '$.idleTtlSeconds'), 0) > 0`).Scan(&n)
		})
		if err != nil {
			return nil, wrapDB("expire idle workflows", err)
		}
		if n == 0 {
			return out, nil
		}
	}
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		clear(out)
		rows, err := w.query(ctx, `SELECT workflow_id, updated_at, retention FROM workflows`)
		if err != nil {
			return err
		}
		now := s.now()
		var expired []string
		for rows.Next() {
			var wf string
			var updated int64
			var js sql.NullString
			if err := rows.Scan(&wf, &updated, &js); err != nil {
				rows.Close()
				return err
			}
			if s.parseRetention(wf, js).Expired(time.UnixMicro(updated), now) {
				expired = append(expired, wf)
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// A workflow whose compensations are not all done, or with an unfinished rollback, is
		// kept: expiry never deletes an undo that is still needed (store/sqlite/saga.go).
		if expired, err = withoutSagaHolds(ctx, w, expired); err != nil {
			return err
		}
		for _, wf := range expired {
			ids, err := s.deleteWorkflow(ctx, w, wf, true)
			if err != nil {
				return err
			}
			out[wf] = ids
		}
		if len(expired) > 0 {
			w.after(func() {
				for wf, ids := range out {
					s.notifyPruned(wf, ids, "idle")
				}
			})
		}
		return nil
	})
	if err != nil {
		return nil, wrapDB("expire idle workflows", err)
	}
	return out, nil
}
