package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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

// DeleteWorkflow removes every checkpoint of workflowID and its configuration; 0 if unknown.
func (s *Store) DeleteWorkflow(ctx context.Context, workflowID string) (int, error) {
	n := 0
	err := s.do(ctx, []int64{wfKey(workflowID)}, func(ctx context.Context, w *wtx) error {
		ids, err := s.deleteWorkflow(ctx, w, workflowID, true)
		n = len(ids)
		return err
	})
	if err != nil {
		return 0, wrapDB(fmt.Sprintf("delete workflow %q", workflowID), err)
	}
	return n, nil
}

// deleteWorkflow deletes a workflow's checkpoints (and with dropRow its row); the caller holds
// its lock.
func (s *Store) deleteWorkflow(ctx context.Context, w *wtx, workflowID string, dropRow bool) ([]string, error) {
	refs, err := collectRefs(w.query(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = $1 ORDER BY seq`, workflowID))
	if err != nil {
		return nil, err
	}
	ids, _, err := deleteRefs(ctx, w, refs)
	if err != nil {
		return nil, err
	}
	// writes whose checkpoint is already gone (defensive: PutWrites requires the checkpoint)
	var indexes [][]byte
	if err := collectIndexes(w.query(ctx, `DELETE FROM writes WHERE workflow_id = $1
		RETURNING CASE WHEN encoding = 4 THEN value END`, workflowID))(&indexes); err != nil {
		return nil, err
	}
	if _, err := s.releaseIndexes(ctx, w, indexes); err != nil {
		return nil, err
	}
	queueDeleteSagaRows(w, workflowID) // saga.go
	if dropRow {
		w.queue(`DELETE FROM workflows WHERE workflow_id = $1`, workflowID)
	}
	return ids, w.flush(ctx)
}

// Complete marks workflowID completed (not resumable). Without preserve its checkpoints are
// deleted. A later save makes it resumable again.
func (s *Store) Complete(ctx context.Context, workflowID string, preserve bool) (int, error) {
	return s.complete(ctx, workflowID, preserve, 0)
}

// complete is Complete under fencing token (0: none), checked in its transaction
// (CompleteFenced).
func (s *Store) complete(ctx context.Context, workflowID string, preserve bool, token int64) (int, error) {
	n := 0
	err := s.do(ctx, []int64{wfKey(workflowID)}, func(ctx context.Context, w *wtx) error {
		n = 0
		if err := s.fence(ctx, w, workflowID, token); err != nil {
			return err
		}
		ct, err := w.exec(ctx, `UPDATE workflows SET completed_at = $1 WHERE workflow_id = $2`, s.now(), workflowID)
		if err != nil {
			return err
		}
		if ct.RowsAffected() == 0 {
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
		s.pruned(w, workflowID, ids, "complete")
		return nil
	})
	if err != nil {
		return 0, wrapDB(fmt.Sprintf("complete workflow %q", workflowID), err)
	}
	return n, nil
}

// Prune deletes old checkpoints of one workflow (or all) per (workflow, namespace) with
// store.SelectExpired (PruneRequest.Retention). DryRun reports what would go without deleting.
// FreedBytes counts the stored bytes of the states the deletion removes (PostgreSQL reuses the
// space once autovacuum has run).
func (s *Store) Prune(ctx context.Context, req store.PruneRequest) (store.PruneResult, error) {
	if err := req.Validate(); err != nil {
		return store.PruneResult{}, err
	}
	var locks []int64
	if req.WorkflowID != "" {
		locks = []int64{wfKey(req.WorkflowID)}
	}
	var res store.PruneResult
	err := s.do(ctx, locks, func(ctx context.Context, w *wtx) error {
		res = store.PruneResult{IDs: map[string][]string{}}
		wfs := []string{req.WorkflowID}
		if req.WorkflowID == "" {
			var err error
			if wfs, err = workflowIDs(ctx, w, `SELECT DISTINCT workflow_id FROM checkpoints`); err != nil {
				return err
			}
			if err := w.lock(ctx, wfKeys(wfs)); err != nil {
				return err
			}
		}
		rows, err := w.query(ctx, `SELECT c.id, c.workflow_id, c.namespace, c.seq, c.checkpoint_id, c.created_at, w.retention
			FROM checkpoints c LEFT JOIN workflows w ON w.workflow_id = c.workflow_id
			WHERE c.workflow_id = ANY($1) ORDER BY c.workflow_id, c.namespace, c.seq`, wfs)
		if err != nil {
			return err
		}
		type group struct {
			wf, ns string
			ret    store.Retention
			items  []store.RetentionItem
		}
		var groups []*group
		rowids := map[string]int64{}
		var cur *group
		var curNS string
		for rows.Next() {
			var rowid, seq int64
			var wf, ns, id string
			var created time.Time
			var js []byte
			if err := rows.Scan(&rowid, &wf, &ns, &seq, &id, &created, &js); err != nil {
				rows.Close()
				return err
			}
			if cur == nil || cur.wf != wf || curNS != ns {
				cur = &group{wf: wf, ns: ns, ret: req.Retention(s.parseRetention(wf, js))}
				curNS = ns
				groups = append(groups, cur)
			}
			cur.items = append(cur.items, store.RetentionItem{Seq: seq, ID: id, CreatedAt: created})
			rowids[id] = rowid
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if req.DryRun {
			w.queue(`SAVEPOINT dryrun`)
		}
		now := s.now()
		for _, g := range groups {
			expired, err := withoutRetentionHolds(ctx, w, g.wf, g.ns, store.SelectExpired(g.items, g.ret, now)) // saga.go
			if err != nil {
				return err
			}
			var refs []ckRef
			for _, id := range expired {
				refs = append(refs, ckRef{rowids[id], id})
			}
			ids, freed, err := deleteRefs(ctx, w, refs)
			if err != nil {
				return err
			}
			res.FreedBytes += freed
			res.Deleted += len(ids)
			if len(ids) > 0 {
				res.IDs[g.wf] = append(res.IDs[g.wf], ids...)
			}
		}
		if req.DryRun {
			w.queue(`ROLLBACK TO SAVEPOINT dryrun`)
			w.queue(`RELEASE SAVEPOINT dryrun`)
			return w.flush(ctx)
		}
		for wf, ids := range res.IDs {
			s.pruned(w, wf, ids, "prune")
		}
		return nil
	})
	if err != nil {
		return store.PruneResult{}, wrapDB("prune", err)
	}
	return res, nil
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

func wfKeys(wfs []string) []int64 {
	keys := make([]int64, len(wfs))
	for i, wf := range wfs {
		keys[i] = wfKey(wf)
	}
	slices.Sort(keys)
	return keys
}

// ExpireIdle deletes every workflow whose effective idleTtlSeconds has passed since its last save.
// It returns workflowId -> deleted checkpoint ids.
func (s *Store) ExpireIdle(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	if s.defRet.IdleTTLSeconds <= 0 {
		// only workflows with their own retention can expire: skip the writer when none has a TTL
		var n int
		err := s.readRow(ctx, `SELECT count(*) FROM workflows WHERE retention IS NOT NULL
			AND coalesce((retention->>'idleTtlSeconds')::bigint, 0) > 0`, nil, &n)
		if err != nil {
			return nil, wrapDB("expire idle workflows", err)
		}
		if n == 0 {
			return out, nil
		}
	}
	err := s.do(ctx, nil, func(ctx context.Context, w *wtx) error {
		clear(out)
		expired, err := s.idleWorkflows(ctx, w)
		if err != nil || len(expired) == 0 {
			return err
		}
		if err := w.lock(ctx, wfKeys(expired)); err != nil {
			return err
		}
		// again under the locks: a save may have come in meanwhile
		if expired, err = s.idleWorkflows(ctx, w); err != nil {
			return err
		}
		for _, wf := range expired {
			ids, err := s.deleteWorkflow(ctx, w, wf, true)
			if err != nil {
				return err
			}
			out[wf] = ids
			s.pruned(w, wf, ids, "idle")
		}
		return nil
	})
	if err != nil {
		return nil, wrapDB("expire idle workflows", err)
	}
	return out, nil
}

// idleWorkflows lists the workflows whose idle TTL has passed, but for those holding a
// compensation still needed: one not done, or an unfinished rollback (saga.go).
func (s *Store) idleWorkflows(ctx context.Context, w *wtx) ([]string, error) {
	rows, err := w.query(ctx, `SELECT workflow_id, updated_at, retention FROM workflows w WHERE NOT `+sagaHeld)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	now := s.now()
	var expired []string
	for rows.Next() {
		var wf string
		var updated time.Time
		var js []byte
		if err := rows.Scan(&wf, &updated, &js); err != nil {
			return nil, err
		}
		if s.parseRetention(wf, js).Expired(updated, now) {
			expired = append(expired, wf)
		}
	}
	return expired, rows.Err()
}
