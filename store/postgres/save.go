package postgres

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// saveJob is a save plus everything computed before it reaches the writer.
type saveJob struct {
	store.PreparedSave
	err error // validation failure: reported without touching the database

	check    chan error // req.Check's result, nil once received (or without Check)
	checkErr error

	res store.SaveResult
}

// Enqueue prepares saves this small inline; larger ones on their own goroutine.
const (
	inlinePrepState = 8 << 10
	inlinePrepRest  = 64 << 10
)

// Save stores a checkpoint and returns once it is committed.
func (s *Store) Save(ctx context.Context, req store.SaveRequest) (store.SaveResult, error) {
	return s.Enqueue(req).Wait(ctx)
}

// Enqueue accepts a save without blocking. Saves are committed in Enqueue order. The state is
// hashed and compressed on its own goroutine while earlier saves commit.
func (s *Store) Enqueue(req store.SaveRequest) *store.Pending {
	sj := &saveJob{}
	sj.Req = req
	j := &job{save: sj, ready: make(chan struct{}), done: make(chan struct{}), locks: []int64{wfKey(req.WorkflowID)}}
	p := store.NewPending(j.done, func() (store.SaveResult, error) {
		if j.err != nil {
			return store.SaveResult{}, j.err
		}
		return sj.res, nil
	})
	inline := len(req.State) < inlinePrepState &&
		len(req.PendingTasks)+len(req.CompletedTasks)+len(req.Metadata) < inlinePrepRest
	if inline {
		s.prepareJob(j)
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

func (s *Store) prepareJob(j *job) {
	defer close(j.ready)
	defer func() {
		if r := recover(); r != nil {
			j.save.err = fmt.Errorf("save: internal error preparing checkpoint: %v", r)
		}
	}()
	j.save.err = s.prepare(j.save)
}

// prepare starts req.Check, then validates the request and computes hashes, compressed bytes
// and metadata index rows (store.PreparedSave). States are compressed on the save path: a
// deferred compression would write each state twice, and PostgreSQL rewrites a whole row.
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
	r := &sj.Req
	if err := noNUL("workflowId", r.WorkflowID, "namespace", r.Namespace, "checkpointId", r.CheckpointID,
		"parentId", r.ParentID, "stepName", r.StepName, "workflowHash", r.WorkflowHash); err != nil {
		return err
	}
	pol := store.SavePolicy{Codec: s.codec, MaxStateBytes: s.opts.MaxStateBytes, CompressThreshold: s.opts.CompressThreshold, Log: s.log,
		Chunk: true, Base: func(wf, ns string) *store.ValueBase { return s.states.Last(wf, ns).Base() }}
	if err := sj.Prepare(sj.Req, &pol); err != nil {
		return err
	}
	for _, kv := range sj.Meta {
		if err := noNUL("metadata", kv[0]); err != nil {
			return err
		}
	}
	if m := r.Manifest; m != nil {
		if err := noNUL("sources.root", m.Root); err != nil {
			return err
		}
	}
	return nil
}

// checked waits for req.Check (if any) and returns its error. Writer goroutine only; a batch
// run again gets the same answer.
func (sj *saveJob) checked() error {
	if sj.check != nil {
		sj.checkErr = <-sj.check
		sj.check = nil
	}
	return sj.checkErr
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

// saveSQL stores one checkpoint in one statement: the state is inserted or counted once more,
// the workflow's row hands out the seq (its upsert locks the row until the commit) and keeps
// its figures (figures.go), the checkpoint and its metadata index rows are inserted. A
// checkpoint id that exists already inserts nothing (ck is empty): the caller rolls the
// statement back and compares. The workflow's config is returned for the engine's belief that
// it has no sources (SaveRequest.AssumeNoSources), checked here.
const saveSQL = `WITH st AS (
	INSERT INTO states AS s (hash, encoding, size, stored_size, refs, data)
	SELECT $3::bytea, $4, $5, $6, 1, $7::bytea WHERE $3::bytea IS NOT NULL
	ON CONFLICT (hash) DO UPDATE SET refs = s.refs + 1
	RETURNING s.stored_size, s.refs > 1 AS dedup
), wf AS (
	INSERT INTO workflows AS w (workflow_id, next_seq, created_at, updated_at, ckpt_count, stored_bytes, latest_seq)
	VALUES ($1, 2, $2, $2, 1, coalesce((SELECT stored_size FROM st), 0), 1)
	ON CONFLICT (workflow_id) DO UPDATE SET next_seq = w.next_seq + 1, updated_at = greatest(w.updated_at, $2), completed_at = NULL,
		ckpt_count = w.ckpt_count + 1, stored_bytes = w.stored_bytes + excluded.stored_bytes, latest_seq = w.next_seq
	RETURNING w.next_seq - 1 AS seq, w.retention, w.config
), ck AS (
	INSERT INTO checkpoints (checkpoint_id, workflow_id, namespace, seq, parent_id, phase, step, step_name, error,
		state_type, state_hash, size, stored_size, dedup, completed_count, pending_count, workflow_hash, created_at,
		format_version, content_hash, metadata, completed_tasks, pending_tasks, validation_status, validation)
	SELECT $8, $1, $9, wf.seq, $10, $11, $12, $13, $14, $15, $3::bytea, $5, coalesce(st.stored_size, 0),
		coalesce(st.dedup, false), $16, $17, $18, $2, $19, $20, $21, $22, $23, $26, $27
	FROM wf LEFT JOIN st ON true
	ON CONFLICT (checkpoint_id) DO NOTHING
	RETURNING id, stored_size, dedup
), meta AS (
	INSERT INTO checkpoint_meta (key, value, ckpt)
	SELECT m.k, m.v, ck.id FROM ck, unnest($24::text[], $25::text[]) AS m(k, v)
)
SELECT ck.id, ck.stored_size, ck.dedup, wf.seq, wf.retention, wf.config FROM wf LEFT JOIN ck ON true`

// insertArgs are saveSQL's arguments for a prepared save with creation time created and
// format version format: $1..$25 are schema version 1's, $26 and $27 the validation's status
// and record (NULL without one).
func insertArgs(sj *saveJob, created time.Time, format int) []any {
	r := &sj.Req
	keys := make([]string, len(sj.Meta))
	vals := make([]string, len(sj.Meta))
	for i, kv := range sj.Meta {
		keys[i], vals[i] = kv[0], kv[1]
	}
	var hash, data any
	if sj.HasState {
		hash, data = sj.SHA, sj.Data
	}
	var vStatus, vRec any
	if sj.ValidationJSON != nil {
		vStatus, vRec = r.Validation.Status, sj.ValidationJSON
	}
	return []any{r.WorkflowID, created, hash, sj.Encoding, len(r.State), len(sj.Data), data, sj.ID, r.Namespace,
		nullStr(r.ParentID), string(r.Phase), r.Step, nullStr(r.StepName), nullStr(string(sj.ErrorJSON)), string(sj.StateType),
		sj.CompletedN, sj.PendingN, nullStr(r.WorkflowHash), format, sj.ContentHash, nullBytes(sj.MetaRaw),
		nullBytes([]byte(r.CompletedTasks)), nullBytes([]byte(r.PendingTasks)), keys, vals, vStatus, vRec}
}

// runSave executes one prepared save inside the writer's transaction (after SAVEPOINT sp); a
// failed req.Check undoes it (the caller rolls the job back on any error).
func (s *Store) runSave(ctx context.Context, w *wtx, sj *saveJob, sp string) error {
	if err := s.runSaveRows(ctx, w, sj, sp); err != nil {
		return err
	}
	return sj.checked()
}

func (s *Store) runSaveRows(ctx context.Context, w *wtx, sj *saveJob, sp string) error {
	r := &sj.Req
	now := s.now()
	created := time.UnixMicro(now.UnixMicro()).UTC()
	var rowid, stored *int64
	var dedup *bool
	var seq int64
	var retJSON []byte
	var cfg *string
	// The claim first, read in the save's round trip: a writer that lost its claim stores
	// nothing, not even an idempotent repeat (the job's savepoint undoes the statement).
	b := &pgx.Batch{}
	fc := queueFence(b, r.WorkflowID, r.FencingToken)
	b.Queue(saveSQL, insertArgs(sj, created, store.FormatVersion)...).QueryRow(func(row pgx.Row) error {
		return row.Scan(&rowid, &stored, &dedup, &seq, &retJSON, &cfg)
	})
	if err := w.sendBatch(ctx, b); err != nil {
		return err
	}
	if err := fc.check(); err != nil {
		return err
	}
	if rowid == nil { // the id exists: undo the seq, figures and state count, then compare
		w.queue("ROLLBACK TO SAVEPOINT " + sp)
		return s.existing(ctx, w, sj)
	}
	if sj.Chunked != nil && !*dedup { // the first listing of this state: count its runs
		n, err := storeChunked(ctx, w, sj, *rowid)
		if err != nil {
			return err
		}
		*stored = n
	}
	w.tot.inserted(int64(len(r.State)), *stored, sj.HasState && !*dedup)
	if r.Manifest != nil {
		if err := insertManifest(ctx, w, *rowid, r.Manifest); err != nil {
			return err
		}
	}
	sj.res = store.SaveResult{CheckpointID: sj.ID, Seq: seq, CreatedAt: created, SizeBytes: int64(len(r.State)),
		StoredBytes: *stored, SHA256: hex.EncodeToString(sj.SHA), Deduplicated: *dedup}
	if r.AssumeNoSources && cfg != nil { // the caller's belief, checked where it counts
		sj.res.ConfiguredSources = s.sourcesOf(r.WorkflowID, cfg)
	}
	if cv := sj.Chunked; cv != nil { // the base of this workflow's next save
		e := &store.StateEntry{CheckpointID: sj.ID, WorkflowID: r.WorkflowID, Namespace: r.Namespace, SHA256: cv.Index.SHA256,
			Value: r.State, Recipe: &cv.Recipe, Marks: r.Marks}
		w.after(func() { s.states.Put(e) })
	}
	w.announce(event{Saved: &store.SavedEvent{CheckpointID: sj.ID, WorkflowID: r.WorkflowID, Namespace: r.Namespace,
		Seq: seq, Phase: r.Phase, Step: r.Step}})

	ret := s.parseRetention(r.WorkflowID, retJSON)
	if ret.KeepLast > 0 || ret.MaxAgeSeconds > 0 {
		pruned, more, err := s.applyRetention(ctx, w, r.WorkflowID, r.Namespace, ret, now)
		if err != nil {
			return err
		}
		if len(pruned) > 0 {
			sj.res.Pruned = pruned
			s.pruned(w, r.WorkflowID, pruned, "retention")
		}
		if more {
			wf := r.WorkflowID
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

// storeChunked counts the runs of a chunked state the save stored first (inserting the runs and
// chunks not stored yet) and records its stored size: its index plus what it added, on its
// states row and its checkpoint (rowid), and in its workflow's kept figures. It returns that size.
func storeChunked(ctx context.Context, w *wtx, sj *saveJob, rowid int64) (int64, error) {
	added, err := refChunked(ctx, w, sj.Chunked)
	if err != nil {
		return 0, err
	}
	stored := int64(len(sj.Data)) + added
	w.queue(`UPDATE states SET stored_size = $1 WHERE hash = $2`, stored, sj.SHA)
	w.queue(`UPDATE workflows SET stored_bytes = stored_bytes + $1 WHERE workflow_id = $2`, added, sj.Req.WorkflowID) // kept figures
	_, err = w.exec(ctx, `UPDATE checkpoints SET stored_size = $1 WHERE id = $2`, stored, rowid)
	return stored, err
}

// pruned announces checkpoints removed from wf, to this process once committed and to others.
func (s *Store) pruned(w *wtx, wf string, ids []string, reason string) {
	if len(ids) == 0 {
		return
	}
	w.after(func() { s.notifyPruned(wf, ids, reason) })
	w.announce(event{Pruned: &store.PrunedEvent{WorkflowID: wf, CheckpointIDs: ids, Reason: reason}})
}

// existing answers a save whose checkpoint id is stored already: an idempotent repeat of the
// same content, or a conflict.
func (s *Store) existing(ctx context.Context, w *wtx, sj *saveJob) error {
	var exWf string
	var exHash, exState []byte
	var exSeq, exSz, exSto int64
	var exCreated time.Time
	var exDedup bool
	err := w.queryRow(ctx, `SELECT workflow_id, content_hash, seq, created_at, size, stored_size, state_hash, dedup
		FROM checkpoints WHERE checkpoint_id = $1`, sj.ID).Scan(&exWf, &exHash, &exSeq, &exCreated, &exSz, &exSto, &exState, &exDedup)
	if err != nil {
		return err
	}
	if exWf != sj.Req.WorkflowID {
		return fmt.Errorf("checkpoint %q belongs to workflow %q: %w", sj.ID, exWf, store.ErrConflict)
	}
	if !bytes.Equal(exHash, sj.ContentHash) {
		return fmt.Errorf("checkpoint %q already saved with different content: %w", sj.ID, store.ErrConflict)
	}
	sj.res = store.SaveResult{CheckpointID: sj.ID, Seq: exSeq, CreatedAt: exCreated.UTC(), SizeBytes: exSz, StoredBytes: exSto,
		SHA256: hex.EncodeToString(exState), Deduplicated: exDedup, Existing: true}
	return nil
}

// parseRetention reads a workflow's stored retention; none (or one that does not decode) is the
// default.
func (s *Store) parseRetention(wf string, js []byte) store.Retention {
	if js == nil {
		return s.defRet
	}
	r, err := store.DecodeRetention(js)
	if err != nil {
		s.log.Warn("ckptd store: bad stored retention, using default", "workflowId", wf, "err", err)
		return s.defRet
	}
	return r
}

// ckRef names a stored checkpoint: its row id and checkpoint id.
type ckRef struct {
	rowid int64
	id    string
}

func collectRefs(rows pgx.Rows, err error) ([]ckRef, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ckRef, error) {
		var r ckRef
		err := row.Scan(&r.rowid, &r.id)
		return r, err
	})
}

// applyRetention deletes what r selects among (workflow, namespace)'s checkpoints, the oldest
// saveRetentionCap of them; more: there are others.
func (s *Store) applyRetention(ctx context.Context, w *wtx, wf, ns string, r store.Retention, now time.Time) (_ []string, more bool, _ error) {
	if r.MaxAgeSeconds <= 0 && r.KeepLast > 0 {
		return s.applyKeepLast(ctx, w, wf, ns, r)
	}
	rows, err := w.query(ctx, `SELECT c.id, c.seq, c.checkpoint_id, c.created_at, `+heldCol+` FROM checkpoints c`+holdsJoin+`
		WHERE c.workflow_id = $1 AND c.namespace = $2 ORDER BY c.seq`, wf, ns)
	if err != nil {
		return nil, false, err
	}
	var items []store.RetentionItem
	rowids := map[string]int64{}
	held := map[string]bool{}
	for rows.Next() {
		var it store.RetentionItem
		var id int64
		var h bool
		if err := rows.Scan(&id, &it.Seq, &it.ID, &it.CreatedAt, &h); err != nil {
			rows.Close()
			return nil, false, err
		}
		items = append(items, it)
		rowids[it.ID] = id
		if h {
			held[it.ID] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	var expired []string
	var refs []ckRef
	for _, id := range store.SelectExpired(items, r, now) {
		if !held[id] { // kept for a rollback (saga.go)
			if len(expired) == saveRetentionCap {
				more = true
				break
			}
			expired = append(expired, id)
			refs = append(refs, ckRef{rowids[id], id})
		}
	}
	if _, _, err := deleteCheckpoints(ctx, w, refs); err != nil {
		return nil, false, err
	}
	return expired, more, nil
}

// applyKeepLast is applyRetention for a keepLast-only policy (the common default): it reads only
// the oldest checkpoints beyond the newest KeepLast, at most saveRetentionCap (and two more: the
// first one, kept with KeepFirst, and one to tell whether more are left). Same result as
// store.SelectExpired (less the checkpoints kept for rollbacks), capped.
func (s *Store) applyKeepLast(ctx context.Context, w *wtx, wf, ns string, r store.Retention) (_ []string, more bool, _ error) {
	limit := saveRetentionCap + 2
	rows, err := w.query(ctx, `SELECT c.id, c.checkpoint_id, `+heldCol+` FROM checkpoints c`+holdsJoin+`
		WHERE c.workflow_id = $1 AND c.namespace = $2 AND c.seq < (SELECT seq FROM checkpoints
			WHERE workflow_id = $1 AND namespace = $2 ORDER BY seq DESC OFFSET $3 LIMIT 1)
		ORDER BY c.seq LIMIT $4`, wf, ns, r.KeepLast-1, limit)
	if err != nil {
		return nil, false, err
	}
	type heldRef struct {
		ckRef
		held bool
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (heldRef, error) {
		var h heldRef
		err := row.Scan(&h.rowid, &h.id, &h.held)
		return h, err
	})
	if err != nil {
		return nil, false, err
	}
	more = len(all) == limit
	if r.KeepFirst && len(all) > 0 {
		all = all[1:] // oldest first: the first one is the group's lowest seq
	}
	var refs []ckRef
	for _, h := range all { // seq order, like store.SelectExpired
		if !h.held { // kept for a rollback (saga.go)
			if len(refs) == saveRetentionCap {
				more = true
				break
			}
			refs = append(refs, h.ckRef)
		}
	}
	if len(refs) == 0 {
		return nil, more, nil
	}
	if _, _, err := deleteCheckpoints(ctx, w, refs); err != nil {
		return nil, false, err
	}
	expired := make([]string, len(refs))
	for i, r := range refs {
		expired[i] = r.id
	}
	return expired, more, nil
}

// deleteCheckpoints removes checkpoints with their metadata rows, pending writes, source
// manifests (collecting chunks and entries nothing lists any more) and the states nothing
// refers to any more. It returns the row ids it deleted and the stored bytes of the states it
// removed.
func deleteCheckpoints(ctx context.Context, w *wtx, refs []ckRef) (map[int64]bool, int64, error) {
	if len(refs) == 0 {
		return nil, 0, nil
	}
	rowids := make([]int64, len(refs))
	ids := make([]string, len(refs))
	for i, r := range refs {
		rowids[i], ids[i] = r.rowid, r.id
	}
	b := &pgx.Batch{}
	for _, q := range w.pre {
		b.Queue(q.sql, q.args...)
	}
	npre := len(w.pre)
	w.pre = w.pre[:0]
	b.Queue(`DELETE FROM checkpoint_meta WHERE ckpt = ANY($1)`, rowids)
	b.Queue(`DELETE FROM writes WHERE checkpoint_id = ANY($1) RETURNING CASE WHEN encoding = 4 THEN value END`, ids)
	b.Queue(`DELETE FROM drift_manifests WHERE ckpt = ANY($1) RETURNING chunks`, rowids)
	b.Queue(`WITH d AS (DELETE FROM checkpoints WHERE id = ANY($1) RETURNING id, state_hash, workflow_id, seq, size, stored_size),
		u AS (UPDATE states AS s SET refs = s.refs - x.n
			FROM (SELECT state_hash, count(*) AS n FROM d WHERE state_hash IS NOT NULL GROUP BY state_hash) AS x
			WHERE s.hash = x.state_hash),
		f AS (UPDATE workflows AS w SET ckpt_count = w.ckpt_count - x.n, stored_bytes = w.stored_bytes - x.bytes,
			latest_seq = CASE WHEN w.latest_seq <= x.newest
				THEN coalesce((SELECT max(c.seq) FROM checkpoints c WHERE c.workflow_id = w.workflow_id AND NOT (c.id = ANY($1))), 0)
				ELSE w.latest_seq END
			FROM (SELECT workflow_id, count(*) AS n, sum(stored_size) AS bytes, max(seq) AS newest FROM d GROUP BY workflow_id) AS x
			WHERE w.workflow_id = x.workflow_id)
		SELECT id, size, stored_size FROM d`, rowids)
	b.Queue(`DELETE FROM states WHERE refs <= 0
		RETURNING stored_size, CASE WHEN encoding = 4 THEN length(data) ELSE stored_size END, CASE WHEN encoding = 4 THEN data END`)
	br := w.conn.SendBatch(ctx, b)
	defer br.Close()
	for i := 0; i < npre+1; i++ {
		if _, err := br.Exec(); err != nil {
			return nil, 0, err
		}
	}
	var indexes [][]byte // of the chunked values removed
	if err := collectIndexes(br.Query())(&indexes); err != nil {
		return nil, 0, err
	}
	var chunks [][]byte
	rows, err := br.Query()
	if err != nil {
		return nil, 0, err
	}
	for rows.Next() {
		var c []byte
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return nil, 0, err
		}
		chunks = append(chunks, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	deleted := map[int64]bool{}
	rows, err = br.Query()
	if err != nil {
		return nil, 0, err
	}
	for rows.Next() {
		var id, size, stored int64
		if err := rows.Scan(&id, &size, &stored); err != nil {
			rows.Close()
			return nil, 0, err
		}
		deleted[id] = true
		w.tot.checkpoints--
		w.tot.stateBytes -= size
		w.tot.ckptStored -= stored
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var freed int64
	rows, err = br.Query()
	if err != nil {
		return nil, 0, err
	}
	for rows.Next() {
		var stored, n int64
		var index []byte
		if err := rows.Scan(&stored, &n, &index); err != nil {
			rows.Close()
			return nil, 0, err
		}
		freed += n
		w.tot.states--
		w.tot.statesStored -= stored
		if index != nil {
			indexes = append(indexes, index)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if err := br.Close(); err != nil {
		return nil, 0, err
	}
	if len(chunks) > 0 {
		if err := releaseChunks(ctx, w, chunks); err != nil {
			return nil, 0, err
		}
	}
	n, err := w.s.releaseIndexes(ctx, w, indexes)
	if err != nil {
		return nil, 0, err
	}
	return deleted, freed + n, nil
}
