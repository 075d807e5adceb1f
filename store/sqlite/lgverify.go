package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ckptd/ckptd/store"
)

// VerifyLG re-checks every stored LangGraph checkpoint, channel value and pending write: the
// SHA-256 of the stored bytes and their decoding (a chunked value reassembled and checked as a
// whole), straight from the database (never from the in-memory value cache). Reads only.
func (s *Store) VerifyLG(ctx context.Context) (store.LGCounts, []store.LGProblem, error) {
	var counts store.LGCounts
	var out []store.LGProblem
	err := s.readTx(ctx, func(tx *rtx) error {
		counts, out = store.LGCounts{}, nil
		scan := func(table, q string, each func(rows *sql.Rows) error) error {
			err := scanRows(ctx, tx, q, each)
			if isCorrupt(err) {
				s.observe(err)
				out = append(out, store.LGProblem{Kind: "table", Reason: table + ": " + err.Error()})
				return nil
			}
			return err
		}
		check := func(p store.LGProblem, what string, data sql.RawBytes, enc int, size int64, sha []byte) {
			if _, err := s.lgVerify(ctx, tx.cached, p.CheckpointID, what, data, enc, size, sha); err != nil {
				if ce := (*store.CorruptError)(nil); errors.As(err, &ce) {
					p.Reason = ce.Reason
				} else {
					p.Reason = err.Error()
				}
				out = append(out, p)
			}
		}
		// each table: its identifying columns, then encoding, size, sha256, data
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
		var enc int
		var size int64
		var sha []byte
		var data sql.RawBytes
		for _, t := range tables {
			q := `SELECT ` + t.cols + `, encoding, size, sha256, data FROM ` + t.table + ` ORDER BY id`
			err := scan(t.table, q, func(rows *sql.Rows) error {
				p := store.LGProblem{Kind: t.kind}
				if err := rows.Scan(append(t.dest(&p), &enc, &size, &sha, &data)...); err != nil {
					return err
				}
				*t.n++
				check(p, t.what(&p), data, enc, size, sha)
				return nil
			})
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

// auditLGValues counts the listings of the chunked LangGraph values (channel values, pending
// writes, staged values) into audit (their reassembly is VerifyLG's).
func auditLGValues(ctx context.Context, tx *rtx, audit *store.RefAudit) error {
	err := scanRows(ctx, tx, `SELECT thread_id, namespace, channel, version, variant, data FROM lg_blobs WHERE encoding = 4`,
		func(rows *sql.Rows) error {
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
		func(rows *sql.Rows) error {
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
	return scanRows(ctx, tx, `SELECT id, thread_id, data FROM lg_staged WHERE encoding = 4`, func(rows *sql.Rows) error {
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
