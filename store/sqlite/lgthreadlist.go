package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ckptd/ckptd/store"
)

// ListLGThreads lists one page of LangGraph threads, most recently updated first, through the
// kept list lg_threads (schema step 11, kept by triggers): the page's threads
// are read from lg_threads_updated from the cursor on, and each one's figures from its own rows
// (by key). Total counts lg_threads.
func (s *Store) ListLGThreads(ctx context.Context, limit int, cursor string) (store.LGThreadList, error) {
	if limit < 1 || limit > store.MaxWorkflowPage {
		return store.LGThreadList{}, invalid("limit", "must be between 1 and %d", store.MaxWorkflowPage)
	}
	k, err := store.DecodeLGThreadCursor(cursor)
	if err != nil {
		return store.LGThreadList{}, err
	}
	q := `SELECT thread_id, updated_at FROM lg_threads INDEXED BY lg_threads_updated`
	args := []any{}
	if k != nil {
		q += ` WHERE updated_at <= ?1 AND (updated_at < ?1 OR thread_id > ?2)`
		args = append(args, lgMicros(k.UpdatedAt), k.ID)
	}
	q += fmt.Sprintf(` ORDER BY updated_at DESC, thread_id LIMIT ?%d`, len(args)+1)
	args = append(args, limit+1)
	var out store.LGThreadList
	err = s.readTx(ctx, func(tx *rtx) error {
		out = store.LGThreadList{}
		err := scanCached(ctx, tx, q, func(rows *sql.Rows) error {
			var t store.LGThread
			var updated int64
			if err := rows.Scan(&t.ThreadID, &updated); err != nil {
				return err
			}
			if updated != 0 { // 0: only writes or values, no checkpoint
				t.UpdatedAt = time.UnixMicro(updated).UTC()
			}
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
		for i := range out.Threads {
			t := &out.Threads[i]
			var latest sql.NullString
			var cpBytes, writeBytes int64
			if err := tx.cachedRow(ctx, `SELECT count(*), count(DISTINCT namespace), coalesce(sum(length(data)), 0),
					(SELECT l.checkpoint_id FROM lg_checkpoints l WHERE l.thread_id = ?1
						ORDER BY l.namespace = '' DESC, l.checkpoint_id DESC LIMIT 1)
				FROM lg_checkpoints WHERE thread_id = ?1`, t.ThreadID).Scan(&t.Checkpoints, &t.Namespaces, &cpBytes, &latest); err != nil {
				return err
			}
			if err := tx.cachedRow(ctx, `SELECT coalesce(sum(length(data)), 0) FROM lg_blobs WHERE thread_id = ?`, t.ThreadID).
				Scan(&t.ChannelBytes); err != nil {
				return err
			}
			if err := tx.cachedRow(ctx, `SELECT count(*), coalesce(sum(length(data)), 0) FROM lg_writes WHERE thread_id = ?`, t.ThreadID).
				Scan(&t.Writes, &writeBytes); err != nil {
				return err
			}
			t.LatestID = latest.String
			t.StoredBytes = cpBytes + t.ChannelBytes + writeBytes
		}
		return tx.cachedRow(ctx, `SELECT count(*) FROM lg_threads`).Scan(&out.Total)
	})
	if err != nil {
		return store.LGThreadList{}, wrapDB("list LangGraph threads", err)
	}
	return out, nil
}

// lgMicros is a thread's update time as lg_threads keeps it (0: none).
func lgMicros(t time.Time) int64 {
	if t.UnixMicro() == 0 || t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}
