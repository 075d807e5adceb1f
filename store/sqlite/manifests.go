package sqlite

// Source manifests recorded with checkpoints (store.ManifestRecord): opaque records, stored as a
// row per checkpoint (drift_manifests: the record's header, root and file count, plus the ids of
// its chunks) over two shared tables:
//
//   - drift_entries: each distinct entry's bytes, once, keyed by its key;
//   - drift_chunks: each distinct chunk (a run of entry keys), once, keyed by its id.
//
// A file whose entry is identical to the previous checkpoint's costs no new row: the unchanged
// chunks are shared, and the one chunk that changed lists the same keys but one. Chunks count
// the manifests listing them, entries the chunks listing them, so a save and a deletion touch
// one row per chunk plus one per entry of a chunk that appears or goes, not one per file: a
// 15,000-file tree with one edit costs ~470 chunk counters and ~32 entry rows per save. Deleting
// a checkpoint (delete, prune, retention, complete, idle expiry: all go through
// deleteCheckpoint) drops its manifest, then the chunks no manifest lists, then the entries no
// chunk lists. Ids and keys are store.ManifestKeyLen (16) bytes; the SQL below spells it out.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ckptd/ckptd/store"
)

const keyLen = store.ManifestKeyLen

// keysCTE enumerates the 16-byte keys of the blob ?1 holding ?2 of them:
// k(i) with key = substr(?1, i*16+1, 16).
const keysCTE = `WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i + 1 < ?2) `

// insertManifest records m as the manifest of checkpoint rowid, inside the writer's transaction.
func (s *Store) insertManifest(ctx context.Context, w *wtx, rowid int64, m *store.ManifestRecord) error {
	ids := m.ChunkIDs()
	if _, err := w.exec(ctx, `INSERT INTO drift_manifests(ckpt, root, files, header, chunks) VALUES (?, ?, ?, ?, ?)`,
		rowid, m.Root, m.Files, m.Header, ids); err != nil {
		return err
	}
	if len(m.Chunks) == 0 {
		return nil
	}
	written := int64(len(m.Header) + len(ids))
	upChunk, err := w.conn.PrepareContext(ctx, `INSERT INTO drift_chunks(id, refs, keys) VALUES (?, 1, ?)
		ON CONFLICT(id) DO UPDATE SET refs = refs + 1 RETURNING refs`)
	if err != nil {
		return err
	}
	defer upChunk.Close()
	var upEntry *sql.Stmt
	for _, c := range m.Chunks {
		var refs int64
		if err := upChunk.QueryRowContext(ctx, c.ID, c.Keys).Scan(&refs); err != nil {
			return err
		}
		if refs != 1 {
			continue // an existing chunk: its entries are counted already
		}
		written += int64(len(c.Keys))
		if upEntry == nil {
			if upEntry, err = w.conn.PrepareContext(ctx, `INSERT INTO drift_entries(key, refs, data) VALUES (?, 1, ?)
				ON CONFLICT(key) DO UPDATE SET refs = refs + 1`); err != nil {
				return err
			}
			defer upEntry.Close()
		}
		for i, data := range c.Entries {
			if _, err := upEntry.ExecContext(ctx, c.Keys[i*keyLen:(i+1)*keyLen], data); err != nil {
				return err
			}
			written += int64(len(data))
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
	for off := 0; off+keyLen <= len(ids); off += keyLen {
		id := ids[off : off+keyLen]
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
		n := len(keys) / keyLen
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

const manifestRefQuery = `SELECT c.id, c.checkpoint_id, c.workflow_id, c.namespace, c.seq, c.phase, c.step,
	c.step_name, m.root, m.files FROM checkpoints c LEFT JOIN drift_manifests m ON m.ckpt = c.id WHERE `

func scanManifestRef(rows *sql.Rows) (store.ManifestRef, error) {
	var r store.ManifestRef
	var stepName, root sql.NullString
	var files sql.NullInt64
	var phase string
	if err := rows.Scan(&r.Key, &r.CheckpointID, &r.WorkflowID, &r.Namespace, &r.Seq, &phase, &r.Step,
		&stepName, &root, &files); err != nil {
		return r, err
	}
	r.Phase = store.Phase(phase)
	r.StepName = stepName.String
	r.HasManifest = root.Valid
	r.Root = root.String
	r.Files = int(files.Int64)
	return r, nil
}

func (s *Store) manifestRef(ctx context.Context, op, where string, args ...any) (store.ManifestRef, error) {
	var ref store.ManifestRef
	found := false
	err := s.readManifestTx(ctx, op, func(tx *rtx) error {
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
		return store.ManifestRef{}, err
	}
	if !found {
		return store.ManifestRef{}, store.ErrNotFound
	}
	return ref, nil
}

// CheckpointManifestRef describes checkpoint checkpointID; ErrNotFound if it does not exist.
func (s *Store) CheckpointManifestRef(ctx context.Context, checkpointID string) (store.ManifestRef, error) {
	ref, err := s.manifestRef(ctx, fmt.Sprintf("checkpoint %q", checkpointID), `c.checkpoint_id = ?`, checkpointID)
	if errors.Is(err, store.ErrNotFound) {
		return ref, fmt.Errorf("checkpoint %q: %w", checkpointID, store.ErrNotFound)
	}
	return ref, err
}

// LatestManifestRef describes the latest (highest seq) checkpoint of (workflowID, namespace),
// with or without a manifest; ErrNotFound if there is none.
func (s *Store) LatestManifestRef(ctx context.Context, workflowID, namespace string) (store.ManifestRef, error) {
	ref, err := s.manifestRef(ctx, fmt.Sprintf("latest checkpoint of workflow %q", workflowID),
		`c.workflow_id = ? AND c.namespace = ? ORDER BY c.seq DESC LIMIT 1`, workflowID, namespace)
	if errors.Is(err, store.ErrNotFound) {
		return ref, fmt.Errorf("workflow %q namespace %q has no checkpoints: %w", workflowID, namespace, store.ErrNotFound)
	}
	return ref, err
}

// LatestSourcesRef describes workflowID's most recent checkpoint (any namespace) with a manifest
// recorded for root: the base of an incremental fingerprint. ErrNotFound if there is none.
func (s *Store) LatestSourcesRef(ctx context.Context, workflowID, root string) (store.ManifestRef, error) {
	ref, err := s.manifestRef(ctx, "latest manifest of workflow "+workflowID,
		`c.id = (SELECT c.id FROM checkpoints c JOIN drift_manifests m ON m.ckpt = c.id
			WHERE c.workflow_id = ? AND m.root = ? ORDER BY c.seq DESC LIMIT 1)`, workflowID, root)
	if errors.Is(err, store.ErrNotFound) {
		return ref, fmt.Errorf("workflow %q has no manifest of %s: %w", workflowID, root, store.ErrNotFound)
	}
	return ref, err
}

// Manifest returns the manifest recorded with ref's checkpoint, complete (ErrNotFound if none). A
// manifest whose rows are incomplete gives a *CorruptError; drift checks the rest as it decodes.
func (s *Store) Manifest(ctx context.Context, ref store.ManifestRef) (store.ManifestRecord, error) {
	var m store.ManifestRecord
	err := s.readManifestTx(ctx, "load manifest", func(tx *rtx) (err error) {
		m, err = s.loadManifestTx(ctx, tx, ref.Key)
		return err
	})
	if err != nil {
		var ce *store.CorruptError
		if errors.As(err, &ce) {
			ce.CheckpointID, ce.WorkflowID = ref.CheckpointID, ref.WorkflowID
		}
		if errors.Is(err, store.ErrNotFound) {
			return store.ManifestRecord{}, fmt.Errorf("no sources recorded for checkpoint %q: %w", ref.CheckpointID, store.ErrNotFound)
		}
		return store.ManifestRecord{}, err
	}
	return m, nil
}

// loadManifestTx reads the manifest of checkpoint rowid in tx; ErrNotFound if the checkpoint has
// none, a *CorruptError if a chunk or entry row it lists is missing.
func (s *Store) loadManifestTx(ctx context.Context, tx *rtx, rowid int64) (store.ManifestRecord, error) {
	var m store.ManifestRecord
	var ids []byte
	rows, err := s.query(ctx, tx, `SELECT root, files, header, chunks FROM drift_manifests WHERE ckpt = ?`, rowid)
	if err != nil {
		return m, err
	}
	if !rows.Next() {
		rows.Close()
		if err := rows.Err(); err != nil {
			return m, err
		}
		return m, store.ErrNotFound
	}
	err = rows.Scan(&m.Root, &m.Files, &m.Header, &ids)
	rows.Close()
	if err != nil {
		return m, err
	}
	if m.Chunks, err = s.loadChunks(ctx, tx, ids); err != nil {
		return m, err
	}
	var keys []byte
	for _, c := range m.Chunks {
		keys = append(keys, c.Keys...)
	}
	n := len(keys) / keyLen
	if n == 0 {
		return m, nil
	}
	rows, err = s.query(ctx, tx, keysCTE+`SELECT k.i, e.data FROM k
			JOIN drift_entries e ON e.key = substr(?1, k.i * 16 + 1, 16) ORDER BY k.i`, keys, n)
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
		if i != next {
			return m, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: entry %d of %d is missing", next, n)}
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
	if next != n {
		return m, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: %d of %d entries missing", n-next, n)}
	}
	return m, nil
}

// loadChunks reads the chunks ids (without their entries), in order.
func (s *Store) loadChunks(ctx context.Context, tx *rtx, ids []byte) ([]store.ManifestChunk, error) {
	if len(ids)%keyLen != 0 {
		return nil, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: chunk list of %d bytes", len(ids))}
	}
	n := len(ids) / keyLen
	if n == 0 {
		return nil, nil
	}
	rows, err := s.query(ctx, tx, keysCTE+`SELECT k.i, c.keys FROM k
		JOIN drift_chunks c ON c.id = substr(?1, k.i * 16 + 1, 16) ORDER BY k.i`, ids, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]store.ManifestChunk, 0, n)
	for rows.Next() {
		var i int
		var keys []byte
		if err := rows.Scan(&i, &keys); err != nil {
			return nil, err
		}
		next := len(out)
		if i != next || len(keys)%keyLen != 0 {
			return nil, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: chunk %d of %d is missing or damaged", next, n)}
		}
		out = append(out, store.ManifestChunk{ID: ids[next*keyLen : (next+1)*keyLen], Keys: keys,
			Entries: make([][]byte, 0, len(keys)/keyLen)})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, &store.CorruptError{Reason: fmt.Sprintf("stored source manifest: %d of %d chunks missing", n-len(out), n)}
	}
	return out, nil
}

// readManifestTx runs f in a read transaction (retried while the database is busy); errors other
// than *CorruptError and ErrNotFound are wrapped with op.
func (s *Store) readManifestTx(ctx context.Context, op string, f func(tx *rtx) error) error {
	err := s.readTx(ctx, f)
	var ce *store.CorruptError
	if err == nil || errors.As(err, &ce) || errors.Is(err, store.ErrNotFound) {
		return err
	}
	return wrapDB(op, err)
}

// WorkflowSources returns the sources spec configured for workflowID with SetWorkflowSources
// (the "sources" member of workflows.config), or nil.
func (s *Store) WorkflowSources(ctx context.Context, workflowID string) (json.RawMessage, error) {
	var cfg sql.NullString
	err := s.readAuto(ctx, func(tx *rtx) error {
		return tx.cachedRow(ctx, `SELECT config FROM workflows WHERE workflow_id = ?`, workflowID).Scan(&cfg)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, wrapDB("workflow "+workflowID, err)
	}
	return s.sourcesOf(workflowID, cfg), nil
}

// sourcesOf returns the sources held in workflowID's stored config (store.SourcesOfConfig); a
// config that does not decode holds none, with a warning.
func (s *Store) sourcesOf(workflowID string, cfg sql.NullString) json.RawMessage {
	if !cfg.Valid {
		return nil
	}
	src, err := store.SourcesOfConfig([]byte(cfg.String))
	if err != nil {
		s.log.Warn("ckptd store: workflow config does not decode, ignoring it", "workflowId", workflowID, "err", err)
	}
	return src
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
