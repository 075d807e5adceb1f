package store

// LangGraph channel storage (docs/protocol.md, "LangGraph channel storage"): checkpoints keyed by
// (thread, namespace, checkpoint id) whose channel values live in lg_blobs, one row per
// (thread, namespace, channel, version), so that a put stores only the channels that changed.
// This family is separate from the checkpoints table: no seq, no retention, ids unique per
// (thread, namespace) only.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/s2"
)

// LGEmptyType is the blob type meaning "this channel has this version but no value".
const LGEmptyType = "empty"

// Limits of the LangGraph family.
const (
	LGMaxListLimit  = 100000
	maxLGThreadID   = maxWorkflowIDBytes
	maxLGCheckpoint = maxCheckpointIDBytes
)

// Page caps of lg/list (variables for tests).
var (
	lgPageBytes  int64 = 16 << 20 // soft cap of one page's bytes
	lgPageTuples       = 1000     // and of its tuples
)

// LGBlob is one channel value (or, in writes, a write's value) with its serializer tag.
type LGBlob struct {
	Channel string
	Version string // canonical JSON text of the version (see CanonicalVersion)
	Type    string
	Data    []byte
}

// LGWrite is one pending write of a task.
type LGWrite struct {
	TaskID   string
	TaskPath string
	Idx      int64
	Channel  string
	Type     string
	Data     []byte
}

// LGPutRequest is one LangGraph checkpoint to store with its new channel blobs.
type LGPutRequest struct {
	ThreadID        string
	Namespace       string
	CheckpointID    string
	ParentID        string
	Type            string // serializer tag of Checkpoint
	Checkpoint      []byte
	ChannelVersions json.RawMessage // JSON object channel -> version (string or number)
	Metadata        json.RawMessage // JSON object or nil
	Blobs           []LGBlob
}

// LGTuple is a stored LangGraph checkpoint with the blobs its channel versions name and its
// pending writes. Blobs with the same key share one Data slice within one call's results.
type LGTuple struct {
	ThreadID        string
	Namespace       string
	CheckpointID    string
	ParentID        string
	CreatedAt       time.Time
	Type            string
	Checkpoint      []byte
	ChannelVersions json.RawMessage
	Metadata        json.RawMessage
	Blobs           []LGBlob // in ChannelVersions order; empty and missing blobs left out
	Writes          []LGWrite
}

// LGListFilter selects LangGraph checkpoints. Nil pointers and empty strings mean "any".
type LGListFilter struct {
	ThreadID     string
	Namespace    *string
	CheckpointID string
	Before       string
	Metadata     map[string]json.RawMessage
	Limit        int    // 0: no limit
	Cursor       string // from a previous page
}

// LGListResult is one page of LGList.
type LGListResult struct {
	Tuples []LGTuple
	Cursor string // non-empty: more may follow
}

// LGHistory is one channel's part of LGChannelHistory.
type LGHistory struct {
	Writes []LGWrite // oldest first
	Seed   *LGBlob   // nil: none found
}

// LGHistoryResult answers LGChannelHistory.
type LGHistoryResult struct {
	Channels map[string]*LGHistory
	Visited  []string // ancestors walked, nearest first
}

// CanonicalVersion returns the canonical JSON text of a channel version (a JSON string or number).
func CanonicalVersion(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '"' && raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return "", errors.New("must be a string or a number")
	}
	return canonicalJSON(raw)
}

type chanVer struct {
	channel string
	key     string // canonical version
}

// parseVersions reads a channelVersions object keeping its key order.
func parseVersions(raw []byte) ([]chanVer, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []chanVer
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		ch, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		key, err := CanonicalVersion(v)
		if err != nil {
			return nil, fmt.Errorf("channel %q: version %s", ch, err.Error())
		}
		if seen[ch] {
			return nil, fmt.Errorf("channel %q appears twice", ch)
		}
		seen[ch] = true
		out = append(out, chanVer{ch, key})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the object")
	}
	return out, nil
}

// metaRows returns the (key, vhash) index rows of a metadata object.
func metaRows(field string, raw []byte) ([][2]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, invalid(field, "not a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, invalid(field, "not a JSON object: %v", err)
	}
	out := make([][2]any, 0, len(m))
	for k, v := range m {
		h, err := metaHash(v)
		if err != nil {
			return nil, invalid(field, "key %q: %v", k, err)
		}
		out = append(out, [2]any{k, h})
	}
	sort.Slice(out, func(a, b int) bool { return out[a][0].(string) < out[b][0].(string) })
	return out, nil
}

func metaHash(v json.RawMessage) ([]byte, error) {
	c, err := canonicalJSON(v)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(c))
	return sum[:16], nil
}

// lgEncS2 marks LangGraph byte strings stored S2-compressed (klauspost/compress/s2, block
// format). LangGraph blobs are read back far more often than states and in bulk (lg/list), so
// they use S2, which decodes several times faster than zstd at a somewhat lower ratio. The
// value is outside the codec's encodings on purpose: lg rows never go through codec.decode.
const lgEncS2 = 16

// packed is a byte string ready to store: sha is the SHA-256 of data as stored (compressed or
// not), checked before anything else reads it.
type packed struct {
	enc  int
	size int
	sha  []byte
	data []byte
}

func (s *Store) pack(b []byte) packed {
	p := packed{enc: encRaw, size: len(b), data: b}
	if threshold := s.opts.CompressThreshold; threshold >= 0 && len(b) > threshold {
		if c := s2.Encode(nil, b); len(c) <= len(b)-len(b)/8 {
			p.enc, p.data = lgEncS2, c
		}
	}
	if p.data == nil {
		p.data = []byte{}
	}
	sum := sha256.Sum256(p.data)
	p.sha = sum[:]
	return p
}

// unpack verifies a stored byte string and returns its raw bytes; what names it in errors.
func (s *Store) unpack(checkpointID, what string, data []byte, enc int, size int64, sha []byte) ([]byte, error) {
	corrupt := func(format string, args ...any) error {
		return &CorruptError{CheckpointID: checkpointID, Reason: what + ": " + fmt.Sprintf(format, args...)}
	}
	if sum := sha256.Sum256(data); !bytes.Equal(sum[:], sha) {
		return nil, corrupt("SHA-256 mismatch")
	}
	switch enc {
	case encRaw:
		if int64(len(data)) != size {
			return nil, corrupt("stored %d bytes, expected %d", len(data), size)
		}
		if data == nil {
			data = []byte{}
		}
		return data, nil
	case lgEncS2:
		n, err := s2.DecodedLen(data)
		if err != nil || int64(n) != size {
			return nil, corrupt("does not decode: length %d, expected %d (%v)", n, size, err)
		}
		out, err := s2.Decode(make([]byte, n), data)
		if err != nil {
			return nil, corrupt("does not decode: %v", err)
		}
		return out, nil
	}
	return nil, corrupt("unknown encoding %d", enc)
}

func checkLGIDs(thread, checkpointID string) error {
	switch {
	case thread == "":
		return invalid("threadId", "required")
	case len(thread) > maxLGThreadID:
		return invalid("threadId", "longer than %d bytes", maxLGThreadID)
	case checkpointID == "":
		return invalid("checkpointId", "required")
	case len(checkpointID) > maxLGCheckpoint:
		return invalid("checkpointId", "longer than %d bytes", maxLGCheckpoint)
	}
	return nil
}

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

// LGPending is an accepted LangGraph mutation; Wait returns once it is committed.
type LGPending struct {
	j   *job
	err error
}

// Wait blocks until the mutation is committed (or failed) or ctx ends (the mutation still commits).
func (p *LGPending) Wait(ctx context.Context) error {
	if p.err != nil {
		return p.err
	}
	select {
	case <-p.j.done:
	case <-ctx.Done():
		select {
		case <-p.j.done:
		default:
			return ctx.Err()
		}
	}
	return p.j.err
}

// lgPut is a prepared LGPutRequest.
type lgPut struct {
	req     LGPutRequest
	meta    [][2]any
	metaRaw any
	blobs   []packed
	cp      packed
	micros  int64
}

func (s *Store) prepareLGPut(req LGPutRequest) (*lgPut, error) {
	if err := checkLGIDs(req.ThreadID, req.CheckpointID); err != nil {
		return nil, err
	}
	if req.Type == "" {
		return nil, invalid("checkpoint.type", "required")
	}
	if len(bytes.TrimSpace(req.ChannelVersions)) == 0 {
		return nil, invalid("channelVersions", "required (a JSON object, {} when empty)")
	}
	if _, err := parseVersions(req.ChannelVersions); err != nil {
		return nil, invalid("channelVersions", "%v", err)
	}
	p := &lgPut{req: req, micros: s.now().UnixMicro()}
	var err error
	if p.meta, err = metaRows("metadata", req.Metadata); err != nil {
		return nil, err
	}
	if m := bytes.TrimSpace(req.Metadata); len(m) > 0 && !bytes.Equal(m, []byte("null")) {
		p.metaRaw = []byte(m)
	}
	p.blobs = make([]packed, len(req.Blobs))
	for i, b := range req.Blobs {
		field := fmt.Sprintf("blobs[%d]", i)
		switch {
		case b.Channel == "":
			return nil, invalid(field+".channel", "required")
		case b.Version == "":
			return nil, invalid(field+".version", "required")
		case b.Type == "":
			return nil, invalid(field+".type", "required")
		case b.Type == LGEmptyType && len(b.Data) > 0:
			return nil, invalid(field+".length", "must be 0 for type empty")
		}
		p.blobs[i] = s.pack(b.Data)
		if b.Type != LGEmptyType && s.blobs.keeps(len(b.Data)) {
			// a copy: b.Data may be part of a larger request buffer
			s.blobs.add(p.blobs[i].sha, bytes.Clone(b.Data))
		}
	}
	p.cp = s.pack(req.Checkpoint)
	return p, nil
}

// enqueuePrepared queues a mutation whose preparation runs concurrently: the writer waits for
// prepare before running fn, later mutations stay behind it.
func (s *Store) enqueuePrepared(prepare func() error, fn func(ctx context.Context, w *wtx) error) *LGPending {
	var perr error
	j := &job{ctx: context.Background(), ready: make(chan struct{}), done: make(chan struct{})}
	j.fn = func(ctx context.Context, w *wtx) error {
		if perr != nil {
			return perr
		}
		return fn(ctx, w)
	}
	if !s.push(j) {
		return &LGPending{err: ErrClosed}
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
	return &LGPending{j: j}
}

// LGPut queues a LangGraph checkpoint with its new blobs; validation, hashing and compression run
// concurrently with earlier mutations. blobsStored is valid after Wait.
func (s *Store) LGPut(req LGPutRequest) (pending *LGPending, blobsStored *int) {
	n := new(int)
	var p *lgPut
	return s.enqueuePrepared(func() (err error) {
		p, err = s.prepareLGPut(req)
		return err
	}, func(ctx context.Context, w *wtx) error {
		*n = 0
		r := &p.req
		if _, err := s.lgInsertCheckpoint(ctx, w, p); err != nil {
			return err
		}
		for i, b := range r.Blobs {
			pb := p.blobs[i]
			res, err := w.lgExec(ctx, `INSERT INTO lg_blobs(thread_id, namespace, channel, version, type, encoding, size, sha256, data)
				VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(thread_id, namespace, channel, version) DO NOTHING`,
				r.ThreadID, r.Namespace, b.Channel, b.Version, b.Type, pb.enc, pb.size, pb.sha, pb.data)
			if err != nil {
				return err
			}
			if k, _ := res.RowsAffected(); k > 0 {
				*n++
				s.walPending.Add(int64(len(pb.data)))
			}
		}
		return nil
	}), n
}

// lgInsertCheckpoint writes (or overwrites) the checkpoint row of p and its metadata index rows,
// in the writer's transaction; it returns the row's id.
func (s *Store) lgInsertCheckpoint(ctx context.Context, w *wtx, p *lgPut) (int64, error) {
	r := &p.req
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
	if err := upsert.QueryRowContext(ctx, r.ThreadID, r.Namespace, r.CheckpointID, nullStr(r.ParentID), p.micros,
		string(r.ChannelVersions), p.metaRaw, r.Type, p.cp.enc, p.cp.size, p.cp.sha, p.cp.data).Scan(&rowid); err != nil {
		return 0, err
	}
	if _, err := w.lgExec(ctx, `DELETE FROM lg_meta WHERE ckpt = ?`, rowid); err != nil {
		return 0, err
	}
	for _, kv := range p.meta {
		if _, err := w.lgExec(ctx, `INSERT INTO lg_meta(key, vhash, checkpoint_id, ckpt) VALUES (?,?,?,?)`,
			kv[0], kv[1], r.CheckpointID, rowid); err != nil {
			return 0, err
		}
	}
	s.walPending.Add(int64(len(p.cp.data)))
	return rowid, nil
}

// LGPutWrites queues pending writes of one task. idx >= 0: stored once; idx < 0: replaced.
// stored is valid after Wait.
func (s *Store) LGPutWrites(thread, ns, checkpointID string, writes []LGWrite) (pending *LGPending, stored *int) {
	n := new(int)
	ps := make([]packed, len(writes))
	return s.enqueuePrepared(func() error {
		if err := checkLGIDs(thread, checkpointID); err != nil {
			return err
		}
		for i, w := range writes {
			field := fmt.Sprintf("writes[%d]", i)
			switch {
			case w.TaskID == "":
				return invalid("taskId", "required")
			case w.Channel == "":
				return invalid(field+".channel", "required")
			case w.Type == "":
				return invalid(field+".type", "required")
			}
			ps[i] = s.pack(w.Data)
		}
		return nil
	}, func(ctx context.Context, w *wtx) error {
		*n = 0
		for i, wr := range writes {
			verb := "INSERT OR IGNORE"
			if wr.Idx < 0 {
				verb = "INSERT OR REPLACE"
			}
			p := ps[i]
			res, err := w.lgExec(ctx, verb+` INTO lg_writes(thread_id, namespace, checkpoint_id, task_id, idx, task_path,
				channel, type, encoding, size, sha256, data) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
				thread, ns, checkpointID, wr.TaskID, wr.Idx, wr.TaskPath, wr.Channel, wr.Type, p.enc, p.size, p.sha, p.data)
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
	tx    *sql.Tx
	blobs map[[4]string]*LGBlob // nil value: missing or empty
	bytes int64                 // distinct bytes read so far
}

func (s *Store) newLGReader(ctx context.Context, tx *sql.Tx) *lgReader {
	return &lgReader{s: s, ctx: ctx, tx: tx, blobs: map[[4]string]*LGBlob{}}
}

// blob returns the stored non-empty blob of a key, or nil.
func (r *lgReader) blob(thread, ns, checkpointID, channel, version string) (*LGBlob, error) {
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
func (r *lgReader) prefetch(thread, ns, checkpointID string, vs []chanVer) error {
	var want []chanVer
	seen := map[[2]string]bool{}
	for _, v := range vs {
		k := [2]string{v.channel, v.key}
		if _, done := r.blobs[[4]string{thread, ns, v.channel, v.key}]; done || seen[k] {
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
			args = append(args, v.channel, v.key)
			r.blobs[[4]string{thread, ns, v.channel, v.key}] = nil // missing unless a row says otherwise
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
		if n.typ == LGEmptyType {
			continue
		}
		if raw, ok := r.s.blobs.get(n.sha); ok && int64(len(raw)) == n.size {
			r.blobs[[4]string{thread, ns, n.channel, n.version}] = &LGBlob{Channel: n.channel, Version: n.version, Type: n.typ, Data: raw}
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
		raw, err := r.s.unpack(checkpointID, fmt.Sprintf("blob %s@%s", n.channel, n.version), data, int(n.enc), n.size, n.sha)
		if err != nil {
			return err
		}
		r.s.blobs.add(n.sha, raw)
		r.blobs[[4]string{thread, ns, n.channel, n.version}] = &LGBlob{Channel: n.channel, Version: n.version, Type: n.typ, Data: raw}
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

func (r *lgReader) writes(thread, ns, checkpointID string) ([]LGWrite, error) {
	rows, err := r.s.query(r.ctx, r.tx, `SELECT task_id, task_path, idx, channel, type, encoding, size, sha256, data
		FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?`, thread, ns, checkpointID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LGWrite
	for rows.Next() {
		var w LGWrite
		var enc, size int64
		var sha, data []byte
		if err := rows.Scan(&w.TaskID, &w.TaskPath, &w.Idx, &w.Channel, &w.Type, &enc, &size, &sha, &data); err != nil {
			return nil, err
		}
		if w.Data, err = r.s.unpack(checkpointID, fmt.Sprintf("write %s/%d", w.TaskID, w.Idx), data, int(enc), size, sha); err != nil {
			return nil, err
		}
		r.bytes += int64(len(w.Data))
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sortWrites(out)
	return out, nil
}

func sortWrites(ws []LGWrite) {
	sort.SliceStable(ws, func(a, b int) bool {
		x, y := ws[a], ws[b]
		if x.TaskPath != y.TaskPath {
			return x.TaskPath < y.TaskPath
		}
		if x.TaskID != y.TaskID {
			return x.TaskID < y.TaskID
		}
		return x.Idx < y.Idx
	})
}

// scanTuple reads one lgCols row (without blobs and writes).
func (r *lgReader) scanTuple(sc interface{ Scan(...any) error }) (LGTuple, int64, error) {
	var t LGTuple
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
	if t.Checkpoint, err = r.s.unpack(t.CheckpointID, "checkpoint", data, int(enc), size, sha); err != nil {
		return t, 0, err
	}
	r.bytes += int64(len(t.Checkpoint))
	return t, rowid, nil
}

// fill adds a tuple's blobs and writes.
func (r *lgReader) fill(t *LGTuple) error {
	vs, err := parseVersions(t.ChannelVersions)
	if err != nil {
		return &CorruptError{CheckpointID: t.CheckpointID, Reason: "stored channel versions do not parse: " + err.Error()}
	}
	if err := r.prefetch(t.ThreadID, t.Namespace, t.CheckpointID, vs); err != nil {
		return err
	}
	for _, v := range vs {
		b, err := r.blob(t.ThreadID, t.Namespace, t.CheckpointID, v.channel, v.key)
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
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		return f(s.newLGReader(ctx, tx))
	})
	if err != nil {
		var ce *CorruptError
		var ie *InvalidError
		if errors.As(err, &ce) || errors.As(err, &ie) || errors.Is(err, ErrNotFound) {
			return err
		}
		return wrapDB(op, err)
	}
	return nil
}

// LGGet returns one checkpoint of (thread, ns) with its blobs and writes: checkpointID, or the
// latest (highest id) when empty. nil when there is none.
func (s *Store) LGGet(ctx context.Context, thread, ns, checkpointID string) (*LGTuple, error) {
	if thread == "" {
		return nil, invalid("threadId", "required")
	}
	var out *LGTuple
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

type lgCursor struct {
	id    string
	rowid int64
}

func encodeLGCursor(id string, rowid int64) string {
	b, _ := json.Marshal([]any{id, rowid})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeLGCursor(c string) (*lgCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, invalid("cursor", "not a cursor from lg/list")
	}
	var v []json.RawMessage
	var out lgCursor
	if json.Unmarshal(b, &v) != nil || len(v) != 2 || json.Unmarshal(v[0], &out.id) != nil || json.Unmarshal(v[1], &out.rowid) != nil {
		return nil, invalid("cursor", "not a cursor from lg/list")
	}
	return &out, nil
}

// lgListQuery builds the SQL of one lg/list page. Every shape walks an index in
// (checkpoint_id DESC, rowid DESC) order, so no temporary b-tree sorts the result.
func lgListQuery(f LGListFilter, cur *lgCursor, limit int) (string, []any, error) {
	var where []string
	var args []any
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	type kv struct {
		k string
		h []byte
	}
	var meta []kv
	for k, raw := range f.Metadata {
		h, err := metaHash(raw)
		if err != nil {
			return "", nil, invalid("metadata", "key %q: %v", k, err)
		}
		meta = append(meta, kv{k, h})
	}
	sort.Slice(meta, func(a, b int) bool { return meta[a].k < meta[b].k })
	existsMeta := func(ms []kv) {
		for _, m := range ms {
			add(`EXISTS (SELECT 1 FROM lg_meta m WHERE m.key = ? AND m.vhash = ? AND m.checkpoint_id = c.checkpoint_id AND m.ckpt = c.id)`, m.k, m.h)
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
		add(`m0.key = ?`, meta[0].k)
		add(`m0.vhash = ?`, meta[0].h)
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
		add(idCol+` <= ?`, cur.id)
		add(`(`+idCol+` < ? OR `+rowCol+` < ?)`, cur.id, cur.rowid)
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
func (s *Store) LGList(ctx context.Context, f LGListFilter) (LGListResult, error) {
	if f.Limit < 0 || f.Limit > LGMaxListLimit {
		return LGListResult{}, invalid("limit", "must be between 1 and %d", LGMaxListLimit)
	}
	var cur *lgCursor
	if f.Cursor != "" {
		var err error
		if cur, err = decodeLGCursor(f.Cursor); err != nil {
			return LGListResult{}, err
		}
	}
	page := lgPageTuples
	if f.Limit > 0 && f.Limit < page {
		page = f.Limit
	}
	q, args, err := lgListQuery(f, cur, page+1)
	if err != nil {
		return LGListResult{}, err
	}
	var res LGListResult
	err = s.lgRead(ctx, "lg list", func(r *lgReader) error {
		res = LGListResult{}
		rows, err := r.s.query(ctx, r.tx, q, args...)
		if err != nil {
			return err
		}
		type item struct {
			t     LGTuple
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
			res.Cursor = encodeLGCursor(last.t.CheckpointID, last.rowid)
		}
		return nil
	})
	return res, err
}

// lgNode is one checkpoint as the ancestor walks see it.
type lgNode struct {
	rowid    int64
	id       string
	parent   string
	versions []chanVer
}

func lgNodeByID(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, thread, ns, checkpointID string) (*lgNode, error) {
	var n lgNode
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
	err := row.Scan(&n.rowid, &n.id, &parent, &versions)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n.parent = parent.String
	if n.versions, err = parseVersions([]byte(versions)); err != nil {
		return nil, &CorruptError{CheckpointID: n.id, Reason: "stored channel versions do not parse: " + err.Error()}
	}
	return &n, nil
}

func (n *lgNode) version(channel string) (string, bool) {
	for _, v := range n.versions {
		if v.channel == channel {
			return v.key, true
		}
	}
	return "", false
}

// LGChannelHistory walks the parent chain of a checkpoint (checkpointID, or the latest) collecting,
// per channel, the ancestors' writes up to and including the nearest ancestor with a stored value
// (the seed). See docs/protocol.md, lg/channelHistory.
func (s *Store) LGChannelHistory(ctx context.Context, thread, ns, checkpointID string, channels []string) (LGHistoryResult, error) {
	if thread == "" {
		return LGHistoryResult{}, invalid("threadId", "required")
	}
	var res LGHistoryResult
	err := s.lgRead(ctx, "lg channel history", func(r *lgReader) error {
		res = LGHistoryResult{Channels: map[string]*LGHistory{}, Visited: []string{}}
		open := map[string]bool{}
		perAncestor := map[string][][]LGWrite{}
		for _, ch := range channels {
			res.Channels[ch] = &LGHistory{}
			open[ch] = true
		}
		if len(open) == 0 {
			return nil
		}
		target, err := lgNodeByID(ctx, r.tx, thread, ns, checkpointID)
		if err != nil || target == nil {
			return err
		}
		seen := map[string]bool{target.id: true}
		next := target.parent
		for len(open) > 0 && next != "" && !seen[next] {
			seen[next] = true
			n, err := lgNodeByID(ctx, r.tx, thread, ns, next)
			if err != nil {
				return err
			}
			if n == nil {
				break
			}
			res.Visited = append(res.Visited, n.id)
			ws, err := r.writes(thread, ns, n.id)
			if err != nil {
				return err
			}
			byCh := map[string][]LGWrite{}
			for _, w := range ws {
				if open[w.Channel] {
					byCh[w.Channel] = append(byCh[w.Channel], w)
				}
			}
			for ch := range open {
				perAncestor[ch] = append(perAncestor[ch], byCh[ch])
				v, ok := n.version(ch)
				if !ok {
					continue
				}
				b, err := r.blob(thread, ns, n.id, ch, v)
				if err != nil {
					return err
				}
				if b != nil {
					seed := *b
					res.Channels[ch].Seed = &seed
					delete(open, ch)
				}
			}
			next = n.parent
		}
		for ch, lists := range perAncestor {
			h := res.Channels[ch]
			for i := len(lists) - 1; i >= 0; i-- {
				h.Writes = append(h.Writes, lists[i]...)
			}
		}
		return nil
	})
	return res, err
}

// ---------------------------------------------------------------------------------------------
// Deletion, copy, prune

// lgDelete removes checkpoints (by rowid) with their metadata rows and pending writes.
func lgDeleteRows(ctx context.Context, w *wtx, thread, ns string, nodes []*lgNode) error {
	for _, n := range nodes {
		if _, err := w.exec(ctx, `DELETE FROM lg_meta WHERE ckpt = ?`, n.rowid); err != nil {
			return err
		}
		if _, err := w.exec(ctx, `DELETE FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id = ?`, thread, ns, n.id); err != nil {
			return err
		}
		if _, err := w.exec(ctx, `DELETE FROM lg_checkpoints WHERE id = ?`, n.rowid); err != nil {
			return err
		}
	}
	return nil
}

// lgNodes reads every checkpoint of (thread, ns).
func lgNodes(ctx context.Context, w *wtx, thread, ns string) ([]*lgNode, error) {
	rows, err := w.query(ctx, `SELECT id, checkpoint_id, parent_id, channel_versions FROM lg_checkpoints
		WHERE thread_id = ? AND namespace = ? ORDER BY checkpoint_id DESC, id DESC`, thread, ns)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*lgNode
	for rows.Next() {
		var n lgNode
		var parent sql.NullString
		var versions string
		if err := rows.Scan(&n.rowid, &n.id, &parent, &versions); err != nil {
			return nil, err
		}
		n.parent = parent.String
		if n.versions, err = parseVersions([]byte(versions)); err != nil {
			return nil, &CorruptError{CheckpointID: n.id, Reason: "stored channel versions do not parse: " + err.Error()}
		}
		out = append(out, &n)
	}
	return out, rows.Err()
}

// lgGCBlobs deletes the blobs of (thread, ns) that none of keep refers to.
func lgGCBlobs(ctx context.Context, w *wtx, thread, ns string, keep []*lgNode) error {
	if len(keep) == 0 {
		_, err := w.exec(ctx, `DELETE FROM lg_blobs WHERE thread_id = ? AND namespace = ?`, thread, ns)
		return err
	}
	ref := map[[2]string]bool{}
	for _, n := range keep {
		for _, v := range n.versions {
			ref[[2]string{v.channel, v.key}] = true
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
		var ie *InvalidError
		var ce *CorruptError
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
	switch {
	case src == "":
		return 0, invalid("sourceThreadId", "required")
	case dst == "":
		return 0, invalid("targetThreadId", "required")
	case len(dst) > maxLGThreadID:
		return 0, invalid("targetThreadId", "longer than %d bytes", maxLGThreadID)
	case src == dst:
		return 0, invalid("targetThreadId", "must differ from sourceThreadId")
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
	switch strategy {
	case "", "keep_latest", "delete":
	default:
		return 0, invalid("strategy", "%q is not keep_latest or delete", strategy)
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
	byID := map[string]*lgNode{}
	for _, n := range nodes {
		if _, dup := byID[n.id]; !dup {
			byID[n.id] = n
		}
	}
	hasValue := func(ch, v string) (bool, error) {
		var typ string
		err := w.queryRow(ctx, `SELECT type FROM lg_blobs WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ?`,
			thread, ns, ch, v).Scan(&typ)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil && typ != LGEmptyType, err
	}
	latest := nodes[0]
	keep := map[int64]bool{latest.rowid: true}
	// A channel without a value at the latest checkpoint (empty or missing blob, or not
	// versioned at all while ancestors wrote to it) is rebuilt by replaying ancestor writes from
	// the nearest ancestor with a value: keep that part of the chain.
	valueAtLatest := map[string]bool{}
	open := map[string]bool{}
	for _, v := range latest.versions {
		ok, err := hasValue(v.channel, v.key)
		if err != nil {
			return 0, err
		}
		if ok {
			valueAtLatest[v.channel] = true
		} else {
			open[v.channel] = true
		}
	}
	closed := map[string]bool{}
	for cur := byID[latest.parent]; cur != nil && !keep[cur.rowid]; cur = byID[cur.parent] {
		written, err := lgWrittenChannels(ctx, w, thread, ns, cur.id)
		if err != nil {
			return 0, err
		}
		for _, ch := range written {
			if !valueAtLatest[ch] && !closed[ch] {
				open[ch] = true
			}
		}
		if len(open) == 0 {
			break
		}
		keep[cur.rowid] = true
		for ch := range open {
			if v, ok := cur.version(ch); ok {
				has, err := hasValue(ch, v)
				if err != nil {
					return 0, err
				}
				if has {
					delete(open, ch)
					closed[ch] = true
				}
			}
		}
	}
	var drop, kept []*lgNode
	for _, n := range nodes {
		if keep[n.rowid] {
			kept = append(kept, n)
		} else {
			drop = append(drop, n)
		}
	}
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

// LGDeleteForRuns deletes every LangGraph checkpoint whose metadata.run_id is one of runIDs, with
// its writes and the blobs nothing left refers to. It returns the number deleted.
func (s *Store) LGDeleteForRuns(ctx context.Context, runIDs []string) (int, error) {
	hashes := make([][]byte, 0, len(runIDs))
	seen := map[string]bool{}
	for _, id := range runIDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		raw, _ := json.Marshal(id)
		h, err := metaHash(raw)
		if err != nil {
			return 0, err
		}
		hashes = append(hashes, h)
	}
	n := 0
	err := s.lgWait(ctx, "delete for runs", func(ctx context.Context, w *wtx) error {
		n = 0
		type pair struct{ thread, ns string }
		affected := map[pair][]*lgNode{}
		var order []pair
		for _, h := range hashes {
			rows, err := w.query(ctx, `SELECT c.id, c.thread_id, c.namespace, c.checkpoint_id FROM lg_meta m
				CROSS JOIN lg_checkpoints c WHERE m.key = 'run_id' AND m.vhash = ? AND c.id = m.ckpt`, h)
			if err != nil {
				return err
			}
			for rows.Next() {
				var nd lgNode
				var p pair
				if err := rows.Scan(&nd.rowid, &p.thread, &p.ns, &nd.id); err != nil {
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
