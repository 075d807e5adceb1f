package sqlite

// Chunked LangGraph values (docs/storage.md "Chunked values", store/lgchunked.go): an lg_blobs,
// lg_writes or lg_staged row with encoding 4 keeps the index of a value stored as shared chunks,
// counted like a state's (refChunked when the row is written, refIndex when a row is copied,
// wtx.release when it is deleted, in the same transaction). Every reader of their data goes
// through lgOpen.

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// lgOpen verifies and decodes one stored LangGraph byte string (store.Unpack, or the chunked
// value its index names, reassembled through query). Damage is a *store.CorruptError naming
// checkpointID and what.
func (s *Store) lgOpen(ctx context.Context, query queryFunc, checkpointID, what string, data []byte, enc int, size int64, sha []byte) ([]byte, error) {
	return store.OpenValue(checkpointID, what, data, enc, size, sha, func() ([]byte, error) {
		return s.openChunked(ctx, query, data, size, sha)
	})
}

// lgVerify is lgOpen for VerifyLG: a chunked value is rebuilt with verifyChunked (every chunk
// decoded and checked, the chunk cache left alone).
func (s *Store) lgVerify(ctx context.Context, query queryFunc, checkpointID, what string, data []byte, enc int, size int64, sha []byte) ([]byte, error) {
	return store.OpenValue(checkpointID, what, data, enc, size, sha, func() ([]byte, error) {
		return s.verifyChunked(ctx, query, data, size, sha)
	})
}

// lgValueBases reads every stored variant of (channel, version) of (thread, ns), verified: the
// candidate bases of a wire delta the value cache does not hold (store.ResolveLGDeltas).
func (s *Store) lgValueBases(ctx context.Context, thread, ns, channel, version string) ([][]byte, error) {
	var out [][]byte
	err := s.readTx(ctx, func(tx *rtx) error {
		out = nil
		type row struct {
			variant   int
			enc       int
			size      int64
			sha, data []byte
		}
		var rs []row
		err := scanRows(ctx, tx, `SELECT variant, encoding, size, sha256, data FROM lg_blobs
			WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ? AND type <> 'empty' ORDER BY variant`,
			func(rows *sql.Rows) error {
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
			raw, err := s.lgOpen(ctx, tx.cached, "", store.LGValueWhat(channel, version, r.variant), r.data, r.enc, r.size, r.sha)
			if err != nil {
				return err
			}
			out = append(out, raw)
		}
		return nil
	})
	if err != nil {
		return nil, wrapLG("read the base of a delta", err)
	}
	return out, nil
}

// refIndex records one more listing of the runs of a stored index (a chunked row copied: thread
// copy). Every run must be stored: the row copied lists it.
func (s *Store) refIndex(ctx context.Context, w *wtx, indexData []byte) error {
	addrs, err := chunk.DecodeAddresses(indexData)
	if err != nil {
		return &store.CorruptError{Reason: "a chunked value's index does not decode: " + err.Error()}
	}
	t := chunk.Tally{}
	t.Add(1, addrs...)
	for _, rc := range t.Sorted() {
		res, err := w.exec(ctx, qRunUp, rc.N, rc.Addr[:])
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
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
	defer rows.Close()
	var n int64
	for rows.Next() {
		var index []byte
		if err := rows.Scan(&index); err != nil {
			return n, err
		}
		n++
		if index != nil {
			w.release(index)
		}
	}
	return n, rows.Err()
}
