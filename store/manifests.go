package store

// Source fingerprints (drift manifests) recorded with checkpoints.
//
// A manifest is stored as a row per checkpoint (drift_manifests: drift.MarshalManifest of the
// manifest without its entries, plus the list of its chunks) over two shared tables:
//
//   - drift_entries: each distinct entry (drift.EncodeEntry), once, keyed by drift.EntryKey;
//   - drift_chunks: the manifest's ordered entry keys cut into runs ("chunks", about 32 keys,
//     cut after paths whose hash says so, so an edit, addition or removal changes only the
//     chunk around it), each distinct run stored once.
//
// A file whose entry is identical to the previous checkpoint's costs no new row: the unchanged
// chunks are shared, and the one chunk that changed lists the same keys but one. Chunks count
// the manifests listing them, entries the chunks listing them, so a save and a deletion touch
// one row per chunk plus one per entry of a chunk that appears or goes, not one per file: a
// 15,000-file tree with one edit costs ~470 chunk counters and ~32 entry rows per save. Deleting
// a checkpoint (delete, prune, retention, complete, idle expiry: all go through
// deleteCheckpoint) drops its manifest, then the chunks no manifest lists, then the entries no
// chunk lists.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/zeebo/blake3"

	"github.com/ckptd/ckptd/drift"
)

const (
	entryKeyLen   = 16  // length of drift.EntryKey
	chunkIDLen    = 16  // length of a drift_chunks.id
	chunkCutMask  = 31  // a chunk ends after a path whose FNV-1a hash has these bits clear (~32 keys)
	maxChunkFiles = 256 // and after this many keys at most
)

// keysCTE enumerates the 16-byte keys of the blob ?1 holding ?2 of them:
// k(i) with key = substr(?1, i*16+1, 16).
const keysCTE = `WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i + 1 < ?2) `

// EncodedManifest is a drift manifest prepared for storage by EncodeManifest, off the writer.
type EncodedManifest struct {
	m      *drift.Manifest
	header []byte
	keys   [][]byte // EntryKey of each entry
	data   [][]byte // EncodeEntry of each entry
	chunks []manifestChunk
	ids    []byte // the chunk ids, concatenated
}

type manifestChunk struct {
	id     []byte
	lo, hi int // entries [lo, hi)
}

// Manifest is the manifest em encodes (shared: do not modify).
func (em *EncodedManifest) Manifest() *drift.Manifest { return em.m }

// Files is the number of entries (files and symlinks) of the manifest.
func (em *EncodedManifest) Files() int { return len(em.keys) }

// Root is the manifest's absolute sources root.
func (em *EncodedManifest) Root() string { return em.m.Spec.Root }

func (em *EncodedManifest) chunkKeys(c manifestChunk) []byte {
	b := make([]byte, 0, (c.hi-c.lo)*entryKeyLen)
	for _, k := range em.keys[c.lo:c.hi] {
		b = append(b, k...)
	}
	return b
}

// EncodeManifest prepares m for SaveRequest.Manifest. prev, optional, is an earlier encoding of
// the same tree (say the previous save's): entries equal to one of its entries reuse its
// encoding instead of being encoded and hashed again.
func EncodeManifest(m *drift.Manifest, prev *EncodedManifest) (*EncodedManifest, error) {
	if m == nil {
		return nil, errors.New("encode manifest: nil manifest")
	}
	h := *m
	h.Entries = nil
	header, err := drift.MarshalManifest(&h)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	n := len(m.Entries)
	em := &EncodedManifest{m: m, header: header, keys: make([][]byte, n), data: make([][]byte, n)}
	var old []drift.Entry
	if prev != nil && prev.m.Spec.Root == m.Spec.Root {
		old = prev.m.Entries
	}
	j, lo := 0, 0
	for i := range m.Entries {
		e := &m.Entries[i]
		// both lists are sorted by path: a merge walk finds prev's entry of the same path
		for j < len(old) && old[j].Path < e.Path {
			j++
		}
		if j < len(old) && sameEntry(&old[j], e) {
			em.keys[i], em.data[i] = prev.keys[j], prev.data[j]
		} else {
			em.data[i] = drift.EncodeEntry(*e)
			sum := blake3.Sum256(em.data[i]) // = drift.EntryKey(*e), without encoding it twice
			em.keys[i] = sum[:entryKeyLen:entryKeyLen]
		}
		if i+1 == n || i+1-lo >= maxChunkFiles || cutAfter(e.Path) {
			em.chunks = append(em.chunks, manifestChunk{lo: lo, hi: i + 1})
			lo = i + 1
		}
	}
	em.ids = make([]byte, 0, len(em.chunks)*chunkIDLen)
	for k := range em.chunks {
		sum := blake3.Sum256(em.chunkKeys(em.chunks[k]))
		em.chunks[k].id = sum[:chunkIDLen:chunkIDLen]
		em.ids = append(em.ids, em.chunks[k].id...)
	}
	return em, nil
}

// cutAfter says whether a chunk ends after the entry of path p: a function of the path alone,
// so chunk boundaries stay put when entries around them change.
func cutAfter(p string) bool {
	h := fnv.New64a()
	_, _ = h.Write([]byte(p))
	return h.Sum64()&chunkCutMask == 0
}

// sameEntry reports whether two entries encode identically (hence have the same EntryKey).
func sameEntry(a, b *drift.Entry) bool {
	return a.Path == b.Path && a.Type == b.Type && a.Size == b.Size && a.MtimeNs == b.MtimeNs &&
		a.CtimeNs == b.CtimeNs && a.Ino == b.Ino && a.Mode == b.Mode && a.Target == b.Target &&
		string(a.Hash) == string(b.Hash)
}

// insertManifest records em as the manifest of checkpoint rowid, inside the writer's transaction.
func (s *Store) insertManifest(ctx context.Context, w *wtx, rowid int64, em *EncodedManifest) error {
	if _, err := w.exec(ctx, `INSERT INTO drift_manifests(ckpt, root, files, header, chunks) VALUES (?, ?, ?, ?, ?)`,
		rowid, em.Root(), em.Files(), em.header, em.ids); err != nil {
		return err
	}
	if len(em.chunks) == 0 {
		return nil
	}
	written := int64(len(em.header) + len(em.ids))
	upChunk, err := w.conn.PrepareContext(ctx, `INSERT INTO drift_chunks(id, refs, keys) VALUES (?, 1, ?)
		ON CONFLICT(id) DO UPDATE SET refs = refs + 1 RETURNING refs`)
	if err != nil {
		return err
	}
	defer upChunk.Close()
	var upEntry *sql.Stmt
	for _, c := range em.chunks {
		keys := em.chunkKeys(c)
		var refs int64
		if err := upChunk.QueryRowContext(ctx, c.id, keys).Scan(&refs); err != nil {
			return err
		}
		if refs != 1 {
			continue // an existing chunk: its entries are counted already
		}
		written += int64(len(keys))
		if upEntry == nil {
			if upEntry, err = w.conn.PrepareContext(ctx, `INSERT INTO drift_entries(key, refs, data) VALUES (?, 1, ?)
				ON CONFLICT(key) DO UPDATE SET refs = refs + 1`); err != nil {
				return err
			}
			defer upEntry.Close()
		}
		for i := c.lo; i < c.hi; i++ {
			if _, err := upEntry.ExecContext(ctx, em.keys[i], em.data[i]); err != nil {
				return err
			}
			written += int64(len(em.data[i]))
		}
	}
	s.walPending.Add(written)
	return nil
}

// deleteManifest drops the manifest of checkpoint rowid (if any), then the chunks no manifest
// lists and the entries no chunk lists, inside the writer's transaction.
func (s *Store) deleteManifest(ctx context.Context, w *wtx, rowid int64) error {
	var ids []byte
	err := w.queryRow(ctx, `DELETE FROM drift_manifests WHERE ckpt = ? RETURNING chunks`, rowid).Scan(&ids)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	down, err := w.conn.PrepareContext(ctx, `UPDATE drift_chunks SET refs = refs - 1 WHERE id = ? RETURNING refs, keys`)
	if err != nil {
		return err
	}
	defer down.Close()
	for off := 0; off+chunkIDLen <= len(ids); off += chunkIDLen {
		id := ids[off : off+chunkIDLen]
		var refs int64
		var keys []byte
		err := down.QueryRowContext(ctx, id).Scan(&refs, &keys)
		if errors.Is(err, sql.ErrNoRows) {
			continue // not there: nothing to count down
		}
		if err != nil {
			return err
		}
		if refs > 0 {
			continue
		}
		if _, err := w.exec(ctx, `DELETE FROM drift_chunks WHERE id = ?`, id); err != nil {
			return err
		}
		n := len(keys) / entryKeyLen
		if n == 0 {
			continue
		}
		if _, err := w.exec(ctx, keysCTE+`UPDATE drift_entries SET refs = refs - 1
			WHERE key IN (SELECT substr(?1, i * 16 + 1, 16) FROM k)`, keys, n); err != nil {
			return err
		}
		if _, err := w.exec(ctx, keysCTE+`DELETE FROM drift_entries
			WHERE key IN (SELECT substr(?1, i * 16 + 1, 16) FROM k) AND refs <= 0`, keys, n); err != nil {
			return err
		}
	}
	return nil
}

// ManifestRef is a checkpoint as the drift methods need it: who it is, and whether (and for
// which root) a manifest was recorded with it.
type ManifestRef struct {
	Rowid        int64 // internal id: stable for the checkpoint's lifetime, never reused
	CheckpointID string
	WorkflowID   string
	Namespace    string
	Seq          int64
	Phase        Phase
	Step         int64
	StepName     string
	HasManifest  bool
	Root         string // HasManifest: the absolute sources root
	Files        int    // HasManifest: entries recorded
}

const manifestRefQuery = `SELECT c.id, c.checkpoint_id, c.workflow_id, c.namespace, c.seq, c.phase, c.step,
	c.step_name, m.root, m.files FROM checkpoints c LEFT JOIN drift_manifests m ON m.ckpt = c.id WHERE `

func scanManifestRef(rows *sql.Rows) (ManifestRef, error) {
	var r ManifestRef
	var stepName, root sql.NullString
	var files sql.NullInt64
	var phase string
	if err := rows.Scan(&r.Rowid, &r.CheckpointID, &r.WorkflowID, &r.Namespace, &r.Seq, &phase, &r.Step,
		&stepName, &root, &files); err != nil {
		return r, err
	}
	r.Phase = Phase(phase)
	r.StepName = stepName.String
	r.HasManifest = root.Valid
	r.Root = root.String
	r.Files = int(files.Int64)
	return r, nil
}

func (s *Store) manifestRef(ctx context.Context, op, where string, args ...any) (ManifestRef, error) {
	var ref ManifestRef
	found := false
	err := s.readManifestTx(ctx, op, func(tx *sql.Tx) error {
		rows, err := s.query(ctx, tx, manifestRefQuery+where, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		found = rows.Next()
		if found {
			if ref, err = scanManifestRef(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err != nil {
		return ManifestRef{}, err
	}
	if !found {
		return ManifestRef{}, ErrNotFound
	}
	return ref, nil
}

// CheckpointManifestRef describes checkpoint checkpointID; ErrNotFound if it does not exist.
func (s *Store) CheckpointManifestRef(ctx context.Context, checkpointID string) (ManifestRef, error) {
	ref, err := s.manifestRef(ctx, fmt.Sprintf("checkpoint %q", checkpointID), `c.checkpoint_id = ?`, checkpointID)
	if errors.Is(err, ErrNotFound) {
		return ref, fmt.Errorf("checkpoint %q: %w", checkpointID, ErrNotFound)
	}
	return ref, err
}

// LatestManifestRef describes the latest (highest seq) checkpoint of (workflowID, namespace),
// with or without a manifest; ErrNotFound if there is none.
func (s *Store) LatestManifestRef(ctx context.Context, workflowID, namespace string) (ManifestRef, error) {
	ref, err := s.manifestRef(ctx, fmt.Sprintf("latest checkpoint of workflow %q", workflowID),
		`c.workflow_id = ? AND c.namespace = ? ORDER BY c.seq DESC LIMIT 1`, workflowID, namespace)
	if errors.Is(err, ErrNotFound) {
		return ref, fmt.Errorf("workflow %q namespace %q has no checkpoints: %w", workflowID, namespace, ErrNotFound)
	}
	return ref, err
}

// Manifest returns the manifest recorded with ref's checkpoint (ErrNotFound if none). Manifests
// are immutable: the result is shared (with a small in-memory cache) and must not be modified.
// A manifest whose rows do not decode or are incomplete gives a *CorruptError.
func (s *Store) Manifest(ctx context.Context, ref ManifestRef) (*drift.Manifest, error) {
	if m := s.manifests.get(ref.Rowid); m != nil {
		return m, nil
	}
	m, err := s.loadManifest(ctx, ref.Rowid)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.CheckpointID, ce.WorkflowID = ref.CheckpointID, ref.WorkflowID
		}
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("no sources recorded for checkpoint %q: %w", ref.CheckpointID, ErrNotFound)
		}
		return nil, err
	}
	s.manifests.put(ref.Rowid, m)
	return m, nil
}

// LatestWorkflowManifest returns the manifest of workflowID's most recent checkpoint (any
// namespace) recorded for root, or nil: the base of an incremental fingerprint.
func (s *Store) LatestWorkflowManifest(ctx context.Context, workflowID, root string) (*drift.Manifest, error) {
	var rowid int64
	found := false
	err := s.readManifestTx(ctx, "latest manifest of workflow "+workflowID, func(tx *sql.Tx) error {
		rows, err := s.query(ctx, tx, `SELECT c.id FROM checkpoints c JOIN drift_manifests m ON m.ckpt = c.id
				WHERE c.workflow_id = ? AND m.root = ? ORDER BY c.seq DESC LIMIT 1`, workflowID, root)
		if err != nil {
			return err
		}
		defer rows.Close()
		if found = rows.Next(); found {
			if err := rows.Scan(&rowid); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err != nil || !found {
		return nil, err
	}
	if m := s.manifests.get(rowid); m != nil {
		return m, nil
	}
	m, err := s.loadManifest(ctx, rowid)
	if errors.Is(err, ErrNotFound) { // deleted meanwhile
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.manifests.put(rowid, m)
	return m, nil
}

// loadManifest reads and decodes the manifest of checkpoint rowid in one read transaction.
func (s *Store) loadManifest(ctx context.Context, rowid int64) (*drift.Manifest, error) {
	var m *drift.Manifest
	err := s.readManifestTx(ctx, "load manifest", func(tx *sql.Tx) (err error) {
		m, err = s.loadManifestTx(ctx, tx, rowid)
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// loadManifestTx reads and decodes the manifest of checkpoint rowid in tx; ErrNotFound if the
// checkpoint has none.
func (s *Store) loadManifestTx(ctx context.Context, tx *sql.Tx, rowid int64) (*drift.Manifest, error) {
	var header, ids []byte
	rows, err := s.query(ctx, tx, `SELECT header, chunks FROM drift_manifests WHERE ckpt = ?`, rowid)
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, ErrNotFound
	}
	err = rows.Scan(&header, &ids)
	rows.Close()
	if err != nil {
		return nil, err
	}
	hm, err := drift.UnmarshalManifest(header)
	if err != nil {
		return nil, &CorruptError{Reason: "stored source manifest does not decode: " + err.Error()}
	}
	keys, err := s.chunkKeys(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	n := len(keys) / entryKeyLen
	hm.Entries = make([]drift.Entry, 0, n)
	if n > 0 {
		rows, err := s.query(ctx, tx, keysCTE+`SELECT k.i, e.data FROM k
				JOIN drift_entries e ON e.key = substr(?1, k.i * 16 + 1, 16) ORDER BY k.i`, keys, n)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		next := 0
		for rows.Next() {
			var i int
			var data []byte
			if err := rows.Scan(&i, &data); err != nil {
				return nil, err
			}
			if i != next {
				return nil, &CorruptError{Reason: fmt.Sprintf("stored source manifest: entry %d of %d is missing", next, n)}
			}
			// entries are content-addressed too: changed bytes would read as a changed file
			if sum := blake3.Sum256(data); string(sum[:entryKeyLen]) != string(keys[i*entryKeyLen:(i+1)*entryKeyLen]) {
				return nil, &CorruptError{Reason: fmt.Sprintf("stored source manifest: entry %d of %d is damaged (BLAKE3 mismatch)", i, n)}
			}
			e, err := drift.DecodeEntry(data)
			if err != nil {
				return nil, &CorruptError{Reason: "stored source manifest: " + err.Error()}
			}
			hm.Entries = append(hm.Entries, e)
			next++
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if next != n {
			return nil, &CorruptError{Reason: fmt.Sprintf("stored source manifest: %d of %d entries missing", n-next, n)}
		}
	}
	return hm, nil
}

// chunkKeys concatenates the entry keys of the chunks ids, in order.
func (s *Store) chunkKeys(ctx context.Context, tx *sql.Tx, ids []byte) ([]byte, error) {
	if len(ids)%chunkIDLen != 0 {
		return nil, &CorruptError{Reason: fmt.Sprintf("stored source manifest: chunk list of %d bytes", len(ids))}
	}
	n := len(ids) / chunkIDLen
	if n == 0 {
		return nil, nil
	}
	rows, err := s.query(ctx, tx, keysCTE+`SELECT k.i, c.keys FROM k
		JOIN drift_chunks c ON c.id = substr(?1, k.i * 16 + 1, 16) ORDER BY k.i`, ids, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []byte
	next := 0
	for rows.Next() {
		var i int
		var b []byte
		if err := rows.Scan(&i, &b); err != nil {
			return nil, err
		}
		// The id is the chunk's content address: a chunk that lost or changed keys would
		// otherwise load as a manifest with files silently missing (reported as added).
		id := ids[next*chunkIDLen : (next+1)*chunkIDLen]
		if sum := blake3.Sum256(b); i != next || len(b)%entryKeyLen != 0 || string(sum[:chunkIDLen]) != string(id) {
			return nil, &CorruptError{Reason: fmt.Sprintf("stored source manifest: chunk %d of %d is missing or damaged", next, n)}
		}
		keys = append(keys, b...)
		next++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if next != n {
		return nil, &CorruptError{Reason: fmt.Sprintf("stored source manifest: %d of %d chunks missing", n-next, n)}
	}
	return keys, nil
}

// readManifestTx runs f in a read transaction (retried while the database is busy); errors other
// than *CorruptError and ErrNotFound are wrapped with op.
func (s *Store) readManifestTx(ctx context.Context, op string, f func(tx *sql.Tx) error) error {
	err := s.readTx(ctx, f)
	var ce *CorruptError
	if err == nil || errors.As(err, &ce) || errors.Is(err, ErrNotFound) {
		return err
	}
	return wrapDB(op, err)
}

// manifestCache keeps the last few decoded manifests by checkpoint rowid (rowids are never
// reused and manifests never change, so entries cannot go stale).
type manifestCache struct {
	mu    sync.Mutex
	order []int64 // most recently used last
	byID  map[int64]*drift.Manifest
}

const manifestCacheSize = 4

func (c *manifestCache) get(rowid int64) *drift.Manifest {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byID[rowid]
	if m != nil {
		if i := slices.Index(c.order, rowid); i >= 0 {
			c.order = append(slices.Delete(c.order, i, i+1), rowid)
		}
	}
	return m
}

func (c *manifestCache) put(rowid int64, m *drift.Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[int64]*drift.Manifest{}
	}
	if _, ok := c.byID[rowid]; ok {
		return
	}
	c.byID[rowid] = m
	c.order = append(c.order, rowid)
	for len(c.order) > manifestCacheSize {
		delete(c.byID, c.order[0])
		c.order = c.order[1:]
	}
}

// WorkflowSources returns the sources spec configured for workflowID with SetWorkflowSources
// (the "sources" member of workflows.config), or nil.
func (s *Store) WorkflowSources(ctx context.Context, workflowID string) (json.RawMessage, error) {
	var cfg sql.NullString
	err := s.retry(ctx, func() error {
		return s.rdb.QueryRowContext(ctx, `SELECT config FROM workflows WHERE workflow_id = ?`, workflowID).Scan(&cfg)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, wrapDB("workflow "+workflowID, err)
	}
	if !cfg.Valid || cfg.String == "" {
		return nil, nil
	}
	var c struct {
		Sources json.RawMessage `json:"sources"`
	}
	if err := json.Unmarshal([]byte(cfg.String), &c); err != nil {
		s.log.Warn("ckptd store: workflow config does not decode, ignoring it", "workflowId", workflowID, "err", err)
		return nil, nil
	}
	if len(c.Sources) == 0 || string(c.Sources) == "null" {
		return nil, nil
	}
	return c.Sources, nil
}

// SetWorkflowSources stores spec (a JSON object) as workflowID's sources, creating the workflow
// if needed; a nil spec removes them. Other members of workflows.config are kept.
func (s *Store) SetWorkflowSources(ctx context.Context, workflowID string, spec json.RawMessage) error {
	if workflowID == "" {
		return invalid("workflowId", "required")
	}
	if spec != nil && !json.Valid(spec) {
		return invalid("sources", "not valid JSON")
	}
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		if spec == nil {
			_, err := w.exec(ctx, `UPDATE workflows SET config = json_remove(config, '$.sources')
				WHERE workflow_id = ? AND CASE WHEN json_valid(config) THEN json_type(config) = 'object' ELSE 0 END`, workflowID)
			return err
		}
		now := s.now().UnixMicro()
		_, err := w.exec(ctx, `INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at, config)
			VALUES (?1, 1, ?2, ?2, json_object('sources', json(?3)))
			ON CONFLICT(workflow_id) DO UPDATE SET config = json_set(
				CASE WHEN json_valid(config) THEN CASE WHEN json_type(config) = 'object' THEN config ELSE '{}' END ELSE '{}' END,
				'$.sources', json(?3))`, workflowID, now, string(spec))
		return err
	})
	if err != nil {
		return wrapDB("configure "+workflowID, err)
	}
	return nil
}
