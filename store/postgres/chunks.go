package postgres

// Chunked values (docs/storage.md "Chunked values", store/chunked.go), stored as SQLite stores
// them (store/sqlite/chunks.go) in two shared tables, chunks and chunk_runs, keyed by address
// with their reference counts beside them (a count update rewrites only the small main tuple:
// the bytes live in TOAST once they are large, and the tables leave room on each page for HOT
// updates).
//
// Several processes save and delete values sharing chunks at once; READ COMMITTED is enough as
// every decision is taken on a locked row:
//   - count up: UPDATE … FROM unnest(addresses, counts) RETURNING the rows found. This locks
//     them: a concurrent deleter has either committed (the row is gone, not returned) or waits
//     for us;
//   - insert the rows not found: INSERT … ON CONFLICT DO UPDATE SET refs = refs + excluded.refs
//     (a concurrent insert of the same new row); a row whose count is then exactly ours was
//     inserted by us, and only then are the chunks of a new run counted;
//   - count down with UPDATE … RETURNING refs, then DELETE … WHERE address = ANY($1) AND
//     refs <= 0, in the same transaction.
// Rows are always touched in address order (the arrays are sorted) so that two writers wait for
// each other in one order; a deadlock PostgreSQL still reports is retried with the whole batch.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// countArrays splits sorted counts into the address and count arrays of unnest.
func countArrays(cs []chunk.Count) (addrs [][]byte, ns []int64) {
	addrs = make([][]byte, len(cs))
	ns = make([]int64, len(cs))
	for i, c := range cs {
		addrs[i] = c.Addr[:]
		ns[i] = c.N
	}
	return addrs, ns
}

// refChunked records one more listing of cv's runs (with multiplicity), inserting the runs and
// chunks not stored yet, inside the writer's transaction. It returns the bytes it added.
func refChunked(ctx context.Context, w *wtx, cv *store.ChunkedValue) (added int64, err error) {
	runs := cv.RunCounts()
	addrs, ns := countArrays(runs)
	found, err := addressSet(w.query(ctx, `UPDATE chunk_runs AS r SET refs = r.refs + x.n
		FROM (SELECT * FROM unnest($1::bytea[], $2::bigint[]) AS x(address, n) ORDER BY address) AS x
		WHERE r.address = x.address RETURNING r.address`, addrs, ns))
	if err != nil {
		return 0, err
	}
	var newAddrs, newData [][]byte
	var newNs []int64
	want := map[chunk.Address]int64{}
	for _, rc := range runs {
		if found[rc.Addr] {
			continue
		}
		run := cv.Run(rc.Addr)
		newAddrs = append(newAddrs, rc.Addr[:])
		newNs = append(newNs, rc.N)
		newData = append(newData, run.Data)
		want[rc.Addr] = rc.N
	}
	if len(newAddrs) == 0 {
		return 0, nil
	}
	rows, err := w.query(ctx, `INSERT INTO chunk_runs AS r (address, refs, data)
		SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bytea[]) ORDER BY 1
		ON CONFLICT (address) DO UPDATE SET refs = r.refs + excluded.refs RETURNING r.address, r.refs`, newAddrs, newNs, newData)
	if err != nil {
		return 0, err
	}
	chunks := chunk.Tally{}
	err = eachRow(rows, func(rows pgx.Rows) error {
		var a []byte
		var refs int64
		if err := rows.Scan(&a, &refs); err != nil {
			return err
		}
		addr := chunk.Address(a)
		if refs == want[addr] { // inserted by us: its chunks are not counted yet
			run := cv.Run(addr)
			chunks.AddRefs(1, run.Refs)
			added += int64(len(run.Data))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(chunks) == 0 {
		return added, nil
	}
	counts := chunks.Sorted()
	addrs, ns = countArrays(counts)
	found, err = addressSet(w.query(ctx, `UPDATE chunks AS c SET refs = c.refs + x.n
		FROM (SELECT * FROM unnest($1::bytea[], $2::bigint[]) AS x(address, n) ORDER BY address) AS x
		WHERE c.address = x.address RETURNING c.address`, addrs, ns))
	if err != nil {
		return 0, err
	}
	var cAddrs, cData [][]byte
	var cNs, cSizes []int64
	var cEncs []int16
	for _, cc := range counts {
		if found[cc.Addr] {
			continue
		}
		data, enc, size := cv.Packed(cc.Addr)
		cAddrs = append(cAddrs, cc.Addr[:])
		cNs = append(cNs, cc.N)
		cEncs = append(cEncs, int16(enc))
		cSizes = append(cSizes, int64(size))
		cData = append(cData, data)
	}
	if len(cAddrs) == 0 {
		return added, nil
	}
	want = map[chunk.Address]int64{}
	for i, a := range cAddrs {
		want[chunk.Address(a)] = cNs[i]
	}
	sizeOf := map[chunk.Address]int64{}
	for i, a := range cAddrs {
		sizeOf[chunk.Address(a)] = int64(len(cData[i]))
	}
	rows, err = w.query(ctx, `INSERT INTO chunks AS c (address, refs, encoding, size, data)
		SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::smallint[], $4::bigint[], $5::bytea[]) ORDER BY 1
		ON CONFLICT (address) DO UPDATE SET refs = c.refs + excluded.refs RETURNING c.address, c.refs`,
		cAddrs, cNs, cEncs, cSizes, cData)
	if err != nil {
		return 0, err
	}
	err = eachRow(rows, func(rows pgx.Rows) error {
		var a []byte
		var refs int64
		if err := rows.Scan(&a, &refs); err != nil {
			return err
		}
		if refs == want[chunk.Address(a)] {
			added += sizeOf[chunk.Address(a)]
		}
		return nil
	})
	return added, err
}

// addressSet collects the addresses rows return.
func addressSet(rows pgx.Rows, err error) (map[chunk.Address]bool, error) {
	if err != nil {
		return nil, err
	}
	out := map[chunk.Address]bool{}
	err = eachRow(rows, func(rows pgx.Rows) error {
		var a []byte
		if err := rows.Scan(&a); err != nil {
			return err
		}
		out[chunk.Address(a)] = true
		return nil
	})
	return out, err
}

func eachRow(rows pgx.Rows, each func(rows pgx.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// releaseIndexes counts down the runs the removed values' indexes list, then deletes the runs
// nothing lists any more and counts down (and deletes) their chunks, inside the writer's
// transaction. It returns the bytes of the runs and chunks it deleted. A malformed index
// releases nothing (verify reports what it leaves).
func (s *Store) releaseIndexes(ctx context.Context, w *wtx, indexes [][]byte) (freed int64, err error) {
	runs := chunk.Tally{}
	for _, idx := range indexes {
		addrs, err := chunk.DecodeAddresses(idx)
		if err != nil {
			s.log.Error("ckptd store: a removed chunked value has a malformed index; its runs stay counted", "err", err)
			continue
		}
		runs.Add(1, addrs...)
	}
	if len(runs) == 0 {
		return 0, nil
	}
	addrs, ns := countArrays(runs.Sorted())
	rows, err := w.query(ctx, `UPDATE chunk_runs AS r SET refs = r.refs - x.n
		FROM (SELECT * FROM unnest($1::bytea[], $2::bigint[]) AS x(address, n) ORDER BY address) AS x
		WHERE r.address = x.address RETURNING r.address, CASE WHEN r.refs <= 0 THEN r.data END`, addrs, ns)
	if err != nil {
		return 0, err
	}
	var gone [][]byte
	chunks := chunk.Tally{}
	err = eachRow(rows, func(rows pgx.Rows) error {
		var a, data []byte
		if err := rows.Scan(&a, &data); err != nil {
			return err
		}
		if data == nil {
			return nil
		}
		gone = append(gone, a)
		freed += int64(len(data))
		refs, err := chunk.DecodeRun(data)
		if err != nil {
			s.log.Error("ckptd store: a deleted run does not decode; its chunks stay counted", "run", fmt.Sprintf("%x", a), "err", err)
			return nil
		}
		chunks.AddRefs(1, refs)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(gone) == 0 {
		return 0, nil
	}
	w.queue(`DELETE FROM chunk_runs WHERE address = ANY($1) AND refs <= 0`, gone)
	if len(chunks) == 0 {
		return freed, w.flush(ctx)
	}
	caddrs, cns := countArrays(chunks.Sorted())
	rows, err = w.query(ctx, `UPDATE chunks AS c SET refs = c.refs - x.n
		FROM (SELECT * FROM unnest($1::bytea[], $2::bigint[]) AS x(address, n) ORDER BY address) AS x
		WHERE c.address = x.address RETURNING c.address, c.refs, length(c.data)`, caddrs, cns)
	if err != nil {
		return 0, err
	}
	var del [][]byte
	err = eachRow(rows, func(rows pgx.Rows) error {
		var a []byte
		var refs, n int64
		if err := rows.Scan(&a, &refs, &n); err != nil {
			return err
		}
		if refs <= 0 {
			del = append(del, a)
			freed += n
		}
		return nil
	})
	if err != nil || len(del) == 0 {
		return freed, err
	}
	_, err = w.exec(ctx, `DELETE FROM chunks WHERE address = ANY($1) AND refs <= 0`, del)
	return freed, err
}

// pgQuery runs a query in a read transaction or the writer's.
type pgQuery func(ctx context.Context, sql string, args ...any) (pgx.Rows, error)

// openChunked rebuilds and verifies a chunked value (its row's data, size and SHA-256): its
// runs in one query, its chunks in another. Damage matches chunk.ErrCorrupt.
func (s *Store) openChunked(ctx context.Context, query pgQuery, indexData []byte, size int64, sha []byte) ([]byte, error) {
	return s.readChunked(ctx, query, indexData, size, sha, s.codec.OpenChunked)
}

// verifyChunked is openChunked for the integrity checks: every chunk decoded and checked,
// never taken from (nor added to) the codec's chunk cache (store.Codec.VerifyChunked).
func (s *Store) verifyChunked(ctx context.Context, query pgQuery, indexData []byte, size int64, sha []byte) ([]byte, error) {
	return s.readChunked(ctx, query, indexData, size, sha, s.codec.VerifyChunked)
}

// readChunked fetches what open (Codec.OpenChunked or VerifyChunked) rebuilds the value from.
func (s *Store) readChunked(ctx context.Context, query pgQuery, indexData []byte, size int64, sha []byte,
	open func([]byte, int64, []byte, store.BatchFetch[[]byte], store.BatchFetch[store.ChunkRow]) ([]byte, error)) ([]byte, error) {
	runs := func(addrs []chunk.Address) (map[chunk.Address][]byte, error) {
		out := make(map[chunk.Address][]byte, len(addrs))
		rows, err := query(ctx, `SELECT address, data FROM chunk_runs WHERE address = ANY($1)`, addrSlices(addrs))
		if err != nil {
			return nil, err
		}
		err = eachRow(rows, func(rows pgx.Rows) error {
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
		out := make(map[chunk.Address]store.ChunkRow, len(addrs))
		rows, err := query(ctx, `SELECT address, encoding, size, data FROM chunks WHERE address = ANY($1)`, addrSlices(addrs))
		if err != nil {
			return nil, err
		}
		err = eachRow(rows, func(rows pgx.Rows) error {
			var a []byte
			var r store.ChunkRow
			var enc int16
			if err := rows.Scan(&a, &enc, &r.Size, &r.Data); err != nil {
				return err
			}
			r.Enc = int(enc)
			if len(a) == len(chunk.Address{}) {
				out[chunk.Address(a)] = r
			}
			return nil
		})
		return out, err
	}
	return open(indexData, size, sha, runs, chunks)
}

func addrSlices(addrs []chunk.Address) [][]byte {
	out := make([][]byte, len(addrs))
	for i := range addrs {
		out[i] = addrs[i][:]
	}
	return out
}

// chunkedCorrupt turns an openChunked failure into a *store.CorruptError when it is damage.
func chunkedCorrupt(checkpointID, workflowID string, err error) error {
	if reason, ok := store.ChunkedReason(err); ok {
		return &store.CorruptError{CheckpointID: checkpointID, WorkflowID: workflowID, Reason: reason}
	}
	return fmt.Errorf("read chunked state: %w", err)
}

// collectIndexes reads the rows of a DELETE … RETURNING CASE WHEN encoding = 4 THEN … END: the
// indexes of the chunked values it removed (NULL for the others), appended to *dst.
func collectIndexes(rows pgx.Rows, err error) func(dst *[][]byte) error {
	return func(dst *[][]byte) error {
		if err != nil {
			return err
		}
		return eachRow(rows, func(rows pgx.Rows) error {
			var idx []byte
			if err := rows.Scan(&idx); err != nil {
				return err
			}
			if idx != nil {
				*dst = append(*dst, idx)
			}
			return nil
		})
	}
}

// prepareWrites cuts the large values of ws (outside the writer).
func (s *Store) prepareWrites(ws []store.Write) []store.PreparedWrite {
	return store.PrepareWrites(ws, s.codec, s.opts.CompressThreshold)
}

// putWrite stores one pending write of checkpointID inside the writer's transaction (which
// holds the workflow's lock): with replace, in place of the same (task, idx) if stored (whose
// chunked value is released); otherwise only if it is not stored yet. It reports whether a row
// was written.
func (s *Store) putWrite(ctx context.Context, w *wtx, checkpointID, workflowID, namespace string, pw store.PreparedWrite, replace bool) (bool, error) {
	wr := &pw.Write
	if replace {
		var old [][]byte
		if err := collectIndexes(w.query(ctx, `DELETE FROM writes WHERE checkpoint_id = $1 AND task_id = $2 AND idx = $3
			RETURNING CASE WHEN encoding = 4 THEN value END`, checkpointID, wr.TaskID, wr.Idx))(&old); err != nil {
			return false, err
		}
		if _, err := s.releaseIndexes(ctx, w, old); err != nil {
			return false, err
		}
	}
	var value, size, sha any = nullBytes(wr.Value), nil, nil
	enc := store.EncRaw
	if pw.Chunked != nil {
		enc, value, size, sha = store.EncChunked, pw.Chunked.IndexData(), pw.Chunked.Size(), pw.Chunked.SHA256()
	}
	ct, err := w.exec(ctx, `INSERT INTO writes (checkpoint_id, task_id, idx, workflow_id, namespace, channel, type, task_path,
		is_bytes, encoding, size, sha256, value) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
		ON CONFLICT (checkpoint_id, task_id, idx) DO NOTHING`, checkpointID, wr.TaskID, wr.Idx, workflowID, namespace,
		wr.Channel, nullStr(wr.Type), wr.TaskPath, wr.IsBytes, enc, size, sha, value)
	if err != nil {
		return false, err
	}
	if ct.RowsAffected() == 0 {
		return false, nil
	}
	if pw.Chunked != nil {
		if _, err := refChunked(ctx, w, pw.Chunked); err != nil {
			return false, err
		}
	}
	return true, nil
}

// verifyChunkedWrites reassembles every chunked pending-write value (one CorruptError per
// checkpoint with a damaged one) and counts their listings into audit.
func (s *Store) verifyChunkedWrites(ctx context.Context, tx pgx.Tx, audit *store.RefAudit) ([]store.CorruptError, error) {
	type cw struct {
		ckpt, task string
		idx, size  int64
		sha, index []byte
	}
	var ws []cw
	err := scanRows(ctx, tx, `SELECT checkpoint_id, task_id, idx, coalesce(size, 0), sha256, value FROM writes WHERE encoding = 4`,
		func(rows pgx.Rows) error {
			var w cw
			if err := rows.Scan(&w.ckpt, &w.task, &w.idx, &w.size, &w.sha, &w.index); err != nil {
				return err
			}
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
		if _, err := s.verifyChunked(ctx, tx.Query, w.index, w.size, w.sha); err != nil {
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
// problems.
func auditChunks(ctx context.Context, tx pgx.Tx, audit *store.RefAudit) ([]string, error) {
	err := scanRows(ctx, tx, `SELECT address, refs, data FROM chunk_runs`, func(rows pgx.Rows) error {
		var a, data []byte
		var refs int64
		if err := rows.Scan(&a, &refs, &data); err != nil {
			return err
		}
		if len(a) != len(chunk.Address{}) {
			audit.Problem(fmt.Sprintf("a run has a malformed address %x", a))
			return nil
		}
		audit.Run(chunk.Address(a), refs, data)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = scanRows(ctx, tx, `SELECT address, refs FROM chunks`, func(rows pgx.Rows) error {
		var a []byte
		var refs int64
		if err := rows.Scan(&a, &refs); err != nil {
			return err
		}
		if len(a) != len(chunk.Address{}) {
			audit.Problem(fmt.Sprintf("a chunk has a malformed address %x", a))
			return nil
		}
		audit.Chunk(chunk.Address(a), refs)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return audit.Problems(), nil
}

// StateBase returns the state of checkpointID as the base of a wire delta (store.Checkpoints).
func (s *Store) StateBase(ctx context.Context, checkpointID string) (store.DeltaBase, error) {
	var hash []byte
	err := s.readRow(ctx, `SELECT state_hash FROM checkpoints WHERE checkpoint_id = $1`, []any{checkpointID}, &hash)
	if noRows(err) {
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
