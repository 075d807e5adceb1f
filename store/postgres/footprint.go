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
		err := tx.QueryRow(ctx, `SELECT
			((SELECT coalesce(sum(size), 0) FROM checkpoints)
			+ (SELECT coalesce(sum(CASE WHEN encoding = 4 THEN size ELSE octet_length(value) END), 0) FROM writes)
			+ (SELECT coalesce(sum(size), 0) FROM lg_checkpoints) + (SELECT coalesce(sum(size), 0) FROM lg_blobs)
			+ (SELECT coalesce(sum(size), 0) FROM lg_writes))::bigint,
			((SELECT coalesce(sum(octet_length(data)), 0) FROM states) + (SELECT coalesce(sum(octet_length(value)), 0) FROM writes)
			+ (SELECT coalesce(sum(octet_length(data)), 0) FROM chunk_runs) + (SELECT coalesce(sum(octet_length(data)), 0) FROM chunks)
			+ (SELECT coalesce(sum(octet_length(data)), 0) FROM lg_checkpoints) + (SELECT coalesce(sum(octet_length(data)), 0) FROM lg_blobs)
			+ (SELECT coalesce(sum(octet_length(data)), 0) FROM lg_writes))::bigint,
			(SELECT count(*) FROM chunks), (SELECT count(*) FROM chunk_runs)`).
			Scan(&rep.Total.LogicalBytes, &rep.Total.StoredBytes, &rep.Chunks, &rep.Runs)
		if err != nil {
			return err
		}
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

func threadFootprints(ctx context.Context, tx pgx.Tx, req store.FootprintRequest) (map[string]store.Footprint, error) {
	out := map[string]store.Footprint{}
	where, args := ownerFilter("thread_id", req.AllThreads, req.Threads)
	for _, table := range []string{"lg_checkpoints", "lg_blobs", "lg_writes"} {
		err := scanRows(ctx, tx, `SELECT thread_id, sum(size)::bigint, sum(octet_length(data))::bigint FROM `+table+where+` GROUP BY thread_id`,
			func(rows pgx.Rows) error {
				var th string
				var f store.Footprint
				if err := rows.Scan(&th, &f.LogicalBytes, &f.StoredBytes); err != nil {
					return err
				}
				out[th] = out[th].Add(f)
				return nil
			}, args...)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
