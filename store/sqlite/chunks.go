package sqlite

// Chunked values (docs/storage.md "Chunked values", store/chunked.go): a state or pending-write
// value larger than chunk.InlineMax is stored as content-defined chunks, each stored once
// however many values list it, and its row keeps the addresses of its runs (encoding
// store.EncChunked).
//
// Tables (schema step 9): chunks and runs hold the bytes by row id; chunk_addrs and run_addrs
// map an address to its row id; chunk_refs and run_refs count the listings by row id. Counts
// sit in narrow tables keyed by id rather than beside the bytes or by address: ids are handed
// out in save order, so the ~45 run counts a save of a grown state increments sit on one or two
// pages, where counts keyed by address would dirty one page per count (measured on the issue's
// workload: 59 KB of WAL per save against 79 KB with counts keyed by address and 245 KB with
// counts beside the bytes; 64 KB against 173 KB and 303 KB with ten other workflows stored).
//
// Counting (every mutation runs in the writer's BEGIN IMMEDIATE transaction, a single writer
// across processes, so "stored? count up : insert" and "count down, delete at 0" never
// interleave with another process's):
//   - a value stored (refChunked): each run of its index +1 (with multiplicity); a run not
//     stored yet is inserted, and each chunk it lists +1 (inserted if not stored). The +1 of a
//     run or chunk already stored waits in ref_log (reflog.go) until many are raised at once;
//   - a value removed (wtx.release): its runs are collected and counted down at the end of the
//     job, in the same transaction (flushReleases), after every listing waiting in ref_log was
//     taken into the same net changes: a run reaching 0 is deleted and each chunk it lists -1;
//     a chunk reaching 0 is deleted. Deferring the decrements to the end of the job never frees
//     what the job itself lists again, and a crash leaves the state of some commit, in which
//     the counts plus ref_log match the listings.
//
// The new chunks of one value are stored together in packs (packs.go), whose bytes go when no
// chunk stored in them is left.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

const (
	// addrCTE enumerates the 32-byte addresses of the blob ?1 holding ?2 of them:
	// k(i) with address = substr(?1, i*32+1, 32).
	addrCTE = `WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i + 1 < ?2) `

	qRunsByAddr = addrCTE + `SELECT a.address, r.data FROM k CROSS JOIN run_addrs a ON a.address = substr(?1, k.i * 32 + 1, 32)
		CROSS JOIN runs r ON r.id = a.id`
	qChunksByAddr = addrCTE + `SELECT a.address, c.encoding, c.size, c.data, c.pack, c.pack_off, c.pack_len FROM k
		CROSS JOIN chunk_addrs a ON a.address = substr(?1, k.i * 32 + 1, 32) CROSS JOIN chunks c ON c.id = a.id`
	qChunksByAddrNoPacks = addrCTE + `SELECT a.address, c.encoding, c.size, c.data, NULL, NULL, NULL FROM k
		CROSS JOIN chunk_addrs a ON a.address = substr(?1, k.i * 32 + 1, 32) CROSS JOIN chunks c ON c.id = a.id`

	qRunUp        = `UPDATE run_refs SET refs = refs + ?1 WHERE id = (SELECT id FROM run_addrs WHERE address = ?2)`
	qRunIDsByAddr = addrCTE + `SELECT a.address, a.id FROM k CROSS JOIN run_addrs a ON a.address = substr(?1, k.i * 32 + 1, 32)`
	qRunIns       = `INSERT INTO runs(data) VALUES (?)`
	qRunAddr      = `INSERT OR REPLACE INTO run_addrs(address, id) VALUES (?, ?)`
	qRunRefs      = `INSERT OR REPLACE INTO run_refs(id, refs) VALUES (?, ?)`
	qChunkUp      = `UPDATE chunk_refs SET refs = refs + ?1 WHERE id = (SELECT id FROM chunk_addrs WHERE address = ?2)`
	// countBatched's statements: the ids of addresses, then one count change per distinct change
	qChunkIDsByAddr = addrCTE + `SELECT a.address, a.id FROM k CROSS JOIN chunk_addrs a ON a.address = substr(?1, k.i * 32 + 1, 32)`
	qChunksAdd      = `UPDATE chunk_refs SET refs = refs + ?1 WHERE id IN (SELECT value FROM json_each(?2)) RETURNING id, refs`
	qRunsAdd        = `UPDATE run_refs SET refs = refs + ?1 WHERE id IN (SELECT value FROM json_each(?2)) RETURNING id, refs`
	qChunkIns       = `INSERT INTO chunks(encoding, size, data) VALUES (?, ?, ?)`
	qChunkAddr      = `INSERT OR REPLACE INTO chunk_addrs(address, id) VALUES (?, ?)`
	qChunkRefs      = `INSERT OR REPLACE INTO chunk_refs(id, refs) VALUES (?, ?)`

	qRunDown     = `UPDATE run_refs SET refs = refs - ?1 WHERE id = (SELECT id FROM run_addrs WHERE address = ?2) RETURNING id, refs`
	qRunDel      = `DELETE FROM runs WHERE id = ? RETURNING data`
	qRunDelRefs  = `DELETE FROM run_refs WHERE id = ?`
	qRunDelAddr  = `DELETE FROM run_addrs WHERE address = ?`
	qChunkDown   = `UPDATE chunk_refs SET refs = refs - ?1 WHERE id = (SELECT id FROM chunk_addrs WHERE address = ?2) RETURNING id, refs`
	qChunkDel    = `DELETE FROM chunks WHERE id = ? RETURNING pack`
	qChunkDelOld = `DELETE FROM chunks WHERE id = ? RETURNING NULL`
	qChunkDelRef = `DELETE FROM chunk_refs WHERE id = ?`
	qChunkDelAdr = `DELETE FROM chunk_addrs WHERE address = ?`
)

// refChunked records one more listing of cv's runs (with multiplicity), inserting the runs and
// chunks not stored yet, inside the writer's transaction: the listings of those stored already
// wait in the job's ups (reflog.go). It returns the bytes it added to the database (new runs
// and new chunks as stored).
func (s *Store) refChunked(ctx context.Context, w *wtx, cv *store.ChunkedValue) (added int64, err error) {
	newRuns, err := w.listUp(ctx, knownRun, cv.RunCounts())
	if err != nil {
		return 0, err
	}
	chunks := chunk.Tally{}
	for _, rc := range newRuns {
		run := cv.Run(rc.Addr)
		res, err := w.exec(ctx, qRunIns, run.Data)
		if err != nil {
			return 0, err
		}
		id, _ := res.LastInsertId()
		if _, err := w.exec(ctx, qRunAddr, rc.Addr[:], id); err != nil {
			return 0, err
		}
		w.s.known.learn(knownRun, rc.Addr, id)
		if _, err := w.exec(ctx, qRunRefs, id, rc.N); err != nil {
			return 0, err
		}
		chunks.AddRefs(1, run.Refs)
		added += int64(len(run.Data))
	}
	newChunks, err := w.listUp(ctx, knownChunk, chunks.Sorted())
	if err != nil {
		return 0, err
	}
	fresh := make([]newChunk, 0, len(newChunks))
	for _, cc := range newChunks {
		data, enc, size := cv.Packed(cc.Addr)
		fresh = append(fresh, newChunk{addr: cc.Addr, refs: cc.N, data: data, enc: enc, size: size})
		added += int64(len(data))
	}
	if err := s.insertChunks(ctx, w, fresh); err != nil {
		return 0, err
	}
	s.walPending.Add(added)
	return added, nil
}

// lookupIDs reads the ids of the stored runs or chunks among addrs (one statement per 4096) and
// hands each to note; knownIDs learns them.
func lookupIDs(ctx context.Context, w *wtx, kind knownKind, addrs []chunk.Address, note func(chunk.Address, int64)) error {
	if len(addrs) == 0 {
		return nil
	}
	idsQ := qRunIDsByAddr
	if kind == knownChunk {
		idsQ = qChunkIDsByAddr
	}
	return eachAddrRow(ctx, w.query, idsQ, addrs, func(rows *sql.Rows) error {
		var a []byte
		var id int64
		if err := rows.Scan(&a, &id); err != nil {
			return err
		}
		if len(a) != len(chunk.Address{}) {
			return nil
		}
		note(chunk.Address(a), id)
		w.s.known.learn(kind, chunk.Address(a), id)
		return nil
	})
}

// release records that a value whose index is indexData (the addresses of its runs) is no
// longer stored: its runs are counted down when the job ends (flushReleases). A malformed
// index releases nothing (verify reports what it leaves behind).
func (w *wtx) release(indexData []byte) {
	addrs, err := chunk.DecodeAddresses(indexData)
	if err != nil {
		w.s.log.Error("ckptd store: a removed chunked value has a malformed index; its runs stay counted", "err", err)
		return
	}
	if w.rel == nil {
		w.rel = chunk.Tally{}
	}
	w.rel.Add(1, addrs...)
}

// flushReleases ends a job's chunk bookkeeping, inside the writer's transaction before the job's
// savepoint is released. Without releases, the job's listings of stored runs and chunks go to
// ref_log (logUps). With releases, every listing waiting in ref_log and the job's own are taken
// into the same net changes as the releases (so that no count reaches 0 while a listing of it
// waits): each run's count changes by its net; a run no value lists any more is deleted and
// each chunk it lists counted down with the chunks' own net changes; a chunk no run lists any
// more is deleted, and the packs that lost chunks settled (settlePacks).
func (s *Store) flushReleases(ctx context.Context, w *wtx) error {
	if len(w.rel) == 0 {
		return s.logUps(ctx, w)
	}
	if err := s.drainRefLog(ctx, w); err != nil {
		return err
	}
	runs := w.rel
	w.rel = nil
	rcs := runs.Sorted()
	runIDs, runOwner, err := w.ids(ctx, knownRun, rcs)
	if err != nil {
		return err
	}
	net := w.up(knownRun)
	for _, rc := range rcs {
		if id, ok := runIDs[rc.Addr]; ok {
			net[id] -= rc.N
		} // not stored: nothing to count down (verify reports the dangling listing)
	}
	runsAfter, err := applyNet(ctx, w, knownRun, net)
	if err != nil {
		return err
	}
	chunks := chunk.Tally{}
	freed := false
	var packs map[int64]bool
	for _, rc := range rcs {
		id, ok := runIDs[rc.Addr]
		if !ok || runOwner[id] != rc.Addr {
			continue
		}
		if refs, counted := runsAfter[id]; !counted || refs > 0 {
			continue
		}
		var data []byte
		if err := w.queryRow(ctx, qRunDel, id).Scan(&data); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := w.exec(ctx, qRunDelRefs, id); err != nil {
			return err
		}
		if _, err := w.exec(ctx, qRunDelAddr, rc.Addr[:]); err != nil {
			return err
		}
		s.known.forget(knownRun, rc.Addr)
		freed = true
		if data == nil {
			continue
		}
		refsOf, err := chunk.DecodeRun(data)
		if err != nil {
			s.log.Error("ckptd store: a deleted run does not decode; its chunks stay counted", "run", rc.Addr.String(), "err", err)
			continue
		}
		chunks.AddRefs(1, refsOf)
	}
	ccs := chunks.Sorted()
	chunkIDs, chunkOwner, err := w.ids(ctx, knownChunk, ccs)
	if err != nil {
		return err
	}
	cnet := w.up(knownChunk)
	for _, cc := range ccs {
		if id, ok := chunkIDs[cc.Addr]; ok {
			cnet[id] -= cc.N
		}
	}
	chunksAfter, err := applyNet(ctx, w, knownChunk, cnet)
	if err != nil {
		return err
	}
	w.ups = [2]map[int64]int64{}
	for _, cc := range ccs {
		id, ok := chunkIDs[cc.Addr]
		if !ok || chunkOwner[id] != cc.Addr {
			continue
		}
		if refs, counted := chunksAfter[id]; !counted || refs > 0 {
			continue
		}
		del := qChunkDel
		if !s.hasPacks(ctx) {
			del = qChunkDelOld
		}
		var pack sql.NullInt64
		if err := w.queryRow(ctx, del, id).Scan(&pack); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if pack.Valid {
			if packs == nil {
				packs = map[int64]bool{}
			}
			packs[pack.Int64] = true
		}
		for _, q := range []struct {
			sql string
			arg any
		}{{qChunkDelRef, id}, {qChunkDelAdr, cc.Addr[:]}} {
			if _, err := w.exec(ctx, q.sql, q.arg); err != nil {
				return err
			}
		}
		s.known.forget(knownChunk, cc.Addr)
	}
	if err := s.settlePacks(ctx, w, packs); err != nil {
		return err
	}
	if freed {
		s.deletes.Add(1) // the background vacuum returns the pages to the file system
	}
	return nil
}

// queryFunc runs a query inside a read or write transaction (rtx.cached, wtx.query).
type queryFunc func(ctx context.Context, q string, args ...any) (*sql.Rows, error)

// openChunked rebuilds and verifies a chunked value (its row's data, size and SHA-256) through
// query: its runs in one statement, its chunks in another, then the packs they lie in (each
// once). Damage is an error matching chunk.ErrCorrupt (store.ChunkedReason).
func (s *Store) openChunked(ctx context.Context, query queryFunc, indexData []byte, size int64, sha []byte) ([]byte, error) {
	return s.readChunked(ctx, query, indexData, size, sha, s.codec.OpenChunked)
}

// verifyChunked is openChunked for the integrity checks: every chunk decoded and checked,
// never taken from (nor added to) the codec's chunk cache (store.Codec.VerifyChunked).
func (s *Store) verifyChunked(ctx context.Context, query queryFunc, indexData []byte, size int64, sha []byte) ([]byte, error) {
	return s.readChunked(ctx, query, indexData, size, sha, s.codec.VerifyChunked)
}

// readChunked fetches what open (Codec.OpenChunked or VerifyChunked) rebuilds the value from.
func (s *Store) readChunked(ctx context.Context, query queryFunc, indexData []byte, size int64, sha []byte,
	open func([]byte, int64, []byte, store.BatchFetch[[]byte], store.BatchFetch[store.ChunkRow]) ([]byte, error)) ([]byte, error) {
	runs := func(addrs []chunk.Address) (map[chunk.Address][]byte, error) {
		out := make(map[chunk.Address][]byte, len(addrs))
		err := eachAddrRow(ctx, query, qRunsByAddr, addrs, func(rows *sql.Rows) error {
			var a, data []byte
			if err := rows.Scan(&a, &data); err != nil {
				return err
			}
			if len(a) == len(chunk.Address{}) {
				out[chunk.Address(a)] = data
			}
			return nil
		})
		return out, err
	}
	chunks := func(addrs []chunk.Address) (map[chunk.Address]store.ChunkRow, error) {
		return s.fetchChunks(ctx, query, addrs)
	}
	return open(indexData, size, sha, runs, chunks)
}

// eachAddrRow runs q (one of the by-address queries) over addrs, in batches of at most
// addrBatch addresses.
func eachAddrRow(ctx context.Context, query queryFunc, q string, addrs []chunk.Address, each func(rows *sql.Rows) error) error {
	const addrBatch = 4096
	for len(addrs) > 0 {
		n := min(len(addrs), addrBatch)
		rows, err := query(ctx, q, chunk.AppendAddresses(make([]byte, 0, n*32), addrs[:n]), n)
		if err != nil {
			return err
		}
		if err := eachRow(ctx, rows, each); err != nil {
			return err
		}
		addrs = addrs[n:]
	}
	return nil
}

// chunkedCorrupt turns an openChunked failure into the checkpoint's *store.CorruptError when it
// is damage; other errors are returned as they are.
func chunkedCorrupt(checkpointID string, err error) error {
	if reason, ok := store.ChunkedReason(err); ok {
		return &store.CorruptError{CheckpointID: checkpointID, Reason: reason}
	}
	return fmt.Errorf("read chunked state: %w", err)
}

// releaseRows releases the chunked values a DELETE … RETURNING CASE WHEN encoding = 4 THEN
// value END (or data) statement removed: one index per row, NULL for values stored inline.
func (w *wtx) releaseRows(rows *sql.Rows, err error) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var index []byte
		if err := rows.Scan(&index); err != nil {
			return err
		}
		if index != nil {
			w.release(index)
		}
	}
	return rows.Err()
}

// deleteWrites runs del (a prepared DELETE FROM writes … RETURNING the chunked index) with args
// and releases what it removed.
func (w *wtx) deleteWrites(ctx context.Context, del *sql.Stmt, args ...any) error {
	return w.releaseRows(del.QueryContext(ctx, args...))
}

// prepareWrites cuts the large values of ws (outside the writer).
func (s *Store) prepareWrites(ws []store.Write) []store.PreparedWrite {
	return store.PrepareWrites(ws, s.codec, s.opts.CompressThreshold)
}

// putWrite stores one pending write of checkpointID inside the writer's transaction: with
// replace, in place of the same (task, idx) if stored (whose chunked value is released);
// otherwise only if it is not stored yet. It reports whether a row was written.
func (s *Store) putWrite(ctx context.Context, w *wtx, checkpointID, workflowID, namespace string, pw store.PreparedWrite, replace bool) (bool, error) {
	wr := &pw.Write
	if replace {
		if err := w.releaseRows(w.query(ctx, `DELETE FROM writes WHERE checkpoint_id = ? AND task_id = ? AND idx = ?
			RETURNING CASE WHEN encoding = 4 THEN value END`, checkpointID, wr.TaskID, wr.Idx)); err != nil {
			return false, err
		}
	}
	var value, size, sha any
	enc := store.EncRaw
	if wr.Value != nil {
		value = wr.Value
	}
	if pw.Chunked != nil {
		enc, value, size, sha = store.EncChunked, pw.Chunked.IndexData(), pw.Chunked.Size(), pw.Chunked.SHA256()
	}
	res, err := w.exec(ctx, `INSERT OR IGNORE INTO writes(checkpoint_id, task_id, idx, workflow_id, namespace, channel, type,
		task_path, is_bytes, encoding, size, sha256, value) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`, checkpointID, wr.TaskID, wr.Idx,
		workflowID, namespace, wr.Channel, nullStr(wr.Type), wr.TaskPath, wr.IsBytes, enc, size, sha, value)
	if err != nil {
		return false, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if pw.Chunked != nil {
		if _, err := s.refChunked(ctx, w, pw.Chunked); err != nil {
			return false, err
		}
	}
	return true, nil
}

// verifyChunkedWrites reassembles every chunked pending-write value (one CorruptError per
// checkpoint with a damaged one) and counts their listings into audit.
func (s *Store) verifyChunkedWrites(ctx context.Context, tx *rtx, audit *store.RefAudit) ([]store.CorruptError, error) {
	type cw struct {
		ckpt, task string
		idx, size  int64
		sha, index []byte
	}
	var ws []cw
	err := scanRows(ctx, tx, `SELECT checkpoint_id, task_id, idx, size, sha256, value FROM writes WHERE encoding = 4`, func(rows *sql.Rows) error {
		var w cw
		var size sql.NullInt64
		if err := rows.Scan(&w.ckpt, &w.task, &w.idx, &size, &w.sha, &w.index); err != nil {
			return err
		}
		w.size = size.Int64
		audit.Value(fmt.Sprintf("pending write %s/%s/%d", w.ckpt, w.task, w.idx), w.index)
		ws = append(ws, w)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []store.CorruptError
	seen := map[string]bool{}
	for _, w := range ws {
		if _, err := s.verifyChunked(ctx, tx.cached, w.index, w.size, w.sha); err != nil {
			reason, ok := store.ChunkedReason(err)
			if !ok {
				return nil, err
			}
			if !seen[w.ckpt] {
				seen[w.ckpt] = true
				out = append(out, store.CorruptError{CheckpointID: w.ckpt, Reason: fmt.Sprintf("pending write %s/%d: %s", w.task, w.idx, reason)})
			}
		}
	}
	return out, nil
}

// auditChunks feeds the stored runs and chunks with their counts to audit and returns its
// problems, plus the rows that have lost their address or count row.
func (s *Store) auditChunks(ctx context.Context, tx *rtx, audit *store.RefAudit) ([]string, error) {
	// a count is the stored one plus the listings waiting in ref_log (reflog.go)
	pending, err := refLogAudit(ctx, tx)
	if err != nil {
		return nil, err
	}
	err = scanRows(ctx, tx, `SELECT a.address, a.id, r.refs, d.data FROM run_addrs a LEFT JOIN run_refs r ON r.id = a.id
		LEFT JOIN runs d ON d.id = a.id`, func(rows *sql.Rows) error {
		var addr, data []byte
		var id int64
		var refs sql.NullInt64
		if err := rows.Scan(&addr, &id, &refs, &data); err != nil {
			return err
		}
		if len(addr) != len(chunk.Address{}) {
			audit.Problem(fmt.Sprintf("run row %d has a malformed address %x", id, addr))
			return nil
		}
		a := chunk.Address(addr)
		if !refs.Valid {
			audit.Problem(fmt.Sprintf("run %s has no reference count", a))
		}
		audit.Run(a, refs.Int64+pending[knownRun][id], data)
		delete(pending[knownRun], id)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = scanRows(ctx, tx, `SELECT a.address, a.id, r.refs, c.id IS NOT NULL FROM chunk_addrs a LEFT JOIN chunk_refs r ON r.id = a.id
		LEFT JOIN chunks c ON c.id = a.id`, func(rows *sql.Rows) error {
		var addr []byte
		var id int64
		var refs sql.NullInt64
		var has bool
		if err := rows.Scan(&addr, &id, &refs, &has); err != nil {
			return err
		}
		if len(addr) != len(chunk.Address{}) {
			audit.Problem(fmt.Sprintf("chunk row %d has a malformed address %x", id, addr))
			return nil
		}
		a := chunk.Address(addr)
		if !refs.Valid {
			audit.Problem(fmt.Sprintf("chunk %s has no reference count", a))
		}
		if !has {
			audit.Problem(fmt.Sprintf("chunk %s has no bytes", a))
		}
		audit.Chunk(a, refs.Int64+pending[knownChunk][id])
		delete(pending[knownChunk], id)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for kind, what := range []string{"runs", "chunks"} {
		if n := len(pending[kind]); n > 0 {
			audit.Problem(fmt.Sprintf("ref_log lists %d %s that are not stored", n, what))
		}
	}
	if err := s.auditPacks(ctx, tx, audit); err != nil {
		return nil, err
	}
	// rows no address leads to (they would never be collected)
	for _, q := range []struct{ what, sql string }{
		{"runs", `SELECT count(*) FROM runs WHERE id NOT IN (SELECT id FROM run_addrs)`},
		{"run counts", `SELECT count(*) FROM run_refs WHERE id NOT IN (SELECT id FROM run_addrs)`},
		{"chunks", `SELECT count(*) FROM chunks WHERE id NOT IN (SELECT id FROM chunk_addrs)`},
		{"chunk counts", `SELECT count(*) FROM chunk_refs WHERE id NOT IN (SELECT id FROM chunk_addrs)`},
	} {
		var n int
		if err := tx.QueryRowContext(ctx, q.sql).Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			audit.Problem(fmt.Sprintf("%d rows of %s have no address (orphans)", n, q.what))
		}
	}
	return audit.Problems(), nil
}

// StateBase returns the state of checkpointID as the base of a wire delta (store.Checkpoints).
func (s *Store) StateBase(ctx context.Context, checkpointID string) (store.DeltaBase, error) {
	var hash []byte
	err := s.readAuto(ctx, func(tx *rtx) error {
		return tx.cachedRow(ctx, `SELECT state_hash FROM checkpoints WHERE checkpoint_id = ?`, checkpointID).Scan(&hash)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.DeltaBase{}, fmt.Errorf("base checkpoint %q: %w", checkpointID, store.ErrNotFound)
	}
	if err != nil {
		return store.DeltaBase{}, wrapDB(fmt.Sprintf("read base checkpoint %q", checkpointID), err)
	}
	return s.states.Base(checkpointID, hash, func() ([]byte, error) {
		cp, err := s.Load(ctx, checkpointID)
		return cp.State, err
	})
}
