package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// LGProblem is a stored LangGraph byte string that fails verification, or damage that stopped
// a scan of one of the LangGraph tables (Kind "table").
type LGProblem struct {
	Kind         string // "checkpoint", "blob", "write" or "table"
	ThreadID     string
	Namespace    string
	CheckpointID string // checkpoint, write
	Channel      string // blob, write
	Version      string // blob
	TaskID       string // write
	Idx          int64  // write
	Reason       string
}

// LGCounts are the LangGraph rows VerifyLG checked.
type LGCounts struct {
	Checkpoints, Blobs, Writes int
}

// VerifyLG re-checks every stored LangGraph checkpoint, channel value and pending write: the
// SHA-256 of the stored bytes and their decoding, straight from the database (never from the
// in-memory value cache). Reads only.
func (s *Store) VerifyLG(ctx context.Context) (LGCounts, []LGProblem, error) {
	var counts LGCounts
	var out []LGProblem
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		counts, out = LGCounts{}, nil
		scan := func(table, q string, each func(rows *sql.Rows) error) error {
			rows, err := tx.QueryContext(ctx, q)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				if err := each(rows); err != nil {
					return err
				}
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if err := rows.Err(); isCorrupt(err) {
				out = append(out, LGProblem{Kind: "table", Reason: table + ": " + err.Error()})
				return nil
			} else if err != nil {
				return err
			}
			return nil
		}
		check := func(p LGProblem, what string, data sql.RawBytes, enc int, size int64, sha []byte) {
			if _, err := s.unpack(p.CheckpointID, what, data, enc, size, sha); err != nil {
				if ce := (*CorruptError)(nil); errors.As(err, &ce) {
					p.Reason = ce.Reason
				} else {
					p.Reason = err.Error()
				}
				out = append(out, p)
			}
		}
		var enc int
		var size int64
		var sha []byte
		var data sql.RawBytes
		err := scan("lg_checkpoints", `SELECT thread_id, namespace, checkpoint_id, encoding, size, sha256, data FROM lg_checkpoints ORDER BY id`,
			func(rows *sql.Rows) error {
				var p LGProblem
				if err := rows.Scan(&p.ThreadID, &p.Namespace, &p.CheckpointID, &enc, &size, &sha, &data); err != nil {
					return err
				}
				counts.Checkpoints++
				p.Kind = "checkpoint"
				check(p, "checkpoint", data, enc, size, sha)
				return nil
			})
		if err != nil {
			return err
		}
		err = scan("lg_blobs", `SELECT thread_id, namespace, channel, version, encoding, size, sha256, data FROM lg_blobs ORDER BY id`,
			func(rows *sql.Rows) error {
				var p LGProblem
				if err := rows.Scan(&p.ThreadID, &p.Namespace, &p.Channel, &p.Version, &enc, &size, &sha, &data); err != nil {
					return err
				}
				counts.Blobs++
				p.Kind = "blob"
				check(p, fmt.Sprintf("blob %s@%s", p.Channel, p.Version), data, enc, size, sha)
				return nil
			})
		if err != nil {
			return err
		}
		return scan("lg_writes", `SELECT thread_id, namespace, checkpoint_id, task_id, idx, channel, encoding, size, sha256, data
			FROM lg_writes ORDER BY id`,
			func(rows *sql.Rows) error {
				var p LGProblem
				if err := rows.Scan(&p.ThreadID, &p.Namespace, &p.CheckpointID, &p.TaskID, &p.Idx, &p.Channel, &enc, &size, &sha, &data); err != nil {
					return err
				}
				counts.Writes++
				p.Kind = "write"
				check(p, fmt.Sprintf("write %s/%d", p.TaskID, p.Idx), data, enc, size, sha)
				return nil
			})
	})
	if err != nil {
		return LGCounts{}, nil, wrapDB("verify LangGraph storage", err)
	}
	return counts, out, nil
}
