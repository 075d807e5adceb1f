package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Kept figures (schema step 8): each workflow's ckpt_count, stored_bytes and latest_seq, and the
// database's totals in the counters row, change in the transaction of every write that changes
// what they count. A job notes its changes in its wtx's figures as it makes them; its
// workflows' rows are updated when the job ends (so a job deleting many checkpoints of a
// workflow updates its row once), and the totals once per batch, before the commit. A job
// that fails is rolled back with its notes. The save path updates its workflow's row itself,
// in the upsert that hands out the seq, and notes only the totals.
//
// What a checkpoint's stored size is, is decided once, by storeState; the figures only add up
// checkpoints.stored_size as written, and follow the compactor when it rewrites it.

// figures are one job's changes to the kept figures.
type figures struct {
	wfs    map[string]*wfFigures
	totals totals
}

// wfFigures are one workflow's.
type wfFigures struct {
	count, stored int64
	maxDeleted    int64 // highest seq deleted (0: none): the newest seq is read again if it was at or below
	maxAdded      int64 // highest seq inserted by this job outside the save path (imports)
}

// totals are changes to the counters row.
type totals struct {
	checkpoints, stateBytes, ckptStored, states, statesStored int64
}

func (t *totals) add(o totals) {
	t.checkpoints += o.checkpoints
	t.stateBytes += o.stateBytes
	t.ckptStored += o.ckptStored
	t.states += o.states
	t.statesStored += o.statesStored
}

func (t totals) zero() bool { return t == totals{} }

func (f *figures) wf(id string) *wfFigures {
	if f.wfs == nil {
		f.wfs = map[string]*wfFigures{}
	}
	w := f.wfs[id]
	if w == nil {
		w = &wfFigures{}
		f.wfs[id] = w
	}
	return w
}

// saved notes a checkpoint inserted by the save path (whose upsert updated the workflow's row).
func (f *figures) saved(size, stored int64) {
	f.totals.checkpoints++
	f.totals.stateBytes += size
	f.totals.ckptStored += stored
}

// added notes a checkpoint inserted outside the save path.
func (f *figures) added(wf string, seq, size, stored int64) {
	f.saved(size, stored)
	w := f.wf(wf)
	w.count++
	w.stored += stored
	w.maxAdded = max(w.maxAdded, seq)
}

// deleted notes a checkpoint deleted.
func (f *figures) deleted(wf string, seq, size, stored int64) {
	f.totals.checkpoints--
	f.totals.stateBytes -= size
	f.totals.ckptStored -= stored
	w := f.wf(wf)
	w.count--
	w.stored -= stored
	w.maxDeleted = max(w.maxDeleted, seq)
}

// restored notes a checkpoint's stored size rewritten from before to after (the compactor).
func (f *figures) restored(wf string, before, after int64) {
	f.totals.ckptStored += after - before
	f.wf(wf).stored += after - before
}

// stateStored and stateDeleted note a row of states inserted or deleted; stateResized a state
// whose stored bytes changed.
func (f *figures) stateStored(stored int64) {
	f.totals.states++
	f.totals.statesStored += stored
}

func (f *figures) stateDeleted(stored int64) {
	f.totals.states--
	f.totals.statesStored -= stored
}

func (f *figures) stateResized(before, after int64) { f.totals.statesStored += after - before }

// flushWorkflows writes a job's changes so far to its workflows' rows (at its end, or before it
// reads them).
func (s *Store) flushWorkflows(ctx context.Context, w *wtx) error {
	defer clear(w.fig.wfs)
	for id, d := range w.fig.wfs {
		if d.count == 0 && d.stored == 0 && d.maxDeleted == 0 && d.maxAdded == 0 {
			continue
		}
		if _, err := w.exec(ctx, `UPDATE workflows SET ckpt_count = ckpt_count + ?2, stored_bytes = stored_bytes + ?3,
			latest_seq = CASE WHEN ?4 > 0 AND latest_seq <= ?4
				THEN coalesce((SELECT max(seq) FROM checkpoints WHERE workflow_id = ?1), 0)
				ELSE max(latest_seq, ?5) END
			WHERE workflow_id = ?1`, id, d.count, d.stored, d.maxDeleted, d.maxAdded); err != nil {
			return err
		}
	}
	return nil
}

// flushTotals writes a batch's changes to the counters row.
func flushTotals(ctx context.Context, w *wtx, t totals) error {
	if t.zero() {
		return nil
	}
	_, err := w.exec(ctx, `UPDATE counters SET checkpoints = checkpoints + ?, state_bytes = state_bytes + ?,
		checkpoint_stored = checkpoint_stored + ?, states = states + ?, states_stored = states_stored + ? WHERE id = 1`,
		t.checkpoints, t.stateBytes, t.ckptStored, t.states, t.statesStored)
	return err
}

// readCounters reads the counters row.
func readCounters(ctx context.Context, tx *rtx) (workflows int64, t totals, err error) {
	err = tx.cachedRow(ctx, `SELECT workflows, checkpoints, state_bytes, checkpoint_stored, states, states_stored
		FROM counters WHERE id = 1`).Scan(&workflows, &t.checkpoints, &t.stateBytes, &t.ckptStored, &t.states, &t.statesStored)
	return workflows, t, err
}

// CheckFigures recounts every kept figure from the rows it counts and returns one line per
// figure that differs (ckptd verify). It reads the whole database: a check, not a listing.
func (s *Store) CheckFigures(ctx context.Context) ([]string, error) {
	var out []string
	err := s.readTx(ctx, func(tx *rtx) error {
		out = nil
		err := scanRows(ctx, tx, `SELECT w.workflow_id, w.ckpt_count, w.stored_bytes, w.latest_seq,
				coalesce(x.n, 0), coalesce(x.bytes, 0), coalesce(x.latest, 0)
			FROM workflows w LEFT JOIN (SELECT workflow_id, count(*) AS n, sum(stored_size) AS bytes, max(seq) AS latest
				FROM checkpoints GROUP BY workflow_id) x ON x.workflow_id = w.workflow_id
			WHERE w.ckpt_count != coalesce(x.n, 0) OR w.stored_bytes != coalesce(x.bytes, 0) OR w.latest_seq != coalesce(x.latest, 0)`,
			func(rows *sql.Rows) error {
				var id string
				var n, b, l, xn, xb, xl int64
				if err := rows.Scan(&id, &n, &b, &l, &xn, &xb, &xl); err != nil {
					return err
				}
				out = append(out, fmt.Sprintf("workflow %q: kept figures count %d, stored %d, latest seq %d; its checkpoints count %d, stored %d, latest seq %d",
					id, n, b, l, xn, xb, xl))
				return nil
			})
		if err != nil {
			return err
		}
		var orphans int64
		if err := tx.QueryRowContext(ctx, `SELECT count(DISTINCT workflow_id) FROM checkpoints
			WHERE workflow_id NOT IN (SELECT workflow_id FROM workflows)`).Scan(&orphans); err != nil {
			return err
		}
		if orphans > 0 {
			out = append(out, fmt.Sprintf("%d workflows have checkpoints but no row of their own", orphans))
		}
		var lgBad int64
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT thread_id, max(u) AS u FROM (
				SELECT thread_id, max(created_at) AS u FROM lg_checkpoints GROUP BY thread_id
				UNION ALL SELECT DISTINCT thread_id, 0 FROM lg_writes
				UNION ALL SELECT DISTINCT thread_id, 0 FROM lg_blobs) AS a GROUP BY thread_id) x
			FULL JOIN lg_threads t USING (thread_id)
			WHERE x.u IS NOT t.updated_at AND NOT (x.u IS NULL AND t.retention IS NOT NULL)`).Scan(&lgBad); err != nil {
			return err
		}
		if lgBad > 0 {
			out = append(out, fmt.Sprintf("%d LangGraph threads are missing from (or wrong in) the kept list of threads", lgBad))
		}
		wfs, t, err := readCounters(ctx, tx)
		if errors.Is(err, sql.ErrNoRows) {
			out = append(out, "the counters row is missing")
			return nil
		}
		if err != nil {
			return err
		}
		var rw int64
		var rt totals
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM workflows), (SELECT count(*) FROM checkpoints),
			(SELECT coalesce(sum(size), 0) FROM checkpoints), (SELECT coalesce(sum(stored_size), 0) FROM checkpoints),
			(SELECT count(*) FROM states), (SELECT coalesce(sum(stored_size), 0) FROM states)`).
			Scan(&rw, &rt.checkpoints, &rt.stateBytes, &rt.ckptStored, &rt.states, &rt.statesStored); err != nil {
			return err
		}
		for _, c := range []struct {
			name        string
			kept, count int64
		}{{"workflows", wfs, rw}, {"checkpoints", t.checkpoints, rt.checkpoints}, {"state bytes", t.stateBytes, rt.stateBytes},
			{"checkpoint stored bytes", t.ckptStored, rt.ckptStored}, {"states", t.states, rt.states},
			{"states stored bytes", t.statesStored, rt.statesStored}} {
			if c.kept != c.count {
				out = append(out, fmt.Sprintf("counter %s is %d, the rows count %d", c.name, c.kept, c.count))
			}
		}
		// the database's footprint (schema step 13; footprint.go)
		kf, err := readFootprintCounters(ctx, tx, false)
		if err != nil {
			return err
		}
		rf, err := recountFootprint(ctx, tx, s.hasPacks(ctx))
		if err != nil {
			return err
		}
		for i, c := range kf.named() {
			if n := rf.named()[i].n; c.n != n {
				out = append(out, fmt.Sprintf("counter %s is %d, the rows count %d", c.name, c.n, n))
			}
		}
		return nil
	})
	if err != nil {
		return nil, wrapDB("check kept figures", err)
	}
	return out, nil
}
