package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ckptd/ckptd/store"
)

// LGThreads lists every LangGraph thread (one with checkpoints, channel values or pending
// writes), most recently updated first, from one snapshot. Reads only, from the row headers:
// no stored value is read.
func (s *Store) LGThreads(ctx context.Context) ([]store.LGThread, error) {
	var out []store.LGThread
	err := s.readTx(ctx, func(tx *rtx) error {
		byID := map[string]*store.LGThread{}
		get := func(id string) *store.LGThread {
			t := byID[id]
			if t == nil {
				t = &store.LGThread{ThreadID: id}
				byID[id] = t
			}
			return t
		}
		err := scanRows(ctx, tx, `SELECT thread_id, count(*), count(DISTINCT namespace), max(created_at),
				(SELECT l.checkpoint_id FROM lg_checkpoints l WHERE l.thread_id = c.thread_id
					ORDER BY l.namespace = '' DESC, l.checkpoint_id DESC LIMIT 1),
				sum(length(data))
			FROM lg_checkpoints c GROUP BY thread_id`, func(rows *sql.Rows) error {
			var id string
			var n, ns int
			var updated, bytes int64
			var latest sql.NullString
			if err := rows.Scan(&id, &n, &ns, &updated, &latest, &bytes); err != nil {
				return err
			}
			t := get(id)
			t.Checkpoints, t.Namespaces, t.LatestID = n, ns, latest.String
			t.UpdatedAt = time.UnixMicro(updated).UTC()
			t.StoredBytes += bytes
			return nil
		})
		if err != nil {
			return err
		}
		err = scanRows(ctx, tx, `SELECT thread_id, sum(length(data)) FROM lg_blobs GROUP BY thread_id`, func(rows *sql.Rows) error {
			var id string
			var bytes int64
			if err := rows.Scan(&id, &bytes); err != nil {
				return err
			}
			t := get(id)
			t.ChannelBytes = bytes
			t.StoredBytes += bytes
			return nil
		})
		if err != nil {
			return err
		}
		err = scanRows(ctx, tx, `SELECT thread_id, count(*), sum(length(data)) FROM lg_writes GROUP BY thread_id`, func(rows *sql.Rows) error {
			var id string
			var n int
			var bytes int64
			if err := rows.Scan(&id, &n, &bytes); err != nil {
				return err
			}
			t := get(id)
			t.Writes = n
			t.StoredBytes += bytes
			return nil
		})
		if err != nil {
			return err
		}
		out = make([]store.LGThread, 0, len(byID))
		for _, t := range byID {
			out = append(out, *t)
		}
		return nil
	})
	if err != nil {
		return nil, wrapDB("list LangGraph threads", err)
	}
	slices.SortFunc(out, func(a, b store.LGThread) int {
		if c := b.UpdatedAt.Compare(a.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ThreadID, b.ThreadID)
	})
	return out, nil
}

// LGThreadCheckpoints lists a thread's checkpoints, namespace by namespace (root first), newest
// first within each, optionally of one namespace only, at most limit of them (0: all). An
// unknown thread gives ErrNotFound. Reads only the rows' headers and metadata.
func (s *Store) LGThreadCheckpoints(ctx context.Context, thread string, namespace *string, limit int) ([]store.LGCheckpointInfo, error) {
	q := `SELECT c.namespace, c.checkpoint_id, c.parent_id, c.created_at, c.metadata, c.channel_versions, c.size,
			length(c.data), (SELECT count(*) FROM lg_writes w WHERE w.thread_id = c.thread_id
				AND w.namespace = c.namespace AND w.checkpoint_id = c.checkpoint_id)
		FROM lg_checkpoints c WHERE c.thread_id = ?`
	args := []any{thread}
	if namespace != nil {
		q += ` AND c.namespace = ?`
		args = append(args, *namespace)
	}
	q += ` ORDER BY c.namespace, c.checkpoint_id DESC`
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	var out []store.LGCheckpointInfo
	err := s.readTx(ctx, func(tx *rtx) error {
		out = nil
		err := scanRows(ctx, tx, q, func(rows *sql.Rows) error {
			c := store.LGCheckpointInfo{ThreadID: thread}
			var parent sql.NullString
			var created int64
			var meta []byte
			var versions string
			if err := rows.Scan(&c.Namespace, &c.CheckpointID, &parent, &created, &meta, &versions, &c.SizeBytes,
				&c.StoredBytes, &c.Writes); err != nil {
				return err
			}
			c.ParentID = parent.String
			c.CreatedAt = time.UnixMicro(created).UTC()
			if len(meta) > 0 {
				c.Metadata = json.RawMessage(meta)
			}
			var vs map[string]json.RawMessage
			if json.Unmarshal([]byte(versions), &vs) == nil {
				c.Channels = len(vs)
			}
			out = append(out, c)
			return nil
		}, args...)
		if err != nil || len(out) > 0 {
			return err
		}
		var found int
		err = tx.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM lg_checkpoints WHERE thread_id = ?1
			UNION ALL SELECT 1 FROM lg_writes WHERE thread_id = ?1 UNION ALL SELECT 1 FROM lg_blobs WHERE thread_id = ?1 LIMIT 1)`,
			thread).Scan(&found)
		if err == nil && found == 0 {
			return fmt.Errorf("LangGraph thread %q: %w", thread, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		return nil, wrapDB(fmt.Sprintf("list LangGraph thread %q", thread), err)
	}
	return out, nil
}
