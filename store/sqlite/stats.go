package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ckptd/ckptd/store"
)

// Stats describes the database file and its checkpoints.
func (s *Store) Stats(ctx context.Context) (store.DBStats, error) {
	st := store.DBStats{Path: s.path}
	if fi, err := os.Stat(s.path); err == nil {
		st.SizeBytes = fi.Size()
	}
	err := s.readAuto(ctx, func(tx *rtx) error { // the kept counters (figures.go): one row
		wfs, t, err := readCounters(ctx, tx)
		st.Workflows, st.Checkpoints, st.States, st.StatesStoredBytes = int(wfs), int(t.checkpoints), int(t.states), t.statesStored
		return err
	})
	if err != nil {
		return store.DBStats{}, wrapDB("stats", err)
	}
	return st, nil
}

// Health reports SQLite's own figures: "walBytes" (the -wal file), "freeBytes" (pages on the
// free list, reclaimable by incremental_vacuum), "pageSize" and "pageCount"; and PragmaNames as
// Settings, read on the connection saves commit through. With an error it still returns what
// it could read (the figures before the failure, no settings).
func (s *Store) Health(ctx context.Context) (store.Health, error) {
	var h store.Health
	var wal int64
	if fi, err := os.Stat(s.path + "-wal"); err == nil {
		wal = fi.Size()
	}
	h.Figures = []store.Figure{{Name: "walBytes", Value: wal}}
	var pageSize, pageCount, free int64
	err := s.readTx(ctx, func(tx *rtx) error {
		return tx.QueryRowContext(ctx, `SELECT (SELECT page_size FROM pragma_page_size), (SELECT page_count FROM pragma_page_count),
			(SELECT freelist_count FROM pragma_freelist_count)`).Scan(&pageSize, &pageCount, &free)
	})
	if err != nil {
		return h, wrapDB("health", err)
	}
	h.Figures = append(h.Figures, store.Figure{Name: "freeBytes", Value: free * pageSize},
		store.Figure{Name: "pageSize", Value: pageSize}, store.Figure{Name: "pageCount", Value: pageCount})
	if s.wconn == nil { // opened read-only: no connection commits saves, no settings to report
		return h, nil
	}
	pragmas, err := s.Pragmas(ctx)
	if err != nil {
		return h, fmt.Errorf("health: %w", err)
	}
	for _, name := range PragmaNames {
		h.Settings = append(h.Settings, store.Setting{Name: name, Value: pragmas[name]})
	}
	return h, nil
}

// Verify re-checks every stored state (decompression and SHA-256). It returns one CorruptError
// per corrupt checkpoint (and one with an empty CheckpointID for damage SQLite reports while
// reading). progress, if not nil, is called with the number of states checked.
func (s *Store) Verify(ctx context.Context, progress func(done, total int)) ([]store.CorruptError, error) {
	var out []store.CorruptError
	err := s.readTx(ctx, func(tx *rtx) error {
		out = nil
		var total int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM states`).Scan(&total); err != nil {
			return err
		}
		// hashes of bad states, then map them to checkpoints
		var bad [][]byte
		reasons := map[string]string{}
		audit := store.NewRefAudit()
		type chunkedState struct {
			hash, index []byte
			size        int64
		}
		var chunked []chunkedState // reassembled once the scan is closed
		rows, err := tx.QueryContext(ctx, `SELECT hash, encoding, size, data FROM states`)
		if err != nil {
			return err
		}
		done := 0
		for rows.Next() {
			var hash []byte
			var enc int
			var size int64
			var data sql.RawBytes
			if err := rows.Scan(&hash, &enc, &size, &data); err != nil {
				rows.Close()
				return err
			}
			reason := ""
			if enc == store.EncChunked {
				audit.Value(fmt.Sprintf("state %x", hash), data)
				chunked = append(chunked, chunkedState{bytes.Clone(hash), bytes.Clone(data), size})
			} else if _, err := s.codec.OpenState(data, enc, size, hash); err != nil {
				reason = err.Error()
			}
			if reason != "" {
				h := bytes.Clone(hash)
				bad = append(bad, h)
				reasons[string(h)] = reason
			}
			if enc != store.EncChunked {
				done++
				if progress != nil {
					progress(done, total)
				}
			}
			if err := ctx.Err(); err != nil {
				rows.Close()
				return err
			}
		}
		fellBack := false
		scanErr := rows.Err()
		if err := rows.Close(); scanErr == nil {
			scanErr = err
		}
		if scanErr == nil {
			for _, c := range chunked {
				if _, err := s.verifyChunked(ctx, tx.cached, c.index, c.size, c.hash); err != nil {
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
			// chunked pending-write values, then the reference counts of everything chunked
			writes, err := s.verifyChunkedWrites(ctx, tx, audit)
			if err != nil {
				return err
			}
			out = append(out, writes...)
			if err := auditLGValues(ctx, tx, audit); err != nil {
				return err
			}
			problems, err := s.auditChunks(ctx, tx, audit)
			if err != nil {
				return err
			}
			for _, p := range problems {
				out = append(out, store.CorruptError{Reason: "chunk store: " + p})
			}
		}
		if isCorrupt(scanErr) {
			s.observe(scanErr)
			// A damaged page of the states table stops the scan: check each checkpoint on its
			// own instead (loadOne names those whose rows sit on damaged pages), so that every
			// corrupt checkpoint is still listed, and report the damage itself.
			each, err := s.verifyEach(ctx, tx)
			if err != nil {
				return err
			}
			out = append(out, each...)
			out = append(out, store.CorruptError{Reason: "database: states table: " + scanErr.Error()})
			bad, fellBack = nil, true
		} else if scanErr != nil {
			return scanErr
		}
		for _, h := range bad {
			ids, err := tx.QueryContext(ctx, `SELECT checkpoint_id FROM checkpoints WHERE state_hash = ? ORDER BY id`, h)
			if err != nil {
				return err
			}
			for ids.Next() {
				var id string
				if err := ids.Scan(&id); err != nil {
					ids.Close()
					return err
				}
				out = append(out, store.CorruptError{CheckpointID: id, Reason: reasons[string(h)]})
			}
			ids.Close()
		}
		// checkpoints whose state row is missing (verifyEach found those already)
		if !fellBack {
			ids, err := tx.QueryContext(ctx, `SELECT checkpoint_id FROM checkpoints c WHERE c.state_hash IS NOT NULL
				AND NOT EXISTS (SELECT 1 FROM states s WHERE s.hash = c.state_hash) ORDER BY id`)
			if err != nil {
				return err
			}
			for ids.Next() {
				var id string
				if err := ids.Scan(&id); err != nil {
					ids.Close()
					return err
				}
				out = append(out, store.CorruptError{CheckpointID: id, Reason: "state blob missing"})
			}
			ids.Close()
		}

		return nil
	})
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return out, err
		}
		if isDamaged(err) {
			s.observe(err)
			return append(out, store.CorruptError{Reason: "database: " + err.Error()}), nil
		}
		return out, wrapDB(fmt.Sprintf("verify %s", s.path), err)
	}
	return out, nil
}

// isDamaged reports SQLITE_CORRUPT and SQLITE_NOTADB: the file itself is damaged.
func isDamaged(err error) bool { return sqliteCode(err) == 11 || sqliteCode(err) == 26 }

// IntegrityCheck runs PRAGMA integrity_check: one problem per message that is not "ok" (and one
// for damage that stops it).
func (s *Store) IntegrityCheck(ctx context.Context) ([]string, error) {
	var out []string
	err := s.readTx(ctx, func(tx *rtx) error {
		out = nil
		return scanRows(ctx, tx, `PRAGMA integrity_check`, func(rows *sql.Rows) error {
			var msg string
			if err := rows.Scan(&msg); err != nil {
				return err
			}
			if !strings.EqualFold(msg, "ok") {
				out = append(out, "integrity_check: "+msg)
			}
			return nil
		})
	})
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return out, err
		}
		if isDamaged(err) {
			s.observe(err)
			return append(out, "database: "+err.Error()), nil
		}
		return out, wrapDB(fmt.Sprintf("integrity check of %s", s.path), err)
	}
	return out, nil
}

// verifyEach verifies every checkpoint with loadOne: Verify's fallback when SQLite cannot scan
// the states table.
func (s *Store) verifyEach(ctx context.Context, tx *rtx) ([]store.CorruptError, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id FROM checkpoints ORDER BY id`)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []store.CorruptError
	for _, id := range ids {
		_, err := s.loadOne(ctx, tx, "c.id = ?", id)
		var ce *store.CorruptError
		switch {
		case errors.As(err, &ce):
			out = append(out, *ce)
		case err != nil:
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
