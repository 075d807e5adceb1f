package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"
)

// LangGraph rows kinds, as LGRecord.Kind.
const (
	LGKindCheckpoint = "checkpoint"
	LGKindValue      = "value"
	LGKindWrite      = "write"
)

// LGRecord is one stored LangGraph row of a thread with its raw bytes: what LGExport yields and
// LGImport takes. Fields not of its kind are zero.
type LGRecord struct {
	Kind      string // LGKindCheckpoint, LGKindValue or LGKindWrite
	Namespace string

	CheckpointID    string          // checkpoint, write
	ParentID        string          // checkpoint
	CreatedAt       time.Time       // checkpoint
	ChannelVersions json.RawMessage // checkpoint, as sent
	Metadata        json.RawMessage // checkpoint, as sent; nil: none

	Channel string // value, write
	Version string // value: canonical JSON text (CanonicalVersion)

	TaskID   string // write
	TaskPath string // write
	Idx      int64  // write

	Type string // serializer tag ("empty" for a value without one)
	Data []byte // raw, as sent
}

// LGThreadCounts counts a thread's rows by kind.
type LGThreadCounts struct {
	Checkpoints, Values, Writes int
}

// LGExport reads every checkpoint, channel value and pending write of thread from one snapshot,
// verified (SHA-256 and decoding): begin gets the counts, then each every row, checkpoints
// first, then values, then writes, each in key order. Only one row is in memory at a time. A
// damaged row stops the export with its *CorruptError; a thread with no rows is ErrNotFound.
func (s *Store) LGExport(ctx context.Context, thread string, begin func(LGThreadCounts) error, each func(LGRecord) error) error {
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var c LGThreadCounts
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM lg_checkpoints WHERE thread_id = ?1),
				(SELECT count(*) FROM lg_blobs WHERE thread_id = ?1), (SELECT count(*) FROM lg_writes WHERE thread_id = ?1)`,
			thread).Scan(&c.Checkpoints, &c.Values, &c.Writes); err != nil {
			return err
		}
		if c == (LGThreadCounts{}) {
			return fmt.Errorf("LangGraph thread %q: %w", thread, ErrNotFound)
		}
		if err := begin(c); err != nil {
			return err
		}
		var ferr error // each's error: returned as is
		emit := func(r LGRecord, what string, data []byte, enc int, size int64, sha []byte) error {
			raw, err := s.unpack(r.CheckpointID, what, data, enc, size, sha)
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
				type, encoding, size, sha256, data FROM lg_checkpoints WHERE thread_id = ? ORDER BY namespace, checkpoint_id`,
			func(rows *sql.Rows) error {
				r := LGRecord{Kind: LGKindCheckpoint}
				var parent sql.NullString
				var created, size int64
				var versions string
				var enc int
				var sha, data, meta []byte
				if err := rows.Scan(&r.Namespace, &r.CheckpointID, &parent, &created, &versions, &meta, &r.Type,
					&enc, &size, &sha, &data); err != nil {
					return err
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
		err = scanRows(ctx, tx, `SELECT namespace, channel, version, type, encoding, size, sha256, data FROM lg_blobs
				WHERE thread_id = ? ORDER BY namespace, channel, version`, func(rows *sql.Rows) error {
			r := LGRecord{Kind: LGKindValue}
			var enc int
			var size int64
			var sha, data []byte
			if err := rows.Scan(&r.Namespace, &r.Channel, &r.Version, &r.Type, &enc, &size, &sha, &data); err != nil {
				return err
			}
			return emit(r, fmt.Sprintf("blob %s@%s", r.Channel, r.Version), data, enc, size, sha)
		}, thread)
		if err != nil {
			return err
		}
		return scanRows(ctx, tx, `SELECT namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding,
				size, sha256, data FROM lg_writes WHERE thread_id = ? ORDER BY namespace, checkpoint_id, task_id, idx`,
			func(rows *sql.Rows) error {
				r := LGRecord{Kind: LGKindWrite}
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
	var ce *CorruptError
	if err == nil || errors.Is(err, ErrNotFound) || errors.As(err, &ce) || errors.Is(err, ctx.Err()) {
		return err
	}
	return wrapDB(fmt.Sprintf("export LangGraph thread %q", thread), err)
}

// LGImportResult reports an LGImport.
type LGImportResult struct {
	ThreadID      string
	CreatedThread bool           // the thread had no rows here before
	Imported      LGThreadCounts // rows written
	Skipped       LGThreadCounts // rows already here with the same bytes: left untouched
	DryRun        bool
}

// LGImport writes a thread's rows, as LGExport produced them, in ONE transaction: if recs yields
// an error, a row is invalid or conflicts, or ctx ends, nothing is written. Rows keep their
// keys, bytes and checkpoint creation times. A row already here with the same bytes is skipped
// (importing twice is a no-op); one with different bytes is an ErrConflict.
func (s *Store) LGImport(ctx context.Context, thread string, recs iter.Seq2[LGRecord, error], opts ImportOptions) (LGImportResult, error) {
	switch {
	case thread == "":
		return LGImportResult{}, invalid("threadId", "required")
	case len(thread) > maxLGThreadID:
		return LGImportResult{}, invalid("threadId", "longer than %d bytes", maxLGThreadID)
	}
	callerCtx := ctx
	var res LGImportResult
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		res = LGImportResult{ThreadID: thread, DryRun: opts.DryRun}
		var n int
		if err := w.queryRow(ctx, `SELECT (SELECT count(*) FROM lg_checkpoints WHERE thread_id = ?1)
				+ (SELECT count(*) FROM lg_blobs WHERE thread_id = ?1) + (SELECT count(*) FROM lg_writes WHERE thread_id = ?1)`,
			thread).Scan(&n); err != nil {
			return err
		}
		res.CreatedThread = n == 0
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
		var ie *InvalidError
		var ce *CorruptError
		if errors.As(err, &ie) || errors.As(err, &ce) || errors.Is(err, ErrConflict) {
			return LGImportResult{}, fmt.Errorf("import LangGraph thread %q: %w", thread, err)
		}
		return LGImportResult{}, wrapDB(fmt.Sprintf("import LangGraph thread %q", thread), err)
	}
	return res, nil
}

// lgImportOne writes one row of an LGImport unless the same row is already here.
func (s *Store) lgImportOne(ctx context.Context, w *wtx, thread string, r LGRecord, res *LGImportResult) error {
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
		raw, err := s.unpack(r.CheckpointID, what+" (stored here)", data, enc, size, sha)
		if err != nil {
			return false, err
		}
		if !bytes.Equal(raw, r.Data) {
			return false, fmt.Errorf("%s is already here with different content: %w", what, ErrConflict)
		}
		return true, nil
	}
	switch r.Kind {
	case LGKindCheckpoint:
		what := fmt.Sprintf("checkpoint %q (namespace %q)", r.CheckpointID, r.Namespace)
		if r.CreatedAt.IsZero() {
			return invalid("createdAt", "%s: required", what)
		}
		dup, err := same(what, `SELECT encoding, size, sha256, data FROM lg_checkpoints WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?`,
			thread, r.Namespace, r.CheckpointID)
		if err != nil || dup {
			res.Skipped.Checkpoints += b2i(dup)
			return err
		}
		p, err := s.prepareLGPut(LGPutRequest{ThreadID: thread, Namespace: r.Namespace, CheckpointID: r.CheckpointID,
			ParentID: r.ParentID, Type: r.Type, Checkpoint: r.Data, ChannelVersions: r.ChannelVersions, Metadata: r.Metadata})
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		p.micros = r.CreatedAt.UnixMicro()
		if _, err := s.lgInsertCheckpoint(ctx, w, p); err != nil {
			return err
		}
		res.Imported.Checkpoints++
	case LGKindValue:
		what := fmt.Sprintf("value %s@%s (namespace %q)", r.Channel, r.Version, r.Namespace)
		switch canon, err := CanonicalVersion(json.RawMessage(r.Version)); {
		case r.Channel == "":
			return invalid("channel", "%s: required", what)
		case err != nil || canon != r.Version:
			return invalid("version", "%s: not a canonical version", what)
		case r.Type == "":
			return invalid("type", "%s: required", what)
		case r.Type == LGEmptyType && len(r.Data) > 0:
			return invalid("type", "%s: an empty value with %d bytes", what, len(r.Data))
		}
		dup, err := same(what, `SELECT encoding, size, sha256, data FROM lg_blobs WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ?`,
			thread, r.Namespace, r.Channel, r.Version)
		if err != nil || dup {
			res.Skipped.Values += b2i(dup)
			return err
		}
		pb := s.pack(r.Data)
		if _, err := w.lgExec(ctx, `INSERT INTO lg_blobs(thread_id, namespace, channel, version, type, encoding, size, sha256, data)
				VALUES (?,?,?,?,?,?,?,?,?)`, thread, r.Namespace, r.Channel, r.Version, r.Type, pb.enc, pb.size, pb.sha, pb.data); err != nil {
			return err
		}
		s.walPending.Add(int64(len(pb.data)))
		res.Imported.Values++
	case LGKindWrite:
		what := fmt.Sprintf("write %s/%d of checkpoint %q (namespace %q)", r.TaskID, r.Idx, r.CheckpointID, r.Namespace)
		switch {
		case r.CheckpointID == "" || r.TaskID == "" || r.Channel == "" || r.Type == "":
			return invalid("write", "%s: checkpointId, taskId, channel and type are required", what)
		}
		dup, err := same(what, `SELECT encoding, size, sha256, data FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?
				AND task_id = ? AND idx = ?`, thread, r.Namespace, r.CheckpointID, r.TaskID, r.Idx)
		if err != nil || dup {
			res.Skipped.Writes += b2i(dup)
			return err
		}
		p := s.pack(r.Data)
		if _, err := w.lgExec(ctx, `INSERT INTO lg_writes(thread_id, namespace, checkpoint_id, task_id, idx, task_path,
				channel, type, encoding, size, sha256, data) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
			thread, r.Namespace, r.CheckpointID, r.TaskID, r.Idx, r.TaskPath, r.Channel, r.Type, p.enc, p.size, p.sha, p.data); err != nil {
			return err
		}
		s.walPending.Add(int64(len(p.data)))
		res.Imported.Writes++
	default:
		return invalid("kind", "%q: want checkpoint, value or write", r.Kind)
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
