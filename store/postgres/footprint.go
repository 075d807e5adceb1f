package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// Footprints reports the logical and stored bytes of the database, of the workflows and of the
// LangGraph threads req names (store.Footprint), from one snapshot.
func (s *Store) Footprints(ctx context.Context, req store.FootprintRequest) (store.FootprintReport, error) {
	var rep store.FootprintReport
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		rep = store.FootprintReport{}
		if req.OmitTotal {
			return ownerFootprints(ctx, tx, req, &rep)
		}
		// the kept counters (the footprint step, figures.go): a few rows
		k, err := readFootprint(ctx, tx, keptFootprintSQL)
		if err != nil {
			return err
		}
		rep.Total, rep.Chunks, rep.Runs = k.total()
		return ownerFootprints(ctx, tx, req, &rep)
	})
	if err != nil {
		return store.FootprintReport{}, wrapDB("storage footprint", err)
	}
	return rep, nil
}

// ownerFootprints adds the footprints of the workflows and threads req names to rep.
func ownerFootprints(ctx context.Context, tx pgx.Tx, req store.FootprintRequest, rep *store.FootprintReport) error {
	var err error
	if req.AllWorkflows || len(req.Workflows) > 0 {
		if rep.Workflows, err = workflowFootprints(ctx, tx, req); err != nil {
			return err
		}
	}
	if req.AllThreads || len(req.Threads) > 0 {
		if rep.Threads, err = threadFootprints(ctx, tx, req); err != nil {
			return err
		}
	}
	return nil
}

// ownerFilter is the WHERE clause and argument that select the owners req names in column col.
func ownerFilter(col string, all bool, ids []string) (string, []any) {
	if all {
		return "", nil
	}
	return ` WHERE ` + col + ` = ANY($1)`, []any{ids}
}

func workflowFootprints(ctx context.Context, tx pgx.Tx, req store.FootprintRequest) (map[string]store.Footprint, error) {
	owners := map[string]*store.OwnerValues{}
	get := func(wf string) *store.OwnerValues {
		o := owners[wf]
		if o == nil {
			o = &store.OwnerValues{}
			owners[wf] = o
		}
		return o
	}
	where, args := ownerFilter("workflow_id", req.AllWorkflows, req.Workflows)
	err := scanRows(ctx, tx, `SELECT workflow_id, sum(size)::bigint FROM checkpoints`+where+` GROUP BY workflow_id`, func(rows pgx.Rows) error {
		var wf string
		var n int64
		if err := rows.Scan(&wf, &n); err != nil {
			return err
		}
		get(wf).Logical += n
		return nil
	}, args...)
	if err != nil {
		return nil, err
	}
	err = scanRows(ctx, tx, `SELECT d.workflow_id, octet_length(s.data)::bigint, CASE WHEN s.encoding = 4 THEN s.data END
		FROM (SELECT DISTINCT workflow_id, state_hash FROM checkpoints`+where+`) d JOIN states s ON s.hash = d.state_hash`,
		func(rows pgx.Rows) error {
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
		}, args...)
	if err != nil {
		return nil, err
	}
	err = scanRows(ctx, tx, `SELECT workflow_id, CASE WHEN encoding = 4 THEN coalesce(size, 0) ELSE coalesce(octet_length(value), 0) END::bigint,
		coalesce(octet_length(value), 0)::bigint, CASE WHEN encoding = 4 THEN value END FROM writes`+where, func(rows pgx.Rows) error {
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
	}, args...)
	if err != nil {
		return nil, err
	}
	return chunkedFootprints(ctx, tx, owners)
}

// chunkedFootprints computes the footprints of owners: their rows plus the distinct runs and
// chunks their indexes list, each once.
func chunkedFootprints(ctx context.Context, tx pgx.Tx, owners map[string]*store.OwnerValues) (map[string]store.Footprint, error) {
	runs := func(addrs []chunk.Address) (map[chunk.Address][]byte, error) {
		out := make(map[chunk.Address][]byte, len(addrs))
		err := scanRows(ctx, tx, `SELECT address, data FROM chunk_runs WHERE address = ANY($1)`, func(rows pgx.Rows) error {
			var a, data []byte
			if err := rows.Scan(&a, &data); err != nil {
				return err
			}
			if len(a) == len(chunk.Address{}) {
				out[chunk.Address(a)] = data
			}
			return nil
		}, addrSlices(addrs))
		return out, err
	}
	sizes := func(addrs []chunk.Address) (map[chunk.Address]int64, error) {
		out := make(map[chunk.Address]int64, len(addrs))
		err := scanRows(ctx, tx, `SELECT address, octet_length(data)::bigint FROM chunks WHERE address = ANY($1)`, func(rows pgx.Rows) error {
			var a []byte
			var n int64
			if err := rows.Scan(&a, &n); err != nil {
				return err
			}
			if len(a) == len(chunk.Address{}) {
				out[chunk.Address(a)] = n
			}
			return nil
		}, addrSlices(addrs))
		return out, err
	}
	return store.OwnerFootprints(owners, runs, sizes)
}

// threadFootprints adds up the LangGraph rows of the threads req names, and the distinct runs
// and chunks of their chunked values.
func threadFootprints(ctx context.Context, tx pgx.Tx, req store.FootprintRequest) (map[string]store.Footprint, error) {
	owners := map[string]*store.OwnerValues{}
	where, args := ownerFilter("thread_id", req.AllThreads, req.Threads)
	for _, table := range []string{"lg_checkpoints", "lg_blobs", "lg_writes"} {
		err := scanRows(ctx, tx, `SELECT thread_id, sum(size)::bigint, sum(octet_length(data))::bigint FROM `+table+where+` GROUP BY thread_id`,
			func(rows pgx.Rows) error {
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
			}, args...)
		if err != nil {
			return nil, err
		}
	}
	where4 := ` WHERE encoding = 4`
	if where != "" {
		where4 += ` AND thread_id = ANY($1)`
	}
	err := scanRows(ctx, tx, `SELECT thread_id, data FROM lg_blobs`+where4+` UNION ALL SELECT thread_id, data FROM lg_writes`+where4, func(rows pgx.Rows) error {
		var th string
		var idx []byte
		if err := rows.Scan(&th, &idx); err != nil {
			return err
		}
		if o := owners[th]; o != nil {
			o.Indexes = append(o.Indexes, idx)
		}
		return nil
	}, args...)
	if err != nil {
		return nil, err
	}
	return chunkedFootprints(ctx, tx, owners)
}

// footprint is what the database's footprint adds up: the checkpoints' sizes (state_bytes) and
// the counters of the footprint step, in footprintCounters' order.
type footprint struct {
	stateBytes int64
	counts     []int64
}

// total is the database's footprint and its chunk and run counts.
func (k footprint) total() (store.Footprint, int64, int64) {
	c := map[string]int64{}
	for i, fc := range footprintCounters {
		c[fc.name] = k.counts[i]
	}
	return store.Footprint{
		LogicalBytes: k.stateBytes + c["write_logical"] + c["lg_logical"],
		StoredBytes:  c["state_data"] + c["write_stored"] + c["run_bytes"] + c["chunk_bytes"] + c["lg_stored"],
	}, c["chunks"], c["runs"]
}

var (
	// keptFootprintSQL sums the shards of counters.
	keptFootprintSQL = func() string {
		q := `SELECT coalesce(sum(state_bytes), 0)::bigint`
		for _, c := range footprintCounters {
			q += `, coalesce(sum(` + c.name + `), 0)::bigint`
		}
		return q + ` FROM counters`
	}()
	// recountFootprintSQL adds up every value row instead.
	recountFootprintSQL = func() string {
		q := `SELECT (SELECT coalesce(sum(size), 0) FROM checkpoints)::bigint`
		for _, c := range footprintCounters {
			q += `, ` + c.recount + `::bigint`
		}
		return q
	}()
)

func readFootprint(ctx context.Context, tx pgx.Tx, q string) (footprint, error) {
	k := footprint{counts: make([]int64, len(footprintCounters))}
	dest := []any{&k.stateBytes}
	for i := range k.counts {
		dest = append(dest, &k.counts[i])
	}
	return k, tx.QueryRow(ctx, q).Scan(dest...)
}

// RecountFootprint is the database's footprint added up from every value row, as Footprints
// computed it before the counters kept it: the check of the counters (CheckFigures compares
// them counter by counter).
func (s *Store) RecountFootprint(ctx context.Context) (store.FootprintReport, error) {
	var rep store.FootprintReport
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		k, err := readFootprint(ctx, tx, recountFootprintSQL)
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
