package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/ckptd/ckptd/store"
)

// LGExport reads every checkpoint, channel value and pending write of thread from one snapshot,
// verified (SHA-256 and decoding): begin gets the counts, then each every row, checkpoints
// first, then values, then writes, each in key order. Only one row is in memory at a time. A
// damaged row stops the export with its *CorruptError; a thread with no rows is ErrNotFound.
func (s *Store) LGExport(ctx context.Context, thread string, begin func(store.LGThreadCounts) error, each func(store.LGRecord) error) error {
	err := s.readTx(ctx, func(tx *rtx) error {
		var c store.LGThreadCounts
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM lg_checkpoints WHERE thread_id = ?1),
				(SELECT count(*) FROM lg_blobs WHERE thread_id = ?1), (SELECT count(*) FROM lg_writes WHERE thread_id = ?1)`,
			thread).Scan(&c.Checkpoints, &c.Values, &c.Writes); err != nil {
			return err
		}
		if c == (store.LGThreadCounts{}) {
			return fmt.Errorf("LangGraph thread %q: %w", thread, store.ErrNotFound)
		}
		if err := begin(c); err != nil {
			return err
		}
		var ferr error // each's error: returned as is
		emit := func(r store.LGRecord, what string, data []byte, enc int, size int64, sha []byte) error {
			raw, err := s.lgOpen(ctx, tx.cached, r.CheckpointID, what, data, enc, size, sha)
			if err != nil {
				return err
			}
			r.Data = raw
			if ferr = each(r); ferr != nil {
				return ferr
			}
			return ctx.Err()
		}
		err := scanRows(ctx, tx, `SELECT namespace, checkpoint_id, parent_id, created_at, channel_versions, metadata,
				type, encoding, size, sha256, data, value_refs FROM lg_checkpoints WHERE thread_id = ? ORDER BY namespace, checkpoint_id`,
			func(rows *sql.Rows) error {
				r := store.LGRecord{Kind: store.LGKindCheckpoint}
				var parent sql.NullString
				var created, size int64
				var versions string
				var enc int
				var sha, data, meta, refs []byte
				if err := rows.Scan(&r.Namespace, &r.CheckpointID, &parent, &created, &versions, &meta, &r.Type,
					&enc, &size, &sha, &data, &refs); err != nil {
					return err
				}
				var err error
				if r.ValueRefs, err = store.ParseValueRefs(refs); err != nil {
					return &store.CorruptError{CheckpointID: r.CheckpointID, Reason: "stored value refs do not parse: " + err.Error()}
				}
				r.ParentID, r.CreatedAt, r.ChannelVersions = parent.String, time.UnixMicro(created).UTC(), json.RawMessage(versions)
				if meta != nil {
					r.Metadata = json.RawMessage(meta)
				}
				return emit(r, "checkpoint", data, enc, size, sha)
			}, thread)
		if err != nil {
			return err
		}
		err = scanRows(ctx, tx, `SELECT namespace, channel, version, variant, type, encoding, size, sha256, data FROM lg_blobs
				WHERE thread_id = ? ORDER BY namespace, channel, version, variant`, func(rows *sql.Rows) error {
			r := store.LGRecord{Kind: store.LGKindValue}
			var enc int
			var size int64
			var sha, data []byte
			if err := rows.Scan(&r.Namespace, &r.Channel, &r.Version, &r.Variant, &r.Type, &enc, &size, &sha, &data); err != nil {
				return err
			}
			return emit(r, store.LGValueWhat(r.Channel, r.Version, r.Variant), data, enc, size, sha)
		}, thread)
		if err != nil {
			return err
		}
		return scanRows(ctx, tx, `SELECT namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding,
				size, sha256, data FROM lg_writes WHERE thread_id = ? ORDER BY namespace, checkpoint_id, task_id, idx`,
			func(rows *sql.Rows) error {
				r := store.LGRecord{Kind: store.LGKindWrite}
				var enc int
				var size int64
				var sha, data []byte
				if err := rows.Scan(&r.Namespace, &r.CheckpointID, &r.TaskID, &r.Idx, &r.TaskPath, &r.Channel, &r.Type,
					&enc, &size, &sha, &data); err != nil {
					return err
				}
				return emit(r, fmt.Sprintf("write %s/%d", r.TaskID, r.Idx), data, enc, size, sha)
			}, thread)
	})
	var ce *store.CorruptError
	if err == nil || errors.Is(err, store.ErrNotFound) || errors.As(err, &ce) || errors.Is(err, ctx.Err()) {
		return err
	}
	return wrapDB(fmt.Sprintf("export LangGraph thread %q", thread), err)
}

// LGImport writes a thread's rows, as LGExport produced them, in ONE transaction: if recs yields
// an error, a row is invalid or conflicts, or ctx ends, nothing is written. Rows keep their
// keys, bytes and checkpoint creation times. A row already here with the same bytes is skipped
// (importing twice is a no-op); one with different bytes is an ErrConflict.
func (s *Store) LGImport(ctx context.Context, thread string, recs iter.Seq2[store.LGRecord, error], opts store.ImportOptions) (store.LGImportResult, error) {
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return store.LGImportResult{}, err
	}
	callerCtx := ctx
	var res store.LGImportResult
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		res = store.LGImportResult{ThreadID: thread, DryRun: opts.DryRun}
		var n int
		if err := w.queryRow(ctx, `SELECT (SELECT count(*) FROM lg_checkpoints WHERE thread_id = ?1)
				+ (SELECT count(*) FROM lg_blobs WHERE thread_id = ?1) + (SELECT count(*) FROM lg_writes WHERE thread_id = ?1)`,
			thread).Scan(&n); err != nil {
			return err
		}
		res.CreatedThread = n == 0
		var newest int64
		for r, err := range recs {
			if err != nil {
				return err
			}
			if err := callerCtx.Err(); err != nil {
				return err
			}
			if err := s.lgImportOne(ctx, w, thread, r, &res); err != nil {
				return err
			}
			if r.Kind == store.LGKindCheckpoint {
				newest = max(newest, r.CreatedAt.UnixMicro())
			}
		}
		if newest > 0 {
			if err := lgTouchThread(ctx, w, thread, newest); err != nil {
				return err
			}
		}
		if opts.DryRun {
			return errImportDryRun
		}
		return nil
	})
	if errors.Is(err, errImportDryRun) {
		return res, nil
	}
	if err != nil {
		var ie *store.InvalidError
		var ce *store.CorruptError
		if errors.As(err, &ie) || errors.As(err, &ce) || errors.Is(err, store.ErrConflict) {
			return store.LGImportResult{}, fmt.Errorf("import LangGraph thread %q: %w", thread, err)
		}
		return store.LGImportResult{}, wrapDB(fmt.Sprintf("import LangGraph thread %q", thread), err)
	}
	return res, nil
}

// lgImportOne writes one row of an LGImport unless the same row is already here.
func (s *Store) lgImportOne(ctx context.Context, w *wtx, thread string, r store.LGRecord, res *store.LGImportResult) error {
	// same reports whether the row the query (selecting encoding, size, sha256, data) finds is
	// here with the same raw bytes; a row with other bytes is a conflict. (The stored SHA-256 is
	// of the stored, possibly compressed, bytes: the raw bytes are compared.)
	same := func(what, q string, args ...any) (bool, error) {
		var enc int
		var size int64
		var sha, data []byte
		err := w.queryRow(ctx, q, args...).Scan(&enc, &size, &sha, &data)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return false, nil
		case err != nil:
			return false, err
		}
		raw, err := s.lgOpen(ctx, w.query, r.CheckpointID, what+" (stored here)", data, enc, size, sha)
		if err != nil {
			return false, err
		}
		if !bytes.Equal(raw, r.Data) {
			return false, fmt.Errorf("%s is already here with different content: %w", what, store.ErrConflict)
		}
		return true, nil
	}
	if err := r.Check(); err != nil {
		return err
	}
	what := r.What()
	switch r.Kind {
	case store.LGKindCheckpoint:
		dup, err := same(what, `SELECT encoding, size, sha256, data FROM lg_checkpoints WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?`,
			thread, r.Namespace, r.CheckpointID)
		if err != nil || dup {
			res.Skipped.Checkpoints += b2i(dup)
			return err
		}
		p, err := s.prepareLGPut(store.LGPutRequest{ThreadID: thread, Namespace: r.Namespace, CheckpointID: r.CheckpointID,
			ParentID: r.ParentID, Type: r.Type, Checkpoint: r.Data, ChannelVersions: r.ChannelVersions, Metadata: r.Metadata})
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		p.Micros = r.CreatedAt.UnixMicro()
		if _, err := s.lgInsertCheckpoint(ctx, w, p, store.EncodeValueRefs(r.ValueRefs)); err != nil {
			return err
		}
		res.Imported.Checkpoints++
	case store.LGKindValue:
		dup, err := same(what, `SELECT encoding, size, sha256, data FROM lg_blobs WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ? AND variant = ?`,
			thread, r.Namespace, r.Channel, r.Version, r.Variant)
		if err != nil || dup {
			res.Skipped.Values += b2i(dup)
			return err
		}
		pb := s.pack(r.Data)
		if r.Type != store.LGEmptyType {
			pb = s.lgPacker().Value(thread, r.Namespace, r.Channel, r.Version, r.Data)
		}
		if _, err := w.lgExec(ctx, `INSERT INTO lg_blobs(thread_id, namespace, channel, version, variant, type, encoding, size, sha256, data)
				VALUES (?,?,?,?,?,?,?,?,?,?)`, thread, r.Namespace, r.Channel, r.Version, r.Variant, r.Type, pb.Enc, pb.Size, pb.SHA, pb.Data); err != nil {
			return err
		}
		if pb.CV != nil {
			if _, err := s.refChunked(ctx, w, pb.CV); err != nil {
				return err
			}
		} else {
			s.walPending.Add(int64(len(pb.Data)))
		}
		res.Imported.Values++
	case store.LGKindWrite:
		dup, err := same(what, `SELECT encoding, size, sha256, data FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?
				AND task_id = ? AND idx = ?`, thread, r.Namespace, r.CheckpointID, r.TaskID, r.Idx)
		if err != nil || dup {
			res.Skipped.Writes += b2i(dup)
			return err
		}
		p := s.lgPacker().Write(r.Data)
		if _, err := w.lgExec(ctx, `INSERT INTO lg_writes(thread_id, namespace, checkpoint_id, task_id, idx, task_path,
				channel, type, encoding, size, sha256, data) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
			thread, r.Namespace, r.CheckpointID, r.TaskID, r.Idx, r.TaskPath, r.Channel, r.Type, p.Enc, p.Size, p.SHA, p.Data); err != nil {
			return err
		}
		if p.CV != nil {
			if _, err := s.refChunked(ctx, w, p.CV); err != nil {
				return err
			}
		} else {
			s.walPending.Add(int64(len(p.Data)))
		}
		res.Imported.Writes++
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
