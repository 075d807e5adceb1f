package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ckptd/ckptd/store/chunk"
)

// Listings logged, counted later (schema step 18). A value stored lists its runs, and a run
// stored lists its chunks; each listing of a run or chunk already stored is one more in its
// count (chunks.go). A save of a state that grew by a step lists ~38 runs, all but one or two
// stored already, and its new runs list ~30 chunks, most of them stored: ~70 counts to raise, one
// b-tree row each (0.5 ms of the save in modernc SQLite, on its path). The job now appends them
// to ref_log instead, as one row per kind (ids and how many more listings each), and the counts
// are raised later, many saves' worth at once (a run listed by 100 saves in a row is raised once
// by 100):
//   - before any count goes down: a job that releases values (flushReleases) first takes every
//     row of ref_log, of every process, into the same net changes as its releases, in its own
//     transaction; so a count never reaches 0, and its run or chunk is never deleted, while a
//     listing of it waits in the log;
//   - when the log grew past refLogApplyRows rows, by the job that finds it so;
//   - when the writer has been idle for compactIdle (refLogLoop).
//
// A count stored in run_refs or chunk_refs is therefore at most the number of listings; the
// listings are its count plus its rows in ref_log, which is what verify's reference audit
// checks. A run or chunk is found stored by its address (chunk_addrs, run_addrs), never by its
// count, so one waiting for its count is reused like any other.

// refLogApplyRows: a job that finds at least this many rows in ref_log (as this process counts
// them) raises the counts they log.
const refLogApplyRows = 256

// listUp notes one more listing (c.N) of each of cs that is stored, in the job's ups, and
// returns the others (not stored yet), in order. The ids come from knownIDs, or one statement
// for those it does not know.
func (w *wtx) listUp(ctx context.Context, kind knownKind, cs []chunk.Count) ([]chunk.Count, error) {
	ids, _, err := w.ids(ctx, kind, cs)
	if err != nil {
		return nil, err
	}
	var missing []chunk.Count
	for _, c := range cs {
		id, ok := ids[c.Addr]
		if !ok {
			missing = append(missing, c)
			continue
		}
		w.up(kind)[id] += c.N
	}
	return missing, nil
}

// up returns the job's pending listings of kind (id -> how many more).
func (w *wtx) up(kind knownKind) map[int64]int64 {
	if w.ups[kind] == nil {
		w.ups[kind] = map[int64]int64{}
	}
	return w.ups[kind]
}

// ids returns the row ids of the stored runs or chunks among cs (knownIDs first, then one
// statement for the others), and which address each id was found for.
func (w *wtx) ids(ctx context.Context, kind knownKind, cs []chunk.Count) (map[chunk.Address]int64, map[int64]chunk.Address, error) {
	ids := make(map[chunk.Address]int64, len(cs))
	owner := make(map[int64]chunk.Address, len(cs))
	note := func(a chunk.Address, id int64) {
		ids[a] = id
		owner[id] = a
	}
	var unknown []chunk.Address
	for _, c := range cs {
		if id, ok := w.s.known.get(kind, c.Addr); ok {
			note(c.Addr, id)
		} else {
			unknown = append(unknown, c.Addr)
		}
	}
	if err := lookupIDs(ctx, w, kind, unknown, note); err != nil {
		return nil, nil, err
	}
	return ids, owner, nil
}

// logUps appends the job's pending listings to ref_log (one row per kind), and raises the
// logged counts when the log has grown past refLogApplyRows.
func (s *Store) logUps(ctx context.Context, w *wtx) error {
	if s.refLogDue.Load() || !s.refLog {
		return s.applyRefLog(ctx, w)
	}
	rows := 0
	for kind, m := range w.ups {
		if len(m) == 0 {
			continue
		}
		if _, err := w.exec(ctx, `INSERT INTO ref_log(kind, ids) VALUES (?, ?)`, kind, encodeUps(m)); err != nil {
			return err
		}
		rows++
	}
	w.ups = [2]map[int64]int64{}
	if rows == 0 {
		return nil
	}
	// counted once committed (a job rolled back logs nothing)
	w.after(func() {
		if s.refLogRows.Add(int64(rows)) >= refLogApplyRows {
			s.refLogDue.Store(true)
		}
		s.kickRefLog()
	})
	return nil
}

// applyRefLog raises the counts of every listing in ref_log (and the job's own), and empties it.
func (s *Store) applyRefLog(ctx context.Context, w *wtx) error {
	if err := s.drainRefLog(ctx, w); err != nil {
		return err
	}
	for _, kind := range []knownKind{knownRun, knownChunk} {
		if _, err := applyNet(ctx, w, kind, w.ups[kind]); err != nil {
			return err
		}
	}
	w.ups = [2]map[int64]int64{}
	return nil
}

// drainRefLog takes every row of ref_log into the job's pending listings and deletes them; the
// job then applies them together with its own (applyRefLog, flushReleases).
func (s *Store) drainRefLog(ctx context.Context, w *wtx) error {
	if !s.refLog {
		return nil // opened at an older schema (tests only): listings are counted at once
	}
	rows, err := w.query(ctx, `DELETE FROM ref_log RETURNING kind, ids`)
	if err != nil {
		return err
	}
	if err := eachRow(ctx, rows, func(rows *sql.Rows) error {
		return scanRefLogRow(rows, w.up)
	}); err != nil {
		return err
	}
	w.after(func() {
		s.refLogRows.Store(0)
		s.refLogDue.Store(false)
	})
	return nil
}

// applyNet adds net[id] to the count of each id, all in one statement, and returns the counts
// after, by id. An id without a count row is left out (verify reports the listing). A log
// raised after 128 saves holds a few hundred ids with as many different changes: one UPDATE per
// distinct change took ~5 ms there.
func applyNet(ctx context.Context, w *wtx, kind knownKind, net map[int64]int64) (map[int64]int64, error) {
	pairs := make([][2]int64, 0, len(net))
	for id, n := range net {
		if n != 0 {
			pairs = append(pairs, [2]int64{id, n})
		}
	}
	after := make(map[int64]int64, len(pairs))
	if len(pairs) == 0 {
		return after, nil
	}
	slices.SortFunc(pairs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) }) // the same statement for the same changes
	js, err := json.Marshal(pairs)
	if err != nil {
		return nil, err
	}
	q := qRunsNet
	if kind == knownChunk {
		q = qChunksNet
	}
	rows, err := w.query(ctx, q, string(js))
	if err != nil {
		return nil, err
	}
	err = eachRow(ctx, rows, func(rows *sql.Rows) error {
		var id, refs int64
		if err := rows.Scan(&id, &refs); err != nil {
			return err
		}
		after[id] = refs
		return nil
	})
	return after, err
}

// qRunsNet and qChunksNet add n to the count of each id of the JSON array ?1 of [id, n] pairs.
const (
	qRunsNet = `UPDATE run_refs SET refs = refs + j.n FROM (SELECT value ->> 0 AS id, value ->> 1 AS n FROM json_each(?1)) AS j
		WHERE run_refs.id = j.id RETURNING run_refs.id, run_refs.refs`
	qChunksNet = `UPDATE chunk_refs SET refs = refs + j.n FROM (SELECT value ->> 0 AS id, value ->> 1 AS n FROM json_each(?1)) AS j
		WHERE chunk_refs.id = j.id RETURNING chunk_refs.id, chunk_refs.refs`
)

// encodeUps encodes listings as (id, n) pairs of uvarints, ids ascending.
func encodeUps(m map[int64]int64) []byte {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]byte, 0, len(ids)*4)
	for _, id := range ids {
		out = binary.AppendUvarint(out, uint64(id))
		out = binary.AppendUvarint(out, uint64(m[id]))
	}
	return out
}

// decodeUps adds the listings of an encodeUps row to m.
func decodeUps(b []byte, m map[int64]int64) error {
	for len(b) > 0 {
		id, k := binary.Uvarint(b)
		if k <= 0 {
			return errors.New("ref_log: malformed row")
		}
		b = b[k:]
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return errors.New("ref_log: malformed row")
		}
		b = b[k:]
		m[int64(id)] += int64(n)
	}
	return nil
}

// kickRefLog wakes refLogLoop.
func (s *Store) kickRefLog() {
	select {
	case s.refLogKick <- struct{}{}:
	default:
	}
}

// refLogLoop raises the logged counts once the writer has been idle for compactIdle, so that
// the log does not wait for the next release.
func (s *Store) refLogLoop() {
	defer s.bgWG.Done()
	ctx := context.Background()
	for {
		select {
		case <-s.stopBG:
			return
		case <-s.refLogKick:
		}
		for {
			idle, wait := s.writerIdle(compactIdle)
			if idle {
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-s.stopBG:
				t.Stop()
				return
			case <-t.C:
			}
		}
		if s.refLogRows.Load() == 0 || !s.Condition().Writable() {
			continue
		}
		if err := s.do(ctx, func(ctx context.Context, w *wtx) error { return s.applyRefLog(ctx, w) }); err != nil &&
			!errors.Is(err, context.Canceled) {
			s.log.Warn("ckptd store: raising logged reference counts failed; the next release raises them", "err", err)
		}
	}
}

// countRefLog counts the rows left in ref_log (by a crash, a stop, or another process), for
// refLogLoop.
func (s *Store) countRefLog(ctx context.Context) (int64, error) {
	if !s.refLog {
		return 0, nil
	}
	var n int64
	err := s.readAuto(ctx, func(tx *rtx) error {
		return tx.QueryRowContext(ctx, `SELECT count(*) FROM ref_log`).Scan(&n)
	})
	return n, err
}

// refLogAudit adds the listings waiting in ref_log to verify's counts: pending[kind][id].
func refLogAudit(ctx context.Context, tx *rtx) ([2]map[int64]int64, error) {
	out := [2]map[int64]int64{{}, {}}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'ref_log'`).Scan(&n); err != nil || n == 0 {
		return out, err // a database of an older schema (verify opens them read-only)
	}
	err := scanRows(ctx, tx, `SELECT kind, ids FROM ref_log`, func(rows *sql.Rows) error {
		return scanRefLogRow(rows, func(kind knownKind) map[int64]int64 { return out[kind] })
	})
	return out, err
}

// scanRefLogRow adds the listings of a ref_log row (kind, ids) to into(kind).
func scanRefLogRow(rows *sql.Rows, into func(knownKind) map[int64]int64) error {
	var kind int
	var data []byte
	if err := rows.Scan(&kind, &data); err != nil {
		return err
	}
	if kind != int(knownRun) && kind != int(knownChunk) {
		return fmt.Errorf("ref_log: unknown kind %d", kind)
	}
	return decodeUps(data, into(knownKind(kind)))
}
