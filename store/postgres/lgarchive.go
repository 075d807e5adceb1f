package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// LGExport reads every checkpoint, channel value and pending write of thread from one snapshot,
// verified: begin gets the counts, then each every row, checkpoints first, then values, then
// writes, each in key order. A damaged row stops the export with its *CorruptError; a thread
// with no rows is ErrNotFound.
func (s *Store) LGExport(ctx context.Context, thread string, begin func(store.LGThreadCounts) error, each func(store.LGRecord) error) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	op := fmt.Sprintf("export LangGraph thread %q", thread)
	var tx pgx.Tx
	err := s.retry(ctx, func() error {
		var err error
		tx, err = s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		return err
	})
	if err != nil {
		return wrapDB(op, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	err = func() error {
		var c store.LGThreadCounts
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM lg_checkpoints WHERE thread_id = $1),
				(SELECT count(*) FROM lg_blobs WHERE thread_id = $1), (SELECT count(*) FROM lg_writes WHERE thread_id = $1)`,
			thread).Scan(&c.Checkpoints, &c.Values, &c.Writes); err != nil {
			return err
		}
		if c == (store.LGThreadCounts{}) {
			return fmt.Errorf("LangGraph thread %q: %w", thread, store.ErrNotFound)
		}
		if err := begin(c); err != nil {
			return err
		}
		emit := func(r store.LGRecord, what string, data []byte, enc int, size int64, sha []byte) error {
			raw, err := s.lgOpen(ctx, tx.Query, r.CheckpointID, what, data, enc, size, sha)
			if err != nil {
				return err
			}
			r.Data = raw
			if err := each(r); err != nil {
				return err
			}
			return ctx.Err()
		}
		err := scanRows(ctx, tx, `SELECT namespace, checkpoint_id, parent_id, created_at, channel_versions, metadata,
				type, encoding, size, sha256, data, value_refs FROM lg_checkpoints WHERE thread_id = $1 ORDER BY namespace, checkpoint_id`,
			func(rows pgx.Rows) error {
				r := store.LGRecord{Kind: store.LGKindCheckpoint}
				var parent, refs *string
				var size int64
				var versions string
				var enc int
				var sha, data, meta []byte
				if err := rows.Scan(&r.Namespace, &r.CheckpointID, &parent, &r.CreatedAt, &versions, &meta, &r.Type,
					&enc, &size, &sha, &data, &refs); err != nil {
					return err
				}
				var err error
				if r.ValueRefs, err = store.ParseValueRefs(refBytes(refs)); err != nil {
					return &store.CorruptError{CheckpointID: r.CheckpointID, Reason: "stored value refs do not parse: " + err.Error()}
				}
				r.ParentID, r.CreatedAt, r.ChannelVersions = deref(parent), r.CreatedAt.UTC(), json.RawMessage(versions)
				if meta != nil {
					r.Metadata = json.RawMessage(meta)
				}
				return emit(r, "checkpoint", data, enc, size, sha)
			}, thread)
		if err != nil {
			return err
		}
		// values: their ids in key order first, then row by row, so that a chunked value's
		// runs and chunks can be read on the same connection
		var ids []int64
		err = scanRows(ctx, tx, `SELECT id FROM lg_blobs WHERE thread_id = $1 ORDER BY namespace, channel, version, variant`,
			func(rows pgx.Rows) error {
				var id int64
				if err := rows.Scan(&id); err != nil {
					return err
				}
				ids = append(ids, id)
				return nil
			}, thread)
		if err != nil {
			return err
		}
		for _, id := range ids {
			r := store.LGRecord{Kind: store.LGKindValue}
			var enc int
			var size int64
			var sha, data []byte
			if err := tx.QueryRow(ctx, `SELECT namespace, channel, version, variant, type, encoding, size, sha256, data FROM lg_blobs
					WHERE id = $1`, id).Scan(&r.Namespace, &r.Channel, &r.Version, &r.Variant, &r.Type, &enc, &size, &sha, &data); err != nil {
				return err
			}
			if err := emit(r, store.LGValueWhat(r.Channel, r.Version, r.Variant), data, enc, size, sha); err != nil {
				return err
			}
		}
		// writes the same way (a chunked one is reassembled on the connection)
		ids = ids[:0]
		err = scanRows(ctx, tx, `SELECT id FROM lg_writes WHERE thread_id = $1 ORDER BY namespace, checkpoint_id, task_id, idx`,
			func(rows pgx.Rows) error {
				var id int64
				if err := rows.Scan(&id); err != nil {
					return err
				}
				ids = append(ids, id)
				return nil
			}, thread)
		if err != nil {
			return err
		}
		for _, id := range ids {
			r := store.LGRecord{Kind: store.LGKindWrite}
			var enc int
			var size int64
			var sha, data []byte
			if err := tx.QueryRow(ctx, `SELECT namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding,
					size, sha256, data FROM lg_writes WHERE id = $1`, id).Scan(&r.Namespace, &r.CheckpointID, &r.TaskID, &r.Idx,
				&r.TaskPath, &r.Channel, &r.Type, &enc, &size, &sha, &data); err != nil {
				return err
			}
			if err := emit(r, fmt.Sprintf("write %s/%d", r.TaskID, r.Idx), data, enc, size, sha); err != nil {
				return err
			}
		}
		return nil
	}()
	if err == nil || errors.Is(err, store.ErrNotFound) || asCorrupt(err) != nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return wrapDB(op, err)
}

// LGImport writes a thread's rows, as LGExport produced them, in ONE transaction: if recs yields
// an error, a row is invalid or conflicts, or ctx ends, nothing is written. A row already here
// with the same bytes is skipped; one with different bytes is an ErrConflict.
func (s *Store) LGImport(ctx context.Context, thread string, recs iter.Seq2[store.LGRecord, error], opts store.ImportOptions) (store.LGImportResult, error) {
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return store.LGImportResult{}, err
	}
	if err := noNUL("threadId", thread); err != nil {
		return store.LGImportResult{}, err
	}
	callerCtx := ctx
	var res store.LGImportResult
	err := s.do(ctx, threadKeys(thread), func(ctx context.Context, w *wtx) error {
		res = store.LGImportResult{ThreadID: thread, DryRun: opts.DryRun}
		var n bool
		if err := w.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM lg_checkpoints WHERE thread_id = $1)
				OR EXISTS (SELECT 1 FROM lg_blobs WHERE thread_id = $1) OR EXISTS (SELECT 1 FROM lg_writes WHERE thread_id = $1)`,
			thread).Scan(&n); err != nil {
			return err
		}
		res.CreatedThread = !n
		var newest time.Time
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
			if r.Kind == store.LGKindCheckpoint && r.CreatedAt.After(newest) {
				newest = r.CreatedAt
			}
		}
		if !newest.IsZero() {
			if _, err := w.exec(ctx, lgTouchThreadSQL, thread, newest.UTC()); err != nil {
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
		if errors.As(err, &ie) || asCorrupt(err) != nil || errors.Is(err, store.ErrConflict) {
			return store.LGImportResult{}, fmt.Errorf("import LangGraph thread %q: %w", thread, err)
		}
		return store.LGImportResult{}, wrapDB(fmt.Sprintf("import LangGraph thread %q", thread), err)
	}
	return res, nil
}

// lgImportOne writes one row of an LGImport unless the same row is already here.
func (s *Store) lgImportOne(ctx context.Context, w *wtx, thread string, r store.LGRecord, res *store.LGImportResult) error {
	// same reports whether the row the query finds is here with the same raw bytes; a row with
	// other bytes is a conflict.
	same := func(what, q string, args ...any) (bool, error) {
		var enc int
		var size int64
		var sha, data []byte
		err := w.queryRow(ctx, q, args...).Scan(&enc, &size, &sha, &data)
		switch {
		case noRows(err):
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
	if err := noNUL("namespace", r.Namespace, "checkpointId", r.CheckpointID, "channel", r.Channel, "version", r.Version,
		"type", r.Type, "taskId", r.TaskID, "taskPath", r.TaskPath); err != nil {
		return err
	}
	what := r.What()
	switch r.Kind {
	case store.LGKindCheckpoint:
		dup, err := same(what, `SELECT encoding, size, sha256, data FROM lg_checkpoints WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = $3`,
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
		b := &pgx.Batch{}
		queueLGCheckpoint(b, p, store.EncodeValueRefs(r.ValueRefs))
		if err := w.sendBatch(ctx, b); err != nil {
			return err
		}
		res.Imported.Checkpoints++
	case store.LGKindValue:
		dup, err := same(what, `SELECT encoding, size, sha256, data FROM lg_blobs WHERE thread_id = $1 AND namespace = $2 AND channel = $3
				AND version = $4 AND variant = $5`, thread, r.Namespace, r.Channel, r.Version, r.Variant)
		if err != nil || dup {
			res.Skipped.Values += b2i(dup)
			return err
		}
		pb := s.pack(r.Data)
		if r.Type != store.LGEmptyType {
			pb = s.lgPacker().Value(thread, r.Namespace, r.Channel, r.Version, r.Data)
		}
		if _, err := w.exec(ctx, `INSERT INTO lg_blobs (thread_id, namespace, channel, version, variant, type, encoding, size, sha256, data)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, thread, r.Namespace, r.Channel, r.Version, r.Variant, r.Type, pb.Enc, pb.Size, pb.SHA, pb.Data); err != nil {
			return err
		}
		if pb.CV != nil {
			if _, err := refChunked(ctx, w, pb.CV); err != nil {
				return err
			}
		}
		res.Imported.Values++
	case store.LGKindWrite:
		dup, err := same(what, `SELECT encoding, size, sha256, data FROM lg_writes WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = $3
				AND task_id = $4 AND idx = $5`, thread, r.Namespace, r.CheckpointID, r.TaskID, r.Idx)
		if err != nil || dup {
			res.Skipped.Writes += b2i(dup)
			return err
		}
		p := s.lgPacker().Write(r.Data)
		if _, err := w.exec(ctx, `INSERT INTO lg_writes (thread_id, namespace, checkpoint_id, task_id, idx, task_path,
				channel, type, encoding, size, sha256, data) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			thread, r.Namespace, r.CheckpointID, r.TaskID, r.Idx, r.TaskPath, r.Channel, r.Type, p.Enc, p.Size, p.SHA, p.Data); err != nil {
			return err
		}
		if p.CV != nil {
			if _, err := refChunked(ctx, w, p.CV); err != nil {
				return err
			}
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
