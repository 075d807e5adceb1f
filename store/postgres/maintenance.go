package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// tableBytes adds up ckptd's tables, their indexes and TOAST data.
const tableBytes = `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
	JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'`

// Stats describes the checkpoint family. SizeBytes is what ckptd's tables take in the database,
// indexes and TOAST included.
func (s *Store) Stats(ctx context.Context) (store.DBStats, error) {
	st := store.DBStats{Path: s.location}
	// the kept counters (figures.go): a few rows
	err := s.readRow(ctx, `SELECT (`+tableBytes+`), k.* FROM (SELECT coalesce(sum(workflows), 0)::bigint, coalesce(sum(checkpoints), 0)::bigint,
		coalesce(sum(states), 0)::bigint, coalesce(sum(states_stored), 0)::bigint FROM counters) AS k`, nil,
		&st.SizeBytes, &st.Workflows, &st.Checkpoints, &st.States, &st.StatesStoredBytes)
	if err != nil {
		return store.DBStats{}, wrapDB("stats", err)
	}
	return st, nil
}

// SettingNames are the server settings Health reports, in this order: what an acknowledged
// save's durability rests on (docs/durability.md).
var SettingNames = []string{"server_version", "synchronous_commit", "fsync", "full_page_writes", "wal_sync_method",
	"synchronous_standby_names", "data_checksums"}

// Health reports PostgreSQL's own figures: "databaseBytes" (the whole database),
// "ckptdBytes" (ckptd's tables with their indexes and TOAST), "deadRows" (row versions
// autovacuum has yet to reclaim in them) and "connections" (sessions on the database); and
// SettingNames as the server reports them to the sessions saves commit through.
func (s *Store) Health(ctx context.Context) (store.Health, error) {
	var h store.Health
	var db, ours, dead, conns int64
	err := s.readRow(ctx, `SELECT pg_database_size(current_database()), (`+tableBytes+`),
		(SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = current_schema()),
		(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database())`, nil, &db, &ours, &dead, &conns)
	if err != nil {
		return h, wrapDB("health", err)
	}
	h.Figures = []store.Figure{{Name: "databaseBytes", Value: db}, {Name: "ckptdBytes", Value: ours},
		{Name: "deadRows", Value: dead}, {Name: "connections", Value: conns}}
	var vals []*string
	err = s.retry(ctx, func() error {
		rows, err := s.pool.Query(ctx, `SELECT current_setting(n, true) FROM unnest($1::text[]) WITH ORDINALITY AS x(n, i) ORDER BY i`, SettingNames)
		if err != nil {
			return err
		}
		vals, err = pgx.CollectRows(rows, pgx.RowTo[*string])
		return err
	})
	if err != nil {
		return h, wrapDB("health", err)
	}
	for i, name := range SettingNames {
		h.Settings = append(h.Settings, store.Setting{Name: name, Value: deref(vals[i])})
	}
	return h, nil
}

// Verify re-checks every stored state (decompression and SHA-256): one CorruptError per corrupt
// checkpoint. progress, if not nil, is called with the number of states checked.
func (s *Store) Verify(ctx context.Context, progress func(done, total int)) ([]store.CorruptError, error) {
	var out []store.CorruptError
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		out = nil
		var total int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM states`).Scan(&total); err != nil {
			return err
		}
		var bad [][]byte
		reasons := map[string]string{}
		done := 0
		audit := store.NewRefAudit()
		type chunkedState struct {
			hash, index []byte
			size        int64
		}
		var chunked []chunkedState // reassembled once the scan is done
		err := scanRows(ctx, tx, `SELECT hash, encoding, size, data FROM states`, func(rows pgx.Rows) error {
			var hash, data []byte
			var enc int
			var size int64
			if err := rows.Scan(&hash, &enc, &size, &data); err != nil {
				return err
			}
			if enc == store.EncChunked {
				audit.Value(fmt.Sprintf("state %x", hash), data)
				chunked = append(chunked, chunkedState{bytes.Clone(hash), bytes.Clone(data), size})
				return nil
			}
			if _, err := s.codec.OpenState(data, enc, size, hash); err != nil {
				h := bytes.Clone(hash)
				bad = append(bad, h)
				reasons[string(h)] = err.Error()
			}
			done++
			if progress != nil {
				progress(done, total)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, c := range chunked {
			if _, err := s.verifyChunked(ctx, tx.Query, c.index, c.size, c.hash); err != nil {
				reason, ok := store.ChunkedReason(err)
				if !ok {
					return err
				}
				bad = append(bad, c.hash)
				reasons[string(c.hash)] = reason
			}
			done++
			if progress != nil {
				progress(done, total)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		writes, err := s.verifyChunkedWrites(ctx, tx, audit)
		if err != nil {
			return err
		}
		out = append(out, writes...)
		if err := auditLGValues(ctx, tx, audit); err != nil {
			return err
		}
		problems, err := auditChunks(ctx, tx, audit)
		if err != nil {
			return err
		}
		for _, p := range problems {
			out = append(out, store.CorruptError{Reason: "chunk store: " + p})
		}
		if len(bad) > 0 {
			if err := scanRows(ctx, tx, `SELECT checkpoint_id, state_hash FROM checkpoints WHERE state_hash = ANY($1) ORDER BY id`,
				func(rows pgx.Rows) error {
					var id string
					var h []byte
					if err := rows.Scan(&id, &h); err != nil {
						return err
					}
					out = append(out, store.CorruptError{CheckpointID: id, Reason: reasons[string(h)]})
					return nil
				}, bad); err != nil {
				return err
			}
		}
		return scanRows(ctx, tx, `SELECT checkpoint_id FROM checkpoints c WHERE c.state_hash IS NOT NULL
			AND NOT EXISTS (SELECT 1 FROM states s WHERE s.hash = c.state_hash) ORDER BY id`, func(rows pgx.Rows) error {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			out = append(out, store.CorruptError{CheckpointID: id, Reason: "state blob missing"})
			return nil
		})
	})
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return out, err
		}
		if c := sqlState(err); c == "XX001" || c == "XX002" {
			return append(out, store.CorruptError{Reason: "database: " + err.Error()}), nil
		}
		return out, wrapDB("verify "+s.location, err)
	}
	return out, nil
}

// IntegrityCheck runs amcheck over ckptd's tables (verify_heapam, PostgreSQL 14 and later) and
// B-tree indexes (bt_index_check with heapallindexed): one problem per finding. Without amcheck
// (About().Integrity says so) it checks nothing and reports nothing. The extension is created
// in the ckptd schema when the role may.
func (s *Store) IntegrityCheck(ctx context.Context) ([]string, error) {
	if !s.amcheck {
		s.log.Warn("ckptd store: no integrity check: the amcheck extension is not available", "db", s.location)
		return nil, nil
	}
	var out []string
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, wrapDB("integrity check", err)
	}
	defer conn.Release()
	var installed bool
	var version int
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'amcheck'),
		current_setting('server_version_num')::int`).Scan(&installed, &version); err != nil {
		return nil, wrapDB("integrity check", err)
	}
	if !installed {
		if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS amcheck SCHEMA `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
			return nil, wrapDB("integrity check: create extension amcheck", err)
		}
	}
	var fnSchema string
	if err := conn.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
		WHERE e.extname = 'amcheck'`).Scan(&fnSchema); err != nil {
		return nil, wrapDB("integrity check", err)
	}
	fn := pgx.Identifier{fnSchema}.Sanitize() + "."
	type rel struct {
		name  string
		index bool
	}
	relRows, err := conn.Query(ctx, `SELECT c.relname, c.relkind = 'i' FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_am a ON a.oid = c.relam
		WHERE n.nspname = $1 AND (c.relkind = 'r' OR (c.relkind = 'i' AND a.amname = 'btree')) ORDER BY c.relkind DESC, c.relname`, s.schema)
	if err != nil {
		return nil, wrapDB("integrity check", err)
	}
	rels, err := pgx.CollectRows(relRows,
		func(row pgx.CollectableRow) (rel, error) {
			var r rel
			err := row.Scan(&r.name, &r.index)
			return r, err
		})
	if err != nil {
		return nil, wrapDB("integrity check", err)
	}
	for _, r := range rels {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		qualified := pgx.Identifier{s.schema, r.name}.Sanitize()
		if r.index {
			if _, err := conn.Exec(ctx, `SELECT `+fn+`bt_index_check($1::regclass, true)`, qualified); err != nil {
				if sqlState(err) == "" || isConnErr(err) {
					return out, wrapDB("integrity check", err)
				}
				out = append(out, fmt.Sprintf("amcheck: index %s: %v", r.name, err))
			}
			continue
		}
		if version < 140000 {
			continue // verify_heapam came with PostgreSQL 14
		}
		rows, err := conn.Query(ctx, `SELECT blkno, offnum, attnum, msg FROM `+fn+`verify_heapam($1::regclass)`, qualified)
		if err != nil {
			return out, wrapDB("integrity check", err)
		}
		for rows.Next() {
			var blk *int64
			var off, att *int32
			var msg string
			if err := rows.Scan(&blk, &off, &att, &msg); err != nil {
				rows.Close()
				return out, wrapDB("integrity check", err)
			}
			where := ""
			if blk != nil {
				where = fmt.Sprintf(" block %d", *blk)
			}
			if off != nil {
				where += fmt.Sprintf(" offset %d", *off)
			}
			out = append(out, fmt.Sprintf("amcheck: table %s%s: %s", r.name, where, msg))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			if sqlState(err) == "" || isConnErr(err) {
				return out, wrapDB("integrity check", err)
			}
			out = append(out, fmt.Sprintf("amcheck: table %s: %v", r.name, err))
		}
	}
	return out, nil
}

// VerifyLG re-checks every stored LangGraph checkpoint, channel value and pending write: the
// SHA-256 of the stored bytes and their decoding, straight from the database (never from the
// in-memory value or chunk caches).
func (s *Store) VerifyLG(ctx context.Context) (store.LGCounts, []store.LGProblem, error) {
	var counts store.LGCounts
	var out []store.LGProblem
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		counts, out = store.LGCounts{}, nil
		check := func(p store.LGProblem, what string, data []byte, enc int, size int64, sha []byte) {
			if _, err := s.lgVerify(ctx, tx.Query, p.CheckpointID, what, data, enc, size, sha); err != nil {
				if ce := asCorrupt(err); ce != nil {
					p.Reason = ce.Reason
				} else {
					p.Reason = err.Error()
				}
				out = append(out, p)
			}
		}
		tables := []struct {
			table, kind, cols string
			n                 *int
			dest              func(p *store.LGProblem) []any
			what              func(p *store.LGProblem) string
		}{
			{"lg_checkpoints", "checkpoint", "thread_id, namespace, checkpoint_id", &counts.Checkpoints,
				func(p *store.LGProblem) []any { return []any{&p.ThreadID, &p.Namespace, &p.CheckpointID} },
				func(*store.LGProblem) string { return "checkpoint" }},
			{"lg_blobs", "blob", "thread_id, namespace, channel, version, variant", &counts.Blobs,
				func(p *store.LGProblem) []any {
					return []any{&p.ThreadID, &p.Namespace, &p.Channel, &p.Version, &p.Variant}
				},
				func(p *store.LGProblem) string { return store.LGValueWhat(p.Channel, p.Version, p.Variant) }},
			{"lg_writes", "write", "thread_id, namespace, checkpoint_id, task_id, idx, channel", &counts.Writes,
				func(p *store.LGProblem) []any {
					return []any{&p.ThreadID, &p.Namespace, &p.CheckpointID, &p.TaskID, &p.Idx, &p.Channel}
				},
				func(p *store.LGProblem) string { return fmt.Sprintf("write %s/%d", p.TaskID, p.Idx) }},
		}
		type chunkedRow struct {
			p          store.LGProblem
			size       int64
			sha, index []byte
		}
		for _, t := range tables {
			var chunked []chunkedRow // reassembled once the scan is closed (one connection)
			err := scanRows(ctx, tx, `SELECT `+t.cols+`, encoding, size, sha256, data FROM `+t.table+` ORDER BY id`, func(rows pgx.Rows) error {
				p := store.LGProblem{Kind: t.kind}
				var enc int
				var size int64
				var sha, data []byte
				if err := rows.Scan(append(t.dest(&p), &enc, &size, &sha, &data)...); err != nil {
					return err
				}
				*t.n++
				if enc == store.EncChunked {
					chunked = append(chunked, chunkedRow{p, size, sha, data})
					return nil
				}
				check(p, t.what(&p), data, enc, size, sha)
				return nil
			})
			if err == nil {
				for _, c := range chunked {
					check(c.p, t.what(&c.p), c.index, store.EncChunked, c.size, c.sha)
				}
			}
			if c := sqlState(err); c == "XX001" || c == "XX002" {
				out = append(out, store.LGProblem{Kind: "table", Reason: t.table + ": " + err.Error()})
				return nil // the transaction is aborted: report the damage found so far
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.LGCounts{}, nil, wrapDB("verify LangGraph storage", err)
	}
	return counts, out, nil
}

// Compact has nothing to do: states are compressed on the save path.
func (s *Store) Compact(ctx context.Context) error { return ctx.Err() }

// CompactionStats reports no deferred compression (states are compressed on the save path).
func (s *Store) CompactionStats() store.CompactionStats { return store.CompactionStats{} }

// BlobCacheStats reports the LangGraph channel-value cache (zero when it is off).
func (s *Store) BlobCacheStats() store.BlobCacheStats { return s.blobs.Stats() }

// ChunkCacheStats reports the codec's cache of verified chunks (store.ChunkCache).
func (s *Store) ChunkCacheStats() store.ChunkCacheStats { return s.codec.ChunkCache().Stats() }
