package sqlite

// Long maintenance in bites (store/bites.go): prune, retention sweeps, workflow deletion and
// completion, and vacuum run as a series of write jobs, each a bounded share of the work in
// the writer's transaction. A bite is one job on the writer's queue: saves queued while it ran
// commit before the next bite (in this process), and the write gate hands SQLite's lock to the
// other processes between two transactions. Each bite leaves the database consistent (figures
// included); a job's position lives in memory, so a crash loses only the rest of the job, which
// running it again finishes.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ckptd/ckptd/store"
)

// biteRows is how many rows a bite reads at a time before working on them.
const biteRows = 64

// runBites runs bite in jobs of its own until it reports done. bite starts afresh on every
// attempt of its job (a batch retried while the database is busy), so it keeps what it learns
// in variables it resets; committed runs after each commit, where the caller keeps them.
func (s *Store) runBites(ctx context.Context, bite func(ctx context.Context, w *wtx, b *store.Bite) (done bool, err error), committed func()) error {
	for {
		var done bool
		err := s.do(ctx, func(ctx context.Context, w *wtx) error {
			var err error
			done, err = bite(ctx, w, s.bites.Start())
			return err
		})
		if err != nil {
			return err
		}
		s.bites.Committed()
		if committed != nil {
			committed()
		}
		if done {
			return nil
		}
	}
}

// deleteOldest deletes wf's checkpoints oldest first, those with seq <= upTo (0: all), while
// b has room. finished: none is left.
func (s *Store) deleteOldest(ctx context.Context, w *wtx, wf string, upTo int64, b *store.Bite, ids *[]string) (finished bool, err error) {
	q, args := `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = ? ORDER BY seq LIMIT ?`, []any{wf, biteRows}
	if upTo > 0 {
		q, args = `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = ? AND seq <= ? ORDER BY seq LIMIT ?`, []any{wf, upTo, biteRows}
	}
	for !b.Full() {
		refs, err := w.refs(ctx, q, args...)
		if err != nil {
			return false, err
		}
		if len(refs) == 0 {
			return true, nil
		}
		for _, r := range refs {
			ok, err := s.deleteCheckpoint(ctx, w, r.rowid, r.id)
			if err != nil {
				return false, err
			}
			if ok {
				*ids = append(*ids, r.id)
			}
			if b.Spend(1) {
				return false, nil
			}
		}
	}
	return false, nil
}

// dropWorkflowRows deletes what is left of a workflow once its checkpoints are gone: pending
// writes whose checkpoint is gone, its compensation log, and with dropRow its row.
func (s *Store) dropWorkflowRows(ctx context.Context, w *wtx, wf string, dropRow bool) error {
	// writes whose checkpoint is already gone (defensive: PutWrites requires the checkpoint)
	if err := w.releaseRows(w.query(ctx, `DELETE FROM writes WHERE workflow_id = ? RETURNING CASE WHEN encoding = 4 THEN value END`,
		wf)); err != nil {
		return err
	}
	if err := deleteSagaRows(ctx, w, wf); err != nil { // store/sqlite/saga.go
		return err
	}
	if dropRow {
		if _, err := w.exec(ctx, `DELETE FROM workflows WHERE workflow_id = ?`, wf); err != nil {
			return err
		}
	}
	return nil
}

// DeleteWorkflow removes every checkpoint of workflowID, oldest first, then its configuration,
// in bites; 0 if unknown. Interrupted, it leaves the newest checkpoints; running it again
// finishes.
func (s *Store) DeleteWorkflow(ctx context.Context, workflowID string) (int, error) {
	n := 0
	var ids []string
	err := s.runBites(ctx, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		ids = ids[:0]
		finished, err := s.deleteOldest(ctx, w, workflowID, 0, b, &ids)
		if err != nil || !finished {
			return false, err
		}
		return true, s.dropWorkflowRows(ctx, w, workflowID, true)
	}, func() { n += len(ids) })
	if err != nil {
		return n, wrapDB(fmt.Sprintf("delete workflow %q", workflowID), err)
	}
	s.vacuumBites(ctx)
	return n, nil
}

// CompleteFenced is Complete under fencing token (0: none), checked in its first bite, which
// marks the workflow completed. Without preserve, the checkpoints it had then are deleted in
// bites, oldest first; a save in between makes the workflow resumable again and keeps its new
// checkpoint. Interrupted, the workflow stays completed with its newest checkpoints; completing
// it again finishes.
func (s *Store) CompleteFenced(ctx context.Context, workflowID string, preserve bool, token int64) (int, error) {
	n := 0
	var ids []string
	var upTo int64 // the newest seq when completed: later saves are kept
	err := s.runBites(ctx, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		ids = ids[:0]
		if upTo == 0 {
			if err := s.fence(ctx, w, workflowID, token); err != nil {
				return false, err
			}
			var latest int64
			err := w.queryRow(ctx, `UPDATE workflows SET completed_at = ? WHERE workflow_id = ? RETURNING latest_seq`,
				s.now().UnixMicro(), workflowID).Scan(&latest)
			if errors.Is(err, sql.ErrNoRows) {
				return false, fmt.Errorf("workflow %q: %w", workflowID, store.ErrNotFound)
			}
			if err != nil {
				return false, err
			}
			if preserve {
				return true, nil
			}
			if latest == 0 { // no checkpoints: only its pending writes and compensation log go
				return true, s.dropWorkflowRows(ctx, w, workflowID, false)
			}
			upTo = latest
		}
		finished, err := s.deleteOldest(ctx, w, workflowID, upTo, b, &ids)
		if err != nil || !finished {
			return false, err
		}
		var open bool // saved to since: its new checkpoints and their log stay
		if err := w.queryRow(ctx, `SELECT completed_at IS NULL FROM workflows WHERE workflow_id = ?`, workflowID).Scan(&open); err != nil &&
			!errors.Is(err, sql.ErrNoRows) {
			return false, err
		}
		if !open {
			return true, s.dropWorkflowRows(ctx, w, workflowID, false)
		}
		return true, nil
	}, func() {
		n += len(ids)
		if len(ids) > 0 {
			s.deletes.Add(uint64(len(ids)))
			s.notifyPruned(workflowID, append([]string(nil), ids...), "complete")
		}
	})
	if err != nil {
		if n == 0 {
			return 0, wrapDB(fmt.Sprintf("complete workflow %q", workflowID), err)
		}
		return n, wrapDB(fmt.Sprintf("complete workflow %q (%d checkpoints deleted before)", workflowID, n), err)
	}
	if n > 0 {
		s.vacuumBites(ctx)
	}
	return n, nil
}

// Complete marks workflowID completed (not resumable). Without preserve its checkpoints are deleted.
// A later save makes it resumable again.
func (s *Store) Complete(ctx context.Context, workflowID string, preserve bool) (int, error) {
	return s.CompleteFenced(ctx, workflowID, preserve, 0)
}

// ExpireIdle deletes every workflow whose effective idleTtlSeconds has passed since its last
// save, in bites: the candidates are read from a snapshot, and each bite checks again, in its
// transaction, that the workflow it deletes from is still idle and holds no compensation still
// needed (a save in between keeps it, with what is left of it). It returns workflowId -> the
// checkpoint ids deleted, for the workflows deleted whole.
func (s *Store) ExpireIdle(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	candidates, err := s.idleCandidates(ctx)
	if err != nil || len(candidates) == 0 {
		return out, err
	}
	type step struct {
		wf    string
		ids   []string
		whole bool
	}
	partial := map[string][]string{} // ids deleted by earlier bites from the workflow under way
	i := 0
	var steps []step
	var next int
	err = s.runBites(ctx, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		steps, next = steps[:0], i
		for next < len(candidates) {
			wf := candidates[next]
			idle, err := s.stillIdle(ctx, w, wf)
			if err != nil {
				return false, err
			}
			b.Spend(1)
			if !idle {
				next++
				continue
			}
			var ids []string
			finished, err := s.deleteOldest(ctx, w, wf, 0, b, &ids)
			if err != nil {
				return false, err
			}
			if !finished {
				steps = append(steps, step{wf: wf, ids: ids})
				return false, nil
			}
			if err := s.dropWorkflowRows(ctx, w, wf, true); err != nil {
				return false, err
			}
			steps = append(steps, step{wf: wf, ids: ids, whole: true})
			next++
			if b.Full() {
				break
			}
		}
		return next == len(candidates), nil
	}, func() {
		for _, st := range steps {
			if len(st.ids) > 0 {
				s.deletes.Add(uint64(len(st.ids)))
				s.notifyPruned(st.wf, st.ids, "idle")
			}
			ids := append(partial[st.wf], st.ids...)
			delete(partial, st.wf)
			if st.whole {
				if ids == nil {
					ids = []string{}
				}
				out[st.wf] = ids
			} else {
				partial[st.wf] = ids
			}
		}
		i = next
	})
	if err != nil {
		return out, wrapDB("expire idle workflows", err)
	}
	if len(out) > 0 {
		s.vacuumBites(ctx)
	}
	return out, nil
}

// idleCandidates lists, from a snapshot, the workflows whose idle TTL has passed.
func (s *Store) idleCandidates(ctx context.Context) ([]string, error) {
	// Only workflows with their own retention can expire (index workflows_retained), unless
	// the daemon has a default idle TTL: then every workflow is read, in table order (through
	// the primary key's index, each row would be a lookup), and sorted here.
	q := `SELECT workflow_id, updated_at, retention FROM workflows INDEXED BY workflows_retained
		WHERE retention IS NOT NULL AND coalesce(json_extract(retention, '$.idleTtlSeconds'), 0) > 0 ORDER BY workflow_id`
	if s.defRet.IdleTTLSeconds > 0 {
		q = `SELECT workflow_id, updated_at, retention FROM workflows NOT INDEXED`
	}
	var out []string
	err := s.readTx(ctx, func(tx *rtx) error {
		out = out[:0]
		var now time.Time // read once a row needs it (tests count the clock's reads)
		return scanRows(ctx, tx, q, func(rows *sql.Rows) error {
			var wf string
			var updated int64
			var js sql.NullString
			if err := rows.Scan(&wf, &updated, &js); err != nil {
				return err
			}
			if now.IsZero() {
				now = s.now()
			}
			if s.parseRetention(wf, js).Expired(time.UnixMicro(updated), now) {
				out = append(out, wf)
			}
			return nil
		})
	})
	if err != nil {
		return nil, wrapDB("expire idle workflows", err)
	}
	slices.Sort(out)
	return out, nil
}

// stillIdle checks in the writer's transaction that wf is still idle past its TTL and holds no
// compensation still needed (store/sqlite/saga.go).
func (s *Store) stillIdle(ctx context.Context, w *wtx, wf string) (bool, error) {
	var updated int64
	var js sql.NullString
	err := w.queryRow(ctx, `SELECT updated_at, retention FROM workflows WHERE workflow_id = ?`, wf).Scan(&updated, &js)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !s.parseRetention(wf, js).Expired(time.UnixMicro(updated), s.now()) {
		return false, nil
	}
	free, err := withoutSagaHolds(ctx, w, []string{wf})
	return len(free) == 1, err
}

// Prune deletes old checkpoints of one workflow (or all) per (workflow, namespace), in bites,
// with the rule of store.SelectExpired applied as store.GroupBounds describes: keepLast and
// maxAge are the request's KeepLast and OlderThanSeconds (both zero: each workflow's own
// retention); keepFirst comes from the workflow's retention. The walk goes workflow by
// workflow (by id), each one's checkpoints oldest first (every namespace at once, up to the
// newest seq it had when the walk came to it), and reads the bounds of each namespace it meets
// again in every bite: saves in between only add newer checkpoints to keep. DryRun deletes and
// rolls every bite back. FreedBytes counts the database pages the deletions free, summed over
// the bites.
func (s *Store) Prune(ctx context.Context, req store.PruneRequest) (store.PruneResult, error) {
	if err := req.Validate(); err != nil {
		return store.PruneResult{}, err
	}
	res, err := s.prune(ctx, req, "prune")
	if err != nil {
		return res, wrapDB("prune", err)
	}
	return res, nil
}

// pruneWalk is where a prune is: the workflow under way and the last seq examined in it.
type pruneWalk struct {
	wf     string // the workflow under way ("" : none yet)
	inWf   bool   // wf's checkpoints are being walked
	ret    store.Retention
	upTo   int64 // wf's newest seq when the walk came to it: never pruned, nor anything after it
	seq    int64 // the last seq examined in wf
	done   bool
	walked int // workflows gone through
}

// prune runs req in bites; reason names the deletions to SetOnPruned's callback.
func (s *Store) prune(ctx context.Context, req store.PruneRequest, reason string) (store.PruneResult, error) {
	res := store.PruneResult{}
	if !req.OmitIDs {
		res.IDs = map[string][]string{}
	}
	total := 1
	if req.WorkflowID == "" {
		var n int64
		if err := s.readAuto(ctx, func(tx *rtx) error {
			var err error
			n, _, err = readCounters(ctx, tx)
			return err
		}); err != nil {
			return res, err
		}
		total = int(n)
	}
	now := s.now()
	var walk, at pruneWalk
	var ids map[string][]string
	var freed int64
	err := s.runBites(ctx, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		at, ids, freed = walk, map[string][]string{}, 0
		var freeBefore int64
		if err := w.queryRow(ctx, "PRAGMA freelist_count").Scan(&freeBefore); err != nil {
			return false, err
		}
		fig := w.fig
		var mark wtxMark
		if req.DryRun {
			if _, err := w.exec(ctx, "SAVEPOINT dryrun"); err != nil {
				return false, err
			}
			w.fig = &figures{} // rolled back with the rows
			mark = w.mark()
		}
		if err := s.pruneBite(ctx, w, b, req, now, &at, ids); err != nil {
			return false, err
		}
		// the chunks the deletions free count too; and a dry run's releases are undone with it
		if err := s.flushReleases(ctx, w); err != nil {
			return false, err
		}
		var freeAfter, pageSize int64
		if err := w.queryRow(ctx, "PRAGMA freelist_count").Scan(&freeAfter); err != nil {
			return false, err
		}
		if err := w.queryRow(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
			return false, err
		}
		freed = (freeAfter - freeBefore) * pageSize
		if req.DryRun {
			if _, err := w.exec(ctx, "ROLLBACK TO dryrun"); err != nil {
				return false, err
			}
			w.restore(mark) // the listings its releases took from ref_log are back there too
			if _, err := w.exec(ctx, "RELEASE dryrun"); err != nil {
				return false, err
			}
			w.fig = fig
		}
		return at.done, nil
	}, func() {
		walk = at
		res.FreedBytes += freed
		for wf, l := range ids {
			res.Deleted += len(l)
			if res.IDs != nil {
				res.IDs[wf] = append(res.IDs[wf], l...)
			}
			if !req.DryRun {
				s.deletes.Add(uint64(len(l)))
				s.notifyPruned(wf, l, reason)
			}
		}
		if req.Progress != nil {
			req.Progress(store.PruneProgress{Deleted: res.Deleted, FreedBytes: res.FreedBytes, Workflows: walk.walked,
				Total: max(total, walk.walked)})
		}
	})
	if err != nil {
		return res, err
	}
	if res.Deleted > 0 && !req.DryRun {
		s.vacuumBites(ctx)
	}
	return res, nil
}

// nsBounds are one namespace's bounds and retention holds, as a bite read them.
type nsBounds struct {
	store.GroupBounds
	holds map[string]bool
}

// pruneBite advances the walk while b has room, deleting what it selects into ids. Each
// namespace's bounds are read once per bite, when the walk first meets it.
func (s *Store) pruneBite(ctx context.Context, w *wtx, b *store.Bite, req store.PruneRequest, now time.Time,
	at *pruneWalk, ids map[string][]string) error {
	bounds := map[string]*nsBounds{}
	for !b.Full() && !at.done {
		if !at.inWf {
			if err := s.pruneNextWorkflow(ctx, w, req, at); err != nil {
				return err
			}
			clear(bounds)
			b.Spend(1)
			continue
		}
		rows, err := w.query(ctx, `SELECT id, seq, namespace, checkpoint_id, created_at FROM checkpoints
			WHERE workflow_id = ? AND seq > ? AND seq < ? ORDER BY seq LIMIT ?`, at.wf, at.seq, at.upTo, biteRows)
		if err != nil {
			return err
		}
		type row struct {
			rowid int64
			ns    string
			it    store.RetentionItem
		}
		var window []row
		for rows.Next() {
			var r row
			var created int64
			if err := rows.Scan(&r.rowid, &r.it.Seq, &r.ns, &r.it.ID, &created); err != nil {
				rows.Close()
				return err
			}
			r.it.CreatedAt = time.UnixMicro(created)
			window = append(window, r)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(window) == 0 {
			at.inWf = false
			continue
		}
		for _, r := range window {
			nb := bounds[r.ns]
			if nb == nil {
				if nb, err = s.readNSBounds(ctx, w, at.wf, r.ns, at.ret); err != nil {
					return err
				}
				bounds[r.ns] = nb
				b.Spend(1)
			}
			at.seq = r.it.Seq
			if nb.Expired(r.it, at.ret, now) && !nb.holds[r.it.ID] {
				ok, err := s.deleteCheckpoint(ctx, w, r.rowid, r.it.ID)
				if err != nil {
					return err
				}
				if ok {
					ids[at.wf] = append(ids[at.wf], r.it.ID)
				}
			}
			if b.Spend(1) {
				return nil
			}
		}
	}
	return nil
}

// readNSBounds reads (wf, ns)'s bounds (store.GroupBounds: walking the per-workflow index from
// either end, skipping other namespaces) and the checkpoints retention keeps there for rollbacks.
func (s *Store) readNSBounds(ctx context.Context, w *wtx, wf, ns string, r store.Retention) (*nsBounds, error) {
	nb := &nsBounds{}
	var boundary sql.NullInt64
	if err := w.queryRow(ctx, `SELECT (SELECT seq FROM checkpoints WHERE workflow_id = ?1 AND namespace = ?2 ORDER BY seq DESC LIMIT 1),
			(SELECT seq FROM checkpoints WHERE workflow_id = ?1 AND namespace = ?2 ORDER BY seq LIMIT 1),
			(SELECT seq FROM checkpoints WHERE workflow_id = ?1 AND namespace = ?2 ORDER BY seq DESC LIMIT 1 OFFSET ?3)`,
		wf, ns, max(r.KeepLast-1, 0)).Scan(&nb.Newest, &nb.First, &boundary); err != nil {
		return nil, err
	}
	if r.KeepLast > 0 {
		nb.Boundary = boundary.Int64
	}
	holds, err := retentionHolds(ctx, w, wf, ns) // store/sqlite/saga.go
	if err != nil {
		return nil, err
	}
	nb.holds = holds
	return nb, nil
}

// pruneNextWorkflow moves the walk to the next workflow with something to prune.
func (s *Store) pruneNextWorkflow(ctx context.Context, w *wtx, req store.PruneRequest, at *pruneWalk) error {
	var wf string
	var js sql.NullString
	var count, latest int64
	var err error
	if req.WorkflowID != "" {
		if at.walked > 0 {
			at.done = true
			return nil
		}
		wf = req.WorkflowID
		err = w.queryRow(ctx, `SELECT retention, ckpt_count, latest_seq FROM workflows WHERE workflow_id = ?`, wf).Scan(&js, &count, &latest)
	} else {
		q := `SELECT workflow_id, retention, ckpt_count, latest_seq FROM workflows WHERE workflow_id > ? ORDER BY workflow_id LIMIT 1`
		if at.walked == 0 {
			q = `SELECT workflow_id, retention, ckpt_count, latest_seq FROM workflows WHERE workflow_id >= ? ORDER BY workflow_id LIMIT 1`
		}
		err = w.queryRow(ctx, q, at.wf).Scan(&wf, &js, &count, &latest)
	}
	if errors.Is(err, sql.ErrNoRows) {
		at.done = true
		return nil
	}
	if err != nil {
		return err
	}
	at.walked++
	at.wf = wf
	at.ret = req.Retention(s.parseRetention(wf, js))
	at.inWf = at.ret.Prunes(count)
	at.upTo, at.seq = latest, 0
	return nil
}

// vacuumBites gives free pages back to the file system (PRAGMA incremental_vacuum) in bites,
// then checkpoints the WAL. Best effort: a failure is logged.
func (s *Store) vacuumBites(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	err := s.runBites(ctx, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		for !b.Full() {
			var free int64
			if err := w.queryRow(ctx, "PRAGMA freelist_count").Scan(&free); err != nil {
				return false, err
			}
			if free == 0 {
				return true, nil
			}
			n := min(free, store.BiteUnits)
			if _, err := w.exec(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", n)); err != nil {
				return false, err
			}
			b.Spend(int(n))
		}
		return false, nil
	}, nil)
	if err != nil {
		if !errors.Is(err, store.ErrClosed) {
			s.log.Warn("ckptd store: incremental_vacuum failed", "err", err)
		}
		return
	}
	if _, err := s.cdb.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil && !isBusy(err) {
		s.log.Warn("ckptd store: WAL checkpoint failed", "err", err)
	}
}
