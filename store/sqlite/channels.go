package sqlite

// LangGraph channel storage (store/langgraph.go): checkpoints in lg_checkpoints keyed by
// (thread, namespace, checkpoint id) whose channel values live in lg_blobs, one row per
// (thread, namespace, channel, version), so that a put stores only the channels that changed.
// These tables are separate from the checkpoints table: no seq, no retention.

import (
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

// lgPacker packs LangGraph values: large channel values chunked (store.LGPacker).
func (s *Store) lgPacker() store.LGPacker {
	return store.LGPacker{Threshold: s.opts.CompressThreshold, Codec: s.codec, Cache: s.lgvals}
}

func (s *Store) prepareLGPut(req store.LGPutRequest) (*store.LGPrepared, error) {
	if err := store.ResolveLGDeltas(context.Background(), &req, s.lgvals, s.lgValueBases, req.MaxValueBytes); err != nil {
		return nil, err
	}
	p, err := store.PrepareLGPut(req, s.lgPacker(), s.now())
	if err != nil {
		return nil, err
	}
	for i, b := range req.Blobs {
		if b.Type != store.LGEmptyType && s.blobs.Keeps(len(b.Data)) {
			s.blobs.Add(p.Blobs[i].SHA, b.KeptData())
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
// concurrently with earlier mutations. blobsStored is valid after Wait. With a retention (the
// request's, the thread's own, the database's or the daemon's) that prunes, the put's
// transaction also takes the first bite of it (lgRetain).
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
		var consumed []int64
		if r.CheckpointStaged != 0 {
			st, err := lgStaged(ctx, w, r.ThreadID, r.CheckpointStaged, "checkpoint.valueId")
			if err != nil {
				return err
			}
			r.Type, p.CP = st.typ, st.packed
			if st.index != nil { // lg_checkpoints keeps checkpoints whole: reassembled and packed
				raw, err := s.lgOpen(ctx, w.query, r.CheckpointID, "staged checkpoint", st.index, st.packed.Enc, int64(st.packed.Size), st.packed.SHA)
				if err != nil {
					return err
				}
				p.CP = s.pack(raw)
			}
			consumed = append(consumed, r.CheckpointStaged)
		}
		versions, err := store.ParseVersions(r.ChannelVersions)
		if err != nil {
			return invalid("channelVersions", "%v", err)
		}
		given := make(map[string]int, len(r.Blobs))
		for i, b := range r.Blobs {
			pb, typ := p.Blobs[i], b.Type
			if b.Staged != 0 {
				st, err := lgStaged(ctx, w, r.ThreadID, b.Staged, fmt.Sprintf("blobs[%d].valueId", i))
				if err != nil {
					return err
				}
				pb, typ = st.packed, st.typ
				consumed = append(consumed, b.Staged)
			}
			variant, stored, err := s.lgStoreValue(ctx, w, r.ThreadID, r.Namespace, b.Channel, b.Version, typ, pb, b.Staged)
			if err != nil {
				return err
			}
			given[b.Channel] = variant
			if stored {
				*n++
			}
		}
		refs, err := s.lgRefs(ctx, w, r.ThreadID, r.Namespace, r.ParentID, versions, given)
		if err != nil {
			return err
		}
		if _, err := s.lgInsertCheckpoint(ctx, w, p, store.EncodeValueRefs(refs)); err != nil {
			return err
		}
		for _, id := range consumed {
			if _, err := w.lgDeleteRows(ctx, `DELETE FROM lg_staged WHERE id = ?`, id); err != nil {
				return err
			}
			s.staged.Delete(id)
		}
		if err := s.lgTouch(ctx, w, p); err != nil {
			return err
		}
		w.after(func() { s.noteLGPut(r.ThreadID, r.Namespace) })
		return nil
	}), n
}

// lgStoredValue is a staged value as a put takes it.
type lgStagedValue struct {
	typ    string
	packed store.Packed // Data nil: still in lg_staged
	index  []byte       // a chunked value's index (packed.Enc EncChunked); nil otherwise
}

// lgStaged reads the head of a staged value of thread; field names it in errors.
func lgStaged(ctx context.Context, w *wtx, thread string, id int64, field string) (lgStagedValue, error) {
	var v lgStagedValue
	var owner string
	var enc int
	var size int64
	err := w.queryRow(ctx, `SELECT thread_id, type, encoding, size, sha256, CASE WHEN encoding = 4 THEN data END FROM lg_staged WHERE id = ?`, id).
		Scan(&owner, &v.typ, &enc, &size, &v.packed.SHA, &v.index)
	if errors.Is(err, sql.ErrNoRows) {
		return v, invalid(field, "no staged value %d (lg/putValue): unknown, already used or expired", id)
	}
	if err != nil {
		return v, err
	}
	if owner != thread {
		return v, invalid(field, "staged value %d belongs to another thread", id)
	}
	v.packed.Enc, v.packed.Size = enc, int(size)
	return v, nil
}

// lgStoreValue stores one value of a put under (channel, version): as variant 0 when the version
// is new, else as the variant already holding the same bytes, else as a new variant. pb.Data nil
// with staged set: the bytes are those of the staged value. It returns the variant and whether
// a row was written.
func (s *Store) lgStoreValue(ctx context.Context, w *wtx, thread, ns, channel, version, typ string, pb store.Packed, staged int64) (int, bool, error) {
	insert := func(variant int) (bool, error) {
		if staged != 0 {
			// a chunked staged value: the copy is one more listing of its runs (the staged
			// row's is released when the put deletes it)
			var index []byte
			err := w.queryRow(ctx, `INSERT INTO lg_blobs(thread_id, namespace, channel, version, variant, type, encoding, size, sha256, data)
				SELECT ?, ?, ?, ?, ?, type, encoding, size, sha256, data FROM lg_staged WHERE id = ?
				ON CONFLICT(thread_id, namespace, channel, version, variant) DO NOTHING
				RETURNING CASE WHEN encoding = 4 THEN data END`,
				thread, ns, channel, version, variant, staged).Scan(&index)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return false, nil
			case err != nil:
				return false, err
			case index != nil:
				return true, s.refIndex(ctx, w, index)
			}
			s.walPending.Add(int64(pb.Size))
			return true, nil
		}
		res, err := w.lgExec(ctx, `INSERT INTO lg_blobs(thread_id, namespace, channel, version, variant, type, encoding, size, sha256, data)
			VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(thread_id, namespace, channel, version, variant) DO NOTHING`,
			thread, ns, channel, version, variant, typ, pb.Enc, pb.Size, pb.SHA, pb.Data)
		if err != nil {
			return false, err
		}
		k, _ := res.RowsAffected()
		if k > 0 && pb.CV != nil {
			if _, err := s.refChunked(ctx, w, pb.CV); err != nil {
				return false, err
			}
		} else if k > 0 {
			s.walPending.Add(int64(pb.Size))
		}
		return k > 0, nil
	}
	ok, err := insert(0)
	if err != nil || ok {
		return 0, ok, err
	}
	// The version is taken: the same bytes, or another branch's.
	rows, err := w.query(ctx, `SELECT variant, type, size, sha256 FROM lg_blobs
		WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ?`, thread, ns, channel, version)
	if err != nil {
		return 0, false, err
	}
	var stored []store.LGStoredValue
	for rows.Next() {
		var v store.LGStoredValue
		if err := rows.Scan(&v.Variant, &v.Type, &v.Size, &v.SHA); err != nil {
			rows.Close()
			return 0, false, err
		}
		stored = append(stored, v)
	}
	if err := rows.Close(); err != nil {
		return 0, false, err
	}
	match, next := store.LGMatchVariant(stored, typ, pb)
	if match >= 0 {
		return match, false, nil
	}
	ok, err = insert(next)
	return next, ok, err
}

// lgRefs resolves the variant of every channel of a put (given: those it stores): the channels
// it does not store take their parent's variant, or the newest stored one. A (thread, namespace)
// that never stored a second variant needs no lookup: everything is variant 0.
func (s *Store) lgRefs(ctx context.Context, w *wtx, thread, ns, parentID string, versions []store.ChanVer, given map[string]int) (map[string]int, error) {
	inherit := false
	for _, cv := range versions {
		if _, ok := given[cv.Channel]; !ok {
			inherit = true
			break
		}
	}
	if !inherit {
		return given, nil
	}
	var one int
	err := w.queryRow(ctx, `SELECT 1 FROM lg_blobs INDEXED BY lg_blobs_variants WHERE thread_id = ? AND namespace = ? AND variant > 0 LIMIT 1`,
		thread, ns).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return given, nil // variants are all 0
	}
	if err != nil {
		return nil, err
	}
	var parent *store.LGNode
	if parentID != "" {
		if parent, err = lgNodeByID(ctx, w, thread, ns, parentID); err != nil {
			return nil, err
		}
	}
	return store.LGInheritedRefs(versions, given, parent, func(ch, ver string) (int, error) {
		var v int
		err := w.queryRow(ctx, `SELECT variant FROM lg_blobs WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ?
			ORDER BY id DESC LIMIT 1`, thread, ns, ch, ver).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		}
		return v, err
	})
}

// lgInsertCheckpoint writes (or overwrites) the checkpoint row of p with its value refs and its
// metadata index rows, in the writer's transaction; it returns the row's id. A new row (the usual
// case) takes an INSERT and one statement for its metadata rows; an overwritten one an upsert,
// the removal of its old metadata rows and the new ones.
func (s *Store) lgInsertCheckpoint(ctx context.Context, w *wtx, p *store.LGPrepared, refs []byte) (int64, error) {
	r := &p.Req
	var data any = p.CP.Data
	if p.CP.Data == nil { // staged: read it where it is
		var d []byte
		if err := w.queryRow(ctx, `SELECT data FROM lg_staged WHERE id = ?`, r.CheckpointStaged).Scan(&d); err != nil {
			return 0, err
		}
		data = d
	}
	args := []any{r.ThreadID, r.Namespace, r.CheckpointID, nullStr(r.ParentID), p.Micros,
		string(r.ChannelVersions), nullBytes(p.MetaRaw), r.Type, p.CP.Enc, p.CP.Size, p.CP.SHA, data, nullBytes(refs)}
	var rowid int64
	fresh := true
	err := w.queryRow(ctx, lgInsertCheckpointSQL+` ON CONFLICT(thread_id, namespace, checkpoint_id) DO NOTHING RETURNING id`, args...).Scan(&rowid)
	if errors.Is(err, sql.ErrNoRows) {
		fresh = false
		err = w.queryRow(ctx, lgInsertCheckpointSQL+` ON CONFLICT(thread_id, namespace, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
		created_at = excluded.created_at, channel_versions = excluded.channel_versions, metadata = excluded.metadata,
		type = excluded.type, encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256,
		data = excluded.data, value_refs = excluded.value_refs RETURNING id`, args...).Scan(&rowid)
	}
	if err != nil {
		return 0, err
	}
	if !fresh {
		if _, err := w.lgExec(ctx, `DELETE FROM lg_meta WHERE ckpt = ?`, rowid); err != nil {
			return 0, err
		}
	}
	for meta := p.Meta; len(meta) > 0; {
		n := min(len(meta), lgMetaRowsPerInsert)
		q := `INSERT INTO lg_meta(key, vhash, checkpoint_id, ckpt) VALUES (?,?,?,?)` + strings.Repeat(`,(?,?,?,?)`, n-1)
		margs := make([]any, 0, 4*n)
		for _, kv := range meta[:n] {
			margs = append(margs, kv.Key, kv.Hash, r.CheckpointID, rowid)
		}
		if _, err := w.lgExec(ctx, q, margs...); err != nil {
			return 0, err
		}
		meta = meta[n:]
	}
	s.walPending.Add(int64(p.CP.Size))
	return rowid, nil
}

// lgInsertCheckpointSQL inserts an lg_checkpoints row; the caller appends the conflict clause.
const lgInsertCheckpointSQL = `INSERT INTO lg_checkpoints(thread_id, namespace, checkpoint_id, parent_id, created_at,
		channel_versions, metadata, type, encoding, size, sha256, data, value_refs) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`

// lgMetaRowsPerInsert bounds the metadata rows one INSERT writes (and so the statements the writer
// keeps prepared for them).
const lgMetaRowsPerInsert = 16

// LGPutWrites queues pending writes of one task. idx >= 0: stored once; idx < 0: replaced.
// stored is valid after Wait.
func (s *Store) LGPutWrites(thread, ns, checkpointID string, writes []store.LGWrite) (pending *store.LGPending, stored *int) {
	return s.LGPutWritesFenced(thread, ns, checkpointID, writes, 0)
}

// LGPutWritesFenced is LGPutWrites under fencing token (0: none) for the claim of thread,
// checked in the write's transaction. A value larger than chunk.InlineMax is stored as chunks
// (store.LGPacker.Write); a replaced write's chunked value is released.
func (s *Store) LGPutWritesFenced(thread, ns, checkpointID string, writes []store.LGWrite, token int64) (pending *store.LGPending, stored *int) {
	n := new(int)
	ps := make([]store.Packed, len(writes))
	return s.enqueuePrepared(func() error {
		if err := store.CheckLGWrites(thread, checkpointID, writes); err != nil {
			return err
		}
		pk := s.lgPacker()
		for i, w := range writes {
			if w.Staged == 0 {
				ps[i] = pk.Write(w.Data)
			}
		}
		return nil
	}, func(ctx context.Context, w *wtx) error {
		*n = 0
		if err := s.fence(ctx, w, thread, token); err != nil {
			return err
		}
		for i, wr := range writes {
			// a special write (idx < 0) replaces the one stored: DO UPDATE, whose UPDATE fires
			// the kept footprint's triggers (OR REPLACE's deletion would not; schema step 13)
			conflict := ` ON CONFLICT(thread_id, namespace, checkpoint_id, task_id, idx) DO NOTHING`
			var old []byte // the chunked value a replacement releases
			if wr.Idx < 0 {
				conflict = ` ON CONFLICT(thread_id, namespace, checkpoint_id, task_id, idx) DO UPDATE SET task_path = excluded.task_path,
					channel = excluded.channel, type = excluded.type, encoding = excluded.encoding, size = excluded.size,
					sha256 = excluded.sha256, data = excluded.data`
				err := w.queryRow(ctx, `SELECT data FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?
					AND task_id = ? AND idx = ? AND encoding = 4`, thread, ns, checkpointID, wr.TaskID, wr.Idx).Scan(&old)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
			}
			var k int64
			if wr.Staged != 0 {
				st, err := lgStaged(ctx, w, thread, wr.Staged, fmt.Sprintf("writes[%d].valueId", i))
				if err != nil {
					return err
				}
				res, err := w.lgExec(ctx, `INSERT INTO lg_writes(thread_id, namespace, checkpoint_id, task_id, idx, task_path,
					channel, type, encoding, size, sha256, data) SELECT ?,?,?,?,?,?,?, type, encoding, size, sha256, data
					FROM lg_staged WHERE id = ?`+conflict, thread, ns, checkpointID, wr.TaskID, wr.Idx, wr.TaskPath, wr.Channel, wr.Staged)
				if err != nil {
					return err
				}
				if k, _ = res.RowsAffected(); k > 0 && st.index != nil {
					// one more listing; the staged row's is released with it just below
					if err := s.refIndex(ctx, w, st.index); err != nil {
						return err
					}
				}
				if _, err := w.lgDeleteRows(ctx, `DELETE FROM lg_staged WHERE id = ?`, wr.Staged); err != nil {
					return err
				}
				s.staged.Delete(wr.Staged)
			} else {
				p := ps[i]
				res, err := w.lgExec(ctx, `INSERT INTO lg_writes(thread_id, namespace, checkpoint_id, task_id, idx, task_path,
					channel, type, encoding, size, sha256, data) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`+conflict,
					thread, ns, checkpointID, wr.TaskID, wr.Idx, wr.TaskPath, wr.Channel, wr.Type, p.Enc, p.Size, p.SHA, p.Data)
				if err != nil {
					return err
				}
				if k, _ = res.RowsAffected(); k > 0 && p.CV != nil {
					if _, err := s.refChunked(ctx, w, p.CV); err != nil {
						return err
					}
				}
			}
			if k > 0 {
				*n++
				if old != nil {
					w.release(old) // counted down at the end of the job, after the new value's count
				}
			}
		}
		return nil
	}), n
}

// LGStageValue stores one value of thread ahead of the put or putWrites that names it (lg/putValue):
// a request then carries one value at most. A value no put takes is collected once it is older
// than store.LGStagedTTL, and when this store closes.
func (s *Store) LGStageValue(ctx context.Context, thread, typ string, data []byte) (int64, error) {
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return 0, err
	}
	if typ == "" {
		return 0, invalid("type", "required")
	}
	if typ == store.LGEmptyType {
		return 0, invalid("type", "an empty value needs no staging")
	}
	p := s.lgPacker().Write(data)
	var id int64
	err := s.lgWait(ctx, "stage a LangGraph value", func(ctx context.Context, w *wtx) error {
		if err := w.queryRow(ctx, `INSERT INTO lg_staged(thread_id, created_at, type, encoding, size, sha256, data)
			VALUES (?,?,?,?,?,?,?) RETURNING id`, thread, s.now().UnixMicro(), typ, p.Enc, p.Size, p.SHA, p.Data).Scan(&id); err != nil {
			return err
		}
		if p.CV != nil {
			_, err := s.refChunked(ctx, w, p.CV)
			return err
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.staged.Store(id, struct{}{})
	return id, nil
}

// ---------------------------------------------------------------------------------------------
// Reads

const lgCols = `c.id, c.thread_id, c.namespace, c.checkpoint_id, c.parent_id, c.created_at, c.channel_versions,
	c.metadata, c.type, c.encoding, c.size, c.sha256, c.data, c.value_refs`

// blobKey names one stored value: thread, namespace, channel, version, variant.
type blobKey struct {
	thread, ns, channel, version string
	variant                      int
}

// lgReader reads tuples inside one read transaction, fetching each blob key once.
type lgReader struct {
	s     *Store
	ctx   context.Context
	tx    *rtx
	blobs map[blobKey]*store.LGBlob // nil value: missing or empty
	bytes int64                     // distinct bytes read so far
}

func (s *Store) newLGReader(ctx context.Context, tx *rtx) *lgReader {
	return &lgReader{s: s, ctx: ctx, tx: tx, blobs: map[blobKey]*store.LGBlob{}}
}

// blob returns the stored non-empty blob of a key, or nil.
func (r *lgReader) blob(thread, ns, checkpointID, channel, version string, variant int) (*store.LGBlob, error) {
	key := blobKey{thread, ns, channel, version, variant}
	if b, ok := r.blobs[key]; ok {
		return b, nil
	}
	r.blobs[key] = nil // missing or empty unless the row says otherwise
	if err := r.fetchBlobs(thread, ns, checkpointID, `SELECT id, channel, version, variant, type, encoding, size, sha256 FROM lg_blobs
		WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ? AND variant = ?`, []any{thread, ns, channel, version, variant}); err != nil {
		return nil, err
	}
	return r.blobs[key], nil
}

// writes returns a checkpoint's pending writes in (task_path, task_id, idx) order.
// prefetchChunk bounds the (channel, version) pairs fetched by one query.
const prefetchChunk = 32

// prefetch reads the blobs of vs not read yet with one query per prefetchChunk pairs (instead
// of one per channel), so that blob() finds them.
func (r *lgReader) prefetch(thread, ns, checkpointID string, vs []store.ChanVer, refs map[string]int) error {
	var want []blobKey
	seen := map[blobKey]bool{}
	for _, v := range vs {
		k := blobKey{thread, ns, v.Channel, v.Version, refs[v.Channel]}
		if _, done := r.blobs[k]; done || seen[k] {
			continue
		}
		seen[k] = true
		want = append(want, k)
	}
	for len(want) > 0 {
		n := min(len(want), prefetchChunk)
		chunk := want[:n]
		want = want[n:]
		args := make([]any, 0, 2+3*n)
		args = append(args, thread, ns)
		var q strings.Builder
		q.WriteString(`SELECT id, channel, version, variant, type, encoding, size, sha256 FROM lg_blobs
		WHERE thread_id = ? AND namespace = ? AND (channel, version, variant) IN (VALUES `)
		for i, k := range chunk {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?,?,?)")
			args = append(args, k.channel, k.version, k.variant)
			r.blobs[k] = nil // missing unless a row says otherwise
		}
		q.WriteByte(')')
		if err := r.fetchBlobs(thread, ns, checkpointID, q.String(), args); err != nil {
			return err
		}
	}
	return nil
}

// fetchBlobs runs q (selecting id, channel, version, variant, type, encoding, size, sha256 of lg_blobs
// rows: never the data, so SQLite reads no overflow pages) and records each row's value in
// r.blobs: from the store's blob cache when it holds the row's stored SHA-256, else read,
// verified and decoded by a second query over the rows the cache lacked.
func (r *lgReader) fetchBlobs(thread, ns, checkpointID, q string, args []any) error {
	type need struct {
		channel, version, typ string
		variant               int
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
		if err := rows.Scan(&id, &n.channel, &n.version, &n.variant, &n.typ, &n.enc, &n.size, &n.sha); err != nil {
			rows.Close()
			return err
		}
		if n.typ == store.LGEmptyType {
			continue
		}
		if raw, ok := r.s.blobs.Get(n.sha); ok && int64(len(raw)) == n.size {
			r.blobs[blobKey{thread, ns, n.channel, n.version, n.variant}] = &store.LGBlob{Channel: n.channel, Version: n.version, Variant: n.variant, Type: n.typ, Data: raw}
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
	got := func(id int64, raw []byte) {
		n := missing[id]
		r.s.blobs.Add(n.sha, raw)
		r.blobs[blobKey{thread, ns, n.channel, n.version, n.variant}] = &store.LGBlob{Channel: n.channel, Version: n.version, Variant: n.variant, Type: n.typ, Data: raw}
		r.bytes += int64(len(raw))
		delete(missing, id)
	}
	chunked := map[int64][]byte{} // indexes, reassembled once the rows are closed
	for rows.Next() {
		var id int64
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			rows.Close()
			return err
		}
		n := missing[id]
		if n.enc == store.EncChunked {
			chunked[id] = data
			continue
		}
		raw, err := store.Unpack(checkpointID, store.LGValueWhat(n.channel, n.version, n.variant), data, int(n.enc), n.size, n.sha)
		if err != nil {
			rows.Close()
			return err
		}
		got(id, raw)
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for id, index := range chunked {
		n := missing[id]
		raw, err := r.s.lgOpen(r.ctx, r.tx.cached, checkpointID, store.LGValueWhat(n.channel, n.version, n.variant), index, int(n.enc), n.size, n.sha)
		if err != nil {
			return err
		}
		got(id, raw)
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
	var out []store.LGWrite
	var later []lgChunkedWrite
	for rows.Next() {
		var w store.LGWrite
		var enc, size int64
		var sha, data []byte
		if err := rows.Scan(&w.TaskID, &w.TaskPath, &w.Idx, &w.Channel, &w.Type, &enc, &size, &sha, &data); err != nil {
			rows.Close()
			return nil, err
		}
		if enc == store.EncChunked { // reassembled once the rows are closed
			later = append(later, lgChunkedWrite{at: len(out), index: data, size: size, sha: sha})
		} else if w.Data, err = store.Unpack(checkpointID, fmt.Sprintf("write %s/%d", w.TaskID, w.Idx), data, int(enc), size, sha); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := r.openWrites(checkpointID, out, later); err != nil {
		return nil, err
	}
	for _, w := range out {
		r.bytes += int64(len(w.Data))
	}
	store.SortLGWrites(out)
	return out, nil
}

// lgChunkedWrite is a pending write read with its chunked value's index: out[at] of a read.
type lgChunkedWrite struct {
	at         int
	index      []byte
	size       int64
	sha        []byte
	checkpoint string // "": the read's
}

// openWrites reassembles the chunked values of later into out (checkpointID: the writes' checkpoint,
// for errors, unless an entry names its own).
func (r *lgReader) openWrites(checkpointID string, out []store.LGWrite, later []lgChunkedWrite) error {
	for _, c := range later {
		w := &out[c.at]
		cp := checkpointID
		if c.checkpoint != "" {
			cp = c.checkpoint
		}
		raw, err := r.s.lgOpen(r.ctx, r.tx.cached, cp, fmt.Sprintf("write %s/%d", w.TaskID, w.Idx), c.index, store.EncChunked, c.size, c.sha)
		if err != nil {
			return err
		}
		w.Data = raw
	}
	return nil
}

// lgItem is a tuple being read with its row id (cursor ties) and value refs.
type lgItem struct {
	t     store.LGTuple
	rowid int64
	refs  map[string]int
}

// scanTuple reads one lgCols row (without blobs and writes).
func (r *lgReader) scanTuple(sc interface{ Scan(...any) error }) (lgItem, error) {
	var it lgItem
	t := &it.t
	var created, enc, size int64
	var parent sql.NullString
	var versions string
	var meta, sha, data, refs []byte
	if err := sc.Scan(&it.rowid, &t.ThreadID, &t.Namespace, &t.CheckpointID, &parent, &created, &versions, &meta,
		&t.Type, &enc, &size, &sha, &data, &refs); err != nil {
		return it, err
	}
	t.ParentID = parent.String
	t.CreatedAt = time.UnixMicro(created).UTC()
	t.ChannelVersions = json.RawMessage(versions)
	if len(meta) > 0 {
		t.Metadata = json.RawMessage(meta)
	}
	var err error
	if t.Checkpoint, err = store.Unpack(t.CheckpointID, "checkpoint", data, int(enc), size, sha); err != nil {
		return it, err
	}
	if it.refs, err = store.ParseValueRefs(refs); err != nil {
		return it, &store.CorruptError{CheckpointID: t.CheckpointID, Reason: "stored value refs do not parse: " + err.Error()}
	}
	r.bytes += int64(len(t.Checkpoint))
	return it, nil
}

// fill adds a tuple's blobs and writes.
func (r *lgReader) fill(it *lgItem) error {
	t := &it.t
	vs, err := store.ParseVersions(t.ChannelVersions)
	if err != nil {
		return &store.CorruptError{CheckpointID: t.CheckpointID, Reason: "stored channel versions do not parse: " + err.Error()}
	}
	if err := r.prefetch(t.ThreadID, t.Namespace, t.CheckpointID, vs, it.refs); err != nil {
		return err
	}
	for _, v := range vs {
		b, err := r.blob(t.ThreadID, t.Namespace, t.CheckpointID, v.Channel, v.Version, it.refs[v.Channel])
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
	return s.lgReadHot(ctx, op, "", f)
}

// lgReadHot is lgRead on the writer's connection when recent (non-empty) names a thread this
// store put lately and the writer is idle (readTxHot): its page cache holds what the put wrote,
// where a pooled connection would read it again from the WAL.
func (s *Store) lgReadHot(ctx context.Context, op, recent string, f func(r *lgReader) error) error {
	read := func(tx *rtx) error { return f(s.newLGReader(ctx, tx)) }
	var err error
	if recent != "" {
		err = s.readTxHot(ctx, recent, read)
	} else {
		err = s.readTx(ctx, read)
	}
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
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return nil, err
	}
	var out *store.LGTuple
	err := s.lgReadHot(ctx, "lg get", recentThread(thread, ns), func(r *lgReader) (err error) {
		out, err = r.get(thread, ns, checkpointID)
		return err
	})
	return out, err
}

// get reads checkpointID ("": the latest) of (thread, ns) with its blobs and writes; nil when
// there is none.
func (r *lgReader) get(thread, ns, checkpointID string) (*store.LGTuple, error) {
	q, args := `SELECT `+lgCols+` FROM lg_checkpoints c INDEXED BY lg_checkpoints_key
			WHERE c.thread_id = ? AND c.namespace = ? ORDER BY c.checkpoint_id DESC LIMIT 1`, []any{thread, ns}
	if checkpointID != "" {
		q, args = `SELECT `+lgCols+` FROM lg_checkpoints c
			WHERE c.thread_id = ? AND c.namespace = ? AND c.checkpoint_id = ?`, []any{thread, ns, checkpointID}
	}
	rows, err := r.s.query(r.ctx, r.tx, q, args...)
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		rows.Close()
		return nil, rows.Err()
	}
	it, err := r.scanTuple(rows)
	rows.Close()
	if err != nil {
		return nil, err
	}
	if err := r.fill(&it); err != nil {
		return nil, err
	}
	return &it.t, nil
}

// lgListQuery builds the SQL of one lg/list page (cols selected). Every shape walks an index in
// (checkpoint_id DESC, rowid DESC) order, so no temporary b-tree sorts the result (but for a
// search over every thread driven by a metadata key with several hashes).
func lgListQuery(cols string, f store.LGListFilter, meta *store.LGMetaQuery, cur *store.LGCursor, limit int) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	hashIn := func(col string, hs [][]byte) string {
		if len(hs) == 1 {
			args = append(args, hs[0])
			return col + ` = ?`
		}
		for _, h := range hs {
			args = append(args, h)
		}
		return col + ` IN (?` + strings.Repeat(`,?`, len(hs)-1) + `)`
	}
	existsMeta := func(skip int) {
		if meta == nil {
			return
		}
		for i, k := range meta.Keys {
			if i == skip || !k.Indexed {
				continue
			}
			args = append(args, k.Key)
			cond := `EXISTS (SELECT 1 FROM lg_meta m WHERE m.key = ? AND ` + hashIn(`m.vhash`, k.Hashes) +
				` AND m.checkpoint_id = c.checkpoint_id AND m.ckpt = c.id)`
			if k.Missing {
				args = append(args, k.Key)
				cond = `(` + cond + ` OR NOT EXISTS (SELECT 1 FROM lg_meta m INDEXED BY lg_meta_ckpt WHERE m.ckpt = c.id AND m.key = ?))`
			}
			where = append(where, cond)
		}
	}
	driver := -1
	if meta != nil {
		driver = meta.Driver()
	}
	from := ""
	idCol, rowCol := "c.checkpoint_id", "c.id"
	switch {
	case f.HasThread() && f.Namespace != nil:
		from = `lg_checkpoints c INDEXED BY lg_checkpoints_key`
		add(`c.thread_id = ?`, f.ThreadID)
		add(`c.namespace = ?`, *f.Namespace)
		existsMeta(-1)
	case f.HasThread():
		from = `lg_checkpoints c INDEXED BY lg_checkpoints_thread`
		add(`c.thread_id = ?`, f.ThreadID)
		existsMeta(-1)
	case driver >= 0:
		k := meta.Keys[driver]
		from = `lg_meta m0 CROSS JOIN lg_checkpoints c`
		idCol, rowCol = "m0.checkpoint_id", "m0.ckpt"
		add(`m0.key = ?`, k.Key)
		where = append(where, hashIn(`m0.vhash`, k.Hashes))
		add(`c.id = m0.ckpt`)
		if f.Namespace != nil {
			add(`c.namespace = ?`, *f.Namespace)
		}
		existsMeta(driver)
	case f.Namespace != nil:
		from = `lg_checkpoints c INDEXED BY lg_checkpoints_ns`
		add(`c.namespace = ?`, *f.Namespace)
		existsMeta(-1)
	default:
		from = `lg_checkpoints c INDEXED BY lg_checkpoints_id`
		existsMeta(-1)
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
	q := `SELECT ` + cols + ` FROM ` + from
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY ` + idCol + ` DESC, ` + rowCol + ` DESC LIMIT ?`
	args = append(args, limit)
	return q, args
}

// lgHotListMax is the largest lg/list limit read on the writer's connection (lgReadHot).
const lgHotListMax = 20

// lgScanBatch is how many candidate rows a filtered lg/list reads per query when the metadata
// index alone does not decide (LGMetaQuery.Exact false).
const lgScanBatch = 256

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
	meta, err := store.NewLGMetaQuery(f.Metadata, f.MetadataMatch)
	if err != nil {
		return store.LGListResult{}, err
	}
	page := lgPageTuples
	if f.Limit > 0 && f.Limit < page {
		page = f.Limit
	}
	var res store.LGListResult
	// A short page of one thread and namespace put lately, without a metadata filter (which may
	// scan the whole thread), is read on the idle writer's connection (a longer read would hold
	// the writer off for longer than it saves).
	recent := ""
	if f.HasThread() && f.Namespace != nil && meta == nil && f.Limit > 0 && f.Limit <= lgHotListMax {
		recent = recentThread(f.ThreadID, *f.Namespace)
	}
	err = s.lgReadHot(ctx, "lg list", recent, func(r *lgReader) error {
		res = store.LGListResult{}
		var items []lgItem
		var more bool
		var err error
		if meta == nil || meta.Exact {
			items, more, err = r.listExact(f, meta, cur, page)
		} else {
			items, more, err = r.listMatched(f, meta, cur, page)
		}
		if err != nil {
			return err
		}
		for i := range items {
			if err := r.fill(&items[i]); err != nil {
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

// listExact reads up to page tuples (and whether more follow) with one query.
func (r *lgReader) listExact(f store.LGListFilter, meta *store.LGMetaQuery, cur *store.LGCursor, page int) ([]lgItem, bool, error) {
	q, args := lgListQuery(lgCols, f, meta, cur, page+1)
	rows, err := r.s.query(r.ctx, r.tx, q, args...)
	if err != nil {
		return nil, false, err
	}
	var items []lgItem
	more := false
	for rows.Next() {
		if len(items) == page {
			more = true
			break
		}
		it, err := r.scanTuple(rows)
		if err != nil {
			rows.Close()
			return nil, false, err
		}
		items = append(items, it)
	}
	if err := rows.Close(); err != nil {
		return nil, false, err
	}
	return items, more, rows.Err()
}

// listMatched reads up to page tuples whose metadata meta.Match accepts: candidates by the index
// (their id and metadata only), lgScanBatch at a time, then the matching rows.
func (r *lgReader) listMatched(f store.LGListFilter, meta *store.LGMetaQuery, cur *store.LGCursor, page int) ([]lgItem, bool, error) {
	idCol, rowCol := "c.checkpoint_id", "c.id"
	if !f.HasThread() && meta.Driver() >= 0 {
		idCol, rowCol = "m0.checkpoint_id", "m0.ckpt"
	}
	var ids []int64
	more := false
	for len(ids) <= page {
		q, args := lgListQuery(rowCol+`, `+idCol+`, c.metadata`, f, meta, cur, lgScanBatch)
		rows, err := r.s.query(r.ctx, r.tx, q, args...)
		if err != nil {
			return nil, false, err
		}
		n := 0
		for rows.Next() {
			var rowid int64
			var id string
			var md []byte
			if err := rows.Scan(&rowid, &id, &md); err != nil {
				rows.Close()
				return nil, false, err
			}
			n++
			cur = &store.LGCursor{ID: id, Key: rowid}
			if meta.Match(md) {
				ids = append(ids, rowid)
				if len(ids) > page {
					break
				}
			}
		}
		if err := rows.Close(); err != nil {
			return nil, false, err
		}
		if err := rows.Err(); err != nil {
			return nil, false, err
		}
		if n < lgScanBatch {
			break
		}
	}
	if len(ids) > page {
		ids, more = ids[:page], true
	}
	items := make([]lgItem, 0, len(ids))
	for _, id := range ids {
		rows, err := r.s.query(r.ctx, r.tx, `SELECT `+lgCols+` FROM lg_checkpoints c WHERE c.id = ?`, id)
		if err != nil {
			return nil, false, err
		}
		if rows.Next() {
			it, err := r.scanTuple(rows)
			if err != nil {
				rows.Close()
				return nil, false, err
			}
			items = append(items, it)
		}
		if err := rows.Close(); err != nil {
			return nil, false, err
		}
	}
	return items, more, nil
}

// lgNodeQuerier runs the single-row queries of lgNodeByID (a read or the writer's transaction).
type lgNodeQuerier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// lgNodeByID reads checkpointID ("": the latest) of (thread, ns); nil when there is none.
func lgNodeByID(ctx context.Context, q any, thread, ns, checkpointID string) (*store.LGNode, error) {
	var rowid int64
	var id string
	var parent sql.NullString
	var versions string
	var refs []byte
	var created int64
	var row *sql.Row
	query := func(sql string, args ...any) *sql.Row {
		switch x := q.(type) {
		case *wtx:
			return x.queryRow(ctx, sql, args...)
		case lgNodeQuerier:
			return x.QueryRowContext(ctx, sql, args...)
		}
		panic("lgNodeByID: unknown querier")
	}
	if checkpointID == "" {
		row = query(`SELECT id, checkpoint_id, parent_id, channel_versions, value_refs, created_at FROM lg_checkpoints INDEXED BY lg_checkpoints_key
			WHERE thread_id = ? AND namespace = ? ORDER BY checkpoint_id DESC LIMIT 1`, thread, ns)
	} else {
		row = query(`SELECT id, checkpoint_id, parent_id, channel_versions, value_refs, created_at FROM lg_checkpoints
			WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?`, thread, ns, checkpointID)
	}
	err := row.Scan(&rowid, &id, &parent, &versions, &refs, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n, err := store.NewLGNode(rowid, id, parent.String, []byte(versions), refs)
	if err != nil {
		return nil, err
	}
	n.Created = time.UnixMicro(created).UTC()
	return n, nil
}

// LGChannelHistory walks the parent chain of a checkpoint (checkpointID, or the latest) collecting,
// per channel, the ancestors' writes up to and including the nearest ancestor with a stored value
// (the seed). See docs/protocol.md, lg/channelHistory.
func (s *Store) LGChannelHistory(ctx context.Context, thread, ns, checkpointID string, channels []string) (store.LGHistoryResult, error) {
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return store.LGHistoryResult{}, err
	}
	var res store.LGHistoryResult
	err := s.lgRead(ctx, "lg channel history", func(r *lgReader) error {
		var err error
		res, err = store.ChannelHistory(&lgAncestry{r: r, thread: thread, ns: ns}, checkpointID, channels)
		return err
	})
	return res, err
}

// lgChainBatch is how many ancestors lgAncestry reads with one query.
const lgChainBatch = 64

// lgAncestry is one (thread, namespace) of an lgReader, for store.ChannelHistory: it reads the
// parent chain lgChainBatch checkpoints at a time, and their writes with one query per batch.
type lgAncestry struct {
	r          *lgReader
	thread, ns string
	nodes      map[string]*store.LGNode
	writes     map[string][]store.LGWrite // loaded: a key (maybe with no writes)
}

func (a *lgAncestry) Node(id string) (*store.LGNode, error) {
	if n, ok := a.nodes[id]; ok || id == "" {
		if id == "" {
			return lgNodeByID(a.r.ctx, a.r.tx, a.thread, a.ns, "")
		}
		return n, nil
	}
	rows, err := a.r.s.query(a.r.ctx, a.r.tx, `WITH RECURSIVE chain(n, id, cid, parent, versions, refs, created) AS (
		SELECT 0, id, checkpoint_id, parent_id, channel_versions, value_refs, created_at FROM lg_checkpoints
			WHERE thread_id = ?1 AND namespace = ?2 AND checkpoint_id = ?3
		UNION ALL
		SELECT chain.n + 1, c.id, c.checkpoint_id, c.parent_id, c.channel_versions, c.value_refs, c.created_at
			FROM chain JOIN lg_checkpoints c ON c.thread_id = ?1 AND c.namespace = ?2 AND c.checkpoint_id = chain.parent
			WHERE chain.n < ?4)
		SELECT id, cid, parent, versions, refs, created FROM chain`, a.thread, a.ns, id, lgChainBatch-1)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if a.nodes == nil {
		a.nodes = map[string]*store.LGNode{}
	}
	a.nodes[id] = nil // none unless the first row says otherwise
	for rows.Next() {
		var rowid, created int64
		var cid, versions string
		var parent sql.NullString
		var refs []byte
		if err := rows.Scan(&rowid, &cid, &parent, &versions, &refs, &created); err != nil {
			return nil, err
		}
		if _, seen := a.nodes[cid]; seen && cid != id {
			break // a cycle
		}
		n, err := store.NewLGNode(rowid, cid, parent.String, []byte(versions), refs)
		if err != nil {
			return nil, err
		}
		n.Created = time.UnixMicro(created).UTC()
		a.nodes[cid] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return a.nodes[id], nil
}

func (a *lgAncestry) Writes(id string) ([]store.LGWrite, error) {
	if ws, ok := a.writes[id]; ok {
		return ws, nil
	}
	// this checkpoint's and those of the other read ancestors whose writes are not loaded yet
	ids := []any{a.thread, a.ns, id}
	for cid, n := range a.nodes {
		if _, ok := a.writes[cid]; !ok && n != nil && cid != id && len(ids) < lgChainBatch+2 {
			ids = append(ids, cid)
		}
	}
	if a.writes == nil {
		a.writes = map[string][]store.LGWrite{}
	}
	for _, cid := range ids[2:] {
		a.writes[cid.(string)] = nil
	}
	rows, err := a.r.s.query(a.r.ctx, a.r.tx, `SELECT checkpoint_id, task_id, task_path, idx, channel, type, encoding, size, sha256, data
		FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id IN (?`+strings.Repeat(`,?`, len(ids)-3)+`)`, ids...)
	if err != nil {
		return nil, err
	}
	var all []store.LGWrite
	var cids []string
	var later []lgChunkedWrite
	for rows.Next() {
		var cid string
		var w store.LGWrite
		var enc, size int64
		var sha, data []byte
		if err := rows.Scan(&cid, &w.TaskID, &w.TaskPath, &w.Idx, &w.Channel, &w.Type, &enc, &size, &sha, &data); err != nil {
			rows.Close()
			return nil, err
		}
		if enc == store.EncChunked { // reassembled once the rows are closed
			later = append(later, lgChunkedWrite{at: len(all), index: data, size: size, sha: sha, checkpoint: cid})
		} else if w.Data, err = store.Unpack(cid, fmt.Sprintf("write %s/%d", w.TaskID, w.Idx), data, int(enc), size, sha); err != nil {
			rows.Close()
			return nil, err
		}
		all, cids = append(all, w), append(cids, cid)
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := a.r.openWrites("", all, later); err != nil {
		return nil, err
	}
	for i, w := range all {
		a.r.bytes += int64(len(w.Data))
		a.writes[cids[i]] = append(a.writes[cids[i]], w)
	}
	for _, cid := range ids[2:] {
		store.SortLGWrites(a.writes[cid.(string)])
	}
	return a.writes[id], nil
}

func (a *lgAncestry) Value(id, channel, version string, variant int) (*store.LGBlob, error) {
	return a.r.blob(a.thread, a.ns, id, channel, version, variant)
}
