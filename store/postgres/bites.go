package postgres

// Long maintenance in bites (store/bites.go): prune, retention sweeps, workflow deletion and
// completion run as a series of write jobs, each a bounded share of the work in a transaction
// of its own, holding its workflows' advisory locks only for that bite: the saves of those
// workflows (in this process and others) commit between two bites. A bite walking several
// workflows takes the first one's lock waiting, the others only if free at once
// (pg_try_advisory_xact_lock): holding one lock while waiting for another, out of the global
// order every batch takes its locks in, could deadlock. Each bite leaves the database
// consistent (figures included); a job's position lives in memory, so a crash loses only the
// rest of the job, which running it again finishes.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// biteRows is how many rows a bite reads at a time before working on them.
const biteRows = 64

// runBites runs bite in jobs of its own (locks: taken for each, nil: bite takes its own) until
// it reports done. bite starts afresh on every attempt (a batch retried after a deadlock or a
// lost connection), so it keeps what it learns in variables it resets; committed runs after
// each commit, where the caller keeps them.
func (s *Store) runBites(ctx context.Context, locks []int64, bite func(ctx context.Context, w *wtx, b *store.Bite) (done bool, err error), committed func()) error {
	for {
		var done bool
		err := s.do(ctx, locks, func(ctx context.Context, w *wtx) error {
			var err error
			done, err = bite(ctx, w, s.bites.Start())
			if err == nil {
				err = w.flush(ctx)
			}
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

// tryLock takes wf's advisory lock if it is free at once.
func (w *wtx) tryLock(ctx context.Context, wf string) (bool, error) {
	var ok bool
	err := w.queryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, wfKey(wf)).Scan(&ok)
	return ok, err
}

// deleteOldest deletes wf's checkpoints oldest first, those with seq <= upTo (0: all), while b
// has room. finished: none is left.
func deleteOldest(ctx context.Context, w *wtx, wf string, upTo int64, b *store.Bite, ids *[]string) (finished bool, err error) {
	for !b.Full() {
		q, args := `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = $1 ORDER BY seq LIMIT $2`, []any{wf, biteRows}
		if upTo > 0 {
			q, args = `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = $1 AND seq <= $2 ORDER BY seq LIMIT $3`, []any{wf, upTo, biteRows}
		}
		refs, err := collectRefs(w.query(ctx, q, args...))
		if err != nil {
			return false, err
		}
		if len(refs) == 0 {
			return true, nil
		}
		n := 0
		for n < len(refs) {
			n++
			if b.Spend(1) {
				break
			}
		}
		got, _, err := deleteRefs(ctx, w, refs[:n])
		if err != nil {
			return false, err
		}
		*ids = append(*ids, got...)
	}
	return false, nil
}

// dropWorkflowRows deletes what is left of a workflow once its checkpoints are gone: pending
// writes whose checkpoint is gone, its compensation log, and with dropRow its row.
func dropWorkflowRows(ctx context.Context, w *wtx, wf string, dropRow bool) error {
	// writes whose checkpoint is already gone (defensive: PutWrites requires the checkpoint)
	var indexes [][]byte
	if err := collectIndexes(w.query(ctx, `DELETE FROM writes WHERE workflow_id = $1
		RETURNING CASE WHEN encoding = 4 THEN value END`, wf))(&indexes); err != nil {
		return err
	}
	if _, err := w.s.releaseIndexes(ctx, w, indexes); err != nil {
		return err
	}
	queueDeleteSagaRows(w, wf) // saga.go
	if dropRow {
		w.queue(`DELETE FROM workflows WHERE workflow_id = $1`, wf)
	}
	return w.flush(ctx)
}

// DeleteWorkflow removes every checkpoint of workflowID, oldest first, then its configuration,
// in bites; 0 if unknown. Interrupted, it leaves the newest checkpoints; running it again
// finishes.
func (s *Store) DeleteWorkflow(ctx context.Context, workflowID string) (int, error) {
	n := 0
	var ids []string
	err := s.runBites(ctx, []int64{wfKey(workflowID)}, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		ids = ids[:0]
		finished, err := deleteOldest(ctx, w, workflowID, 0, b, &ids)
		if err != nil || !finished {
			return false, err
		}
		return true, dropWorkflowRows(ctx, w, workflowID, true)
	}, func() { n += len(ids) })
	if err != nil {
		return n, wrapDB(fmt.Sprintf("delete workflow %q", workflowID), err)
	}
	return n, nil
}

// Complete marks workflowID completed (not resumable). Without preserve its checkpoints are
// deleted. A later save makes it resumable again.
func (s *Store) Complete(ctx context.Context, workflowID string, preserve bool) (int, error) {
	return s.complete(ctx, workflowID, preserve, 0)
}

// complete is Complete under fencing token (0: none), checked in its first bite, which marks
// the workflow completed. Without preserve, the checkpoints it had then are deleted in bites,
// oldest first; a save in between makes the workflow resumable again and keeps its new
// checkpoint. Interrupted, the workflow stays completed with its newest checkpoints;
// completing it again finishes.
func (s *Store) complete(ctx context.Context, workflowID string, preserve bool, token int64) (int, error) {
	n := 0
	var ids []string
	var upTo int64 // the newest seq when completed: later saves are kept
	err := s.runBites(ctx, []int64{wfKey(workflowID)}, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		ids = ids[:0]
		if upTo == 0 {
			if err := s.fence(ctx, w, workflowID, token); err != nil {
				return false, err
			}
			var latest int64
			err := w.queryRow(ctx, `UPDATE workflows SET completed_at = $1 WHERE workflow_id = $2 RETURNING latest_seq`,
				s.now(), workflowID).Scan(&latest)
			if noRows(err) {
				return false, fmt.Errorf("workflow %q: %w", workflowID, store.ErrNotFound)
			}
			if err != nil {
				return false, err
			}
			if preserve {
				return true, nil
			}
			if latest == 0 { // no checkpoints: only its pending writes and compensation log go
				return true, dropWorkflowRows(ctx, w, workflowID, false)
			}
			upTo = latest
		}
		finished, err := deleteOldest(ctx, w, workflowID, upTo, b, &ids)
		if err != nil {
			return false, err
		}
		s.pruned(w, workflowID, append([]string(nil), ids...), "complete")
		if !finished {
			return false, nil
		}
		var open bool // saved to since: its new checkpoints and their log stay
		if err := w.queryRow(ctx, `SELECT completed_at IS NULL FROM workflows WHERE workflow_id = $1`, workflowID).Scan(&open); err != nil &&
			!noRows(err) {
			return false, err
		}
		if !open {
			return true, dropWorkflowRows(ctx, w, workflowID, false)
		}
		return true, nil
	}, func() { n += len(ids) })
	if err != nil {
		if n == 0 {
			return 0, wrapDB(fmt.Sprintf("complete workflow %q", workflowID), err)
		}
		return n, wrapDB(fmt.Sprintf("complete workflow %q (%d checkpoints deleted before)", workflowID, n), err)
	}
	return n, nil
}

// ExpireIdle deletes every workflow whose effective idleTtlSeconds has passed since its last
// save, in bites: the candidates are read from a snapshot, and each bite checks again, under
// the workflow's lock, that it is still idle and holds no compensation still needed (a save
// in between keeps it, with what is left of it). It returns workflowId -> the checkpoint ids
// deleted, for the workflows deleted whole.
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
	partial := map[string][]string{}
	i := 0
	var steps []step
	var next int
	err = s.runBites(ctx, nil, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		steps, next = steps[:0], i
		for next < len(candidates) {
			wf := candidates[next]
			if next == i {
				if err := w.lock(ctx, []int64{wfKey(wf)}); err != nil {
					return false, err
				}
			} else if ok, err := w.tryLock(ctx, wf); err != nil || !ok {
				return false, err // taken: the next bite waits for it
			}
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
			finished, err := deleteOldest(ctx, w, wf, 0, b, &ids)
			if err != nil {
				return false, err
			}
			s.pruned(w, wf, ids, "idle")
			if !finished {
				steps = append(steps, step{wf: wf, ids: ids})
				return false, nil
			}
			if err := dropWorkflowRows(ctx, w, wf, true); err != nil {
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
	return out, nil
}

// idleCandidates lists, from a snapshot, the workflows whose idle TTL has passed.
func (s *Store) idleCandidates(ctx context.Context) ([]string, error) {
	q := `SELECT workflow_id, updated_at, retention FROM workflows`
	order := ` ORDER BY workflow_id`
	if s.defRet.IdleTTLSeconds <= 0 {
		// only workflows with their own retention can expire
		q += ` WHERE retention IS NOT NULL AND coalesce((retention->>'idleTtlSeconds')::bigint, 0) > 0`
	}
	q += order
	var out []string
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		var now time.Time // read once a row needs it (tests count the clock's reads)
		return scanRows(ctx, tx, q, func(rows pgx.Rows) error {
			var wf string
			var updated time.Time
			var js []byte
			if err := rows.Scan(&wf, &updated, &js); err != nil {
				return err
			}
			if now.IsZero() {
				now = s.now()
			}
			if s.parseRetention(wf, js).Expired(updated, now) {
				out = append(out, wf)
			}
			return nil
		})
	})
	if err != nil {
		return nil, wrapDB("expire idle workflows", err)
	}
	return out, nil
}

// stillIdle checks, under wf's lock, that wf is still idle past its TTL and holds no
// compensation still needed (saga.go).
func (s *Store) stillIdle(ctx context.Context, w *wtx, wf string) (bool, error) {
	var updated time.Time
	var js []byte
	var held bool
	err := w.queryRow(ctx, `SELECT updated_at, retention, `+sagaHeld+` FROM workflows w WHERE workflow_id = $1`, wf).Scan(&updated, &js, &held)
	if noRows(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !held && s.parseRetention(wf, js).Expired(updated, s.now()), nil
}

// Prune deletes old checkpoints of one workflow (or all) per (workflow, namespace), in bites,
// with the rule of store.SelectExpired applied as store.GroupBounds describes: keepLast and
// maxAge are the request's KeepLast and OlderThanSeconds (both zero: each workflow's own
// retention); keepFirst comes from the workflow's retention. The walk goes workflow by
// workflow (by id), each one's checkpoints oldest first (every namespace at once, up to the
// newest seq it had when the walk came to it), reading the bounds of each namespace it meets
// again in every bite. DryRun deletes and rolls every bite back. FreedBytes counts the
// stored bytes of the states the deletions remove (PostgreSQL reuses the space once
// autovacuum has run), summed over the bites.
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
	walked int  // workflows gone through
	retry  bool // wf is the next workflow to enter (its lock was taken when the last bite tried)
}

// prune runs req in bites; reason names the deletions to SetOnPruned's callback and the feed.
func (s *Store) prune(ctx context.Context, req store.PruneRequest, reason string) (store.PruneResult, error) {
	res := store.PruneResult{}
	if !req.OmitIDs {
		res.IDs = map[string][]string{}
	}
	total := 1
	if req.WorkflowID == "" {
		var n int64
		if err := s.readRow(ctx, `SELECT coalesce(sum(workflows), 0)::bigint FROM counters`, nil, &n); err != nil {
			return res, err
		}
		total = int(n)
	}
	now := s.now()
	var walk, at pruneWalk
	var ids map[string][]string
	var freed int64
	err := s.runBites(ctx, nil, func(ctx context.Context, w *wtx, b *store.Bite) (bool, error) {
		at, ids, freed = walk, map[string][]string{}, 0
		if req.DryRun {
			w.queue(`SAVEPOINT dryrun`)
		}
		var err error
		freed, err = s.pruneBite(ctx, w, b, req, now, &at, ids)
		if err != nil {
			return false, err
		}
		if req.DryRun {
			w.queue(`ROLLBACK TO SAVEPOINT dryrun`)
			w.queue(`RELEASE SAVEPOINT dryrun`)
			w.tot = totals{}
		} else {
			for wf, l := range ids {
				s.pruned(w, wf, l, reason)
			}
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
		}
		if req.Progress != nil {
			req.Progress(store.PruneProgress{Deleted: res.Deleted, FreedBytes: res.FreedBytes, Workflows: walk.walked,
				Total: max(total, walk.walked)})
		}
	})
	return res, err
}

// pruneBite advances the walk while b has room, deleting what it selects into ids; it returns
// the stored bytes of the states the deletions removed. Each namespace's bounds are read once per
// bite, when the walk first meets it.
func (s *Store) pruneBite(ctx context.Context, w *wtx, b *store.Bite, req store.PruneRequest, now time.Time,
	at *pruneWalk, ids map[string][]string) (int64, error) {
	var freed int64
	locked := false // the bite holds a workflow's lock: the next ones only if free at once
	bounds := map[string]*nsBounds{}
	for !b.Full() && !at.done {
		if !at.inWf {
			wf, err := s.pruneNextWorkflow(ctx, w, req, at)
			if err != nil || wf == "" {
				return freed, err
			}
			if locked {
				ok, err := w.tryLock(ctx, wf)
				if err != nil {
					return freed, err
				}
				if !ok { // taken: this bite ends here, the next one waits for it
					*at = pruneWalkBefore(*at, wf)
					return freed, nil
				}
			} else if err := w.lock(ctx, []int64{wfKey(wf)}); err != nil {
				return freed, err
			}
			locked = true
			if err := s.pruneEnterWorkflow(ctx, w, req, at, wf); err != nil {
				return freed, err
			}
			clear(bounds)
			b.Spend(1)
			continue
		}
		rows, err := w.query(ctx, `SELECT id, seq, namespace, checkpoint_id, created_at FROM checkpoints
			WHERE workflow_id = $1 AND seq > $2 AND seq < $3 ORDER BY seq LIMIT $4`, at.wf, at.seq, at.upTo, biteRows)
		if err != nil {
			return freed, err
		}
		type row struct {
			rowid int64
			ns    string
			it    store.RetentionItem
		}
		window, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.rowid, &x.it.Seq, &x.ns, &x.it.ID, &x.it.CreatedAt)
			return x, err
		})
		if err != nil {
			return freed, err
		}
		if len(window) == 0 {
			at.inWf = false
			continue
		}
		var refs []ckRef
		full := false
		for _, r := range window {
			nb := bounds[r.ns]
			if nb == nil {
				if nb, err = readNSBounds(ctx, w, at.wf, r.ns, at.ret); err != nil {
					return freed, err
				}
				bounds[r.ns] = nb
				b.Spend(1)
			}
			at.seq = r.it.Seq
			if nb.Expired(r.it, at.ret, now) && !nb.held(r.it.ID) {
				refs = append(refs, ckRef{r.rowid, r.it.ID})
			}
			if b.Spend(1) {
				full = true
				break
			}
		}
		got, f, err := deleteRefs(ctx, w, refs)
		if err != nil {
			return freed, err
		}
		freed += f
		if len(got) > 0 {
			ids[at.wf] = append(ids[at.wf], got...)
		}
		if full {
			return freed, nil
		}
	}
	return freed, nil
}

// nsBounds are one namespace's bounds and the checkpoints retention keeps there for rollbacks,
// as a bite read them.
type nsBounds struct {
	store.GroupBounds
	good, target *string
}

func (nb *nsBounds) held(id string) bool {
	return (nb.good != nil && id == *nb.good) || (nb.target != nil && id == *nb.target)
}

// readNSBounds reads (wf, ns)'s bounds (store.GroupBounds: walking the per-workflow index from
// either end, skipping other namespaces) and its retention holds (saga.go).
func readNSBounds(ctx context.Context, w *wtx, wf, ns string, r store.Retention) (*nsBounds, error) {
	nb := &nsBounds{}
	var boundary *int64
	if err := w.queryRow(ctx, `SELECT (SELECT seq FROM checkpoints WHERE workflow_id = $1 AND namespace = $2 ORDER BY seq DESC LIMIT 1),
			(SELECT seq FROM checkpoints WHERE workflow_id = $1 AND namespace = $2 ORDER BY seq LIMIT 1),
			(SELECT seq FROM checkpoints WHERE workflow_id = $1 AND namespace = $2 ORDER BY seq DESC OFFSET $3 LIMIT 1),
			h.good, h.target FROM (SELECT 1) AS one`+holdsJoin, wf, ns, max(r.KeepLast-1, 0)).
		Scan(&nb.Newest, &nb.First, &boundary, &nb.good, &nb.target); err != nil {
		return nil, err
	}
	if r.KeepLast > 0 && boundary != nil {
		nb.Boundary = *boundary
	}
	return nb, nil
}

// pruneWalkBefore is the walk positioned just before wf: the next bite starts with it.
func pruneWalkBefore(at pruneWalk, wf string) pruneWalk {
	at.wf, at.inWf, at.seq, at.upTo = wf, false, 0, 0
	at.ret = store.Retention{}
	at.retry = true
	return at
}

// pruneNextWorkflow names the next workflow of the walk ("" : none; the walk is done).
func (s *Store) pruneNextWorkflow(ctx context.Context, w *wtx, req store.PruneRequest, at *pruneWalk) (string, error) {
	if req.WorkflowID != "" {
		if at.walked > 0 {
			at.done = true
			return "", nil
		}
		return req.WorkflowID, nil
	}
	if at.retry {
		return at.wf, nil
	}
	q := `SELECT workflow_id FROM workflows WHERE workflow_id > $1 ORDER BY workflow_id LIMIT 1`
	if at.walked == 0 {
		q = `SELECT workflow_id FROM workflows WHERE workflow_id >= $1 ORDER BY workflow_id LIMIT 1`
	}
	var wf string
	err := w.queryRow(ctx, q, at.wf).Scan(&wf)
	if noRows(err) {
		at.done = true
		return "", nil
	}
	return wf, err
}

// pruneEnterWorkflow starts walking wf's checkpoints, under its lock, if it has something to
// prune.
func (s *Store) pruneEnterWorkflow(ctx context.Context, w *wtx, req store.PruneRequest, at *pruneWalk, wf string) error {
	at.retry = false
	at.walked++
	at.wf = wf
	at.seq, at.upTo = 0, 0
	var js []byte
	var count int64
	err := w.queryRow(ctx, `SELECT retention, ckpt_count, latest_seq FROM workflows WHERE workflow_id = $1`, wf).Scan(&js, &count, &at.upTo)
	if noRows(err) {
		at.inWf = false
		return nil
	}
	if err != nil {
		return err
	}
	at.ret = req.Retention(s.parseRetention(wf, js))
	at.inWf = at.ret.Prunes(count)
	return nil
}
