package sqlite

import (
	"context"
	"database/sql"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// qChunkBytesByAddr reads the stored bytes of chunks by address: a chunk in a pack counts its
// own bytes there (its pack's other bytes are other chunks'); qChunkBytesByAddrNoPacks is it on
// a database without packs.
const (
	qChunkBytesByAddr = addrCTE + `SELECT a.address, coalesce(c.pack_len, length(c.data)) FROM k
	CROSS JOIN chunk_addrs a ON a.address = substr(?1, k.i * 32 + 1, 32) CROSS JOIN chunks c ON c.id = a.id`
	qChunkBytesByAddrNoPacks = addrCTE + `SELECT a.address, length(c.data) FROM k
	CROSS JOIN chunk_addrs a ON a.address = substr(?1, k.i * 32 + 1, 32) CROSS JOIN chunks c ON c.id = a.id`
)

// Footprints reports the logical and stored bytes of the database, of the workflows and of the
// LangGraph threads req names (store.Footprint), from one snapshot.
func (s *Store) Footprints(ctx context.Context, req store.FootprintRequest) (store.FootprintReport, error) {
	var rep store.FootprintReport
	err := s.readTx(ctx, func(tx *rtx) error {
		rep = store.FootprintReport{}
		if req.OmitTotal {
			return s.ownerFootprints(ctx, tx, req, &rep)
		}
		// the kept counters (schema step 13, figures.go): one row
		k, err := readFootprintCounters(ctx, tx, true)
		if err != nil {
			return err
		}
		rep.Total, rep.Chunks, rep.Runs = k.total()
		return s.ownerFootprints(ctx, tx, req, &rep)
	})
	if err != nil {
		return store.FootprintReport{}, wrapDB("storage footprint", err)
	}
	return rep, nil
}

// ownerFootprints adds the footprints of the workflows and threads req names to rep.
func (s *Store) ownerFootprints(ctx context.Context, tx *rtx, req store.FootprintRequest, rep *store.FootprintReport) error {
	var err error
	if req.AllWorkflows || len(req.Workflows) > 0 {
		if rep.Workflows, err = s.workflowFootprints(ctx, tx, req); err != nil {
			return err
		}
	}
	if req.AllThreads || len(req.Threads) > 0 {
		if rep.Threads, err = s.threadFootprints(ctx, tx, req); err != nil {
			return err
		}
	}
	return nil
}

// workflowFootprints reads the values of the workflows req names and computes their footprints.
func (s *Store) workflowFootprints(ctx context.Context, tx *rtx, req store.FootprintRequest) (map[string]store.Footprint, error) {
	owners := map[string]*store.OwnerValues{}
	get := func(wf string) *store.OwnerValues {
		o := owners[wf]
		if o == nil {
			o = &store.OwnerValues{}
			owners[wf] = o
		}
		return o
	}
	where, args := "", [][]any{{}}
	if !req.AllWorkflows {
		where, args = ` WHERE workflow_id = ?`, nil
		for _, wf := range req.Workflows {
			args = append(args, []any{wf})
		}
	}
	for _, a := range args {
		err := scanRows(ctx, tx, `SELECT workflow_id, sum(size) FROM checkpoints`+where+` GROUP BY workflow_id`, func(rows *sql.Rows) error {
			var wf string
			var n int64
			if err := rows.Scan(&wf, &n); err != nil {
				return err
			}
			get(wf).Logical += n
			return nil
		}, a...)
		if err != nil {
			return nil, err
		}
		// each distinct state of the workflow once
		err = scanRows(ctx, tx, `SELECT d.workflow_id, length(s.data), CASE WHEN s.encoding = 4 THEN s.data END
			FROM (SELECT DISTINCT workflow_id, state_hash FROM checkpoints`+where+`) d JOIN states s ON s.hash = d.state_hash`,
			func(rows *sql.Rows) error {
				var wf string
				var n int64
				var idx []byte
				if err := rows.Scan(&wf, &n, &idx); err != nil {
					return err
				}
				o := get(wf)
				o.Rows += n
				if idx != nil {
					o.Indexes = append(o.Indexes, idx)
				}
				return nil
			}, a...)
		if err != nil {
			return nil, err
		}
		err = scanRows(ctx, tx, `SELECT workflow_id, CASE WHEN encoding = 4 THEN size ELSE coalesce(length(value), 0) END,
			coalesce(length(value), 0), CASE WHEN encoding = 4 THEN value END FROM writes`+where, func(rows *sql.Rows) error {
			var wf string
			var logical, n int64
			var idx []byte
			if err := rows.Scan(&wf, &logical, &n, &idx); err != nil {
				return err
			}
			o := get(wf)
			o.Logical += logical
			o.Rows += n
			if idx != nil {
				o.Indexes = append(o.Indexes, idx)
			}
			return nil
		}, a...)
		if err != nil {
			return nil, err
		}
	}
	return s.chunkedFootprints(ctx, tx, owners)
}

// chunkedFootprints computes the footprints of owners: their rows plus the distinct runs and
// chunks their indexes list, each once.
func (s *Store) chunkedFootprints(ctx context.Context, tx *rtx, owners map[string]*store.OwnerValues) (map[string]store.Footprint, error) {
	runs := func(addrs []chunk.Address) (map[chunk.Address][]byte, error) {
		out := make(map[chunk.Address][]byte, len(addrs))
		err := eachAddrRow(ctx, tx.cached, qRunsByAddr, addrs, func(rows *sql.Rows) error {
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
	sizes := func(addrs []chunk.Address) (map[chunk.Address]int64, error) {
		out := make(map[chunk.Address]int64, len(addrs))
		q := qChunkBytesByAddrNoPacks
		if s.hasPacks(ctx) {
			q = qChunkBytesByAddr
		}
		err := eachAddrRow(ctx, tx.cached, q, addrs, func(rows *sql.Rows) error {
			var a []byte
			var n int64
			if err := rows.Scan(&a, &n); err != nil {
				return err
			}
			if len(a) == len(chunk.Address{}) {
				out[chunk.Address(a)] = n
			}
			return nil
		})
		return out, err
	}
	return store.OwnerFootprints(owners, runs, sizes)
}

// threadFootprints adds up the LangGraph rows of the threads req names, and the distinct runs
// and chunks of their chunked values.
func (s *Store) threadFootprints(ctx context.Context, tx *rtx, req store.FootprintRequest) (map[string]store.Footprint, error) {
	owners := map[string]*store.OwnerValues{}
	where, args := "", [][]any{{}}
	if !req.AllThreads {
		where, args = ` WHERE thread_id = ?`, nil
		for _, th := range req.Threads {
			args = append(args, []any{th})
		}
	}
	for _, a := range args {
		for _, table := range []string{"lg_checkpoints", "lg_blobs", "lg_writes"} {
			err := scanRows(ctx, tx, `SELECT thread_id, sum(size), sum(length(data)) FROM `+table+where+` GROUP BY thread_id`,
				func(rows *sql.Rows) error {
					var th string
					var logical, stored int64
					if err := rows.Scan(&th, &logical, &stored); err != nil {
						return err
					}
					o := owners[th]
					if o == nil {
						o = &store.OwnerValues{}
						owners[th] = o
					}
					o.Logical += logical
					o.Rows += stored
					return nil
				}, a...)
			if err != nil {
				return nil, err
			}
		}
		where4 := ` WHERE encoding = 4`
		if where != "" {
			where4 += ` AND thread_id = ?1`
		}
		err := scanRows(ctx, tx, `SELECT thread_id, data FROM lg_blobs`+where4+` UNION ALL SELECT thread_id, data FROM lg_writes`+where4, func(rows *sql.Rows) error {
			var th string
			var idx []byte
			if err := rows.Scan(&th, &idx); err != nil {
				return err
			}
			if o := owners[th]; o != nil {
				o.Indexes = append(o.Indexes, idx)
			}
			return nil
		}, a...)
		if err != nil {
			return nil, err
		}
	}
	return s.chunkedFootprints(ctx, tx, owners)
}

// footprintCounters are the counters the database's footprint adds up (schema step 13, and
// state_bytes of step 10).
type footprintCounters struct {
	stateBytes, stateData, writeLogical, writeStored, chunks, chunkBytes, runs, runBytes, lgLogical, lgStored int64
}

// total is the database's footprint and its chunk and run counts.
func (k footprintCounters) total() (store.Footprint, int64, int64) {
	return store.Footprint{
		LogicalBytes: k.stateBytes + k.writeLogical + k.lgLogical,
		StoredBytes:  k.stateData + k.writeStored + k.runBytes + k.chunkBytes + k.lgStored,
	}, k.chunks, k.runs
}

// named lists the counters by name, for CheckFigures.
func (k footprintCounters) named() []namedCount {
	return []namedCount{{"state data bytes", k.stateData}, {"pending-write logical bytes", k.writeLogical},
		{"pending-write stored bytes", k.writeStored}, {"chunks", k.chunks}, {"chunk bytes", k.chunkBytes},
		{"runs", k.runs}, {"run bytes", k.runBytes}, {"LangGraph logical bytes", k.lgLogical}, {"LangGraph stored bytes", k.lgStored}}
}

type namedCount struct {
	name string
	n    int64
}

// readFootprintCounters reads them from the counters row (cached: Footprints' statement).
func readFootprintCounters(ctx context.Context, tx *rtx, cached bool) (footprintCounters, error) {
	var k footprintCounters
	const q = `SELECT state_bytes, state_data, write_logical, write_stored, chunks, chunk_bytes, runs, run_bytes,
		lg_logical, lg_stored FROM counters WHERE id = 1`
	row := tx.QueryRowContext
	if cached {
		row = tx.cachedRow
	}
	err := row(ctx, q).Scan(&k.stateBytes, &k.stateData, &k.writeLogical, &k.writeStored, &k.chunks, &k.chunkBytes,
		&k.runs, &k.runBytes, &k.lgLogical, &k.lgStored)
	return k, err
}

// recountFootprint adds up every value row: what the counters keep, recounted (CheckFigures,
// and the conformance suite's check of the counters). The chunks' bytes are their rows' and
// their packs' (packs says the database has them).
func recountFootprint(ctx context.Context, tx *rtx, packs bool) (footprintCounters, error) {
	var k footprintCounters
	packBytes := `0`
	if packs {
		packBytes = `(SELECT coalesce(sum(length(data)), 0) FROM packs)`
	}
	err := tx.QueryRowContext(ctx, `SELECT (SELECT coalesce(sum(size), 0) FROM checkpoints),
		(SELECT coalesce(sum(length(data)), 0) FROM states),
		(SELECT coalesce(sum(CASE WHEN encoding = 4 THEN size ELSE length(value) END), 0) FROM writes),
		(SELECT coalesce(sum(length(value)), 0) FROM writes),
		(SELECT count(*) FROM chunk_addrs), (SELECT coalesce(sum(length(data)), 0) FROM chunks) + `+packBytes+`,
		(SELECT count(*) FROM run_addrs), (SELECT coalesce(sum(length(data)), 0) FROM runs),
		(SELECT coalesce(sum(size), 0) FROM lg_checkpoints) + (SELECT coalesce(sum(size), 0) FROM lg_blobs)
			+ (SELECT coalesce(sum(size), 0) FROM lg_writes),
		(SELECT coalesce(sum(length(data)), 0) FROM lg_checkpoints) + (SELECT coalesce(sum(length(data)), 0) FROM lg_blobs)
			+ (SELECT coalesce(sum(length(data)), 0) FROM lg_writes)`).
		Scan(&k.stateBytes, &k.stateData, &k.writeLogical, &k.writeStored, &k.chunks, &k.chunkBytes, &k.runs, &k.runBytes,
			&k.lgLogical, &k.lgStored)
	return k, err
}

// RecountFootprint is the database's footprint added up from every value row, as Footprints
// computed it before the counters kept it: the check of the counters (CheckFigures compares
// them counter by counter).
func (s *Store) RecountFootprint(ctx context.Context) (store.FootprintReport, error) {
	var rep store.FootprintReport
	err := s.readTx(ctx, func(tx *rtx) error {
		k, err := recountFootprint(ctx, tx, s.hasPacks(ctx))
		if err != nil {
			return err
		}
		rep = store.FootprintReport{}
		rep.Total, rep.Chunks, rep.Runs = k.total()
		return nil
	})
	if err != nil {
		return store.FootprintReport{}, wrapDB("recount the storage footprint", err)
	}
	return rep, nil
}
