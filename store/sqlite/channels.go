package sqlite

// LangGraph channel storage (store/langgraph.go): checkpoints in lg_checkpoints keyed by
// (thread, namespace, checkpoint id) whose channel values live in lg_blobs, one row per
// (thread, namespace, channel, version), so that a put stores only the channels that changed.
// These tables are separate from the checkpoints table: no seq, no retention.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ckptd/ckptd/store"
)

// Page caps of lg/list (variables for tests).
var (
	lgPageBytes  int64 = 16 << 20 // soft cap of one page's bytes
	lgPageTuples       = 1000     // and of its tuples
)

func (s *Store) pack(b []byte) store.Packed { return store.Pack(b, s.opts.CompressThreshold) }

// wstmt returns the writer connection's prepared statement for q, preparing it once, so that
// the write paths do not parse their SQL again on every call (reads use Store.query's cache).
// Writer goroutine only: wtx never leaves it. Closing the store's databases finalizes them.
func (w *wtx) wstmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := w.s.wcache[q]; ok {
		return st, nil
	}
	st, err := w.conn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if w.s.wcache == nil {
		w.s.wcache = map[string]*sql.Stmt{}
	}
	w.s.wcache[q] = st
	return st, nil
}

func (w *wtx) lgExec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := w.wstmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (s *Store) prepareLGPut(req store.LGPutRequest) (*store.LGPrepared, error) {
	p, err := store.PrepareLGPut(req, s.opts.CompressThreshold, s.now())
	if err != nil {
		return nil, err
	}
	for i, b := range req.Blobs {
		if b.Type != store.LGEmptyType && s.blobs.Keeps(len(b.Data)) {
			// a copy: b.Data may be part of a larger request buffer
			s.blobs.Add(p.Blobs[i].SHA, bytes.Clone(b.Data))
		}
	}
	return p, nil
}

// enqueuePrepared queues a mutation whose preparation runs concurrently: the writer waits for
// prepare before running fn, later mutations stay behind it.
func (s *Store) enqueuePrepared(prepare func() error, fn func(ctx context.Context, w *wtx) error) *store.LGPending {
	var perr error
	j := &job{ctx: context.Background(), ready: make(chan struct{}), done: make(chan struct{})}
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
	return store.NewLGPending(j.done, func() error { return j.err })
}

// LGPut queues a LangGraph checkpoint with its new blobs; validation, hashing and compression run
// concurrently with earlier mutations. blobsStored is valid after Wait.
func (s *Store) LGPut(req store.LGPutRequest) (pending *store.LGPending, blobsStored *int) {
	n := new(int)
	var p *store.LGPrepared
	return s.enqueuePrepared(func() (err error) {
		p, err = s.prepareLGPut(req)
		return err
	}, func(ctx context.Context, w *wtx) error {
		*n = 0
		r := &p.Req
		if err := s.fence(ctx, w, r.ThreadID, r.FencingToken); err != nil {
			return err
		}
		if _, err := s.lgInsertCheckpoint(ctx, w, p); err != nil {
			return err
		}
		for i, b := range r.Blobs {
			pb := p.Blobs[i]
			res, err := w.lgExec(ctx, `INSERT INTO lg_blobs(thread_id, namespace, channel, version, type, encoding, size, sha256, data)
				VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(thread_id, namespace, channel, version) DO NOTHING`,
				r.ThreadID, r.Namespace, b.Channel, b.Version, b.Type, pb.Enc, pb.Size, pb.SHA, pb.Data)
			if err != nil {
				return err
			}
			if k, _ := res.RowsAffected(); k > 0 {
				*n++
				s.walPending.Add(int64(len(pb.Data)))
			}
		}
		return nil
	}), n
}

// lgInsertCheckpoint writes (or overwrites) the checkpoint row of p and its metadata index rows,
// in the writer's transaction; it returns the row's id.
func (s *Store) lgInsertCheckpoint(ctx context.Context, w *wtx, p *store.LGPrepared) (int64, error) {
	r := &p.Req
	var rowid int64
	upsert, err := w.wstmt(ctx, `INSERT INTO lg_checkpoints(thread_id, namespace, checkpoint_id, parent_id, created_at,
		channel_versions, metadata, type, encoding, size, sha256, data) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)
		ON CONFLICT(thread_id, namespace, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
		created_at = excluded.created_at, channel_versions = excluded.channel_versions, metadata = excluded.metadata,
		type = excluded.type, encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256,
		data = excluded.data RETURNING id`)
	if err != nil {
		return 0, err
	}
	if err := upsert.QueryRowContext(ctx, r.ThreadID, r.Namespace, r.CheckpointID, nullStr(r.ParentID), p.Micros,
		string(r.ChannelVersions), nullBytes(p.MetaRaw), r.Type, p.CP.Enc, p.CP.Size, p.CP.SHA, p.CP.Data).Scan(&rowid); err != nil {
		return 0, err
	}
	if _, err := w.lgExec(ctx, `DELETE FROM lg_meta WHERE ckpt = ?`, rowid); err != nil {
		return 0, err
	}
	for _, kv := range p.Meta {
		if _, err := w.lgExec(ctx, `INSERT INTO lg_meta(key, vhash, checkpoint_id, ckpt) VALUES (?,?,?,?)`,
			kv.Key, kv.Hash, r.CheckpointID, rowid); err != nil {
			return 0, err
		}
	}
	s.walPending.Add(int64(len(p.CP.Data)))
	return rowid, nil
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
	return s.enqueuePrepared(func() error {
		if err := store.CheckLGWrites(thread, checkpointID, writes); err != nil {
			return err
		}
		for i, w := range writes {
			ps[i] = s.pack(w.Data)
		}
		return nil
	}, func(ctx context.Context, w *wtx) error {
		*n = 0
		if err := s.fence(ctx, w, thread, token); err != nil {
			return err
		}
		for i, wr := range writes {
			verb := "INSERT OR IGNORE"
			if wr.Idx < 0 {
				verb = "INSERT OR REPLACE"
			}
			p := ps[i]
			res, err := w.lgExec(ctx, verb+` INTO lg_writes(thread_id, namespace, checkpoint_id, task_id, idx, task_path,
				channel, type, encoding, size, sha256, data) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
				thread, ns, checkpointID, wr.TaskID, wr.Idx, wr.TaskPath, wr.Channel, wr.Type, p.Enc, p.Size, p.SHA, p.Data)
			if err != nil {
				return err
			}
			if k, _ := res.RowsAffected(); k > 0 {
				*n++
			}
		}
		return nil
	}), n
}

// ---------------------------------------------------------------------------------------------
// Reads

const lgCols = `c.id, c.thread_id, c.namespace, c.checkpoint_id, c.parent_id, c.created_at, c.channel_versions,
	c.metadata, c.type, c.encoding, c.size, c.sha256, c.data`

// lgReader reads tuples inside one read transaction, fetching each blob key once.
type lgReader struct {
	s     *Store
	ctx   context.Context
	tx    *rtx
	blobs map[[4]string]*store.LGBlob // nil value: missing or empty
	bytes int64                       // distinct bytes read so far
}

func (s *Store) newLGReader(ctx context.Context, tx *rtx) *lgReader {
	return &lgReader{s: s, ctx: ctx, tx: tx, blobs: map[[4]string]*store.LGBlob{}}
}

// blob returns the stored non-empty blob of a key, or nil.
func (r *lgReader) blob(thread, ns, checkpointID, channel, version string) (*store.LGBlob, error) {
	key := [4]string{thread, ns, channel, version}
	if b, ok := r.blobs[key]; ok {
		return b, nil
	}
	r.blobs[key] = nil // missing or empty unless the row says otherwise
	if err := r.fetchBlobs(thread, ns, checkpointID, `SELECT id, channel, version, type, encoding, size, sha256 FROM lg_blobs
		WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ?`, []any{thread, ns, channel, version}); err != nil {
		return nil, err
	}
	return r.blobs[key], nil
}

// writes returns a checkpoint's pending writes in (task_path, task_id, idx) order.
// prefetchChunk bounds the (channel, version) pairs fetched by one query.
const prefetchChunk = 32

// prefetch reads the blobs of vs not read yet with one query per prefetchChunk pairs (instead
// of one per channel), so that blob() finds them.
func (r *lgReader) prefetch(thread, ns, checkpointID string, vs []store.ChanVer) error {
	var want []store.ChanVer
	seen := map[[2]string]bool{}
	for _, v := range vs {
		k := [2]string{v.Channel, v.Version}
		if _, done := r.blobs[[4]string{thread, ns, v.Channel, v.Version}]; done || seen[k] {
			continue
		}
		seen[k] = true
		want = append(want, v)
	}
	for len(want) > 0 {
		n := min(len(want), prefetchChunk)
		chunk := want[:n]
		want = want[n:]
		args := make([]any, 0, 2+2*n)
		args = append(args, thread, ns)
		var q strings.Builder
		q.WriteString(`SELECT id, channel, version, type, encoding, size, sha256 FROM lg_blobs
		WHERE thread_id = ? AND namespace = ? AND (channel, version) IN (VALUES `)
		for i, v := range chunk {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?,?)")
			args = append(args, v.Channel, v.Version)
			r.blobs[[4]string{thread, ns, v.Channel, v.Version}] = nil // missing unless a row says otherwise
		}
		q.WriteByte(')')
		if err := r.fetchBlobs(thread, ns, checkpointID, q.String(), args); err != nil {
			return err
		}
	}
	return nil
}

// fetchBlobs runs q (selecting id, channel, version, type, encoding, size, sha256 of lg_blobs
// rows: never the data, so SQLite reads no overflow pages) and records each row's value in
// r.blobs: from the store's blob cache when it holds the row's stored SHA-256, else read,
// verified and decoded by a second query over the rows the cache lacked.
func (r *lgReader) fetchBlobs(thread, ns, checkpointID, q string, args []any) error {
	type need struct {
		channel, version, typ string
		enc, size             int64
		sha                   []byte
	}
	var missing map[int64]need
	rows, err := r.s.query(r.ctx, r.tx, q, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		var n need
		if err := rows.Scan(&id, &n.channel, &n.version, &n.typ, &n.enc, &n.size, &n.sha); err != nil {
			rows.Close()
			return err
		}
		if n.typ == store.LGEmptyType {
			continue
		}
		if raw, ok := r.s.blobs.Get(n.sha); ok && int64(len(raw)) == n.size {
			r.blobs[[4]string{thread, ns, n.channel, n.version}] = &store.LGBlob{Channel: n.channel, Version: n.version, Type: n.typ, Data: raw}
			r.bytes += int64(len(raw))
			continue
		}
		if missing == nil {
			missing = map[int64]need{}
		}
		missing[id] = n
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	var dq strings.Builder
	dq.WriteString(`SELECT id, data FROM lg_blobs WHERE id IN (`)
	ids := make([]any, 0, len(missing))
	for id := range missing {
		if len(ids) > 0 {
			dq.WriteByte(',')
		}
		dq.WriteByte('?')
		ids = append(ids, id)
	}
	dq.WriteByte(')')
	rows, err = r.s.query(r.ctx, r.tx, dq.String(), ids...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return err
		}
		n := missing[id]
		raw, err := store.Unpack(checkpointID, fmt.Sprintf("blob %s@%s", n.channel, n.version), data, int(n.enc), n.size, n.sha)
		if err != nil {
			return err
		}
		r.s.blobs.Add(n.sha, raw)
		r.blobs[[4]string{thread, ns, n.channel, n.version}] = &store.LGBlob{Channel: n.channel, Version: n.version, Type: n.typ, Data: raw}
		r.bytes += int64(len(raw))
		delete(missing, id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(missing) > 0 { // a row seen by the first query is gone in the same read transaction
		return fmt.Errorf("lg_blobs rows vanished during a read")
	}
	return nil
}

func (r *lgReader) writes(thread, ns, checkpointID string) ([]store.LGWrite, error) {
	rows, err := r.s.query(r.ctx, r.tx, `SELECT task_id, task_path, idx, channel, type, encoding, size, sha256, data
		FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?`, thread, ns, checkpointID)
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
		if w.Data, err = store.Unpack(checkpointID, fmt.Sprintf("write %s/%d", w.TaskID, w.Idx), data, int(enc), size, sha); err != nil {
			return nil, err
		}
		r.bytes += int64(len(w.Data))
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	store.SortLGWrites(out)
	return out, nil
}

// scanTuple reads one lgCols row (without blobs and writes).
func (r *lgReader) scanTuple(sc interface{ Scan(...any) error }) (store.LGTuple, int64, error) {
	var t store.LGTuple
	var rowid, created, enc, size int64
	var parent sql.NullString
	var versions string
	var meta, sha, data []byte
	if err := sc.Scan(&rowid, &t.ThreadID, &t.Namespace, &t.CheckpointID, &parent, &created, &versions, &meta,
		&t.Type, &enc, &size, &sha, &data); err != nil {
		return t, 0, err
	}
	t.ParentID = parent.String
	t.CreatedAt = time.UnixMicro(created).UTC()
	t.ChannelVersions = json.RawMessage(versions)
	if len(meta) > 0 {
		t.Metadata = json.RawMessage(meta)
	}
	var err error
	if t.Checkpoint, err = store.Unpack(t.CheckpointID, "checkpoint", data, int(enc), size, sha); err != nil {
		return t, 0, err
	}
	r.bytes += int64(len(t.Checkpoint))
	return t, rowid, nil
}

// fill adds a tuple's blobs and writes.
func (r *lgReader) fill(t *store.LGTuple) error {
	vs, err := store.ParseVersions(t.ChannelVersions)
	if err != nil {
		return &store.CorruptError{CheckpointID: t.CheckpointID, Reason: "stored channel versions do not parse: " + err.Error()}
	}
	if err := r.prefetch(t.ThreadID, t.Namespace, t.CheckpointID, vs); err != nil {
		return err
	}
	for _, v := range vs {
		b, err := r.blob(t.ThreadID, t.Namespace, t.CheckpointID, v.Channel, v.Version)
		if err != nil {
			return err
		}
		if b != nil {
			t.Blobs = append(t.Blobs, *b)
		}
	}
	t.Writes, err = r.writes(t.ThreadID, t.Namespace, t.CheckpointID)
	return err
}

func (s *Store) lgRead(ctx context.Context, op string, f func(r *lgReader) error) error {
	err := s.readTx(ctx, func(tx *rtx) error {
		return f(s.newLGReader(ctx, tx))
	})
	if err != nil {
		var ce *store.CorruptError
		var ie *store.InvalidError
		if errors.As(err, &ce) || errors.As(err, &ie) || errors.Is(err, store.ErrNotFound) {
			return err
		}
		return wrapDB(op, err)
	}
	return nil
}

// LGGet returns one checkpoint of (thread, ns) with its blobs and writes: checkpointID, or the
// latest (highest id) when empty. nil when there is none.
func (s *Store) LGGet(ctx context.Context, thread, ns, checkpointID string) (*store.LGTuple, error) {
	if thread == "" {
		return nil, invalid("threadId", "required")
	}
	var out *store.LGTuple
	err := s.lgRead(ctx, "lg get", func(r *lgReader) error {
		out = nil
		q, args := `SELECT `+lgCols+` FROM lg_checkpoints c INDEXED BY lg_checkpoints_key
				WHERE c.thread_id = ? AND c.namespace = ? ORDER BY c.checkpoint_id DESC LIMIT 1`, []any{thread, ns}
		if checkpointID != "" {
			q, args = `SELECT `+lgCols+` FROM lg_checkpoints c
				WHERE c.thread_id = ? AND c.namespace = ? AND c.checkpoint_id = ?`, []any{thread, ns, checkpointID}
		}
		rows, err := r.s.query(ctx, r.tx, q, args...)
		if err != nil {
			return err
		}
		if !rows.Next() {
			rows.Close()
			return rows.Err()
		}
		t, _, err := r.scanTuple(rows)
		rows.Close()
		if err != nil {
			return err
		}
		if err := r.fill(&t); err != nil {
			return err
		}
		out = &t
		return nil
	})
	return out, err
}

// lgListQuery builds the SQL of one lg/list page. Every shape walks an index in
// (checkpoint_id DESC, rowid DESC) order, so no temporary b-tree sorts the result.
func lgListQuery(f store.LGListFilter, cur *store.LGCursor, limit int) (string, []any, error) {
	var where []string
	var args []any
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	meta, err := store.LGMetaFilter(f.Metadata)
	if err != nil {
		return "", nil, err
	}
	existsMeta := func(ms []store.LGMetaRow) {
		for _, m := range ms {
			add(`EXISTS (SELECT 1 FROM lg_meta m WHERE m.key = ? AND m.vhash = ? AND m.checkpoint_id = c.checkpoint_id AND m.ckpt = c.id)`, m.Key, m.Hash)
		}
	}
	from := ""
	idCol, rowCol := "c.checkpoint_id", "c.id"
	switch {
	case f.ThreadID != "" && f.Namespace != nil:
		from = `lg_checkpoints c INDEXED BY lg_checkpoints_key`
		add(`c.thread_id = ?`, f.ThreadID)
		add(`c.namespace = ?`, *f.Namespace)
		existsMeta(meta)
	case f.ThreadID != "":
		from = `lg_checkpoints c INDEXED BY lg_checkpoints_thread`
		add(`c.thread_id = ?`, f.ThreadID)
		existsMeta(meta)
	case len(meta) > 0:
		from = `lg_meta m0 CROSS JOIN lg_checkpoints c`
		idCol, rowCol = "m0.checkpoint_id", "m0.ckpt"
		add(`m0.key = ?`, meta[0].Key)
		add(`m0.vhash = ?`, meta[0].Hash)
		add(`c.id = m0.ckpt`)
		if f.Namespace != nil {
			add(`c.namespace = ?`, *f.Namespace)
		}
		existsMeta(meta[1:])
	case f.Namespace != nil:
		from = `lg_checkpoints c INDEXED BY lg_checkpoints_ns`
		add(`c.namespace = ?`, *f.Namespace)
	default:
		from = `lg_checkpoints c INDEXED BY lg_checkpoints_id`
	}
	if f.CheckpointID != "" {
		add(idCol+` = ?`, f.CheckpointID)
	}
	if f.Before != "" {
		add(idCol+` < ?`, f.Before)
	}
	if cur != nil {
		add(idCol+` <= ?`, cur.ID)
		add(`(`+idCol+` < ? OR `+rowCol+` < ?)`, cur.ID, cur.Key)
	}
	q := `SELECT ` + lgCols + ` FROM ` + from
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY ` + idCol + ` DESC, ` + rowCol + ` DESC LIMIT ?`
	args = append(args, limit)
	return q, args, nil
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
	err = s.lgRead(ctx, "lg list", func(r *lgReader) error {
		res = store.LGListResult{}
		rows, err := r.s.query(ctx, r.tx, q, args...)
		if err != nil {
			return err
		}
		type item struct {
			t     store.LGTuple
			rowid int64
		}
		var items []item
		more := false
		for rows.Next() {
			if len(items) == page {
				more = true
				break
			}
			t, rowid, err := r.scanTuple(rows)
			if err != nil {
				rows.Close()
				return err
			}
			items = append(items, item{t, rowid})
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range items {
			if err := r.fill(&items[i].t); err != nil {
				return err
			}
			res.Tuples = append(res.Tuples, items[i].t)
			if r.bytes >= lgPageBytes && i < len(items)-1 {
				more = true
				break
			}
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

// lgNodeByID reads checkpointID ("": the latest) of (thread, ns); nil when there is none.
func lgNodeByID(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, thread, ns, checkpointID string) (*store.LGNode, error) {
	var rowid int64
	var id string
	var parent sql.NullString
	var versions string
	var row *sql.Row
	if checkpointID == "" {
		row = q.QueryRowContext(ctx, `SELECT id, checkpoint_id, parent_id, channel_versions FROM lg_checkpoints INDEXED BY lg_checkpoints_key
			WHERE thread_id = ? AND namespace = ? ORDER BY checkpoint_id DESC LIMIT 1`, thread, ns)
	} else {
		row = q.QueryRowContext(ctx, `SELECT id, checkpoint_id, parent_id, channel_versions FROM lg_checkpoints
			WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?`, thread, ns, checkpointID)
	}
	err := row.Scan(&rowid, &id, &parent, &versions)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return store.NewLGNode(rowid, id, parent.String, []byte(versions))
}

// LGChannelHistory walks the parent chain of a checkpoint (checkpointID, or the latest) collecting,
// per channel, the ancestors' writes up to and including the nearest ancestor with a stored value
// (the seed). See docs/protocol.md, lg/channelHistory.
func (s *Store) LGChannelHistory(ctx context.Context, thread, ns, checkpointID string, channels []string) (store.LGHistoryResult, error) {
	if thread == "" {
		return store.LGHistoryResult{}, invalid("threadId", "required")
	}
	var res store.LGHistoryResult
	err := s.lgRead(ctx, "lg channel history", func(r *lgReader) error {
		var err error
		res, err = store.ChannelHistory(lgAncestry{r, thread, ns}, checkpointID, channels)
		return err
	})
	return res, err
}

// lgAncestry is one (thread, namespace) of an lgReader, for store.ChannelHistory.
type lgAncestry struct {
	r          *lgReader
	thread, ns string
}

func (a lgAncestry) Node(id string) (*store.LGNode, error) {
	return lgNodeByID(a.r.ctx, a.r.tx, a.thread, a.ns, id)
}

func (a lgAncestry) Writes(id string) ([]store.LGWrite, error) { return a.r.writes(a.thread, a.ns, id) }

func (a lgAncestry) Value(id, channel, version string) (*store.LGBlob, error) {
	return a.r.blob(a.thread, a.ns, id, channel, version)
}

// ---------------------------------------------------------------------------------------------
// Deletion, copy, prune

// lgDelete removes checkpoints (by rowid) with their metadata rows and pending writes.
func lgDeleteRows(ctx context.Context, w *wtx, thread, ns string, nodes []*store.LGNode) error {
	for _, n := range nodes {
		if _, err := w.exec(ctx, `DELETE FROM lg_meta WHERE ckpt = ?`, n.Key); err != nil {
			return err
		}
		if _, err := w.exec(ctx, `DELETE FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?`, thread, ns, n.ID); err != nil {
			return err
		}
		if _, err := w.exec(ctx, `DELETE FROM lg_checkpoints WHERE id = ?`, n.Key); err != nil {
			return err
		}
	}
	return nil
}

// lgNodes reads every checkpoint of (thread, ns).
func lgNodes(ctx context.Context, w *wtx, thread, ns string) ([]*store.LGNode, error) {
	rows, err := w.query(ctx, `SELECT id, checkpoint_id, parent_id, channel_versions FROM lg_checkpoints
		WHERE thread_id = ? AND namespace = ? ORDER BY checkpoint_id DESC, id DESC`, thread, ns)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.LGNode
	for rows.Next() {
		var rowid int64
		var id string
		var parent sql.NullString
		var versions string
		if err := rows.Scan(&rowid, &id, &parent, &versions); err != nil {
			return nil, err
		}
		n, err := store.NewLGNode(rowid, id, parent.String, []byte(versions))
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
		_, err := w.exec(ctx, `DELETE FROM lg_blobs WHERE thread_id = ? AND namespace = ?`, thread, ns)
		return err
	}
	ref := map[[2]string]bool{}
	for _, n := range keep {
		for _, v := range n.Versions {
			ref[[2]string{v.Channel, v.Version}] = true
		}
	}
	rows, err := w.query(ctx, `SELECT id, channel, version FROM lg_blobs WHERE thread_id = ? AND namespace = ?`, thread, ns)
	if err != nil {
		return err
	}
	var drop []int64
	for rows.Next() {
		var id int64
		var ch, v string
		if err := rows.Scan(&id, &ch, &v); err != nil {
			rows.Close()
			return err
		}
		if !ref[[2]string{ch, v}] {
			drop = append(drop, id)
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range drop {
		if _, err := w.exec(ctx, `DELETE FROM lg_blobs WHERE id = ?`, id); err != nil {
			return err
		}
	}
	return nil
}

func lgNamespaces(ctx context.Context, w *wtx, thread string) ([]string, error) {
	rows, err := w.query(ctx, `SELECT DISTINCT namespace FROM lg_checkpoints INDEXED BY lg_checkpoints_key WHERE thread_id = ?
		UNION SELECT DISTINCT namespace FROM lg_blobs WHERE thread_id = ?
		UNION SELECT DISTINCT namespace FROM lg_writes WHERE thread_id = ?`, thread, thread, thread)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ns string
		if err := rows.Scan(&ns); err != nil {
			return nil, err
		}
		out = append(out, ns)
	}
	return out, rows.Err()
}

func (s *Store) lgDeleteThread(ctx context.Context, w *wtx, thread string) (int, error) {
	var n int
	if err := w.queryRow(ctx, `SELECT count(*) FROM lg_checkpoints INDEXED BY lg_checkpoints_key WHERE thread_id = ?`, thread).Scan(&n); err != nil {
		return 0, err
	}
	for _, q := range []string{
		`DELETE FROM lg_meta WHERE ckpt IN (SELECT id FROM lg_checkpoints INDEXED BY lg_checkpoints_key WHERE thread_id = ?)`,
		`DELETE FROM lg_checkpoints WHERE thread_id = ?`,
		`DELETE FROM lg_writes WHERE thread_id = ?`,
		`DELETE FROM lg_blobs WHERE thread_id = ?`,
	} {
		res, err := w.exec(ctx, q, thread)
		if err != nil {
			return 0, err
		}
		if k, _ := res.RowsAffected(); k > 0 {
			w.vacuumAfter()
		}
	}
	return n, nil
}

func (s *Store) lgWait(ctx context.Context, op string, fn func(ctx context.Context, w *wtx) error) error {
	if err := s.do(ctx, fn); err != nil {
		var ie *store.InvalidError
		var ce *store.CorruptError
		if errors.As(err, &ie) || errors.As(err, &ce) {
			return err
		}
		return wrapDB(op, err)
	}
	return nil
}

// LGDeleteThread deletes every LangGraph checkpoint, write and blob of thread; it returns the
// number of checkpoints deleted.
func (s *Store) LGDeleteThread(ctx context.Context, thread string) (int, error) {
	if thread == "" {
		return 0, invalid("threadId", "required")
	}
	n := 0
	err := s.lgWait(ctx, "delete thread "+thread, func(ctx context.Context, w *wtx) error {
		var err error
		n, err = s.lgDeleteThread(ctx, w, thread)
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
	n := 0
	err := s.lgWait(ctx, "copy thread "+src, func(ctx context.Context, w *wtx) error {
		// metadata rows of target checkpoints about to be overwritten
		if _, err := w.exec(ctx, `DELETE FROM lg_meta WHERE ckpt IN (SELECT t.id FROM lg_checkpoints s
			JOIN lg_checkpoints t ON t.thread_id = ?2 AND t.namespace = s.namespace AND t.checkpoint_id = s.checkpoint_id
			WHERE s.thread_id = ?1)`, src, dst); err != nil {
			return err
		}
		res, err := w.exec(ctx, `INSERT INTO lg_checkpoints(thread_id, namespace, checkpoint_id, parent_id, created_at,
			channel_versions, metadata, type, encoding, size, sha256, data)
			SELECT ?2, namespace, checkpoint_id, parent_id, created_at, channel_versions, metadata, type, encoding, size, sha256, data
			FROM lg_checkpoints WHERE thread_id = ?1 ORDER BY id
			ON CONFLICT(thread_id, namespace, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
			created_at = excluded.created_at, channel_versions = excluded.channel_versions, metadata = excluded.metadata,
			type = excluded.type, encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256, data = excluded.data`,
			src, dst)
		if err != nil {
			return err
		}
		k, _ := res.RowsAffected()
		n = int(k)
		for _, q := range []string{
			`INSERT INTO lg_meta(key, vhash, checkpoint_id, ckpt) SELECT m.key, m.vhash, m.checkpoint_id, t.id
				FROM lg_checkpoints s JOIN lg_meta m ON m.ckpt = s.id
				JOIN lg_checkpoints t ON t.thread_id = ?2 AND t.namespace = s.namespace AND t.checkpoint_id = s.checkpoint_id
				WHERE s.thread_id = ?1 ON CONFLICT DO NOTHING`,
			`INSERT INTO lg_writes(thread_id, namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding, size, sha256, data)
				SELECT ?2, namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding, size, sha256, data
				FROM lg_writes WHERE thread_id = ?1 ORDER BY id
				ON CONFLICT(thread_id, namespace, checkpoint_id, task_id, idx) DO UPDATE SET task_path = excluded.task_path,
				channel = excluded.channel, type = excluded.type, encoding = excluded.encoding, size = excluded.size,
				sha256 = excluded.sha256, data = excluded.data`,
			`INSERT INTO lg_blobs(thread_id, namespace, channel, version, type, encoding, size, sha256, data)
				SELECT ?2, namespace, channel, version, type, encoding, size, sha256, data FROM lg_blobs WHERE thread_id = ?1 ORDER BY id
				ON CONFLICT(thread_id, namespace, channel, version) DO UPDATE SET type = excluded.type, encoding = excluded.encoding,
				size = excluded.size, sha256 = excluded.sha256, data = excluded.data`,
		} {
			if _, err := w.exec(ctx, q, src, dst); err != nil {
				return err
			}
		}
		return nil
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
	err := s.lgWait(ctx, "prune threads", func(ctx context.Context, w *wtx) error {
		n = 0
		for _, thread := range threads {
			if strategy == "delete" {
				k, err := s.lgDeleteThread(ctx, w, thread)
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
				k, err := s.lgKeepLatest(ctx, w, thread, ns)
				if err != nil {
					return err
				}
				n += k
			}
		}
		if n > 0 {
			w.vacuumAfter()
		}
		return nil
	})
	return n, err
}

// lgWrittenChannels lists the channels a checkpoint's regular (idx >= 0) pending writes write to.
func lgWrittenChannels(ctx context.Context, w *wtx, thread, ns, checkpointID string) ([]string, error) {
	rows, err := w.query(ctx, `SELECT DISTINCT channel FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ? AND idx >= 0`,
		thread, ns, checkpointID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ch string
		if err := rows.Scan(&ch); err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, rows.Err()
}

func (s *Store) lgKeepLatest(ctx context.Context, w *wtx, thread, ns string) (int, error) {
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
	if _, err := w.exec(ctx, `DELETE FROM lg_writes WHERE thread_id = ? AND namespace = ? AND NOT EXISTS
		(SELECT 1 FROM lg_checkpoints c WHERE c.thread_id = lg_writes.thread_id AND c.namespace = lg_writes.namespace
		AND c.checkpoint_id = lg_writes.checkpoint_id)`, thread, ns); err != nil {
		return 0, err
	}
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
	err := v.w.queryRow(v.ctx, `SELECT type FROM lg_blobs WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ?`,
		v.thread, v.ns, ch, ver).Scan(&typ)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil && typ != store.LGEmptyType, err
}

func (v lgPruneView) Written(id string) ([]string, error) {
	return lgWrittenChannels(v.ctx, v.w, v.thread, v.ns, id)
}

// LGDeleteForRuns deletes every LangGraph checkpoint whose metadata.run_id is one of runIDs, with
// its writes and the blobs nothing left refers to. It returns the number deleted.
func (s *Store) LGDeleteForRuns(ctx context.Context, runIDs []string) (int, error) {
	hashes, err := store.LGRunHashes(runIDs)
	if err != nil {
		return 0, err
	}
	n := 0
	err = s.lgWait(ctx, "delete for runs", func(ctx context.Context, w *wtx) error {
		n = 0
		type pair struct{ thread, ns string }
		affected := map[pair][]*store.LGNode{}
		var order []pair
		for _, h := range hashes {
			rows, err := w.query(ctx, `SELECT c.id, c.thread_id, c.namespace, c.checkpoint_id FROM lg_meta m
				CROSS JOIN lg_checkpoints c WHERE m.key = 'run_id' AND m.vhash = ? AND c.id = m.ckpt`, h)
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
			if err := rows.Close(); err != nil {
				return err
			}
			if err := rows.Err(); err != nil {
				return err
			}
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
		if n > 0 {
			w.vacuumAfter()
		}
		return nil
	})
	return n, err
}
