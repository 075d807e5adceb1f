package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ckptd/ckptd/store"
)

// saveJob is a save plus everything computed before it reaches the writer.
type saveJob struct {
	store.PreparedSave
	err         error // validation failure: reported without touching the database
	compressNow bool  // compress on the save path, never deferred (imports)

	check    chan error // req.Check's result, nil once received (or without Check)
	checkErr error

	res store.SaveResult
}

// Save stores a checkpoint and returns once it is committed.
func (s *Store) Save(ctx context.Context, req store.SaveRequest) (store.SaveResult, error) {
	return s.Enqueue(req).Wait(ctx)
}

// Enqueue accepts a save without blocking. Saves are committed in Enqueue order. The state is
// hashed and compressed on its own goroutine while earlier saves commit.
func (s *Store) Enqueue(req store.SaveRequest) *store.Pending {
	sj := &saveJob{}
	sj.Req = req
	j := &job{save: sj, ready: make(chan struct{}), done: make(chan struct{})}
	p := store.NewPending(j.done, func() (store.SaveResult, error) {
		if j.err != nil {
			return store.SaveResult{}, j.err
		}
		return sj.res, nil
	})
	inline := len(req.State) < inlinePrepState &&
		len(req.PendingTasks)+len(req.CompletedTasks)+len(req.Metadata) < inlinePrepRest
	if inline {
		s.prepareJob(j) // microseconds: cheaper than a goroutine hand-off
	}
	if !s.push(j) {
		j.err = fmt.Errorf("save: %w", store.ErrClosed)
		if !inline {
			close(j.ready)
		}
		close(j.done)
		return p
	}
	if !inline {
		go s.prepareJob(j)
	}
	return p
}

// Enqueue prepares saves this small inline; larger ones on their own goroutine.
const (
	inlinePrepState = 8 << 10
	inlinePrepRest  = 64 << 10
)

func (s *Store) prepareJob(j *job) {
	defer close(j.ready)
	defer func() {
		if r := recover(); r != nil {
			j.save.err = fmt.Errorf("save: internal error preparing checkpoint: %v", r)
		}
	}()
	j.save.err = s.prepare(j.save)
}

// prepare starts req.Check, whose result the writer collects before the save may commit, then
// validates the request and computes hashes, compressed bytes and metadata index rows
// (store.PreparedSave).
func (s *Store) prepare(sj *saveJob) error {
	if check := sj.Req.Check; check != nil {
		ch := make(chan error, 1)
		sj.check = ch
		go func() {
			defer func() {
				if p := recover(); p != nil {
					ch <- fmt.Errorf("save: internal error checking the request: %v", p)
				}
			}()
			ch <- check()
		}()
	}
	pol := store.SavePolicy{Codec: s.codec, MaxStateBytes: s.opts.MaxStateBytes, CompressThreshold: s.opts.CompressThreshold,
		Defer: !s.opts.CompressInline && !sj.compressNow, Log: s.log, Chunk: true,
		Base: func(wf, ns string) *store.ValueBase { return s.states.Last(wf, ns).Base() }}
	return sj.Prepare(sj.Req, &pol)
}

// writeStmts are the writer connection's prepared statements for the save path.
type writeStmts struct {
	begin, commit, rollback, savepoint, release, rollbackTo, dataVersion                    *sql.Stmt
	existing, upsertWf, reopenWf, selState, insState, insCkpt, insMeta, retItems, retBeyond *sql.Stmt
	delMeta, delWrites, delCkpt, delState                                                   *sql.Stmt
	// all is every statement above, as prepared: close finalizes them all (one left open keeps
	// the writer's connection open at exit, and with it the WAL and its index on disk)
	all []*sql.Stmt
}

func prepareWriteStmts(ctx context.Context, c *sql.Conn) (*writeStmts, error) {
	ws := &writeStmts{}
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&ws.begin, `BEGIN IMMEDIATE`},
		{&ws.commit, `COMMIT`},
		{&ws.rollback, `ROLLBACK`},
		{&ws.savepoint, `SAVEPOINT job`},
		{&ws.release, `RELEASE job`},
		{&ws.rollbackTo, `ROLLBACK TO job`},
		{&ws.dataVersion, `PRAGMA data_version`}, // knownIDs.begin, at every batch
		{&ws.existing, `SELECT workflow_id, content_hash, seq, created_at, size, stored_size, state_hash, dedup
			FROM checkpoints WHERE checkpoint_id = ?`},
		// The workflow's row hands out the seq and keeps its figures (figures.go): ?3 the stored
		// size of the checkpoint being inserted. completed_at is not among the columns it sets
		// (a completed workflow's is cleared by reopenWf): so workflows_open is not rewritten by
		// every save (schema step 9). config is returned for the engine's belief that the
		// workflow has no sources (SaveRequest.AssumeNoSources), checked here.
		{&ws.upsertWf, `INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at, ckpt_count, stored_bytes, latest_seq)
			VALUES (?1, 2, ?2, ?2, 1, ?3, 1)
			ON CONFLICT(workflow_id) DO UPDATE SET next_seq = next_seq + 1, updated_at = max(updated_at, ?2),
				ckpt_count = ckpt_count + 1, stored_bytes = stored_bytes + ?3, latest_seq = next_seq
			RETURNING next_seq - 1, retention, completed_at IS NOT NULL, config`},
		{&ws.reopenWf, `UPDATE workflows SET completed_at = NULL WHERE workflow_id = ?`},
		{&ws.selState, `SELECT stored_size FROM states WHERE hash = ?`},
		{&ws.insState, `INSERT INTO states(hash, encoding, size, stored_size, data) VALUES (?, ?, ?, ?, ?)`},
		{&ws.insCkpt, `INSERT INTO checkpoints(checkpoint_id, workflow_id, namespace, seq, parent_id, phase, step,
			step_name, error, state_type, state_hash, size, stored_size, dedup, completed_count, pending_count,
			workflow_hash, created_at, format_version, content_hash, metadata, completed_tasks, pending_tasks)
			VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id`},
		{&ws.insMeta, `INSERT INTO checkpoint_meta(key, value, ckpt) VALUES (?, ?, ?)`},
		{&ws.retItems, `SELECT id, seq, checkpoint_id, created_at FROM checkpoints
			WHERE workflow_id = ? AND namespace = ? ORDER BY seq`},
		// the oldest ?4 checkpoints of (workflow, namespace) beyond its newest ?3
		{&ws.retBeyond, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = ?1 AND namespace = ?2
			AND seq < (SELECT seq FROM checkpoints WHERE workflow_id = ?1 AND namespace = ?2 ORDER BY seq DESC LIMIT 1 OFFSET ?3 - 1)
			ORDER BY seq LIMIT ?4`},
		{&ws.delMeta, `DELETE FROM checkpoint_meta WHERE ckpt = ?`},
		{&ws.delWrites, `DELETE FROM writes WHERE checkpoint_id = ? RETURNING CASE WHEN encoding = 4 THEN value END`},
		{&ws.delCkpt, `DELETE FROM checkpoints WHERE id = ? RETURNING state_hash, workflow_id, seq, size, stored_size`},
		{&ws.delState, `DELETE FROM states WHERE hash = ?1 AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE state_hash = ?1)
			RETURNING stored_size, CASE WHEN encoding = 4 THEN data END`},
	} {
		st, err := c.PrepareContext(ctx, p.q)
		if err != nil {
			ws.close()
			return nil, fmt.Errorf("prepare %q: %w", p.q, err)
		}
		*p.dst = st
		ws.all = append(ws.all, st)
	}
	return ws, nil
}

func (ws *writeStmts) close() {
	for _, st := range ws.all {
		_ = st.Close()
	}
	ws.all = nil
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// storeState stores the save's state bytes unless the same bytes are stored already (dedup),
// and returns the stored size. Raw-pending states go to the compactor once committed.
func (s *Store) storeState(ctx context.Context, w *wtx, sj *saveJob) (stored int64, dedup bool, err error) {
	if !sj.HasState {
		return 0, false, nil
	}
	err = s.ws.selState.QueryRowContext(ctx, sj.SHA).Scan(&stored)
	switch {
	case err == nil:
		return stored, true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, false, err
	}
	stored = int64(len(sj.Data))
	if sj.Chunked != nil {
		added, err := s.refChunked(ctx, w, sj.Chunked)
		if err != nil {
			return 0, false, err
		}
		stored += added // the index plus the runs and chunks this state was the first to list
	}
	if _, err := s.ws.insState.ExecContext(ctx, sj.SHA, sj.Encoding, len(sj.Req.State), stored, sj.Data); err != nil {
		return 0, false, err
	}
	w.fig.stateStored(stored)
	s.walPending.Add(stored)
	if sj.Encoding == store.EncRawPending {
		sha, size := sj.SHA, int64(len(sj.Req.State))
		w.after(func() { s.compact.add(sha, size) })
	}
	return stored, false, nil
}

// checked waits for req.Check (if any) and returns its error. Writer goroutine only; a batch
// retried after SQLITE_BUSY gets the same answer again.
func (sj *saveJob) checked() error {
	if sj.check != nil {
		sj.checkErr = <-sj.check
		sj.check = nil
	}
	return sj.checkErr
}

// runSave executes one prepared save inside the writer's transaction; a failed req.Check undoes
// it (the caller rolls the job back on any error).
func (s *Store) runSave(ctx context.Context, w *wtx, sj *saveJob) error {
	if err := s.runSaveRows(ctx, w, sj); err != nil {
		return err
	}
	return sj.checked()
}

func (s *Store) runSaveRows(ctx context.Context, w *wtx, sj *saveJob) error {
	ws := s.ws
	r := &sj.Req
	// The claim first: a writer that lost its claim stores nothing, not even an idempotent repeat.
	if err := s.fence(ctx, w, r.WorkflowID, r.FencingToken); err != nil {
		return err
	}
	var (
		exWf                          string
		exHash, exState               []byte
		exSeq, exCreated, exSz, exSto int64
		exDedup                       bool
	)
	err := sql.ErrNoRows // an id this store just made (UUIDv7) cannot exist yet
	if r.CheckpointID != "" {
		err = ws.existing.QueryRowContext(ctx, sj.ID).Scan(&exWf, &exHash, &exSeq, &exCreated, &exSz, &exSto, &exState, &exDedup)
	}
	switch {
	case err == nil:
		if exWf != r.WorkflowID {
			return fmt.Errorf("checkpoint %q belongs to workflow %q: %w", sj.ID, exWf, store.ErrConflict)
		}
		if !bytes.Equal(exHash, sj.ContentHash) {
			return fmt.Errorf("checkpoint %q already saved with different content: %w", sj.ID, store.ErrConflict)
		}
		sj.res = store.SaveResult{CheckpointID: sj.ID, Seq: exSeq, CreatedAt: time.UnixMicro(exCreated).UTC(),
			SizeBytes: exSz, StoredBytes: exSto, SHA256: hex.EncodeToString(exState), Deduplicated: exDedup, Existing: true}
		return nil
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}

	now := s.now()
	micros := now.UnixMicro()
	stored, dedup, err := s.storeState(ctx, w, sj)
	if err != nil {
		return err
	}
	var seq int64
	var retJSON, cfg sql.NullString
	var completed bool
	if err := ws.upsertWf.QueryRowContext(ctx, r.WorkflowID, micros, stored).Scan(&seq, &retJSON, &completed, &cfg); err != nil {
		return err
	}
	if completed { // a save makes a completed workflow resumable again
		if _, err := ws.reopenWf.ExecContext(ctx, r.WorkflowID); err != nil {
			return err
		}
	}
	w.fig.saved(int64(len(r.State)), stored)
	var rowid int64
	if err := ws.insCkpt.QueryRowContext(ctx, sj.ID, r.WorkflowID, r.Namespace, seq, nullStr(r.ParentID), string(r.Phase),
		r.Step, nullStr(r.StepName), nullBytes(sj.ErrorJSON), string(sj.StateType), nullBytes(sj.SHA), len(r.State), stored,
		dedup, sj.CompletedN, sj.PendingN, nullStr(r.WorkflowHash), micros, store.FormatVersion, sj.ContentHash,
		nullBytes(sj.MetaRaw), nullBytes([]byte(r.CompletedTasks)), nullBytes([]byte(r.PendingTasks))).Scan(&rowid); err != nil {
		return err
	}
	for _, kv := range sj.Meta {
		if _, err := ws.insMeta.ExecContext(ctx, kv[0], kv[1], rowid); err != nil {
			return err
		}
	}
	if r.Manifest != nil {
		if err := s.insertManifest(ctx, w, rowid, r.Manifest); err != nil {
			return err
		}
	}
	if sj.ValidationJSON != nil {
		if err := s.insertValidation(ctx, w, rowid, r.Validation.Status, sj.ValidationJSON); err != nil { // store/sqlite/saga.go
			return err
		}
	}
	sj.res = store.SaveResult{CheckpointID: sj.ID, Seq: seq, CreatedAt: time.UnixMicro(micros).UTC(), SizeBytes: int64(len(r.State)),
		StoredBytes: stored, SHA256: hex.EncodeToString(sj.SHA), Deduplicated: dedup}
	if r.AssumeNoSources && cfg.Valid { // the caller's belief, checked where it counts
		sj.res.ConfiguredSources = s.sourcesOf(r.WorkflowID, cfg)
	}
	if sj.Chunked != nil || sj.ChunkLater { // the base of this workflow's next save
		e := &store.StateEntry{CheckpointID: sj.ID, WorkflowID: r.WorkflowID, Namespace: r.Namespace, SHA256: [32]byte(sj.SHA),
			Value: r.State, Marks: r.Marks}
		if sj.Chunked != nil {
			e.Recipe = &sj.Chunked.Recipe
		}
		w.after(func() { s.states.Put(e) })
	}

	ret := s.parseRetention(r.WorkflowID, retJSON)
	if ret.KeepLast > 0 || ret.MaxAgeSeconds > 0 {
		pruned, more, err := s.applyRetention(ctx, w, r.WorkflowID, r.Namespace, ret, now)
		if err != nil {
			return err
		}
		wf := r.WorkflowID
		if len(pruned) > 0 {
			sj.res.Pruned = pruned
			w.after(func() {
				s.deletes.Add(uint64(len(pruned)))
				s.notifyPruned(wf, pruned, "retention")
			})
		}
		if more {
			w.after(func() { s.sweepLater(wf) })
		}
	}
	return nil
}

// saveRetentionCap bounds the checkpoints a save's retention deletes in the save's transaction
// (a workflow whose retention was just tightened may have thousands to go): the rest is left
// to a sweep in bites (sweepLater).
const saveRetentionCap = store.BiteUnits

// sweepLater prunes wf with its own retention in bites, in the background, once: for what a
// save's retention left (saveRetentionCap).
func (s *Store) sweepLater(wf string) {
	s.mu.Lock()
	if s.closed || s.sweeping[wf] {
		s.mu.Unlock()
		return
	}
	if s.sweeping == nil {
		s.sweeping = map[string]bool{}
	}
	s.sweeping[wf] = true
	s.bgWG.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bgWG.Done()
		defer func() {
			s.mu.Lock()
			delete(s.sweeping, wf)
			s.mu.Unlock()
		}()
		if _, err := s.prune(context.Background(), store.PruneRequest{WorkflowID: wf, OmitIDs: true}, "retention"); err != nil &&
			!errors.Is(err, store.ErrClosed) {
			s.log.Warn("ckptd store: retention sweep failed", "workflowId", wf, "err", err)
		}
	}()
}

// applyRetention deletes what r selects among (workflow, namespace)'s checkpoints, the oldest
// saveRetentionCap of them; more: there are others.
func (s *Store) applyRetention(ctx context.Context, w *wtx, wf, ns string, r store.Retention, now time.Time) (_ []string, more bool, _ error) {
	if r.MaxAgeSeconds <= 0 && r.KeepLast > 0 {
		return s.applyKeepLast(ctx, w, wf, ns, r)
	}
	rows, err := s.ws.retItems.QueryContext(ctx, wf, ns)
	if err != nil {
		return nil, false, err
	}
	var items []store.RetentionItem
	rowids := map[string]int64{}
	for rows.Next() {
		var it store.RetentionItem
		var id, created int64
		if err := rows.Scan(&id, &it.Seq, &it.ID, &created); err != nil {
			rows.Close()
			return nil, false, err
		}
		it.CreatedAt = time.UnixMicro(created)
		items = append(items, it)
		rowids[it.ID] = id
	}
	if err := rows.Close(); err != nil {
		return nil, false, err
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	expired, err := s.withoutRetentionHolds(ctx, w, wf, ns, store.SelectExpired(items, r, now)) // store/sqlite/saga.go
	if err != nil {
		return nil, false, err
	}
	if len(expired) > saveRetentionCap {
		expired, more = expired[:saveRetentionCap], true
	}
	for _, id := range expired {
		if _, err := s.deleteCheckpoint(ctx, w, rowids[id], id); err != nil {
			return nil, false, err
		}
	}
	return expired, more, nil
}

// applyKeepLast is applyRetention for a keepLast-only policy (the common default): it reads only
// the oldest checkpoints beyond the newest KeepLast, at most saveRetentionCap (and two more: the
// first one, kept with KeepFirst, and one to tell whether more are left). Same result as
// SelectExpired, capped.
func (s *Store) applyKeepLast(ctx context.Context, w *wtx, wf, ns string, r store.Retention) (_ []string, more bool, _ error) {
	limit := saveRetentionCap + 2
	refs, err := scanRefs(s.ws.retBeyond.QueryContext(ctx, wf, ns, r.KeepLast, limit))
	if err != nil {
		return nil, false, err
	}
	more = len(refs) == limit
	if r.KeepFirst && len(refs) > 0 {
		refs = refs[1:] // oldest first: the first one is the group's lowest seq
	}
	if refs, err = s.refsWithoutRetentionHolds(ctx, w, wf, ns, refs); err != nil { // store/sqlite/saga.go
		return nil, false, err
	}
	if len(refs) > saveRetentionCap {
		refs, more = refs[:saveRetentionCap], true
	}
	expired := make([]string, 0, len(refs))
	for _, ref := range refs { // seq order, like store.SelectExpired
		if _, err := s.deleteCheckpoint(ctx, w, ref.rowid, ref.id); err != nil {
			return nil, false, err
		}
		expired = append(expired, ref.id)
	}
	return expired, more, nil
}

func scanRefs(rows *sql.Rows, err error) ([]ckRef, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ckRef
	for rows.Next() {
		var r ckRef
		if err := rows.Scan(&r.rowid, &r.id); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// deleteCheckpoint removes one checkpoint, its metadata rows, its pending writes and its state
// blob if nothing else refers to it.
func (s *Store) deleteCheckpoint(ctx context.Context, w *wtx, rowid int64, checkpointID string) (bool, error) {
	ws := s.ws
	if _, err := ws.delMeta.ExecContext(ctx, rowid); err != nil {
		return false, err
	}
	if err := w.deleteWrites(ctx, ws.delWrites, checkpointID); err != nil {
		return false, err
	}
	if err := s.deleteManifest(ctx, w, rowid); err != nil {
		return false, err
	}
	var hash []byte
	var wf string
	var seq, size, stored int64
	if err := ws.delCkpt.QueryRowContext(ctx, rowid).Scan(&hash, &wf, &seq, &size, &stored); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return false, err
	}
	w.fig.deleted(wf, seq, size, stored)
	if hash != nil {
		var freed int64
		var index []byte
		err := ws.delState.QueryRowContext(ctx, hash).Scan(&freed, &index)
		switch {
		case errors.Is(err, sql.ErrNoRows): // still shared with another checkpoint
		case err != nil:
			return false, err
		default:
			w.fig.stateDeleted(freed)
			if index != nil {
				w.release(index)
			}
		}
	}
	return true, nil
}
