package postgres

// LangGraph channel storage (store/langgraph.go), in the tables SQLite uses: lg_checkpoints
// keyed by (thread, namespace, checkpoint id), channel values in lg_blobs keyed by (thread,
// namespace, channel, version), pending writes in lg_writes, the metadata index in lg_meta.
// Mutations of a thread hold the thread's advisory lock, so that a prune of one process never
// collects the value a put of another is committing.

import (
	"context"
	"encoding/json"
	"fmt"
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
	if err := store.ResolveLGDeltas(context.Background(), &req, s.lgvals, s.lgValueBases, req.MaxValueBytes); err != nil {
		return nil, err
	}
	p, err := store.PrepareLGPut(req, s.lgPacker(), s.now())
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
			s.blobs.Add(p.Blobs[i].SHA, b.KeptData())
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
// concurrently with earlier mutations. blobsStored is valid after Wait. In the common case (new
// versions, no staged value) the put is one round trip: its values go in as variant 0, its
// checkpoint without value refs; only when a version was taken, or the (thread, namespace) has
// other variants, a second one resolves the refs (store/lgrefs.go).
func (s *Store) LGPut(req store.LGPutRequest) (pending *store.LGPending, blobsStored *int) {
	n := new(int)
	var p *store.LGPrepared
	return s.enqueuePrepared(req.ThreadID, func() (err error) {
		p, err = s.prepareLGPut(req)
		return err
	}, func(ctx context.Context, w *wtx) error {
		*n = 0
		r := &p.Req
		staged := r.CheckpointStaged != 0
		for _, bl := range r.Blobs {
			staged = staged || bl.Staged != 0
		}
		if staged {
			return s.lgPutStaged(ctx, w, p, n)
		}
		b := &pgx.Batch{}
		fc := queueFence(b, r.ThreadID, r.FencingToken) // the claim first, in the same round trip
		inserted := map[string]bool{}
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
				ON CONFLICT (thread_id, namespace, channel, version, variant) DO NOTHING RETURNING channel`,
				r.ThreadID, r.Namespace, chs, vers, types, encs, sizes, shas, datas).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var ch string
					if err := rows.Scan(&ch); err != nil {
						return err
					}
					inserted[ch] = true
				}
				return rows.Err()
			})
		}
		variants := false
		b.Queue(`SELECT EXISTS (SELECT 1 FROM lg_blobs WHERE thread_id = $1 AND namespace = $2 AND variant > 0)`, r.ThreadID, r.Namespace).
			QueryRow(func(row pgx.Row) error { return row.Scan(&variants) })
		queueLGCheckpoint(b, p, nil)
		var own *string
		queueLGTouch(b, p, &own)
		if err := w.sendBatch(ctx, b); err != nil {
			return err
		}
		if err := fc.check(); err != nil {
			return err
		}
		*n = len(inserted)
		for i, bl := range r.Blobs {
			if inserted[bl.Channel] && p.Blobs[i].CV != nil {
				if _, err := refChunked(ctx, w, p.Blobs[i].CV); err != nil {
					return err
				}
			}
		}
		given := map[string]int{}
		taken := false
		for i, bl := range r.Blobs {
			if inserted[bl.Channel] {
				given[bl.Channel] = 0
				continue
			}
			variant, stored, err := lgStoreValue(ctx, w, r.ThreadID, r.Namespace, bl.Channel, bl.Version, bl.Type, p.Blobs[i], 0, false)
			if err != nil {
				return err
			}
			given[bl.Channel] = variant
			taken = taken || variant != 0
			if stored {
				*n++
			}
		}
		if taken || variants {
			if err := s.lgSetRefs(ctx, w, p, given); err != nil {
				return err
			}
		}
		return s.lgRetainAfterTouch(ctx, w, p, own)
	}), n
}

// lgPutStaged is LGPut for a put naming staged values: statement by statement.
func (s *Store) lgPutStaged(ctx context.Context, w *wtx, p *store.LGPrepared, n *int) error {
	r := &p.Req
	b := &pgx.Batch{}
	fc := queueFence(b, r.ThreadID, r.FencingToken)
	if err := w.sendBatch(ctx, b); err != nil {
		return err
	}
	if err := fc.check(); err != nil {
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
	given := map[string]int{}
	for i, bl := range r.Blobs {
		pb, typ := p.Blobs[i], bl.Type
		if bl.Staged != 0 {
			st, err := lgStaged(ctx, w, r.ThreadID, bl.Staged, fmt.Sprintf("blobs[%d].valueId", i))
			if err != nil {
				return err
			}
			pb, typ = st.packed, st.typ
			consumed = append(consumed, bl.Staged)
		}
		variant, stored, err := lgStoreValue(ctx, w, r.ThreadID, r.Namespace, bl.Channel, bl.Version, typ, pb, bl.Staged, true)
		if err != nil {
			return err
		}
		given[bl.Channel] = variant
		if stored {
			*n++
		}
	}
	versions, err := store.ParseVersions(r.ChannelVersions)
	if err != nil {
		return invalid("channelVersions", "%v", err)
	}
	refs, err := lgRefs(ctx, w, r.ThreadID, r.Namespace, r.ParentID, versions, given)
	if err != nil {
		return err
	}
	b = &pgx.Batch{}
	queueLGCheckpoint(b, p, store.EncodeValueRefs(refs))
	var own *string
	queueLGTouch(b, p, &own)
	if err := w.sendBatch(ctx, b); err != nil {
		return err
	}
	// after the copies' counts: a chunked staged value's runs never reach 0 on the way
	if _, err := w.lgDeleteRows(ctx, `DELETE FROM lg_staged WHERE id = ANY($1)`, consumed); err != nil {
		return err
	}
	for _, id := range consumed {
		s.staged.Delete(id)
	}
	return s.lgRetainAfterTouch(ctx, w, p, own)
}

// lgSetRefs resolves and stores the value refs of p's checkpoint (given: the variants of the
// values it stores).
func (s *Store) lgSetRefs(ctx context.Context, w *wtx, p *store.LGPrepared, given map[string]int) error {
	r := &p.Req
	versions, err := store.ParseVersions(r.ChannelVersions)
	if err != nil {
		return invalid("channelVersions", "%v", err)
	}
	refs, err := lgRefs(ctx, w, r.ThreadID, r.Namespace, r.ParentID, versions, given)
	if err != nil {
		return err
	}
	enc := store.EncodeValueRefs(refs)
	if enc == nil {
		return nil
	}
	_, err = w.exec(ctx, `UPDATE lg_checkpoints SET value_refs = $4 WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = $3`,
		r.ThreadID, r.Namespace, r.CheckpointID, string(enc))
	return err
}

// lgStagedValue is a staged value as a put takes it.
type lgStagedValue struct {
	typ    string
	packed store.Packed // Data nil: still in lg_staged
	index  []byte       // a chunked value's index (packed.Enc EncChunked); nil otherwise
}

// lgStaged reads the head of a staged value of thread; field names it in errors.
func lgStaged(ctx context.Context, w *wtx, thread string, id int64, field string) (lgStagedValue, error) {
	var v lgStagedValue
	var owner string
	var enc int16
	var size int64
	err := w.queryRow(ctx, `SELECT thread_id, type, encoding, size, sha256, CASE WHEN encoding = 4 THEN data END FROM lg_staged WHERE id = $1`, id).
		Scan(&owner, &v.typ, &enc, &size, &v.packed.SHA, &v.index)
	if noRows(err) {
		return v, invalid(field, "no staged value %d (lg/putValue): unknown, already used or expired", id)
	}
	if err != nil {
		return v, err
	}
	if owner != thread {
		return v, invalid(field, "staged value %d belongs to another thread", id)
	}
	v.packed.Enc, v.packed.Size = int(enc), int(size)
	return v, nil
}

// lgStoreValue stores one value of a put under (channel, version): as variant 0 when the version
// is new, else as the variant already holding the same bytes, else as a new variant. pb.Data nil
// with staged set: the bytes are the staged value's. It returns the variant and whether a row
// was written.
func lgStoreValue(ctx context.Context, w *wtx, thread, ns, channel, version, typ string, pb store.Packed, staged int64, tryFirst bool) (int, bool, error) {
	insert := func(variant int) (bool, error) {
		if staged != 0 {
			// a chunked staged value: the copy is one more listing of its runs (the staged
			// row's is released when the put deletes it, after)
			var index []byte
			err := w.queryRow(ctx, `INSERT INTO lg_blobs (thread_id, namespace, channel, version, variant, type, encoding, size, sha256, data)
				SELECT $1, $2, $3, $4, $5, type, encoding, size, sha256, data FROM lg_staged WHERE id = $6
				ON CONFLICT (thread_id, namespace, channel, version, variant) DO NOTHING
				RETURNING CASE WHEN encoding = 4 THEN data END`, thread, ns, channel, version, variant, staged).Scan(&index)
			switch {
			case noRows(err):
				return false, nil
			case err != nil:
				return false, err
			case index != nil:
				return true, refIndex(ctx, w, index)
			}
			return true, nil
		}
		ct, err := w.exec(ctx, `INSERT INTO lg_blobs (thread_id, namespace, channel, version, variant, type, encoding, size, sha256, data)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (thread_id, namespace, channel, version, variant) DO NOTHING`,
			thread, ns, channel, version, variant, typ, int16(pb.Enc), int64(pb.Size), pb.SHA, pb.Data)
		if err == nil && ct.RowsAffected() > 0 && pb.CV != nil {
			_, err = refChunked(ctx, w, pb.CV)
		}
		return ct.RowsAffected() > 0, err
	}
	if tryFirst {
		ok, err := insert(0)
		if err != nil || ok {
			return 0, ok, err
		}
	}
	rows, err := w.query(ctx, `SELECT variant, type, size, sha256 FROM lg_blobs
		WHERE thread_id = $1 AND namespace = $2 AND channel = $3 AND version = $4`, thread, ns, channel, version)
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
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	match, next := store.LGMatchVariant(stored, typ, pb)
	if match >= 0 {
		return match, false, nil
	}
	ok, err := insert(next)
	return next, ok, err
}

// lgRefs resolves the variant of every channel of a put (given: those it stores): the others
// take their parent's, or the newest stored one.
func lgRefs(ctx context.Context, w *wtx, thread, ns, parentID string, versions []store.ChanVer, given map[string]int) (map[string]int, error) {
	var parent *store.LGNode
	if parentID != "" {
		var err error
		if parent, err = lgNode(ctx, w.querier(ctx), thread, ns, parentID); err != nil {
			return nil, err
		}
	}
	return store.LGInheritedRefs(versions, given, parent, func(ch, ver string) (int, error) {
		var v int
		err := w.queryRow(ctx, `SELECT variant FROM lg_blobs WHERE thread_id = $1 AND namespace = $2 AND channel = $3 AND version = $4
			ORDER BY id DESC LIMIT 1`, thread, ns, ch, ver).Scan(&v)
		if noRows(err) {
			return 0, nil
		}
		return v, err
	})
}

// queueLGCheckpoint queues the statements writing (or overwriting) p's checkpoint row with its
// value refs and its metadata index rows. An overwritten row keeps its id (storage order).
func queueLGCheckpoint(b *pgx.Batch, p *store.LGPrepared, refs []byte) {
	r := &p.Req
	var data any = p.CP.Data
	if p.CP.Data == nil { // staged
		data = nil
	}
	if r.CheckpointStaged != 0 && p.CP.Data == nil { // copied from the staged row (a chunked one was reassembled)
		b.Queue(`INSERT INTO lg_checkpoints (thread_id, namespace, checkpoint_id, parent_id, created_at, channel_versions,
			metadata, type, encoding, size, sha256, data, value_refs)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, s.data, $13 FROM lg_staged s WHERE s.id = $12
			ON CONFLICT (thread_id, namespace, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
			created_at = excluded.created_at, channel_versions = excluded.channel_versions, metadata = excluded.metadata,
			type = excluded.type, encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256, data = excluded.data,
			value_refs = excluded.value_refs`,
			r.ThreadID, r.Namespace, r.CheckpointID, nullStr(r.ParentID), time.UnixMicro(p.Micros).UTC(), string(r.ChannelVersions),
			nullBytes(p.MetaRaw), r.Type, p.CP.Enc, p.CP.Size, p.CP.SHA, r.CheckpointStaged, nullText(refs))
	} else {
		b.Queue(`INSERT INTO lg_checkpoints (thread_id, namespace, checkpoint_id, parent_id, created_at, channel_versions,
			metadata, type, encoding, size, sha256, data, value_refs) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
			ON CONFLICT (thread_id, namespace, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
			created_at = excluded.created_at, channel_versions = excluded.channel_versions, metadata = excluded.metadata,
			type = excluded.type, encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256, data = excluded.data,
			value_refs = excluded.value_refs`,
			r.ThreadID, r.Namespace, r.CheckpointID, nullStr(r.ParentID), time.UnixMicro(p.Micros).UTC(), string(r.ChannelVersions),
			nullBytes(p.MetaRaw), r.Type, p.CP.Enc, p.CP.Size, p.CP.SHA, data, nullText(refs))
	}
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

func nullText(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

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
	return s.enqueuePrepared(thread, func() error {
		if err := store.CheckLGWrites(thread, checkpointID, writes); err != nil {
			return err
		}
		if err := noNUL("threadId", thread, "namespace", ns, "checkpointId", checkpointID); err != nil {
			return err
		}
		pk := s.lgPacker()
		for i, w := range writes {
			f := fmt.Sprintf("writes[%d].", i)
			if err := noNUL("taskId", w.TaskID, f+"taskPath", w.TaskPath, f+"channel", w.Channel, f+"type", w.Type); err != nil {
				return err
			}
			if w.Staged == 0 {
				ps[i] = pk.Write(w.Data)
			}
		}
		return nil
	}, func(ctx context.Context, w *wtx) error {
		*n = 0
		staged := make([]lgStagedValue, len(writes))
		for i, wr := range writes {
			if wr.Staged != 0 {
				st, err := lgStaged(ctx, w, thread, wr.Staged, fmt.Sprintf("writes[%d].valueId", i))
				if err != nil {
					return err
				}
				staged[i] = st
			}
		}
		b := &pgx.Batch{}
		fc := queueFence(b, thread, token) // the claim first, in the same round trip
		var consumed []int64
		var old [][]byte // chunked values replaced (idx < 0): released once the new ones are counted
		inserted := make([]bool, len(writes))
		for i, wr := range writes {
			conflict := `DO NOTHING`
			if wr.Idx < 0 {
				conflict = `DO UPDATE SET task_path = excluded.task_path, channel = excluded.channel, type = excluded.type,
					encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256, data = excluded.data`
				b.Queue(`SELECT data FROM lg_writes WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = $3 AND task_id = $4
					AND idx = $5 AND encoding = 4`, thread, ns, checkpointID, wr.TaskID, wr.Idx).Query(func(rows pgx.Rows) error {
					for rows.Next() {
						var idx []byte
						if err := rows.Scan(&idx); err != nil {
							return err
						}
						old = append(old, idx)
					}
					return rows.Err()
				})
			}
			count := func(ct pgconn.CommandTag) error {
				if ct.RowsAffected() > 0 {
					*n++
					inserted[i] = true
				}
				return nil
			}
			if wr.Staged != 0 {
				b.Queue(`INSERT INTO lg_writes (thread_id, namespace, checkpoint_id, task_id, idx, task_path, channel, type,
					encoding, size, sha256, data) SELECT $1, $2, $3, $4, $5, $6, $7, type, encoding, size, sha256, data
					FROM lg_staged WHERE id = $8
					ON CONFLICT (thread_id, namespace, checkpoint_id, task_id, idx) `+conflict,
					thread, ns, checkpointID, wr.TaskID, wr.Idx, wr.TaskPath, wr.Channel, wr.Staged).Exec(count)
				consumed = append(consumed, wr.Staged)
				continue
			}
			p := ps[i]
			b.Queue(`INSERT INTO lg_writes (thread_id, namespace, checkpoint_id, task_id, idx, task_path, channel, type,
				encoding, size, sha256, data) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
				ON CONFLICT (thread_id, namespace, checkpoint_id, task_id, idx) `+conflict,
				thread, ns, checkpointID, wr.TaskID, wr.Idx, wr.TaskPath, wr.Channel, wr.Type, p.Enc, p.Size, p.SHA, p.Data).Exec(count)
		}
		if err := w.sendBatch(ctx, b); err != nil {
			return err
		}
		if err := fc.check(); err != nil {
			return err
		}
		// the new values' listings first, then the released ones: a value written again over
		// itself never reaches 0 on the way
		for i := range writes {
			switch {
			case !inserted[i]:
			case ps[i].CV != nil:
				if _, err := refChunked(ctx, w, ps[i].CV); err != nil {
					return err
				}
			case staged[i].index != nil:
				if err := refIndex(ctx, w, staged[i].index); err != nil {
					return err
				}
			}
		}
		if len(old) > 0 {
			if _, err := s.releaseIndexes(ctx, w, old); err != nil {
				return err
			}
		}
		if len(consumed) > 0 {
			if _, err := w.lgDeleteRows(ctx, `DELETE FROM lg_staged WHERE id = ANY($1)`, consumed); err != nil {
				return err
			}
		}
		for _, id := range consumed {
			s.staged.Delete(id)
		}
		return nil
	}), n
}

// LGStageValue stores one value of thread ahead of the put or putWrites that names it
// (lg/putValue). A value no put takes is collected once older than store.LGStagedTTL, and when
// this store closes.
func (s *Store) LGStageValue(ctx context.Context, thread, typ string, data []byte) (int64, error) {
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return 0, err
	}
	if err := noNUL("threadId", thread, "type", typ); err != nil {
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
	err := s.lgDo(ctx, "stage a LangGraph value", threadKeys(thread), func(ctx context.Context, w *wtx) error {
		if err := w.queryRow(ctx, `INSERT INTO lg_staged (thread_id, created_at, type, encoding, size, sha256, data)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, thread, s.now().UTC(), typ, int16(p.Enc), int64(p.Size), p.SHA, p.Data).Scan(&id); err != nil {
			return err
		}
		if p.CV != nil {
			_, err := refChunked(ctx, w, p.CV)
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

// lgItem is a tuple being read, with its row id (cursor ties) and value refs.
type lgItem struct {
	t     store.LGTuple
	rowid int64
	vs    []store.ChanVer
	refs  map[string]int
}

// key is the stored value the item reads for cv.
func (it *lgItem) key(cv store.ChanVer) blobKey {
	return blobKey{it.t.ThreadID, it.t.Namespace, cv.Channel, cv.Version, it.refs[cv.Channel]}
}

func (s *Store) scanTuple(rows pgx.Rows) (lgItem, error) {
	var it lgItem
	t := &it.t
	var parent *string
	var versions string
	var enc, size int64
	var meta, sha, data []byte
	var refs *string
	if err := rows.Scan(&it.rowid, &t.ThreadID, &t.Namespace, &t.CheckpointID, &parent, &t.CreatedAt, &versions, &meta,
		&t.Type, &enc, &size, &sha, &data, &refs); err != nil {
		return it, err
	}
	if refs != nil {
		var err error
		if it.refs, err = store.ParseValueRefs([]byte(*refs)); err != nil {
			return it, &store.CorruptError{CheckpointID: t.CheckpointID, Reason: "stored value refs do not parse: " + err.Error()}
		}
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

// blobKey names one stored value.
type blobKey struct {
	thread, ns, channel, version string
	variant                      int
}

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
	var bvar []int32
	seen := map[blobKey]bool{}
	var wt, wn, wc []string
	for i := range items {
		it := &items[i]
		wt, wn, wc = append(wt, it.t.ThreadID), append(wn, it.t.Namespace), append(wc, it.t.CheckpointID)
		for _, v := range it.vs {
			k := it.key(v)
			if !seen[k] {
				seen[k] = true
				bt, bn, bc, bv, bvar = append(bt, k.thread), append(bn, k.ns), append(bc, k.channel), append(bv, k.version), append(bvar, int32(k.variant))
			}
		}
	}
	b := &pgx.Batch{}
	heads := map[blobKey]blobHead{}
	if len(bt) > 0 {
		b.Queue(`SELECT b.id, b.thread_id, b.namespace, b.channel, b.version, b.variant, b.type, b.encoding, b.size, b.sha256
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[]) AS k(t, n, c, v, r)
			JOIN lg_blobs b ON b.thread_id = k.t AND b.namespace = k.n AND b.channel = k.c AND b.version = k.v AND b.variant = k.r`,
			bt, bn, bc, bv, bvar).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k blobKey
				var h blobHead
				if err := rows.Scan(&h.id, &k.thread, &k.ns, &k.channel, &k.version, &k.variant, &h.typ, &h.enc, &h.size, &h.sha); err != nil {
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
	for i := range items {
		it := &items[i]
		for _, v := range it.vs {
			k := it.key(v)
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
	for i := range items[:n] {
		it := &items[i]
		for _, v := range it.vs {
			k := it.key(v)
			h, ok := heads[k]
			if !ok || h.typ == store.LGEmptyType || values[k] != nil {
				continue
			}
			if raw, ok := s.blobs.Get(h.sha); ok && int64(len(raw)) == h.size {
				values[k] = &store.LGBlob{Channel: v.Channel, Version: v.Version, Variant: k.variant, Type: h.typ, Data: raw}
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
	for i := range items[:n] {
		it := &items[i]
		for _, v := range it.vs {
			k := it.key(v)
			if _, ok := owner[k]; !ok {
				owner[k] = it.t.CheckpointID
			}
		}
	}
	b = &pgx.Batch{}
	var ferr error
	chunked := map[int64][]byte{} // row id -> index of a chunked value
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
				if int(h.enc) == store.EncChunked {
					chunked[id] = data // reassembled after the batch
					continue
				}
				raw, err := store.Unpack(owner[k], store.LGValueWhat(k.channel, k.version, k.variant), data, int(h.enc), h.size, h.sha)
				if err != nil {
					ferr = err
					continue
				}
				s.blobs.Add(h.sha, raw)
				values[k] = &store.LGBlob{Channel: k.channel, Version: k.version, Variant: k.variant, Type: h.typ, Data: raw}
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
	for id, index := range chunked {
		k := need[id]
		h := heads[k]
		raw, err := s.lgOpen(ctx, tx.Query, owner[k], store.LGValueWhat(k.channel, k.version, k.variant), index, int(h.enc), h.size, h.sha)
		if err != nil {
			return 0, err
		}
		s.blobs.Add(h.sha, raw)
		values[k] = &store.LGBlob{Channel: k.channel, Version: k.version, Variant: k.variant, Type: h.typ, Data: raw}
		delete(need, id)
	}
	if len(need) > 0 { // a row seen by the first query is gone in the same snapshot
		return 0, fmt.Errorf("lg_blobs rows vanished during a read")
	}
	for i := range items[:n] {
		t := &items[i].t
		for _, v := range items[i].vs {
			if bl := values[items[i].key(v)]; bl != nil {
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
			if wr.Data, err = s.lgOpen(ctx, tx.Query, t.CheckpointID, fmt.Sprintf("write %s/%d", wr.TaskID, wr.Idx), data, int(h.enc), h.size, h.sha); err != nil {
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
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return nil, err
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

// lgListQuery builds the SQL of one lg/list page (cols selected), in (checkpoint_id DESC, id
// DESC) order.
func lgListQuery(cols string, f store.LGListFilter, meta *store.LGMetaQuery, cur *store.LGCursor, limit int) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if meta != nil {
		for _, k := range meta.Keys {
			if !k.Indexed {
				continue
			}
			cond := `EXISTS (SELECT 1 FROM lg_meta m WHERE m.key = ` + arg(k.Key) + ` AND m.vhash = ANY(` + arg(k.Hashes) +
				`::bytea[]) AND m.checkpoint_id = c.checkpoint_id AND m.ckpt = c.id)`
			if k.Missing {
				cond = `(` + cond + ` OR NOT EXISTS (SELECT 1 FROM lg_meta m WHERE m.ckpt = c.id AND m.key = ` + arg(k.Key) + `))`
			}
			where = append(where, cond)
		}
	}
	if f.HasThread() {
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
	q := `SELECT ` + cols + ` FROM lg_checkpoints c`
	if len(where) > 0 {
		q += ` WHERE ` + joinAnd(where)
	}
	q += ` ORDER BY c.checkpoint_id DESC, c.id DESC LIMIT ` + arg(limit)
	return q, args
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
	err = s.lgRead(ctx, "lg list", func(tx pgx.Tx) error {
		res = store.LGListResult{}
		var items []lgItem
		var err error
		if meta == nil || meta.Exact {
			q, args := lgListQuery(lgCols, f, meta, cur, page+1)
			items, err = s.scanItems(ctx, tx, q, args, page+1)
		} else {
			items, err = s.listMatched(ctx, tx, f, meta, cur, page+1)
		}
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

// listMatched reads up to want tuples whose metadata meta.Match accepts: candidates by the index
// (their id and metadata only), lgScanBatch at a time, then the matching rows.
func (s *Store) listMatched(ctx context.Context, tx pgx.Tx, f store.LGListFilter, meta *store.LGMetaQuery, cur *store.LGCursor, want int) ([]lgItem, error) {
	var ids []int64
	for len(ids) < want {
		q, args := lgListQuery(`c.id, c.checkpoint_id, c.metadata`, f, meta, cur, lgScanBatch)
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		n := 0
		for rows.Next() {
			var rowid int64
			var id string
			var md []byte
			if err := rows.Scan(&rowid, &id, &md); err != nil {
				rows.Close()
				return nil, err
			}
			n++
			cur = &store.LGCursor{ID: id, Key: rowid}
			if meta.Match(md) {
				ids = append(ids, rowid)
				if len(ids) == want {
					break
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if n < lgScanBatch {
			break
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	items, err := s.scanItems(ctx, tx, `SELECT `+lgCols+` FROM lg_checkpoints c WHERE c.id = ANY($1)
		ORDER BY c.checkpoint_id DESC, c.id DESC`, []any{ids}, len(ids))
	return items, err
}

// LGChannelHistory walks the parent chain of a checkpoint (checkpointID, or the latest)
// collecting, per channel, the ancestors' writes up to the nearest ancestor with a stored value.
func (s *Store) LGChannelHistory(ctx context.Context, thread, ns, checkpointID string, channels []string) (store.LGHistoryResult, error) {
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return store.LGHistoryResult{}, err
	}
	var res store.LGHistoryResult
	err := s.lgRead(ctx, "lg channel history", func(tx pgx.Tx) error {
		var err error
		res, err = store.ChannelHistory(&lgAncestry{s: s, ctx: ctx, tx: tx, thread: thread, ns: ns}, checkpointID, channels)
		return err
	})
	return res, err
}

// lgChainBatch is how many ancestors lgAncestry reads with one query.
const lgChainBatch = 64

// lgAncestry is one (thread, namespace) in a read transaction, for store.ChannelHistory: it
// reads the parent chain lgChainBatch checkpoints at a time, and their writes with one query per
// batch.
type lgAncestry struct {
	s          *Store
	ctx        context.Context
	tx         pgx.Tx
	thread, ns string
	nodes      map[string]*store.LGNode
	writes     map[string][]store.LGWrite // loaded: a key (maybe with no writes)
}

func (a *lgAncestry) Node(id string) (*store.LGNode, error) {
	if id == "" {
		return lgNode(a.ctx, a.tx, a.thread, a.ns, id)
	}
	if n, ok := a.nodes[id]; ok {
		return n, nil
	}
	rows, err := a.tx.Query(a.ctx, `WITH RECURSIVE chain(n, id, cid, parent, versions, refs, created) AS (
		SELECT 0, id, checkpoint_id, parent_id, channel_versions, value_refs, created_at FROM lg_checkpoints
			WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = $3
		UNION ALL
		SELECT chain.n + 1, c.id, c.checkpoint_id, c.parent_id, c.channel_versions, c.value_refs, c.created_at
			FROM chain JOIN lg_checkpoints c ON c.thread_id = $1 AND c.namespace = $2 AND c.checkpoint_id = chain.parent
			WHERE chain.n < $4)
		SELECT id, cid, parent, versions, refs, created FROM chain ORDER BY n`, a.thread, a.ns, id, lgChainBatch-1)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if a.nodes == nil {
		a.nodes = map[string]*store.LGNode{}
	}
	a.nodes[id] = nil
	for rows.Next() {
		var rowid int64
		var cid, versions string
		var parent, refs *string
		var created time.Time
		if err := rows.Scan(&rowid, &cid, &parent, &versions, &refs, &created); err != nil {
			return nil, err
		}
		if _, seen := a.nodes[cid]; seen && cid != id {
			break // a cycle
		}
		n, err := store.NewLGNode(rowid, cid, deref(parent), []byte(versions), refBytes(refs))
		if err != nil {
			return nil, err
		}
		n.Created = created.UTC()
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
	ids := []string{id}
	for cid, n := range a.nodes {
		if _, ok := a.writes[cid]; !ok && n != nil && cid != id && len(ids) < lgChainBatch {
			ids = append(ids, cid)
		}
	}
	if a.writes == nil {
		a.writes = map[string][]store.LGWrite{}
	}
	for _, cid := range ids {
		a.writes[cid] = nil
	}
	rows, err := a.tx.Query(a.ctx, `SELECT checkpoint_id, task_id, task_path, idx, channel, type, encoding, size, sha256, data
		FROM lg_writes WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = ANY($3)`, a.thread, a.ns, ids)
	if err != nil {
		return nil, err
	}
	type row struct {
		cid       string
		w         store.LGWrite
		enc, size int64
		sha, data []byte
	}
	var rs []row
	err = eachRow(rows, func(rows pgx.Rows) error {
		var r row
		if err := rows.Scan(&r.cid, &r.w.TaskID, &r.w.TaskPath, &r.w.Idx, &r.w.Channel, &r.w.Type, &r.enc, &r.size, &r.sha, &r.data); err != nil {
			return err
		}
		rs = append(rs, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, r := range rs { // a chunked value reassembled once the rows are closed
		w := r.w
		if w.Data, err = a.s.lgOpen(a.ctx, a.tx.Query, r.cid, fmt.Sprintf("write %s/%d", w.TaskID, w.Idx), r.data, int(r.enc), r.size, r.sha); err != nil {
			return nil, err
		}
		a.writes[r.cid] = append(a.writes[r.cid], w)
	}
	for _, cid := range ids {
		store.SortLGWrites(a.writes[cid])
	}
	return a.writes[id], nil
}

func (a *lgAncestry) Value(id, channel, version string, variant int) (*store.LGBlob, error) {
	var h blobHead
	err := a.tx.QueryRow(a.ctx, `SELECT id, type, encoding, size, sha256 FROM lg_blobs
		WHERE thread_id = $1 AND namespace = $2 AND channel = $3 AND version = $4 AND variant = $5`, a.thread, a.ns, channel, version, variant).
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
		return &store.LGBlob{Channel: channel, Version: version, Variant: variant, Type: h.typ, Data: raw}, nil
	}
	var data []byte
	if err := a.tx.QueryRow(a.ctx, `SELECT data FROM lg_blobs WHERE id = $1`, h.id).Scan(&data); err != nil {
		return nil, err
	}
	raw, err := a.s.lgOpen(a.ctx, a.tx.Query, id, store.LGValueWhat(channel, version, variant), data, int(h.enc), h.size, h.sha)
	if err != nil {
		return nil, err
	}
	a.s.blobs.Add(h.sha, raw)
	return &store.LGBlob{Channel: channel, Version: version, Variant: variant, Type: h.typ, Data: raw}, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// lgNode reads checkpointID ("": the latest) of (thread, ns); nil when there is none.
func lgNode(ctx context.Context, q querier, thread, ns, checkpointID string) (*store.LGNode, error) {
	var rowid int64
	var id string
	var parent, refs *string
	var versions string
	var created time.Time
	var row pgx.Row
	if checkpointID == "" {
		row = q.QueryRow(ctx, `SELECT id, checkpoint_id, parent_id, channel_versions, value_refs, created_at FROM lg_checkpoints
			WHERE thread_id = $1 AND namespace = $2 ORDER BY checkpoint_id DESC LIMIT 1`, thread, ns)
	} else {
		row = q.QueryRow(ctx, `SELECT id, checkpoint_id, parent_id, channel_versions, value_refs, created_at FROM lg_checkpoints
			WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = $3`, thread, ns, checkpointID)
	}
	err := row.Scan(&rowid, &id, &parent, &versions, &refs, &created)
	if noRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n, err := store.NewLGNode(rowid, id, deref(parent), []byte(versions), refBytes(refs))
	if err != nil {
		return nil, err
	}
	n.Created = created.UTC()
	return n, nil
}

func refBytes(p *string) []byte {
	if p == nil {
		return nil
	}
	return []byte(*p)
}
