package postgres

// Chunked LangGraph values (docs/storage.md "Chunked values", store/lgchunked.go), as in SQLite
// (store/sqlite/lgchunks.go): an lg_blobs, lg_writes or lg_staged row with encoding 4 keeps the
// index of a value stored as shared chunks, counted with refChunked when the row is written,
// refIndex when a row is copied and releaseIndexes when it is deleted, in the same transaction
// (always counted up before counted down). Every reader of their data goes through lgOpen.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// lgPacker packs LangGraph values: large channel values chunked (store.LGPacker).
func (s *Store) lgPacker() store.LGPacker {
	return store.LGPacker{Threshold: s.opts.CompressThreshold, Codec: s.codec, Cache: s.lgvals}
}

// lgOpen verifies and decodes one stored LangGraph byte string (store.Unpack, or the chunked
// value its index names, reassembled through query). Damage is a *store.CorruptError naming
// checkpointID and what.
func (s *Store) lgOpen(ctx context.Context, query pgQuery, checkpointID, what string, data []byte, enc int, size int64, sha []byte) ([]byte, error) {
	return store.OpenValue(checkpointID, what, data, enc, size, sha, func() ([]byte, error) {
		return s.openChunked(ctx, query, data, size, sha)
	})
}

// lgVerify is lgOpen for VerifyLG: a chunked value is rebuilt with verifyChunked (every chunk
// decoded and checked, the chunk cache left alone).
func (s *Store) lgVerify(ctx context.Context, query pgQuery, checkpointID, what string, data []byte, enc int, size int64, sha []byte) ([]byte, error) {
	return store.OpenValue(checkpointID, what, data, enc, size, sha, func() ([]byte, error) {
		return s.verifyChunked(ctx, query, data, size, sha)
	})
}

// lgValueBases reads every stored variant of (channel, version) of (thread, ns), verified: the
// candidate bases of a wire delta the value cache does not hold (store.ResolveLGDeltas).
func (s *Store) lgValueBases(ctx context.Context, thread, ns, channel, version string) ([][]byte, error) {
	var out [][]byte
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		out = nil
		type row struct {
			variant   int
			enc       int16
			size      int64
			sha, data []byte
		}
		var rs []row
		err := scanRows(ctx, tx, `SELECT variant, encoding, size, sha256, data FROM lg_blobs
			WHERE thread_id = $1 AND namespace = $2 AND channel = $3 AND version = $4 AND type <> 'empty' ORDER BY variant`,
			func(rows pgx.Rows) error {
				var r row
				if err := rows.Scan(&r.variant, &r.enc, &r.size, &r.sha, &r.data); err != nil {
					return err
				}
				rs = append(rs, r)
				return nil
			}, thread, ns, channel, version)
		if err != nil {
			return err
		}
		for _, r := range rs {
			raw, err := s.lgOpen(ctx, tx.Query, "", store.LGValueWhat(channel, version, r.variant), r.data, int(r.enc), r.size, r.sha)
			if err != nil {
				return err
			}
			out = append(out, raw)
		}
		return nil
	})
	if err != nil {
		return nil, lgErr("read the base of a delta", err)
	}
	return out, nil
}

// refIndex records one more listing of the runs of a stored index (a chunked row copied: thread
// copy). Every run must be stored: the row copied lists it, and its count, locked here, is at
// least one.
func refIndex(ctx context.Context, w *wtx, indexData []byte) error {
	addrs, err := chunk.DecodeAddresses(indexData)
	if err != nil {
		return &store.CorruptError{Reason: "a chunked value's index does not decode: " + err.Error()}
	}
	t := chunk.Tally{}
	t.Add(1, addrs...)
	runs := t.Sorted()
	as, ns := countArrays(runs)
	found, err := addressSet(w.query(ctx, `UPDATE chunk_runs AS r SET refs = r.refs + x.n
		FROM (SELECT * FROM unnest($1::bytea[], $2::bigint[]) AS x(address, n) ORDER BY address) AS x
		WHERE r.address = x.address RETURNING r.address`, as, ns))
	if err != nil {
		return err
	}
	for _, rc := range runs {
		if !found[rc.Addr] {
			return &store.CorruptError{Reason: fmt.Sprintf("a chunked value lists run %s, which is not stored", rc.Addr)}
		}
	}
	return nil
}

// lgDeleteRows runs a DELETE FROM lg_blobs, lg_writes or lg_staged … statement (without
// RETURNING) and releases the chunked values it removed; it returns the rows deleted.
func (w *wtx) lgDeleteRows(ctx context.Context, q string, args ...any) (int64, error) {
	rows, err := w.query(ctx, q+` RETURNING CASE WHEN encoding = 4 THEN data END`, args...)
	if err != nil {
		return 0, err
	}
	var n int64
	var indexes [][]byte
	err = eachRow(rows, func(rows pgx.Rows) error {
		var idx []byte
		if err := rows.Scan(&idx); err != nil {
			return err
		}
		n++
		if idx != nil {
			indexes = append(indexes, idx)
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if len(indexes) > 0 {
		if _, err := w.s.releaseIndexes(ctx, w, indexes); err != nil {
			return n, err
		}
	}
	return n, nil
}

// selectIndexes returns the chunked values' indexes q selects (one index or NULL per row; the
// NULLs left out).
func (w *wtx) selectIndexes(ctx context.Context, q string, args ...any) ([][]byte, error) {
	rows, err := w.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var indexes [][]byte
	err = eachRow(rows, func(rows pgx.Rows) error {
		var idx []byte
		if err := rows.Scan(&idx); err != nil {
			return err
		}
		if idx != nil {
			indexes = append(indexes, idx)
		}
		return nil
	})
	return indexes, err
}

// releaseSelected releases the chunked values whose indexes q (selecting one index or NULL per
// row) returns: rows a statement that follows replaces.
func (w *wtx) releaseSelected(ctx context.Context, q string, args ...any) error {
	indexes, err := w.selectIndexes(ctx, q, args...)
	if err != nil || len(indexes) == 0 {
		return err
	}
	_, err = w.s.releaseIndexes(ctx, w, indexes)
	return err
}

// refSelected counts one more listing of the runs of every chunked value q (selecting one index
// or NULL per row) returns: rows a copy listed again.
func (w *wtx) refSelected(ctx context.Context, q string, args ...any) error {
	indexes, err := w.selectIndexes(ctx, q, args...)
	if err != nil {
		return err
	}
	for _, idx := range indexes {
		if err := refIndex(ctx, w, idx); err != nil {
			return err
		}
	}
	return nil
}

// auditLGValues counts the listings of the chunked LangGraph values (channel values, pending
// writes, staged values) into audit (their reassembly is VerifyLG's).
func auditLGValues(ctx context.Context, tx pgx.Tx, audit *store.RefAudit) error {
	err := scanRows(ctx, tx, `SELECT thread_id, namespace, channel, version, variant, data FROM lg_blobs WHERE encoding = 4`,
		func(rows pgx.Rows) error {
			var thread, ns, ch, ver string
			var variant int
			var index []byte
			if err := rows.Scan(&thread, &ns, &ch, &ver, &variant, &index); err != nil {
				return err
			}
			audit.Value(fmt.Sprintf("LangGraph thread %q namespace %q %s", thread, ns, store.LGValueWhat(ch, ver, variant)), index)
			return nil
		})
	if err != nil {
		return err
	}
	err = scanRows(ctx, tx, `SELECT thread_id, namespace, checkpoint_id, task_id, idx, data FROM lg_writes WHERE encoding = 4`,
		func(rows pgx.Rows) error {
			var thread, ns, cp, task string
			var idx int64
			var index []byte
			if err := rows.Scan(&thread, &ns, &cp, &task, &idx, &index); err != nil {
				return err
			}
			audit.Value(fmt.Sprintf("LangGraph thread %q namespace %q checkpoint %q write %s/%d", thread, ns, cp, task, idx), index)
			return nil
		})
	if err != nil {
		return err
	}
	return scanRows(ctx, tx, `SELECT id, thread_id, data FROM lg_staged WHERE encoding = 4`, func(rows pgx.Rows) error {
		var id int64
		var thread string
		var index []byte
		if err := rows.Scan(&id, &thread, &index); err != nil {
			return err
		}
		audit.Value(fmt.Sprintf("LangGraph thread %q staged value %d", thread, id), index)
		return nil
	})
}
