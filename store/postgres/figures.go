package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
)

// Kept figures (the schema's "kept figures" step): each workflow's ckpt_count, stored_bytes and
// latest_seq change in the statement that inserts or deletes its checkpoints (saveSQL, importSQL,
// deleteCheckpoints), under the workflow's lock. The database's totals live in counters, one
// row per shard: a job notes its changes to them in its wtx, the batch adds them up and writes
// them to the process's own shard with its COMMIT (one more statement in the same round
// trip), so that two processes committing at once never wait on each other's counters row.
//
// What a checkpoint's stored size is, is decided once, in the save's statement (the state's
// stored_size); the figures only add up checkpoints.stored_size as written.

// totals are changes to the counters.
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

// inserted notes a checkpoint inserted (size as sent, stored size) and whether its state row was
// new.
func (t *totals) inserted(size, stored int64, newState bool) {
	t.checkpoints++
	t.stateBytes += size
	t.ckptStored += stored
	if newState {
		t.states++
		t.statesStored += stored
	}
}

// Shards of counters: the workflows trigger uses 0-15 (by the workflow id's hash), processes a
// shard of 16-63 each, picked at random when they open the database.
const (
	triggerShards = 16
	counterShards = 64
)

func pickShard() int16 { return int16(triggerShards + rand.IntN(counterShards-triggerShards)) }

// queueTotals queues the batch's changes to the counters, to be sent with the COMMIT.
func (w *wtx) queueTotals(shard int16, t totals) {
	if t.zero() {
		return
	}
	w.queue(`INSERT INTO counters AS k (shard, checkpoints, state_bytes, checkpoint_stored, states, states_stored)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (shard) DO UPDATE SET checkpoints = k.checkpoints + excluded.checkpoints,
		state_bytes = k.state_bytes + excluded.state_bytes, checkpoint_stored = k.checkpoint_stored + excluded.checkpoint_stored,
		states = k.states + excluded.states, states_stored = k.states_stored + excluded.states_stored`,
		shard, t.checkpoints, t.stateBytes, t.ckptStored, t.states, t.statesStored)
}

// countersSQL sums the shards.
const countersSQL = `SELECT coalesce(sum(workflows), 0)::bigint, coalesce(sum(checkpoints), 0)::bigint,
	coalesce(sum(state_bytes), 0)::bigint, coalesce(sum(checkpoint_stored), 0)::bigint, coalesce(sum(states), 0)::bigint,
	coalesce(sum(states_stored), 0)::bigint FROM counters`

// CheckFigures recounts every kept figure from the rows it counts and returns one line per
// figure that differs (ckptd verify). It reads the whole database: a check, not a listing.
func (s *Store) CheckFigures(ctx context.Context) ([]string, error) {
	var out []string
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		out = nil
		err := scanRows(ctx, tx, `SELECT w.workflow_id, w.ckpt_count, w.stored_bytes, w.latest_seq,
				coalesce(x.n, 0), coalesce(x.bytes, 0), coalesce(x.latest, 0)
			FROM workflows w LEFT JOIN (SELECT workflow_id, count(*) AS n, sum(stored_size)::bigint AS bytes, max(seq) AS latest
				FROM checkpoints GROUP BY workflow_id) x ON x.workflow_id = w.workflow_id
			WHERE w.ckpt_count <> coalesce(x.n, 0) OR w.stored_bytes <> coalesce(x.bytes, 0) OR w.latest_seq <> coalesce(x.latest, 0)`,
			func(rows pgx.Rows) error {
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
		if err := tx.QueryRow(ctx, `SELECT count(DISTINCT c.workflow_id) FROM checkpoints c
			WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.workflow_id = c.workflow_id)`).Scan(&orphans); err != nil {
			return err
		}
		if orphans > 0 {
			out = append(out, fmt.Sprintf("%d workflows have checkpoints but no row of their own", orphans))
		}
		var lgBad int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT thread_id, max(u) AS u FROM (
				SELECT thread_id, max(created_at) AS u FROM lg_checkpoints GROUP BY thread_id
				UNION ALL SELECT DISTINCT thread_id, 'epoch'::timestamptz FROM lg_writes
				UNION ALL SELECT DISTINCT thread_id, 'epoch'::timestamptz FROM lg_blobs) AS a GROUP BY thread_id) x
			FULL JOIN lg_threads t USING (thread_id)
			WHERE x.u IS DISTINCT FROM t.updated_at AND NOT (x.u IS NULL AND t.retention IS NOT NULL)`).Scan(&lgBad); err != nil {
			return err
		}
		if lgBad > 0 {
			out = append(out, fmt.Sprintf("%d LangGraph threads are missing from (or wrong in) the kept list of threads", lgBad))
		}
		var kw, rw int64
		var kt, rt totals
		if err := tx.QueryRow(ctx, countersSQL).Scan(&kw, &kt.checkpoints, &kt.stateBytes, &kt.ckptStored, &kt.states, &kt.statesStored); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM workflows), (SELECT count(*) FROM checkpoints),
			(SELECT coalesce(sum(size), 0)::bigint FROM checkpoints), (SELECT coalesce(sum(stored_size), 0)::bigint FROM checkpoints),
			(SELECT count(*) FROM states), (SELECT coalesce(sum(stored_size), 0)::bigint FROM states)`).
			Scan(&rw, &rt.checkpoints, &rt.stateBytes, &rt.ckptStored, &rt.states, &rt.statesStored); err != nil {
			return err
		}
		for _, c := range []struct {
			name        string
			kept, count int64
		}{{"workflows", kw, rw}, {"checkpoints", kt.checkpoints, rt.checkpoints}, {"state bytes", kt.stateBytes, rt.stateBytes},
			{"checkpoint stored bytes", kt.ckptStored, rt.ckptStored}, {"states", kt.states, rt.states},
			{"states stored bytes", kt.statesStored, rt.statesStored}} {
			if c.kept != c.count {
				out = append(out, fmt.Sprintf("counter %s is %d, the rows count %d", c.name, c.kept, c.count))
			}
		}
		// the database's footprint (the footprint step; footprint.go)
		kf, err := readFootprint(ctx, tx, keptFootprintSQL)
		if err != nil {
			return err
		}
		rf, err := readFootprint(ctx, tx, recountFootprintSQL)
		if err != nil {
			return err
		}
		for i, c := range footprintCounters {
			if kf.counts[i] != rf.counts[i] {
				out = append(out, fmt.Sprintf("counter %s is %d, the rows count %d", c.name, kf.counts[i], rf.counts[i]))
			}
		}
		return nil
	})
	if err != nil {
		return nil, wrapDB("check kept figures", err)
	}
	return out, nil
}
