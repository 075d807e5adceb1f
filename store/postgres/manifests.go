package postgres

// Source manifests recorded with checkpoints (store.ManifestRecord), stored as SQLite stores
// them (store/sqlite/manifests.go): a row per checkpoint (drift_manifests: header, root, file
// count and the ids of its chunks) over two shared, reference-counted tables, drift_chunks and
// drift_entries. Counts change by upserts and updates that lock their rows, so that processes
// saving and deleting manifests sharing chunks at once keep them right; rows whose count
// reaches 0 are deleted in the same transaction.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

const keyLen = store.ManifestKeyLen

// counted is a key with how often it is listed, and its row's bytes.
type counted struct {
	key  []byte
	n    int64
	data []byte
}

// countKeys counts the keyLen-byte keys of each list, by key, in key order (a stable lock order).
func countKeys(lists [][]byte, data func(list, i int) []byte) []counted {
	m := map[string]*counted{}
	for li, l := range lists {
		for i := 0; i+keyLen <= len(l); i += keyLen {
			k := l[i : i+keyLen]
			c := m[string(k)]
			if c == nil {
				c = &counted{key: k}
				if data != nil {
					c.data = data(li, i/keyLen)
				}
				m[string(k)] = c
			}
			c.n++
		}
	}
	out := make([]counted, 0, len(m))
	for _, c := range m {
		out = append(out, *c)
	}
	sort.Slice(out, func(a, b int) bool { return bytes.Compare(out[a].key, out[b].key) < 0 })
	return out
}

func columns(cs []counted) (keys [][]byte, ns []int64, data [][]byte) {
	for _, c := range cs {
		keys = append(keys, c.key)
		ns = append(ns, c.n)
		data = append(data, c.data)
	}
	return
}

// insertManifest records m as the manifest of checkpoint rowid, inside the writer's transaction.
func insertManifest(ctx context.Context, w *wtx, rowid int64, m *store.ManifestRecord) error {
	ids := m.ChunkIDs()
	w.queue(`INSERT INTO drift_manifests (ckpt, root, files, header, chunks) VALUES ($1, $2, $3, $4, $5)`,
		rowid, m.Root, m.Files, m.Header, ids)
	if len(m.Chunks) == 0 {
		return w.flush(ctx)
	}
	byID := map[string]*store.ManifestChunk{}
	for i := range m.Chunks {
		byID[string(m.Chunks[i].ID)] = &m.Chunks[i]
	}
	chunks := countKeys([][]byte{ids}, func(_, i int) []byte { return m.Chunks[i].Keys })
	cids, cns, ckeys := columns(chunks)
	rows, err := w.query(ctx, `INSERT INTO drift_chunks AS c (id, refs, keys)
		SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bytea[])
		ON CONFLICT (id) DO UPDATE SET refs = c.refs + excluded.refs RETURNING c.id, c.refs`, cids, cns, ckeys)
	if err != nil {
		return err
	}
	want := map[string]int64{}
	for _, c := range chunks {
		want[string(c.key)] = c.n
	}
	var fresh []*store.ManifestChunk
	for rows.Next() {
		var id []byte
		var refs int64
		if err := rows.Scan(&id, &refs); err != nil {
			rows.Close()
			return err
		}
		if refs == want[string(id)] { // a new row: its entries are not counted yet
			fresh = append(fresh, byID[string(id)])
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(fresh) == 0 {
		return nil
	}
	lists := make([][]byte, len(fresh))
	for i, c := range fresh {
		lists[i] = c.Keys
	}
	entries := countKeys(lists, func(li, i int) []byte { return fresh[li].Entries[i] })
	keys, ns, data := columns(entries)
	_, err = w.exec(ctx, `INSERT INTO drift_entries AS e (key, refs, data)
		SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bytea[])
		ON CONFLICT (key) DO UPDATE SET refs = e.refs + excluded.refs`, keys, ns, data)
	return err
}

// releaseChunks counts down the chunks the deleted manifests listed (their concatenated ids),
// deletes those no manifest lists any more, and counts down (and deletes) their entries.
func releaseChunks(ctx context.Context, w *wtx, lists [][]byte) error {
	ids, ns, _ := columns(countKeys(lists, nil))
	rows, err := w.query(ctx, `UPDATE drift_chunks AS c SET refs = c.refs - x.n
		FROM unnest($1::bytea[], $2::bigint[]) AS x(id, n) WHERE c.id = x.id
		RETURNING CASE WHEN c.refs <= 0 THEN c.keys END`, ids, ns)
	if err != nil {
		return err
	}
	var gone [][]byte // key lists of the chunks no manifest lists any more
	for rows.Next() {
		var keys []byte
		if err := rows.Scan(&keys); err != nil {
			rows.Close()
			return err
		}
		if keys != nil {
			gone = append(gone, keys)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(gone) == 0 {
		return nil
	}
	keys, kns, _ := columns(countKeys(gone, nil))
	w.queue(`DELETE FROM drift_chunks WHERE refs <= 0`)
	w.queue(`UPDATE drift_entries AS e SET refs = e.refs - x.n FROM unnest($1::bytea[], $2::bigint[]) AS x(key, n)
		WHERE e.key = x.key`, keys, kns)
	_, err = w.exec(ctx, `DELETE FROM drift_entries WHERE refs <= 0`)
	return err
}

const manifestRefQuery = `SELECT c.id, c.checkpoint_id, c.workflow_id, c.namespace, c.seq, c.phase, c.step,
	c.step_name, m.root, m.files FROM checkpoints c LEFT JOIN drift_manifests m ON m.ckpt = c.id WHERE `

func (s *Store) manifestRef(ctx context.Context, op, where string, args ...any) (store.ManifestRef, error) {
	var r store.ManifestRef
	var stepName, root *string
	var files *int64
	var phase string
	err := s.readRow(ctx, manifestRefQuery+where, args, &r.Key, &r.CheckpointID, &r.WorkflowID, &r.Namespace, &r.Seq,
		&phase, &r.Step, &stepName, &root, &files)
	if noRows(err) {
		return store.ManifestRef{}, store.ErrNotFound
	}
	if err != nil {
		return store.ManifestRef{}, wrapDB(op, err)
	}
	r.Phase = store.Phase(phase)
	if stepName != nil {
		r.StepName = *stepName
	}
	if root != nil {
		r.HasManifest, r.Root = true, *root
		r.Files = int(*files)
	}
	return r, nil
}

// CheckpointManifestRef describes checkpoint checkpointID; ErrNotFound if it does not exist.
func (s *Store) CheckpointManifestRef(ctx context.Context, checkpointID string) (store.ManifestRef, error) {
	ref, err := s.manifestRef(ctx, fmt.Sprintf("checkpoint %q", checkpointID), `c.checkpoint_id = $1`, checkpointID)
	if err == store.ErrNotFound {
		return ref, fmt.Errorf("checkpoint %q: %w", checkpointID, store.ErrNotFound)
	}
	return ref, err
}

// LatestManifestRef describes the latest (highest seq) checkpoint of (workflowID, namespace),
// with or without a manifest; ErrNotFound if there is none.
func (s *Store) LatestManifestRef(ctx context.Context, workflowID, namespace string) (store.ManifestRef, error) {
	ref, err := s.manifestRef(ctx, fmt.Sprintf("latest checkpoint of workflow %q", workflowID),
		`c.workflow_id = $1 AND c.namespace = $2 ORDER BY c.seq DESC LIMIT 1`, workflowID, namespace)
	if err == store.ErrNotFound {
		return ref, fmt.Errorf("workflow %q namespace %q has no checkpoints: %w", workflowID, namespace, store.ErrNotFound)
	}
	return ref, err
}

// LatestSourcesRef describes workflowID's most recent checkpoint (any namespace) with a manifest
// recorded for root; ErrNotFound if there is none.
func (s *Store) LatestSourcesRef(ctx context.Context, workflowID, root string) (store.ManifestRef, error) {
	ref, err := s.manifestRef(ctx, "latest manifest of workflow "+workflowID,
		`c.id = (SELECT c.id FROM checkpoints c JOIN drift_manifests m ON m.ckpt = c.id
			WHERE c.workflow_id = $1 AND m.root = $2 ORDER BY c.seq DESC LIMIT 1)`, workflowID, root)
	if err == store.ErrNotFound {
		return ref, fmt.Errorf("workflow %q has no manifest of %s: %w", workflowID, root, store.ErrNotFound)
	}
	return ref, err
}

// Manifest returns the manifest recorded with ref's checkpoint, complete (ErrNotFound if none);
// rows missing give a *CorruptError.
func (s *Store) Manifest(ctx context.Context, ref store.ManifestRef) (store.ManifestRecord, error) {
	var m store.ManifestRecord
	err := s.readTx(ctx, func(tx pgx.Tx) (err error) {
		m, err = loadManifest(ctx, tx, ref.Key)
		return err
	})
	if err != nil {
		if ce := asCorrupt(err); ce != nil {
			ce.CheckpointID, ce.WorkflowID = ref.CheckpointID, ref.WorkflowID
			return store.ManifestRecord{}, ce
		}
		if err == store.ErrNotFound {
			return store.ManifestRecord{}, fmt.Errorf("no sources recorded for checkpoint %q: %w", ref.CheckpointID, store.ErrNotFound)
		}
		return store.ManifestRecord{}, wrapDB("load manifest", err)
	}
	return m, nil
}

// loadManifest reads the manifest of checkpoint rowid in tx; ErrNotFound if it has none, a
// *CorruptError if a chunk or entry row it lists is missing.
func loadManifest(ctx context.Context, tx pgx.Tx, rowid int64) (store.ManifestRecord, error) {
	var m store.ManifestRecord
	var ids []byte
	err := tx.QueryRow(ctx, `SELECT root, files, header, chunks FROM drift_manifests WHERE ckpt = $1`, rowid).
		Scan(&m.Root, &m.Files, &m.Header, &ids)
	if noRows(err) {
		return m, store.ErrNotFound
	}
	if err != nil {
		return m, err
	}
	if len(ids)%keyLen != 0 {
		return m, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: chunk list of %d bytes", len(ids))}
	}
	n := len(ids) / keyLen
	if n == 0 {
		return m, nil
	}
	list := splitKeys(ids)
	rows, err := tx.Query(ctx, `SELECT k.i, c.keys FROM unnest($1::bytea[]) WITH ORDINALITY AS k(id, i)
		JOIN drift_chunks c ON c.id = k.id ORDER BY k.i`, list)
	if err != nil {
		return m, err
	}
	m.Chunks = make([]store.ManifestChunk, 0, n)
	for rows.Next() {
		var i int
		var keys []byte
		if err := rows.Scan(&i, &keys); err != nil {
			rows.Close()
			return m, err
		}
		next := len(m.Chunks)
		if i != next+1 || len(keys)%keyLen != 0 {
			rows.Close()
			return m, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: chunk %d of %d is missing or damaged", next, n)}
		}
		m.Chunks = append(m.Chunks, store.ManifestChunk{ID: list[next], Keys: keys, Entries: make([][]byte, 0, len(keys)/keyLen)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return m, err
	}
	if len(m.Chunks) != n {
		return m, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: %d of %d chunks missing", n-len(m.Chunks), n)}
	}
	var all []byte
	for _, c := range m.Chunks {
		all = append(all, c.Keys...)
	}
	total := len(all) / keyLen
	if total == 0 {
		return m, nil
	}
	rows, err = tx.Query(ctx, `SELECT k.i, e.data FROM unnest($1::bytea[]) WITH ORDINALITY AS k(key, i)
		JOIN drift_entries e ON e.key = k.key ORDER BY k.i`, splitKeys(all))
	if err != nil {
		return m, err
	}
	defer rows.Close()
	next, ci := 0, 0
	for rows.Next() {
		var i int
		var data []byte
		if err := rows.Scan(&i, &data); err != nil {
			return m, err
		}
		if i != next+1 {
			return m, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: entry %d of %d is missing", next, total)}
		}
		for len(m.Chunks[ci].Entries) == len(m.Chunks[ci].Keys)/keyLen {
			ci++
		}
		m.Chunks[ci].Entries = append(m.Chunks[ci].Entries, data)
		next++
	}
	if err := rows.Err(); err != nil {
		return m, err
	}
	if next != total {
		return m, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: %d of %d entries missing", total-next, total)}
	}
	return m, nil
}

func splitKeys(b []byte) [][]byte {
	out := make([][]byte, 0, len(b)/keyLen)
	for i := 0; i+keyLen <= len(b); i += keyLen {
		out = append(out, b[i:i+keyLen])
	}
	return out
}

// ScanManifests reads every stored manifest row from one snapshot: each distinct entry, each
// distinct chunk, then each checkpoint's manifest by workflow and seq.
func (s *Store) ScanManifests(ctx context.Context, scan store.ManifestScan) error {
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		if err := scanRows(ctx, tx, `SELECT key, data FROM drift_entries`, func(rows pgx.Rows) error {
			var key, data []byte
			if err := rows.Scan(&key, &data); err != nil {
				return err
			}
			return scan.Entry(key, data)
		}); err != nil {
			return err
		}
		if err := scanRows(ctx, tx, `SELECT id, keys FROM drift_chunks`, func(rows pgx.Rows) error {
			var id, keys []byte
			if err := rows.Scan(&id, &keys); err != nil {
				return err
			}
			return scan.Chunk(id, keys)
		}); err != nil {
			return err
		}
		return scanRows(ctx, tx, `SELECT c.checkpoint_id, c.workflow_id, c.seq, m.header, m.chunks
			FROM drift_manifests m JOIN checkpoints c ON c.id = m.ckpt ORDER BY c.workflow_id, c.seq`, func(rows pgx.Rows) error {
			var m store.StoredManifest
			if err := rows.Scan(&m.CheckpointID, &m.WorkflowID, &m.Seq, &m.Header, &m.ChunkIDs); err != nil {
				return err
			}
			return scan.Manifest(m)
		})
	})
	if err != nil {
		return wrapDB("verify source manifests", err)
	}
	return nil
}

// scanRows runs q in tx and calls each for every row.
func scanRows(ctx context.Context, tx pgx.Tx, q string, each func(rows pgx.Rows) error, args ...any) error {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return rows.Err()
}

// WorkflowSources returns the sources spec configured for workflowID (the "sources" member of
// its config), or nil.
func (s *Store) WorkflowSources(ctx context.Context, workflowID string) (json.RawMessage, error) {
	var cfg *string
	err := s.readRow(ctx, `SELECT config FROM workflows WHERE workflow_id = $1`, []any{workflowID}, &cfg)
	if noRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrapDB("workflow "+workflowID, err)
	}
	return s.sourcesOf(workflowID, cfg), nil
}

// sourcesOf returns the sources held in workflowID's stored config (store.SourcesOfConfig); a
// config that does not decode holds none, with a warning.
func (s *Store) sourcesOf(workflowID string, cfg *string) json.RawMessage {
	if cfg == nil {
		return nil
	}
	src, err := store.SourcesOfConfig([]byte(*cfg))
	if err != nil {
		s.log.Warn("ckptd store: workflow config does not decode, ignoring it", "workflowId", workflowID, "err", err)
	}
	return src
}

// SetWorkflowSources stores spec (JSON) as workflowID's sources, creating the workflow if needed;
// a nil spec removes them. Other members of the config are kept.
func (s *Store) SetWorkflowSources(ctx context.Context, workflowID string, spec json.RawMessage) error {
	if workflowID == "" {
		return invalid("workflowId", "required")
	}
	if err := noNUL("workflowId", workflowID); err != nil {
		return err
	}
	if spec != nil && !json.Valid(spec) {
		return invalid("sources", "not valid JSON")
	}
	err := s.do(ctx, []int64{wfKey(workflowID)}, func(ctx context.Context, w *wtx) error {
		var cfg *string
		err := w.queryRow(ctx, `SELECT config FROM workflows WHERE workflow_id = $1`, workflowID).Scan(&cfg)
		exists := err == nil
		if err != nil && !noRows(err) {
			return err
		}
		if spec == nil && !exists {
			return nil
		}
		members := map[string]json.RawMessage{}
		if cfg != nil {
			var m map[string]json.RawMessage
			if json.Unmarshal([]byte(*cfg), &m) == nil && m != nil {
				members = m
			} else if spec == nil {
				return nil // not an object: nothing to remove (SQLite leaves it as it is too)
			}
		}
		if spec == nil {
			if _, ok := members["sources"]; !ok {
				return nil
			}
			delete(members, "sources")
		} else {
			var compact bytes.Buffer
			if err := json.Compact(&compact, spec); err != nil {
				return invalid("sources", "not valid JSON")
			}
			members["sources"] = compact.Bytes()
		}
		out, err := json.Marshal(members)
		if err != nil {
			return err
		}
		now := s.now()
		_, err = w.exec(ctx, `INSERT INTO workflows AS w (workflow_id, next_seq, created_at, updated_at, config)
			VALUES ($1, 1, $2, $2, $3) ON CONFLICT (workflow_id) DO UPDATE SET config = $3`, workflowID, now, string(out))
		return err
	})
	if err != nil {
		return wrapDB("configure "+workflowID, err)
	}
	return nil
}
