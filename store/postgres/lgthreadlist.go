package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// ListLGThreads lists one page of LangGraph threads, most recently updated first, through the
// kept list lg_threads (kept by triggers): the page's threads are read from
// lg_threads_updated from the cursor on, and each one's figures from its own rows (by key).
// Total counts lg_threads.
func (s *Store) ListLGThreads(ctx context.Context, limit int, cursor string) (store.LGThreadList, error) {
	if limit < 1 || limit > store.MaxWorkflowPage {
		return store.LGThreadList{}, invalid("limit", "must be between 1 and %d", store.MaxWorkflowPage)
	}
	k, err := store.DecodeLGThreadCursor(cursor)
	if err != nil {
		return store.LGThreadList{}, err
	}
	if k != nil {
		if err := noNUL("cursor", k.ID); err != nil {
			return store.LGThreadList{}, err
		}
	}
	q := `SELECT t.thread_id, t.updated_at, x.n, x.ns, x.bytes, x.latest,
			(SELECT coalesce(sum(length(b.data)), 0)::bigint FROM lg_blobs b WHERE b.thread_id = t.thread_id),
			w.n, w.bytes
		FROM (SELECT thread_id, updated_at FROM lg_threads`
	args := []any{}
	if k != nil {
		q += ` WHERE updated_at <= $2::timestamptz AND (updated_at < $2::timestamptz OR thread_id > $3)`
		args = append(args, k.UpdatedAt, k.ID)
	}
	q += ` ORDER BY updated_at DESC, thread_id LIMIT $1) t
		CROSS JOIN LATERAL (SELECT count(*) AS n, count(DISTINCT c.namespace) AS ns, coalesce(sum(length(c.data)), 0)::bigint AS bytes,
			(SELECT l.checkpoint_id FROM lg_checkpoints l WHERE l.thread_id = t.thread_id
				ORDER BY l.namespace = '' DESC, l.checkpoint_id DESC LIMIT 1) AS latest
			FROM lg_checkpoints c WHERE c.thread_id = t.thread_id) x
		CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce(sum(length(w.data)), 0)::bigint AS bytes
			FROM lg_writes w WHERE w.thread_id = t.thread_id) w
		ORDER BY t.updated_at DESC, t.thread_id`
	args = append([]any{limit + 1}, args...)
	var out store.LGThreadList
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		out = store.LGThreadList{}
		err := scanRows(ctx, tx, q, func(rows pgx.Rows) error {
			var t store.LGThread
			var latest *string
			var cpBytes, writeBytes int64
			var updated time.Time
			if err := rows.Scan(&t.ThreadID, &updated, &t.Checkpoints, &t.Namespaces, &cpBytes, &latest, &t.ChannelBytes,
				&t.Writes, &writeBytes); err != nil {
				return err
			}
			if updated.UnixMicro() != 0 { // the epoch: only writes or values, no checkpoint
				t.UpdatedAt = updated.UTC()
			}
			t.LatestID = deref(latest)
			t.StoredBytes = cpBytes + t.ChannelBytes + writeBytes
			out.Threads = append(out.Threads, t)
			return nil
		}, args...)
		if err != nil {
			return err
		}
		if len(out.Threads) > limit {
			out.Threads = out.Threads[:limit]
			out.Cursor = store.EncodeLGThreadCursor(out.Threads[limit-1])
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM lg_threads`).Scan(&out.Total)
	})
	if err != nil {
		return store.LGThreadList{}, wrapDB("list LangGraph threads", err)
	}
	return out, nil
}
