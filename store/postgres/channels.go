package postgres

// LangGraph channel storage (store/langgraph.go), in the tables SQLite uses: lg_checkpoints
// keyed by (thread, namespace, checkpoint id), channel values in lg_blobs keyed by (thread,
// namespace, channel, version), pending writes in lg_writes, the metadata index in lg_meta.
// Mutations of a thread hold the thread's advisory lock, so that a prune of one process never
// collects the value a put of another is committing.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ckptd/ckptd/store"
)

// Page caps of lg/list, as SQLite's (store/sqlite/channels.go).
const (
	lgPageBytes  int64 = 16 << 20 // soft cap of one page's bytes
	lgPageTuples       = 1000     // and of its tuples
)

func (s *Store) pack(b []byte) store.Packed { return store.Pack(b, s.opts.CompressThreshold) }

func (s *Store) prepareLGPut(req store.LGPutRequest) (*store.LGPrepared, error) {
	if err := noNUL("threadId", req.ThreadID, "namespace", req.Namespace, "checkpointId", req.CheckpointID,
		"parentId", req.ParentID, "checkpoint.type", req.Type); err != nil {
		return nil, err
	}
	p, err := store.PrepareLGPut(req, s.opts.CompressThreshold, s.now())
	if err != nil {
		return nil, err
	}
	for _, m := range p.Meta {
		if err := noNUL("metadata", m.Key); err != nil {
			return nil, err
		}
	}
	for i, b := range req.Blobs {
		f := fmt.Sprintf("blobs[%d].", i)
		if err := noNUL(f+"channel", b.Channel, f+"version", b.Version, f+"type", b.Type); err != nil {
			return nil, err
		}
		if b.Type != store.LGEmptyType && s.blobs.Keeps(len(b.Data)) {
			s.blobs.Add(p.Blobs[i].SHA, bytes.Clone(b.Data)) // a copy: b.Data may be part of a larger buffer
		}
	}
	return p, nil
}

// enqueuePrepared queues a mutation of thread whose preparation runs concurrently: the writer
// waits for prepare before running fn, later mutations stay behind it.
func (s *Store) enqueuePrepared(thread string, prepare func() error, fn func(ctx context.Context, w *wtx) error) *store.LGPending {
	var perr error
	j := &job{ctx: context.Background(), ready: make(chan struct{}), done: make(chan struct{}), locks: []int64{threadKey(thread)}}
	j.fn = func(ctx context.Context, w *wtx) error {
		if perr != nil {
			return perr
		}
		return fn(ctx, w)
	}
	if !s.push(j) {
		return store.FailedLGPending(store.ErrClosed)
	}
	go func() {
		defer close(j.ready)
		defer func() {
			if r := recover(); r != nil {
				perr = fmt.Errorf("internal error preparing a LangGraph write: %v", r)
			}
		}()
		perr = prepare()
	}()
	return store.NewLGPending(j.done, func() error { return lgErr("lg write", j.err) })
}

// lgErr wraps a database error of a LangGraph call; store errors pass through.
func lgErr(op string, err error) error {
	if err == nil || asCorrupt(err) != nil {
		return err
	}
	var ie *store.InvalidError
	if errorsAs(err, &ie) || isStoreErr(err) {
		return err
	}
	return wrapDB(op, err)
}

// LGPut queues a LangGraph checkpoint with its new blobs; validation, hashing and compression run
// concurrently with earlier mutations. blobsStored is valid after Wait.
func (s *Store) LGPut(req store.LGPutRequest) (pending *store.LGPending, blobsStored *int) {
	n := new(int)
	var p *store.LGPrepared
	return s.enqueuePrepared(req.ThreadID, func() (err error) {
		p, err = s.prepareLGPut(req)
		return err
	}, func(ctx context.Context, w *wtx) error {
		*n = 0
		b := &pgx.Batch{}
		fc := queueFence(b, req.ThreadID, req.FencingToken) // the claim first, in the same round trip
		queueLGCheckpoint(b, p)
		r := &p.Req
		if len(r.Blobs) > 0 {
			chs, vers, types, encs, sizes, shas, datas := make([]string, len(r.Blobs)), make([]string, len(r.Blobs)),
				make([]string, len(r.Blobs)), make([]int16, len(r.Blobs)), make([]int64, len(r.Blobs)),
				make([][]byte, len(r.Blobs)), make([][]byte, len(r.Blobs))
			for i, bl := range r.Blobs {
				pb := p.Blobs[i]
				chs[i], vers[i], types[i], encs[i], sizes[i], shas[i], datas[i] = bl.Channel, bl.Version, bl.Type, int16(pb.Enc), int64(pb.Size), pb.SHA, pb.Data
			}
			b.Queue(`INSERT INTO lg_blobs (thread_id, namespace, channel, version, type, encoding, size, sha256, data)
				SELECT $1, $2, x.* FROM unnest($3::text[], $4::text[], $5::text[], $6::smallint[], $7::bigint[], $8::bytea[], $9::bytea[])
					AS x(channel, version, type, encoding, size, sha256, data)
				ON CONFLICT (thread_id, namespace, channel, version) DO NOTHING`,
				r.ThreadID, r.Namespace, chs, vers, types, encs, sizes, shas, datas).Exec(func(ct pgconn.CommandTag) error {
				*n = int(ct.RowsAffected())
				return nil
			})
		}
		if err := w.sendBatch(ctx, b); err != nil {
			return err
		}
		return fc.check()
	}), n
}

// queueLGCheckpoint queues the statements writing (or overwriting) p's checkpoint row and its
// metadata index rows. An overwritten row keeps its id (storage order).
func queueLGCheckpoint(b *pgx.Batch, p *store.LGPrepared) {
	r := &p.Req
	b.Queue(`INSERT INTO lg_checkpoints (thread_id, namespace, checkpoint_id, parent_id, created_at, channel_versions,
		metadata, type, encoding, size, sha256, data) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (thread_id, namespace, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
		created_at = excluded.created_at, channel_versions = excluded.channel_versions, metadata = excluded.metadata,
		type = excluded.type, encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256, data = excluded.data`,
		r.ThreadID, r.Namespace, r.CheckpointID, nullStr(r.ParentID), time.UnixMicro(p.Micros).UTC(), string(r.ChannelVersions),
		nullBytes(p.MetaRaw), r.Type, p.CP.Enc, p.CP.Size, p.CP.SHA, p.CP.Data)
	b.Queue(`DELETE FROM lg_meta WHERE ckpt = (SELECT id FROM lg_checkpoints WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = $3)`,
		r.ThreadID, r.Namespace, r.CheckpointID)
	if len(p.Meta) > 0 {
		keys, hashes := make([]string, len(p.Meta)), make([][]byte, len(p.Meta))
		for i, m := range p.Meta {
			keys[i], hashes[i] = m.Key, m.Hash
		}
		b.Queue(`INSERT INTO lg_meta (key, vhash, checkpoint_id, ckpt)
			SELECT x.k, x.h, c.checkpoint_id, c.id FROM lg_checkpoints c, unnest($4::text[], $5::bytea[]) AS x(k, h)
			WHERE c.thread_id = $1 AND c.namespace = $2 AND c.checkpoint_id = $3`, r.ThreadID, r.Namespace, r.CheckpointID, keys, hashes)
	}
}

// LGPutWrites queues pending writes of one task. idx >= 0: stored once; idx < 0: replaced.
// stored is valid after Wait.
func (s *Store) LGPutWrites(thread, ns, checkpointID string, writes []store.LGWrite) (pending *store.LGPending, stored *int) {
	return s.LGPutWritesFenced(thread, ns, checkpointID, writes, 0)
}

// LGPutWritesFenced is LGPutWrites under fencing token (0: none) for the claim of thread,
// checked in the write's transaction.
func (s *Store) LGPutWritesFenced(thread, ns, checkpointID string, writes []store.LGWrite, token int64) (pending *store.LGPending, stored *int) {
	n := new(int)
	ps := make([]store.Packed, len(writes))
	return s.enqueuePrepared(thread, func() error {
		if err := store.CheckLGWrites(thread, checkpointID, writes); err != nil {
			return err
		}
		if err := noNUL("threadId", thread, "namespace", ns, "checkpointId", checkpointID); err != nil {
			return err
		}
		for i, w := range writes {
			f := fmt.Sprintf("writes[%d].", i)
			if err := noNUL("taskId", w.TaskID, f+"taskPath", w.TaskPath, f+"channel", w.Channel, f+"type", w.Type); err != nil {
				return err
			}
			ps[i] = s.pack(w.Data)
		}
		return nil
	}, func(ctx context.Context, w *wtx) error {
		*n = 0
		b := &pgx.Batch{}
		fc := queueFence(b, thread, token) // the claim first, in the same round trip
		for i, wr := range writes {
			conflict := `DO NOTHING`
			if wr.Idx < 0 {
				conflict = `DO UPDATE SET task_path = excluded.task_path, channel = excluded.channel, type = excluded.type,
					encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256, data = excluded.data`
			}
			p := ps[i]
			b.Queue(`INSERT INTO lg_writes (thread_id, namespace, checkpoint_id, task_id, idx, task_path, channel, type,
				encoding, size, sha256, data) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
				ON CONFLICT (thread_id, namespace, checkpoint_id, task_id, idx) `+conflict,
				thread, ns, checkpointID, wr.TaskID, wr.Idx, wr.TaskPath, wr.Channel, wr.Type, p.Enc, p.Size, p.SHA, p.Data).
				Exec(func(ct pgconn.CommandTag) error {
					if ct.RowsAffected() > 0 {
						*n++
					}
					return nil
				})
		}
		if err := w.sendBatch(ctx, b); err != nil {
			return err
		}
		return fc.check()
	}), n
}

// ---------------------------------------------------------------------------------------------
// Reads

const lgCols = `c.id, c.thread_id, c.namespace, c.checkpoint_id, c.parent_id, c.created_at, c.channel_versions,
	c.metadata, c.type, c.encoding, c.size, c.sha256, c.data`

// lgItem is a tuple being read, with its row id (cursor ties).
type lgItem struct {
	t     store.LGTuple
	rowid int64
	vs    []store.ChanVer
}

func (s *Store) scanTuple(rows pgx.Rows) (lgItem, error) {
	var it lgItem
	t := &it.t
	var parent *string
	var versions string
	var enc, size int64
	var meta, sha, data []byte
	if err := rows.Scan(&it.rowid, &t.ThreadID, &t.Namespace, &t.CheckpointID, &parent, &t.CreatedAt, &versions, &meta,
		&t.Type, &enc, &size, &sha, &data); err != nil {
		return it, err
	}
	t.ParentID = deref(parent)
	t.CreatedAt = t.CreatedAt.UTC()
	t.ChannelVersions = json.RawMessage(versions)
	if len(meta) > 0 {
		t.Metadata = json.RawMessage(meta)
	}
	var err error
	if t.Checkpoint, err = store.Unpack(t.CheckpointID, "checkpoint", data, int(enc), size, sha); err != nil {
		return it, err
	}
	if it.vs, err = store.ParseVersions(t.ChannelVersions); err != nil {
		return it, &store.CorruptError{CheckpointID: t.CheckpointID, Reason: "stored channel versions do not parse: " + err.Error()}
	}
	return it, nil
}

type blobKey [4]string // thread, namespace, channel, version

type blobHead struct {
	id        int64
	typ       string
	enc, size int64
	sha       []byte
}

type writeHead struct {
	id        int64
	w         store.LGWrite
	enc, size int64
	sha       []byte
}

type writesKey [3]string // thread, namespace, checkpoint id

// fillTuples adds blobs and writes to items (read in tx), stopping after the item with which
// the bytes read (start, plus each item's distinct values and writes) reach capBytes (0: no
// cap). It returns how many items it filled. Values and writes are read by key first, without
// their bytes, and their bytes only for the items that fit, from the value cache when it holds
// them.
func (s *Store) fillTuples(ctx context.Context, tx pgx.Tx, items []lgItem, start, capBytes int64) (int, error) {
	var bt, bn, bc, bv []string
	seen := map[blobKey]bool{}
	var wt, wn, wc []string
	for _, it := range items {
		wt, wn, wc = append(wt, it.t.ThreadID), append(wn, it.t.Namespace), append(wc, it.t.CheckpointID)
		for _, v := range it.vs {
			k := blobKey{it.t.ThreadID, it.t.Namespace, v.Channel, v.Version}
			if !seen[k] {
				seen[k] = true
				bt, bn, bc, bv = append(bt, k[0]), append(bn, k[1]), append(bc, k[2]), append(bv, k[3])
			}
		}
	}
	b := &pgx.Batch{}
	heads := map[blobKey]blobHead{}
	if len(bt) > 0 {
		b.Queue(`SELECT b.id, b.thread_id, b.namespace, b.channel, b.version, b.type, b.encoding, b.size, b.sha256
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS k(t, n, c, v)
			JOIN lg_blobs b ON b.thread_id = k.t AND b.namespace = k.n AND b.channel = k.c AND b.version = k.v`,
			bt, bn, bc, bv).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k blobKey
				var h blobHead
				if err := rows.Scan(&h.id, &k[0], &k[1], &k[2], &k[3], &h.typ, &h.enc, &h.size, &h.sha); err != nil {
					return err
				}
				heads[k] = h
			}
			return rows.Err()
		})
	}
	writes := map[writesKey][]writeHead{}
	b.Queue(`SELECT w.id, w.thread_id, w.namespace, w.checkpoint_id, w.task_id, w.task_path, w.idx, w.channel, w.type,
			w.encoding, w.size, w.sha256
		FROM unnest($1::text[], $2::text[], $3::text[]) AS k(t, n, c)
		JOIN lg_writes w ON w.thread_id = k.t AND w.namespace = k.n AND w.checkpoint_id = k.c`, wt, wn, wc).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k writesKey
				var h writeHead
				if err := rows.Scan(&h.id, &k[0], &k[1], &k[2], &h.w.TaskID, &h.w.TaskPath, &h.w.Idx, &h.w.Channel, &h.w.Type,
					&h.enc, &h.size, &h.sha); err != nil {
					return err
				}
				writes[k] = append(writes[k], h)
			}
			return rows.Err()
		})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, err
	}
	// which items fit, counting each value once
	bytes := start
	counted := map[blobKey]bool{}
	n := 0
	for i, it := range items {
		for _, v := range it.vs {
			k := blobKey{it.t.ThreadID, it.t.Namespace, v.Channel, v.Version}
			if h, ok := heads[k]; ok && h.typ != store.LGEmptyType && !counted[k] {
				counted[k] = true
				bytes += h.size
			}
		}
		for _, h := range writes[writesKey{it.t.ThreadID, it.t.Namespace, it.t.CheckpointID}] {
			bytes += h.size
		}
		n = i + 1
		if capBytes > 0 && bytes >= capBytes {
			break
		}
	}
	// the bytes of what fits: values not in the cache, and writes
	need := map[int64]blobKey{} // row id -> key
	values := map[blobKey]*store.LGBlob{}
	for _, it := range items[:n] {
		for _, v := range it.vs {
			k := blobKey{it.t.ThreadID, it.t.Namespace, v.Channel, v.Version}
			h, ok := heads[k]
			if !ok || h.typ == store.LGEmptyType || values[k] != nil {
				continue
			}
			if raw, ok := s.blobs.Get(h.sha); ok && int64(len(raw)) == h.size {
				values[k] = &store.LGBlob{Channel: v.Channel, Version: v.Version, Type: h.typ, Data: raw}
				continue
			}
			need[h.id] = k
		}
	}
	var wids []int64
	for _, it := range items[:n] {
		for _, h := range writes[writesKey{it.t.ThreadID, it.t.Namespace, it.t.CheckpointID}] {
			wids = append(wids, h.id)
		}
	}
	owner := map[blobKey]string{} // a checkpoint naming the value, for errors
	for _, it := range items[:n] {
		for _, v := range it.vs {
			k := blobKey{it.t.ThreadID, it.t.Namespace, v.Channel, v.Version}
			if _, ok := owner[k]; !ok {
				owner[k] = it.t.CheckpointID
			}
		}
	}
	b = &pgx.Batch{}
	var ferr error
	if len(need) > 0 {
		ids := make([]int64, 0, len(need))
		for id := range need {
			ids = append(ids, id)
		}
		b.Queue(`SELECT id, data FROM lg_blobs WHERE id = ANY($1)`, ids).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				var data []byte
				if err := rows.Scan(&id, &data); err != nil {
					return err
				}
				k := need[id]
				h := heads[k]
				raw, err := store.Unpack(owner[k], fmt.Sprintf("blob %s@%s", k[2], k[3]), data, int(h.enc), h.size, h.sha)
				if err != nil {
					ferr = err
					continue
				}
				s.blobs.Add(h.sha, raw)
				values[k] = &store.LGBlob{Channel: k[2], Version: k[3], Type: h.typ, Data: raw}
				delete(need, id)
			}
			return rows.Err()
		})
	}
	wdata := map[int64][]byte{}
	if len(wids) > 0 {
		b.Queue(`SELECT id, data FROM lg_writes WHERE id = ANY($1)`, wids).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				var data []byte
				if err := rows.Scan(&id, &data); err != nil {
					return err
				}
				wdata[id] = data
			}
			return rows.Err()
		})
	}
	if len(b.QueuedQueries) > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return 0, err
		}
	}
	if ferr != nil {
		return 0, ferr
	}
	if len(need) > 0 { // a row seen by the first query is gone in the same snapshot
		return 0, fmt.Errorf("lg_blobs rows vanished during a read")
	}
	for i := range items[:n] {
		t := &items[i].t
		for _, v := range items[i].vs {
			if bl := values[blobKey{t.ThreadID, t.Namespace, v.Channel, v.Version}]; bl != nil {
				t.Blobs = append(t.Blobs, *bl)
			}
		}
		for _, h := range writes[writesKey{t.ThreadID, t.Namespace, t.CheckpointID}] {
			wr := h.w
			data, ok := wdata[h.id]
			if !ok {
				return 0, fmt.Errorf("lg_writes rows vanished during a read")
			}
			var err error
			if wr.Data, err = store.Unpack(t.CheckpointID, fmt.Sprintf("write %s/%d", wr.TaskID, wr.Idx), data, int(h.enc), h.size, h.sha); err != nil {
				return 0, err
			}
			t.Writes = append(t.Writes, wr)
		}
		store.SortLGWrites(t.Writes)
	}
	return n, nil
}

func (s *Store) lgRead(ctx context.Context, op string, f func(tx pgx.Tx) error) error {
	return lgErr(op, s.readTx(ctx, f))
}

// LGGet returns one checkpoint of (thread, ns) with its blobs and writes: checkpointID, or the
// latest (highest id) when empty. nil when there is none.
func (s *Store) LGGet(ctx context.Context, thread, ns, checkpointID string) (*store.LGTuple, error) {
	if thread == "" {
		return nil, invalid("threadId", "required")
	}
	var out *store.LGTuple
	err := s.lgRead(ctx, "lg get", func(tx pgx.Tx) error {
		out = nil
		q, args := `SELECT `+lgCols+` FROM lg_checkpoints c WHERE c.thread_id = $1 AND c.namespace = $2
			ORDER BY c.checkpoint_id DESC LIMIT 1`, []any{thread, ns}
		if checkpointID != "" {
			q, args = `SELECT `+lgCols+` FROM lg_checkpoints c WHERE c.thread_id = $1 AND c.namespace = $2 AND c.checkpoint_id = $3`,
				[]any{thread, ns, checkpointID}
		}
		items, err := s.scanItems(ctx, tx, q, args, 1)
		if err != nil || len(items) == 0 {
			return err
		}
		if _, err := s.fillTuples(ctx, tx, items, 0, 0); err != nil {
			return err
		}
		out = &items[0].t
		return nil
	})
	return out, err
}

// scanItems runs a tuple query, reading at most max rows; it reports whether more were there.
func (s *Store) scanItems(ctx context.Context, tx pgx.Tx, q string, args []any, max int) ([]lgItem, error) {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []lgItem
	for rows.Next() {
		if len(items) == max {
			break
		}
		it, err := s.scanTuple(rows)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, rows.Err()
}

// lgListQuery builds the SQL of one lg/list page, in (checkpoint_id DESC, id DESC) order.
func lgListQuery(f store.LGListFilter, cur *store.LGCursor, limit int) (string, []any, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	meta, err := store.LGMetaFilter(f.Metadata)
	if err != nil {
		return "", nil, err
	}
	for _, m := range meta {
		where = append(where, `EXISTS (SELECT 1 FROM lg_meta m WHERE m.key = `+arg(m.Key)+` AND m.vhash = `+arg(m.Hash)+
			` AND m.checkpoint_id = c.checkpoint_id AND m.ckpt = c.id)`)
	}
	if f.ThreadID != "" {
		where = append(where, `c.thread_id = `+arg(f.ThreadID))
	}
	if f.Namespace != nil {
		where = append(where, `c.namespace = `+arg(*f.Namespace))
	}
	if f.CheckpointID != "" {
		where = append(where, `c.checkpoint_id = `+arg(f.CheckpointID))
	}
	if f.Before != "" {
		where = append(where, `c.checkpoint_id < `+arg(f.Before))
	}
	if cur != nil {
		where = append(where, `(c.checkpoint_id, c.id) < (`+arg(cur.ID)+`, `+arg(cur.Key)+`)`)
	}
	q := `SELECT ` + lgCols + ` FROM lg_checkpoints c`
	if len(where) > 0 {
		q += ` WHERE ` + joinAnd(where)
	}
	q += ` ORDER BY c.checkpoint_id DESC, c.id DESC LIMIT ` + arg(limit)
	return q, args, nil
}

func joinAnd(w []string) string {
	out := ""
	for i, c := range w {
		if i > 0 {
			out += " AND "
		}
		out += c
	}
	return out
}

// LGList returns one page of LangGraph checkpoints, id descending, with blobs and writes.
func (s *Store) LGList(ctx context.Context, f store.LGListFilter) (store.LGListResult, error) {
	if f.Limit < 0 || f.Limit > store.LGMaxListLimit {
		return store.LGListResult{}, invalid("limit", "must be between 1 and %d", store.LGMaxListLimit)
	}
	var cur *store.LGCursor
	if f.Cursor != "" {
		var err error
		if cur, err = store.DecodeLGCursor(f.Cursor); err != nil {
			return store.LGListResult{}, err
		}
	}
	page := lgPageTuples
	if f.Limit > 0 && f.Limit < page {
		page = f.Limit
	}
	q, args, err := lgListQuery(f, cur, page+1)
	if err != nil {
		return store.LGListResult{}, err
	}
	var res store.LGListResult
	err = s.lgRead(ctx, "lg list", func(tx pgx.Tx) error {
		res = store.LGListResult{}
		items, err := s.scanItems(ctx, tx, q, args, page+1)
		if err != nil {
			return err
		}
		more := len(items) > page
		if more {
			items = items[:page]
		}
		var start int64
		for _, it := range items {
			start += int64(len(it.t.Checkpoint))
		}
		n, err := s.fillTuples(ctx, tx, items, start, lgPageBytes)
		if err != nil {
			return err
		}
		if n < len(items) {
			more = true
		}
		for _, it := range items[:n] {
			res.Tuples = append(res.Tuples, it.t)
		}
		total := len(res.Tuples)
		if f.Limit > 0 && total >= f.Limit {
			more = false
		}
		if more && total > 0 {
			last := items[total-1]
			res.Cursor = store.LGCursor{ID: last.t.CheckpointID, Key: last.rowid}.Encode()
		}
		return nil
	})
	return res, err
}

// LGChannelHistory walks the parent chain of a checkpoint (checkpointID, or the latest)
// collecting, per channel, the ancestors' writes up to the nearest ancestor with a stored value.
func (s *Store) LGChannelHistory(ctx context.Context, thread, ns, checkpointID string, channels []string) (store.LGHistoryResult, error) {
	if thread == "" {
		return store.LGHistoryResult{}, invalid("threadId", "required")
	}
	var res store.LGHistoryResult
	err := s.lgRead(ctx, "lg channel history", func(tx pgx.Tx) error {
		var err error
		res, err = store.ChannelHistory(&lgAncestry{s: s, ctx: ctx, tx: tx, thread: thread, ns: ns}, checkpointID, channels)
		return err
	})
	return res, err
}

// lgAncestry is one (thread, namespace) in a read transaction, for store.ChannelHistory.
type lgAncestry struct {
	s          *Store
	ctx        context.Context
	tx         pgx.Tx
	thread, ns string
}

func (a *lgAncestry) Node(id string) (*store.LGNode, error) {
	return lgNode(a.ctx, a.tx, a.thread, a.ns, id)
}

func (a *lgAncestry) Writes(id string) ([]store.LGWrite, error) {
	rows, err := a.tx.Query(a.ctx, `SELECT task_id, task_path, idx, channel, type, encoding, size, sha256, data
		FROM lg_writes WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = $3`, a.thread, a.ns, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.LGWrite
	for rows.Next() {
		var w store.LGWrite
		var enc, size int64
		var sha, data []byte
		if err := rows.Scan(&w.TaskID, &w.TaskPath, &w.Idx, &w.Channel, &w.Type, &enc, &size, &sha, &data); err != nil {
			return nil, err
		}
		if w.Data, err = store.Unpack(id, fmt.Sprintf("write %s/%d", w.TaskID, w.Idx), data, int(enc), size, sha); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	store.SortLGWrites(out)
	return out, nil
}

func (a *lgAncestry) Value(id, channel, version string) (*store.LGBlob, error) {
	var h blobHead
	err := a.tx.QueryRow(a.ctx, `SELECT id, type, encoding, size, sha256 FROM lg_blobs
		WHERE thread_id = $1 AND namespace = $2 AND channel = $3 AND version = $4`, a.thread, a.ns, channel, version).
		Scan(&h.id, &h.typ, &h.enc, &h.size, &h.sha)
	if noRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if h.typ == store.LGEmptyType {
		return nil, nil
	}
	if raw, ok := a.s.blobs.Get(h.sha); ok && int64(len(raw)) == h.size {
		return &store.LGBlob{Channel: channel, Version: version, Type: h.typ, Data: raw}, nil
	}
	var data []byte
	if err := a.tx.QueryRow(a.ctx, `SELECT data FROM lg_blobs WHERE id = $1`, h.id).Scan(&data); err != nil {
		return nil, err
	}
	raw, err := store.Unpack(id, fmt.Sprintf("blob %s@%s", channel, version), data, int(h.enc), h.size, h.sha)
	if err != nil {
		return nil, err
	}
	a.s.blobs.Add(h.sha, raw)
	return &store.LGBlob{Channel: channel, Version: version, Type: h.typ, Data: raw}, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// lgNode reads checkpointID ("": the latest) of (thread, ns); nil when there is none.
func lgNode(ctx context.Context, q querier, thread, ns, checkpointID string) (*store.LGNode, error) {
	var rowid int64
	var id string
	var parent *string
	var versions string
	var row pgx.Row
	if checkpointID == "" {
		row = q.QueryRow(ctx, `SELECT id, checkpoint_id, parent_id, channel_versions FROM lg_checkpoints
			WHERE thread_id = $1 AND namespace = $2 ORDER BY checkpoint_id DESC LIMIT 1`, thread, ns)
	} else {
		row = q.QueryRow(ctx, `SELECT id, checkpoint_id, parent_id, channel_versions FROM lg_checkpoints
			WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = $3`, thread, ns, checkpointID)
	}
	err := row.Scan(&rowid, &id, &parent, &versions)
	if noRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return store.NewLGNode(rowid, id, deref(parent), []byte(versions))
}

// ---------------------------------------------------------------------------------------------
// Deletion, copy, prune (writer transaction, the threads' locks held)

// lgDeleteRows removes checkpoints (nodes' Keys) of (thread, ns) with their metadata rows and
// pending writes.
func lgDeleteRows(ctx context.Context, w *wtx, thread, ns string, nodes []*store.LGNode) error {
	if len(nodes) == 0 {
		return nil
	}
	keys := make([]int64, len(nodes))
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		keys[i], ids[i] = n.Key, n.ID
	}
	w.queue(`DELETE FROM lg_meta WHERE ckpt = ANY($1)`, keys)
	w.queue(`DELETE FROM lg_writes WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = ANY($3)`, thread, ns, ids)
	_, err := w.exec(ctx, `DELETE FROM lg_checkpoints WHERE id = ANY($1)`, keys)
	return err
}

// lgNodes reads every checkpoint of (thread, ns), newest first.
func lgNodes(ctx context.Context, w *wtx, thread, ns string) ([]*store.LGNode, error) {
	rows, err := w.query(ctx, `SELECT id, checkpoint_id, parent_id, channel_versions FROM lg_checkpoints
		WHERE thread_id = $1 AND namespace = $2 ORDER BY checkpoint_id DESC, id DESC`, thread, ns)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.LGNode
	for rows.Next() {
		var rowid int64
		var id, versions string
		var parent *string
		if err := rows.Scan(&rowid, &id, &parent, &versions); err != nil {
			return nil, err
		}
		n, err := store.NewLGNode(rowid, id, deref(parent), []byte(versions))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// lgGCBlobs deletes the blobs of (thread, ns) that none of keep refers to.
func lgGCBlobs(ctx context.Context, w *wtx, thread, ns string, keep []*store.LGNode) error {
	if len(keep) == 0 {
		_, err := w.exec(ctx, `DELETE FROM lg_blobs WHERE thread_id = $1 AND namespace = $2`, thread, ns)
		return err
	}
	var chs, vers []string
	for _, n := range keep {
		for _, v := range n.Versions {
			chs, vers = append(chs, v.Channel), append(vers, v.Version)
		}
	}
	_, err := w.exec(ctx, `DELETE FROM lg_blobs b WHERE b.thread_id = $1 AND b.namespace = $2
		AND NOT EXISTS (SELECT 1 FROM unnest($3::text[], $4::text[]) AS k(c, v) WHERE k.c = b.channel AND k.v = b.version)`,
		thread, ns, chs, vers)
	return err
}

func lgNamespaces(ctx context.Context, w *wtx, thread string) ([]string, error) {
	return workflowIDs(ctx, w, `SELECT namespace FROM lg_checkpoints WHERE thread_id = $1
		UNION SELECT namespace FROM lg_blobs WHERE thread_id = $1
		UNION SELECT namespace FROM lg_writes WHERE thread_id = $1`, thread)
}

func lgDeleteThread(ctx context.Context, w *wtx, thread string) (int, error) {
	w.queue(`DELETE FROM lg_meta WHERE ckpt IN (SELECT id FROM lg_checkpoints WHERE thread_id = $1)`, thread)
	w.queue(`DELETE FROM lg_writes WHERE thread_id = $1`, thread)
	w.queue(`DELETE FROM lg_blobs WHERE thread_id = $1`, thread)
	ct, err := w.exec(ctx, `DELETE FROM lg_checkpoints WHERE thread_id = $1`, thread)
	return int(ct.RowsAffected()), err
}

func (s *Store) lgDo(ctx context.Context, op string, locks []int64, fn func(ctx context.Context, w *wtx) error) error {
	return lgErr(op, s.do(ctx, locks, fn))
}

func threadKeys(threads ...string) []int64 {
	keys := make([]int64, len(threads))
	for i, t := range threads {
		keys[i] = threadKey(t)
	}
	slices.Sort(keys)
	return keys
}

// LGDeleteThread deletes every LangGraph checkpoint, write and blob of thread; it returns the
// number of checkpoints deleted.
func (s *Store) LGDeleteThread(ctx context.Context, thread string) (int, error) {
	if thread == "" {
		return 0, invalid("threadId", "required")
	}
	n := 0
	err := s.lgDo(ctx, "delete thread "+thread, threadKeys(thread), func(ctx context.Context, w *wtx) error {
		var err error
		n, err = lgDeleteThread(ctx, w, thread)
		return err
	})
	return n, err
}

// LGCopyThread copies every checkpoint, write and blob of src to dst (same ids); dst rows with
// the same keys are overwritten. It returns the number of checkpoints copied.
func (s *Store) LGCopyThread(ctx context.Context, src, dst string) (int, error) {
	if err := store.CheckLGCopy(src, dst); err != nil {
		return 0, err
	}
	if err := noNUL("targetThreadId", dst); err != nil {
		return 0, err
	}
	n := 0
	err := s.lgDo(ctx, "copy thread "+src, threadKeys(src, dst), func(ctx context.Context, w *wtx) error {
		// metadata rows of target checkpoints about to be overwritten
		w.queue(`DELETE FROM lg_meta WHERE ckpt IN (SELECT t.id FROM lg_checkpoints s
			JOIN lg_checkpoints t ON t.thread_id = $2 AND t.namespace = s.namespace AND t.checkpoint_id = s.checkpoint_id
			WHERE s.thread_id = $1)`, src, dst)
		ct, err := w.exec(ctx, `INSERT INTO lg_checkpoints (thread_id, namespace, checkpoint_id, parent_id, created_at,
			channel_versions, metadata, type, encoding, size, sha256, data)
			SELECT $2, namespace, checkpoint_id, parent_id, created_at, channel_versions, metadata, type, encoding, size, sha256, data
			FROM lg_checkpoints WHERE thread_id = $1 ORDER BY id
			ON CONFLICT (thread_id, namespace, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
			created_at = excluded.created_at, channel_versions = excluded.channel_versions, metadata = excluded.metadata,
			type = excluded.type, encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256, data = excluded.data`,
			src, dst)
		if err != nil {
			return err
		}
		n = int(ct.RowsAffected())
		w.queue(`INSERT INTO lg_meta (key, vhash, checkpoint_id, ckpt) SELECT m.key, m.vhash, m.checkpoint_id, t.id
			FROM lg_checkpoints s JOIN lg_meta m ON m.ckpt = s.id
			JOIN lg_checkpoints t ON t.thread_id = $2 AND t.namespace = s.namespace AND t.checkpoint_id = s.checkpoint_id
			WHERE s.thread_id = $1 ON CONFLICT DO NOTHING`, src, dst)
		w.queue(`INSERT INTO lg_writes (thread_id, namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding, size, sha256, data)
			SELECT $2, namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding, size, sha256, data
			FROM lg_writes WHERE thread_id = $1 ORDER BY id
			ON CONFLICT (thread_id, namespace, checkpoint_id, task_id, idx) DO UPDATE SET task_path = excluded.task_path,
			channel = excluded.channel, type = excluded.type, encoding = excluded.encoding, size = excluded.size,
			sha256 = excluded.sha256, data = excluded.data`, src, dst)
		_, err = w.exec(ctx, `INSERT INTO lg_blobs (thread_id, namespace, channel, version, type, encoding, size, sha256, data)
			SELECT $2, namespace, channel, version, type, encoding, size, sha256, data FROM lg_blobs WHERE thread_id = $1 ORDER BY id
			ON CONFLICT (thread_id, namespace, channel, version) DO UPDATE SET type = excluded.type, encoding = excluded.encoding,
			size = excluded.size, sha256 = excluded.sha256, data = excluded.data`, src, dst)
		return err
	})
	return n, err
}

// LGPrune prunes threads: strategy "delete" removes them; "keep_latest" keeps, per namespace,
// the latest checkpoint plus the ancestors a delta-channel replay of it needs. It returns the
// number of checkpoints deleted.
func (s *Store) LGPrune(ctx context.Context, threads []string, strategy string) (int, error) {
	if err := store.CheckLGPrune(strategy); err != nil {
		return 0, err
	}
	n := 0
	err := s.lgDo(ctx, "prune threads", threadKeys(threads...), func(ctx context.Context, w *wtx) error {
		n = 0
		for _, thread := range threads {
			if strategy == "delete" {
				k, err := lgDeleteThread(ctx, w, thread)
				if err != nil {
					return err
				}
				n += k
				continue
			}
			nss, err := lgNamespaces(ctx, w, thread)
			if err != nil {
				return err
			}
			for _, ns := range nss {
				k, err := lgKeepLatest(ctx, w, thread, ns)
				if err != nil {
					return err
				}
				n += k
			}
		}
		return nil
	})
	return n, err
}

func lgKeepLatest(ctx context.Context, w *wtx, thread, ns string) (int, error) {
	nodes, err := lgNodes(ctx, w, thread, ns)
	if err != nil {
		return 0, err
	}
	if len(nodes) == 0 {
		return 0, lgGCBlobs(ctx, w, thread, ns, nil)
	}
	keep, err := store.SelectKeepLatest(nodes, lgPruneView{ctx, w, thread, ns})
	if err != nil {
		return 0, err
	}
	kept, drop := store.SplitKept(nodes, keep)
	if err := lgDeleteRows(ctx, w, thread, ns, drop); err != nil {
		return 0, err
	}
	// writes whose checkpoint does not exist (put_writes does not require it)
	w.queue(`DELETE FROM lg_writes w WHERE w.thread_id = $1 AND w.namespace = $2 AND NOT EXISTS
		(SELECT 1 FROM lg_checkpoints c WHERE c.thread_id = w.thread_id AND c.namespace = w.namespace
		AND c.checkpoint_id = w.checkpoint_id)`, thread, ns)
	return len(drop), lgGCBlobs(ctx, w, thread, ns, kept)
}

// lgPruneView is one (thread, namespace) inside the writer's transaction, for store.SelectKeepLatest.
type lgPruneView struct {
	ctx        context.Context
	w          *wtx
	thread, ns string
}

func (v lgPruneView) HasValue(ch, ver string) (bool, error) {
	var typ string
	err := v.w.queryRow(v.ctx, `SELECT type FROM lg_blobs WHERE thread_id = $1 AND namespace = $2 AND channel = $3 AND version = $4`,
		v.thread, v.ns, ch, ver).Scan(&typ)
	if noRows(err) {
		return false, nil
	}
	return err == nil && typ != store.LGEmptyType, err
}

func (v lgPruneView) Written(id string) ([]string, error) {
	return workflowIDs(v.ctx, v.w, `SELECT DISTINCT channel FROM lg_writes WHERE thread_id = $1 AND namespace = $2
		AND checkpoint_id = $3 AND idx >= 0`, v.thread, v.ns, id)
}

// LGDeleteForRuns deletes every LangGraph checkpoint whose metadata.run_id is one of runIDs, with
// its writes and the blobs nothing left refers to. It returns the number deleted.
func (s *Store) LGDeleteForRuns(ctx context.Context, runIDs []string) (int, error) {
	hashes, err := store.LGRunHashes(runIDs)
	if err != nil {
		return 0, err
	}
	n := 0
	err = s.lgDo(ctx, "delete for runs", nil, func(ctx context.Context, w *wtx) error {
		n = 0
		find := func() ([]string, error) {
			return workflowIDs(ctx, w, `SELECT DISTINCT c.thread_id FROM lg_meta m JOIN lg_checkpoints c ON c.id = m.ckpt
				WHERE m.key = 'run_id' AND m.vhash = ANY($1)`, hashes)
		}
		threads, err := find()
		if err != nil || len(threads) == 0 {
			return err
		}
		if err := w.lock(ctx, threadKeys(threads...)); err != nil {
			return err
		}
		type pair struct{ thread, ns string }
		affected := map[pair][]*store.LGNode{}
		var order []pair
		rows, err := w.query(ctx, `SELECT c.id, c.thread_id, c.namespace, c.checkpoint_id FROM lg_meta m
			JOIN lg_checkpoints c ON c.id = m.ckpt WHERE m.key = 'run_id' AND m.vhash = ANY($1) AND c.thread_id = ANY($2)
			ORDER BY m.vhash, c.id`, hashes, threads)
		if err != nil {
			return err
		}
		for rows.Next() {
			var nd store.LGNode
			var p pair
			if err := rows.Scan(&nd.Key, &p.thread, &p.ns, &nd.ID); err != nil {
				rows.Close()
				return err
			}
			if _, ok := affected[p]; !ok {
				order = append(order, p)
			}
			affected[p] = append(affected[p], &nd)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, p := range order {
			if err := lgDeleteRows(ctx, w, p.thread, p.ns, affected[p]); err != nil {
				return err
			}
			n += len(affected[p])
			rest, err := lgNodes(ctx, w, p.thread, p.ns)
			if err != nil {
				return err
			}
			if err := lgGCBlobs(ctx, w, p.thread, p.ns, rest); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}
