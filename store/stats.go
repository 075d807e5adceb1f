package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Stats describes the database file and its contents.
func (s *Store) Stats(ctx context.Context) (DBStats, error) {
	st := DBStats{Path: s.path}
	if fi, err := os.Stat(s.path); err == nil {
		st.SizeBytes = fi.Size()
	}
	if fi, err := os.Stat(s.path + "-wal"); err == nil {
		st.WALBytes = fi.Size()
	}
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM workflows), (SELECT count(*) FROM checkpoints),
			(SELECT count(*) FROM states), (SELECT coalesce(sum(stored_size), 0) FROM states)`).
			Scan(&st.Workflows, &st.Checkpoints, &st.States, &st.StatesStoredBytes)
	})
	if err != nil {
		return DBStats{}, wrapDB("stats", err)
	}
	return st, nil
}

// Verify re-checks every stored state (decompression and SHA-256) and runs PRAGMA integrity_check.
// It returns one CorruptError per corrupt checkpoint (and one with an empty CheckpointID per
// integrity_check message). progress, if not nil, is called with the number of states checked.
func (s *Store) Verify(ctx context.Context, progress func(done, total int)) ([]CorruptError, error) {
	var out []CorruptError
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		out = nil
		var total int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM states`).Scan(&total); err != nil {
			return err
		}
		// hashes of bad states, then map them to checkpoints
		var bad [][]byte
		reasons := map[string]string{}
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
			raw, derr := s.codec.decode(data, enc, size)
			reason := ""
			if derr != nil {
				reason = "state does not decode: " + derr.Error()
			} else if sum := sha256.Sum256(raw); !bytes.Equal(sum[:], hash) {
				reason = "state SHA-256 mismatch"
			}
			if reason != "" {
				h := bytes.Clone(hash)
				bad = append(bad, h)
				reasons[string(h)] = reason
			}
			done++
			if progress != nil {
				progress(done, total)
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
		if isCorrupt(scanErr) {
			// A damaged page of the states table stops the scan: check each checkpoint on its
			// own instead (loadOne names those whose rows sit on damaged pages), so that every
			// corrupt checkpoint is still listed, and report the damage itself.
			each, err := s.verifyEach(ctx, tx)
			if err != nil {
				return err
			}
			out = append(each, CorruptError{Reason: "database: states table: " + scanErr.Error()})
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
				out = append(out, CorruptError{CheckpointID: id, Reason: reasons[string(h)]})
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
				out = append(out, CorruptError{CheckpointID: id, Reason: "state blob missing"})
			}
			ids.Close()
		}

		ic, err := tx.QueryContext(ctx, `PRAGMA integrity_check`)
		if err != nil {
			return err
		}
		defer ic.Close()
		for ic.Next() {
			var msg string
			if err := ic.Scan(&msg); err != nil {
				return err
			}
			if !strings.EqualFold(msg, "ok") {
				out = append(out, CorruptError{Reason: "integrity_check: " + msg})
			}
		}
		return ic.Err()
	})
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return out, err
		}
		if sqliteCode(err) == 11 || sqliteCode(err) == 26 {
			return append(out, CorruptError{Reason: "database: " + err.Error()}), nil
		}
		return out, wrapDB(fmt.Sprintf("verify %s", s.path), err)
	}
	return out, nil
}

// verifyEach verifies every checkpoint with loadOne: Verify's fallback when SQLite cannot scan
// the states table.
func (s *Store) verifyEach(ctx context.Context, tx *sql.Tx) ([]CorruptError, error) {
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
	var out []CorruptError
	for _, id := range ids {
		_, err := s.loadOne(ctx, tx, "c.id = ?", id)
		var ce *CorruptError
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
