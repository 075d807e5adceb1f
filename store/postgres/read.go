package postgres

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// summaryCols are the checkpoint columns of a Summary, in summaryScan's order.
const summaryCols = `c.id, c.checkpoint_id, c.workflow_id, c.namespace, c.seq, c.parent_id, c.phase, c.step, c.step_name,
	c.error, c.workflow_hash, c.metadata, c.created_at, c.state_type, c.size, c.stored_size, c.state_hash,
	c.completed_count, c.pending_count, c.format_version, c.validation_status, c.validation`

type summaryScan struct {
	rowid                             int64
	parent, stepName, errJSON, wfHash *string
	phase, stateType                  string
	meta, hash                        []byte
	created                           time.Time
	completedN, pendingN, format      int64
	validationStatus                  *string
	validation                        []byte
	sm                                store.Summary
}

func (x *summaryScan) dest() []any {
	return []any{&x.rowid, &x.sm.CheckpointID, &x.sm.WorkflowID, &x.sm.Namespace, &x.sm.Seq, &x.parent, &x.phase,
		&x.sm.Step, &x.stepName, &x.errJSON, &x.wfHash, &x.meta, &x.created, &x.stateType, &x.sm.SizeBytes,
		&x.sm.StoredBytes, &x.hash, &x.completedN, &x.pendingN, &x.format, &x.validationStatus, &x.validation}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// finish fills sm from the scanned columns; a stored value that does not decode is corruption.
func (x *summaryScan) finish() (store.Summary, error) {
	sm := x.sm
	sm.ParentID = deref(x.parent)
	sm.Phase = store.Phase(x.phase)
	sm.StepName = deref(x.stepName)
	sm.WorkflowHash = deref(x.wfHash)
	if len(x.meta) > 0 {
		sm.Metadata = json.RawMessage(x.meta)
	}
	sm.CreatedAt = x.created.UTC()
	sm.StateType = store.StateType(x.stateType)
	if x.hash != nil {
		sm.SHA256 = hex.EncodeToString(x.hash)
	}
	sm.CompletedTaskCount = int(x.completedN)
	sm.PendingTaskCount = int(x.pendingN)
	sm.FormatVersion = int(x.format)
	if x.errJSON != nil {
		var e store.StepError
		if err := json.Unmarshal([]byte(*x.errJSON), &e); err != nil {
			return sm, &store.CorruptError{CheckpointID: sm.CheckpointID, Reason: "stored error does not decode: " + err.Error()}
		}
		sm.Error = &e
	}
	if x.validationStatus != nil {
		v, err := store.DecodeValidation(sm.CheckpointID, *x.validationStatus, x.validation)
		if err != nil {
			return sm, err
		}
		sm.Validation = v
	}
	return sm, nil
}

func asCorrupt(err error) *store.CorruptError {
	var ce *store.CorruptError
	if errors.As(err, &ce) {
		return ce
	}
	return nil
}

const loadQuery = `SELECT ` + summaryCols + `, c.completed_tasks, c.pending_tasks, s.encoding, s.size, s.data
	FROM checkpoints c LEFT JOIN states s ON s.hash = c.state_hash WHERE `

const writesQuery = `SELECT task_id, task_path, idx, channel, type, is_bytes, encoding, size, sha256, value FROM writes
	WHERE checkpoint_id = %s ORDER BY task_id, idx`

// loadOne reads and verifies one checkpoint (where: a condition on checkpoints c, with args)
// inside tx, with its pending writes, in one round trip.
func (s *Store) loadOne(ctx context.Context, tx pgx.Tx, where string, args ...any) (store.Checkpoint, error) {
	b := &pgx.Batch{}
	b.Queue(loadQuery+where, args...)
	b.Queue(fmt.Sprintf(writesQuery, `(SELECT c.checkpoint_id FROM checkpoints c WHERE `+where+`)`), args...)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	var x summaryScan
	var completed, pending, data []byte
	var enc, size *int64
	err := br.QueryRow().Scan(append(x.dest(), &completed, &pending, &enc, &size, &data)...)
	if noRows(err) {
		return store.Checkpoint{}, fmt.Errorf("checkpoint %v: %w", args[0], store.ErrNotFound)
	}
	if err != nil {
		return store.Checkpoint{}, err
	}
	corrupt := func(reason string) error {
		return &store.CorruptError{CheckpointID: x.sm.CheckpointID, WorkflowID: x.sm.WorkflowID, Reason: reason}
	}
	sm, err := x.finish()
	if err != nil {
		ce := asCorrupt(err)
		ce.WorkflowID = sm.WorkflowID
		return store.Checkpoint{}, ce
	}
	cp := store.Checkpoint{Summary: sm}
	if len(completed) > 0 {
		cp.CompletedTasks = json.RawMessage(completed)
	}
	if len(pending) > 0 {
		cp.PendingTasks = json.RawMessage(pending)
	}
	if sm.StateType != store.StateNone {
		switch {
		case x.hash == nil:
			return store.Checkpoint{}, corrupt("state hash missing")
		case enc == nil:
			return store.Checkpoint{}, corrupt("state blob missing")
		}
		if *enc != store.EncChunked {
			state, err := s.codec.OpenState(data, int(*enc), *size, x.hash)
			if err != nil {
				return store.Checkpoint{}, corrupt(err.Error())
			}
			cp.State = state
		}
	}
	rows, err := br.Query()
	if err != nil {
		return store.Checkpoint{}, err
	}
	writes, chunked, err := scanWrites(rows)
	if err != nil {
		return store.Checkpoint{}, err
	}
	if err := br.Close(); err != nil {
		return store.Checkpoint{}, err
	}
	// chunked values take more queries, once the batch is read
	if enc != nil && *enc == store.EncChunked && sm.StateType != store.StateNone {
		if cp.State, err = s.openChunked(ctx, tx.Query, data, *size, x.hash); err != nil {
			return store.Checkpoint{}, chunkedCorrupt(sm.CheckpointID, sm.WorkflowID, err)
		}
	}
	if sm.StateType != store.StateNone && int64(len(cp.State)) != sm.SizeBytes {
		return store.Checkpoint{}, corrupt("state size mismatch")
	}
	if cp.PendingWrites, err = s.openWrites(ctx, tx.Query, sm.CheckpointID, writes, chunked, true); err != nil {
		if ce := asCorrupt(err); ce != nil {
			ce.WorkflowID = sm.WorkflowID
		}
		return store.Checkpoint{}, err
	}
	return cp, nil
}

// chunkedWrite is a pending write whose value is chunked: its position, size, SHA-256 and
// index, reassembled by openWrites.
type chunkedWrite struct {
	i     int
	size  int64
	sha   []byte
	index []byte
}

func scanWrites(rows pgx.Rows) ([]store.Write, []chunkedWrite, error) {
	defer rows.Close()
	var out []store.Write
	var chunked []chunkedWrite
	for rows.Next() {
		var w store.Write
		var typ *string
		var enc int16
		var size *int64
		var sha []byte
		if err := rows.Scan(&w.TaskID, &w.TaskPath, &w.Idx, &w.Channel, &typ, &w.IsBytes, &enc, &size, &sha, &w.Value); err != nil {
			return nil, nil, err
		}
		w.Type = deref(typ)
		if enc == store.EncChunked {
			c := chunkedWrite{i: len(out), sha: sha, index: w.Value}
			if size != nil {
				c.size = *size
			}
			chunked = append(chunked, c)
			w.Value = nil
		}
		out = append(out, w)
	}
	return out, chunked, rows.Err()
}

// openWrites reassembles the chunked values of writes. A damaged one is the checkpoint's
// *store.CorruptError when strict; else its Value stays nil.
func (s *Store) openWrites(ctx context.Context, query pgQuery, checkpointID string, writes []store.Write, chunked []chunkedWrite, strict bool) ([]store.Write, error) {
	for _, c := range chunked {
		v, err := s.openChunked(ctx, query, c.index, c.size, c.sha)
		if err != nil {
			reason, ok := store.ChunkedReason(err)
			if !ok {
				return nil, err
			}
			if !strict {
				continue
			}
			w := writes[c.i]
			return nil, &store.CorruptError{CheckpointID: checkpointID, Reason: fmt.Sprintf("pending write %s/%d: %s", w.TaskID, w.Idx, reason)}
		}
		writes[c.i].Value = v
	}
	return writes, nil
}

// Load returns the verified checkpoint checkpointID: ErrNotFound, or a *CorruptError if it fails
// verification.
func (s *Store) Load(ctx context.Context, checkpointID string) (store.Checkpoint, error) {
	var cp store.Checkpoint
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		cp, err = s.loadOne(ctx, tx, "c.checkpoint_id = $1", checkpointID)
		return err
	})
	if err != nil {
		if ce := asCorrupt(err); ce != nil {
			if ce.CheckpointID == "" {
				ce.CheckpointID = checkpointID
			}
			return store.Checkpoint{}, ce
		}
		if errors.Is(err, store.ErrNotFound) {
			return store.Checkpoint{}, fmt.Errorf("checkpoint %q: %w", checkpointID, store.ErrNotFound)
		}
		return store.Checkpoint{}, wrapDB(fmt.Sprintf("load checkpoint %q", checkpointID), err)
	}
	return cp, nil
}

// LoadLatest returns the newest (highest seq) intact checkpoint of (workflowID, namespace),
// listing newer corrupt ones it skipped in RecoveredFrom. ErrNotFound if there is none; if every
// one is corrupt, the *CorruptError of the newest.
func (s *Store) LoadLatest(ctx context.Context, workflowID, namespace string) (store.LoadResult, error) {
	var res store.LoadResult
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		res = store.LoadResult{}
		// usually the newest is intact: load it straight away, and list the others only if not
		cp, err := s.loadOne(ctx, tx, `c.id = (SELECT id FROM checkpoints WHERE workflow_id = $1 AND namespace = $2
			ORDER BY seq DESC LIMIT 1)`, workflowID, namespace)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("workflow %q namespace %q has no checkpoints: %w", workflowID, namespace, store.ErrNotFound)
		}
		first := asCorrupt(err)
		if first == nil {
			res.Checkpoint = cp
			return err
		}
		res.RecoveredFrom = append(res.RecoveredFrom, store.Recovery{CheckpointID: first.CheckpointID, Reason: first.Reason})
		refs, err := collectRefs(tx.Query(ctx, `SELECT id, checkpoint_id FROM checkpoints WHERE workflow_id = $1 AND namespace = $2
			AND seq < (SELECT seq FROM checkpoints WHERE checkpoint_id = $3) ORDER BY seq DESC`, workflowID, namespace, first.CheckpointID))
		if err != nil {
			return err
		}
		for _, r := range refs {
			cp, err := s.loadOne(ctx, tx, "c.id = $1", r.rowid)
			if ce := asCorrupt(err); ce != nil {
				res.RecoveredFrom = append(res.RecoveredFrom, store.Recovery{CheckpointID: r.id, Reason: ce.Reason})
				continue
			}
			if err != nil {
				return err
			}
			res.Checkpoint = cp
			return nil
		}
		first.AlsoCorrupt = res.RecoveredFrom[1:]
		return first
	})
	if err != nil {
		if ce := asCorrupt(err); ce != nil {
			return store.LoadResult{}, ce
		}
		if errors.Is(err, store.ErrNotFound) {
			return store.LoadResult{}, err
		}
		return store.LoadResult{}, wrapDB(fmt.Sprintf("load latest of workflow %q", workflowID), err)
	}
	if len(res.RecoveredFrom) > 0 {
		s.log.Warn("ckptd store: skipped corrupt checkpoints", "workflowId", workflowID, "recoveredFrom", res.RecoveredFrom,
			"loaded", res.CheckpointID)
	}
	return res, nil
}

// listQuery builds the SQL for f: within a workflow by seq, across workflows by save order.
func listQuery(f store.ListFilter, beforeRowid, beforeSeq int64, beforeSameWf bool) (string, []any, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	type kv struct{ k, v string }
	var meta []kv
	for k, raw := range f.Metadata {
		c, err := store.CanonicalJSON(raw)
		if err != nil {
			return "", nil, invalid("metadata", "key %q: %v", k, err)
		}
		meta = append(meta, kv{k, c})
	}
	sort.Slice(meta, func(a, b int) bool { return meta[a].k < meta[b].k })
	existsMeta := func(ms []kv) {
		for _, m := range ms {
			where = append(where, `EXISTS (SELECT 1 FROM checkpoint_meta m WHERE m.key = `+arg(m.k)+` AND m.value = `+arg(m.v)+` AND m.ckpt = c.id)`)
		}
	}
	var order string
	switch {
	case f.WorkflowID != "":
		where = append(where, `c.workflow_id = `+arg(f.WorkflowID))
		if f.Namespace != nil {
			where = append(where, `c.namespace = `+arg(*f.Namespace))
		}
		order = `c.seq DESC`
		if f.Before != "" {
			if beforeSameWf {
				where = append(where, `c.seq < `+arg(beforeSeq))
			} else {
				where = append(where, `c.id < `+arg(beforeRowid))
			}
		}
		existsMeta(meta)
	default:
		order = `c.id DESC`
		if f.Namespace != nil {
			where = append(where, `c.namespace = `+arg(*f.Namespace))
			if *f.Namespace != "" {
				// the partial index's condition, spelt out so that a generic plan may use it
				where = append(where, `c.namespace <> ''`)
			}
		}
		if f.Before != "" {
			where = append(where, `c.id < `+arg(beforeRowid))
		}
		existsMeta(meta)
	}
	if f.Phase != "" {
		where = append(where, `c.phase = `+arg(string(f.Phase)))
		if f.Phase != store.PhaseCompleted {
			where = append(where, `c.phase <> 'completed'`) // as above: checkpoints_phase_id
		}
	}
	if f.Validation != "" {
		where = append(where, `c.validation_status = `+arg(f.Validation))
	}
	q := `SELECT ` + summaryCols + ` FROM checkpoints c`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY ` + order + ` LIMIT ` + arg(f.Limit)
	return q, args, nil
}

// List returns checkpoint summaries newest first (by seq within a workflow, by save order across
// workflows). Limit defaults to 100 and is capped at 10000.
func (s *Store) List(ctx context.Context, f store.ListFilter) ([]store.Summary, error) {
	if f.Limit <= 0 {
		f.Limit = store.DefaultListLimit
	}
	if f.Limit > store.MaxListLimit {
		f.Limit = store.MaxListLimit
	}
	if f.Phase != "" && !f.Phase.Valid() {
		return nil, invalid("phase", "%q is not one of before_step, completed, failed, interrupted", string(f.Phase))
	}
	if f.Validation != "" && !store.ValidationStatusValid(f.Validation) {
		return nil, invalid("validation", "%q is not one of passed, warning, failed", f.Validation)
	}
	var out []store.Summary
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		out = nil
		var bRowid, bSeq int64
		same := false
		if f.Before != "" {
			var wf string
			err := tx.QueryRow(ctx, `SELECT id, seq, workflow_id FROM checkpoints WHERE checkpoint_id = $1`, f.Before).
				Scan(&bRowid, &bSeq, &wf)
			if noRows(err) {
				return fmt.Errorf("before: checkpoint %q: %w", f.Before, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			same = wf == f.WorkflowID
		}
		q, args, err := listQuery(f, bRowid, bSeq, same)
		if err != nil {
			return err
		}
		return scanRows(ctx, tx, q, func(rows pgx.Rows) error {
			var x summaryScan
			if err := rows.Scan(x.dest()...); err != nil {
				return err
			}
			sm, err := x.finish()
			if err != nil { // listed anyway; loading it reports the corruption
				s.log.Warn("ckptd store: corrupt checkpoint summary", "checkpointId", sm.CheckpointID, "err", err)
			}
			out = append(out, sm)
			return nil
		}, args...)
	})
	if err != nil {
		var ie *store.InvalidError
		if errors.As(err, &ie) || errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		return nil, wrapDB("list checkpoints", err)
	}
	return out, nil
}

// summariesBy reads the summaries (unverified: a bad stored error is shown, not failed) of the
// checkpoints where col = ANY(arg), by row id.
func summariesBy(ctx context.Context, tx pgx.Tx, col string, arg any) (map[int64]store.Summary, error) {
	out := map[int64]store.Summary{}
	err := scanRows(ctx, tx, `SELECT `+summaryCols+` FROM checkpoints c WHERE `+col+` = ANY($1)`, func(rows pgx.Rows) error {
		var x summaryScan
		if err := rows.Scan(x.dest()...); err != nil {
			return err
		}
		sm, ferr := x.finish()
		if ferr != nil {
			sm.Error = &store.StepError{Message: "(corrupt: " + ferr.Error() + ")"}
		}
		out[x.rowid] = sm
		return nil
	}, arg)
	return out, err
}

// workflowCols are the workflows columns of a WorkflowInfo: the row and its kept figures.
const workflowCols = `w.workflow_id, w.updated_at, w.completed_at, w.ckpt_count, w.stored_bytes, w.latest_seq`

type workflowRow struct {
	info   store.WorkflowInfo
	latest int64
}

func scanWorkflow(row pgx.Row) (workflowRow, error) {
	var r workflowRow
	var completed *time.Time
	if err := row.Scan(&r.info.WorkflowID, &r.info.UpdatedAt, &completed, &r.info.Count, &r.info.StoredBytes, &r.latest); err != nil {
		return r, err
	}
	r.info.UpdatedAt = r.info.UpdatedAt.UTC()
	r.info.Completed = completed != nil
	r.info.Resumable = r.info.Count > 0 && completed == nil
	return r, nil
}

// withLatest reads the newest checkpoint of each row by its kept seq (one statement, probes by
// key) and returns the infos.
func withLatest(ctx context.Context, tx pgx.Tx, rs []workflowRow) ([]store.WorkflowInfo, error) {
	var wfs []string
	var seqs []int64
	for _, r := range rs {
		if r.latest > 0 {
			wfs, seqs = append(wfs, r.info.WorkflowID), append(seqs, r.latest)
		}
	}
	latest := map[string]store.Summary{}
	if len(wfs) > 0 {
		err := scanRows(ctx, tx, `SELECT `+summaryCols+` FROM unnest($1::text[], $2::bigint[]) AS l(wf, seq)
			JOIN checkpoints c ON c.workflow_id = l.wf AND c.seq = l.seq`, func(rows pgx.Rows) error {
			var x summaryScan
			if err := rows.Scan(x.dest()...); err != nil {
				return err
			}
			sm, _ := x.finish() // a bad stored error is reported when the checkpoint is loaded
			latest[sm.WorkflowID] = sm
			return nil
		}, wfs, seqs)
		if err != nil {
			return nil, err
		}
	}
	out := make([]store.WorkflowInfo, 0, len(rs))
	for _, r := range rs {
		if sm, ok := latest[r.info.WorkflowID]; ok && r.latest > 0 {
			r.info.Latest = &sm
		}
		out = append(out, r.info)
	}
	return out, nil
}

// workflowPageQuery builds the SQL of one page of f after k (nil: the first page), reading
// Limit+1 rows. Every shape walks partial indexes from the cursor on, stopping at the limit:
// workflows_claimable (the resumable workflows by update time), workflows_open (the workflows
// not completed, by id: the resumable ones by id), the primary key (every workflow by id), and
// for every workflow by update time workflows_claimable and workflows_rest (the others) merged
// (Merge Append). Claimable probes claims by key at the server's clock. Stored (one page of the
// largest) reads the whole table: it serves reports only.
func workflowPageQuery(f store.WorkflowFilter, k *store.WorkflowKey) (string, []any) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	limit := arg(f.Limit + 1)
	desc := `updated_at DESC, workflow_id DESC`
	if f.Ascending() {
		desc = `updated_at, workflow_id`
	}
	var after string
	if k != nil {
		cmp := "<"
		if f.Ascending() {
			cmp = ">"
		}
		if f.Order == store.OrderID {
			after = `w.workflow_id ` + cmp + ` ` + arg(k.ID)
		} else {
			after = `(w.updated_at, w.workflow_id) ` + cmp + ` (` + arg(k.UpdatedAt) + `::timestamptz, ` + arg(k.ID) + `)`
		}
	}
	page := func(order string, where ...string) string {
		if after != "" {
			where = append(where, after)
		}
		if f.Claimable {
			where = append(where, `NOT EXISTS (SELECT 1 FROM claims k WHERE k.workflow_id = w.workflow_id
				AND k.owner IS NOT NULL AND k.expires_at > (SELECT clock_timestamp()))`)
		}
		q := `SELECT ` + workflowCols + ` FROM workflows w`
		if len(where) > 0 {
			q += ` WHERE ` + strings.Join(where, ` AND `)
		}
		return q + ` ORDER BY ` + order + ` LIMIT ` + limit
	}
	const resumable, rest = `w.completed_at IS NULL AND w.ckpt_count > 0`, `(w.completed_at IS NOT NULL OR w.ckpt_count = 0)`
	switch {
	case f.Order == store.OrderStored:
		return page(`w.stored_bytes DESC, w.workflow_id`), args
	case f.Order == store.OrderID && f.ResumableOnly:
		return page(`w.workflow_id`, `w.completed_at IS NULL`, `w.ckpt_count > 0`), args
	case f.Order == store.OrderID:
		return page(`w.workflow_id`), args
	case f.ResumableOnly:
		return page(`w.`+strings.ReplaceAll(desc, ", ", ", w."), resumable), args
	}
	// every workflow by update time: the two halves, each at most a page, merged
	return `(` + page(`w.`+strings.ReplaceAll(desc, ", ", ", w."), resumable) + `) UNION ALL (` +
		page(`w.`+strings.ReplaceAll(desc, ", ", ", w."), rest) + `) ORDER BY ` + desc + ` LIMIT ` + limit, args
}

// ListWorkflows summarises one page of workflows (store.WorkflowFilter) from their kept
// figures: a page costs its rows and one probe each for their newest checkpoint.
func (s *Store) ListWorkflows(ctx context.Context, f store.WorkflowFilter) (store.WorkflowPage, error) {
	if err := f.Normalize(); err != nil {
		return store.WorkflowPage{}, err
	}
	k, err := f.DecodeCursor()
	if err != nil {
		return store.WorkflowPage{}, err
	}
	if k != nil {
		if err := noNUL("cursor", k.ID); err != nil {
			return store.WorkflowPage{}, err
		}
	}
	q, args := workflowPageQuery(f, k)
	var page store.WorkflowPage
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		var rs []workflowRow
		err := scanRows(ctx, tx, q, func(rows pgx.Rows) error {
			r, err := scanWorkflow(rows)
			if err != nil {
				return err
			}
			rs = append(rs, r)
			return nil
		}, args...)
		if err != nil {
			return err
		}
		infos, err := withLatest(ctx, tx, rs)
		if err != nil {
			return err
		}
		page = f.Page(infos)
		return nil
	})
	if err != nil {
		what := "list workflows"
		if f.Claimable {
			what = "list claimable workflows"
		}
		return store.WorkflowPage{}, wrapDB(what, err)
	}
	return page, nil
}

// Workflow summarises one workflow from its kept figures; ErrNotFound if it is unknown.
func (s *Store) Workflow(ctx context.Context, workflowID string) (store.WorkflowInfo, error) {
	var info store.WorkflowInfo
	found := false
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		r, err := scanWorkflow(tx.QueryRow(ctx, `SELECT `+workflowCols+` FROM workflows w WHERE w.workflow_id = $1`, workflowID))
		if noRows(err) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		infos, err := withLatest(ctx, tx, []workflowRow{r})
		if err != nil {
			return err
		}
		info, found = infos[0], true
		return nil
	})
	if err != nil {
		return store.WorkflowInfo{}, wrapDB(fmt.Sprintf("workflow %q", workflowID), err)
	}
	if !found {
		return store.WorkflowInfo{}, fmt.Errorf("workflow %q: %w", workflowID, store.ErrNotFound)
	}
	return info, nil
}

// Summaries returns the stored summaries (not verified) of those of ids that exist, by id.
func (s *Store) Summaries(ctx context.Context, ids []string) (map[string]store.Summary, error) {
	out := map[string]store.Summary{}
	if len(ids) == 0 {
		return out, nil
	}
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		clear(out)
		sums, err := summariesBy(ctx, tx, "c.checkpoint_id", ids)
		for _, sm := range sums {
			out[sm.CheckpointID] = sm
		}
		return err
	})
	if err != nil {
		return nil, wrapDB("read summaries", err)
	}
	return out, nil
}

// Inspect reads checkpointID like Load but reports a failed verification in Corrupt instead of
// failing. ErrNotFound if it does not exist.
func (s *Store) Inspect(ctx context.Context, checkpointID string) (store.Inspection, error) {
	var in store.Inspection
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		in = store.Inspection{}
		cp, err := s.loadOne(ctx, tx, "c.checkpoint_id = $1", checkpointID)
		if ce := asCorrupt(err); ce != nil {
			in.Corrupt = ce.Reason
			if cp, err = s.readUnverified(ctx, tx, checkpointID); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		in.Checkpoint = cp
		if cp.SHA256 == "" {
			return nil
		}
		var enc *int64
		if err := tx.QueryRow(ctx, `SELECT (SELECT s.encoding FROM states s WHERE s.hash = c.state_hash),
			(SELECT count(*) - 1 FROM checkpoints o WHERE o.state_hash = c.state_hash)
			FROM checkpoints c WHERE c.checkpoint_id = $1`, checkpointID).Scan(&enc, &in.SharedWith); err != nil {
			return err
		}
		if enc != nil {
			in.Encoding = store.EncodingName(int(*enc))
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.Inspection{}, fmt.Errorf("checkpoint %q: %w", checkpointID, store.ErrNotFound)
		}
		return store.Inspection{}, wrapDB(fmt.Sprintf("inspect checkpoint %q", checkpointID), err)
	}
	return in, nil
}

// readUnverified reads a checkpoint's summary, task lists and pending writes without its state.
func (s *Store) readUnverified(ctx context.Context, tx pgx.Tx, checkpointID string) (store.Checkpoint, error) {
	var x summaryScan
	var completed, pending []byte
	err := tx.QueryRow(ctx, `SELECT `+summaryCols+`, c.completed_tasks, c.pending_tasks
		FROM checkpoints c WHERE c.checkpoint_id = $1`, checkpointID).Scan(append(x.dest(), &completed, &pending)...)
	if noRows(err) {
		return store.Checkpoint{}, store.ErrNotFound
	}
	if err != nil {
		return store.Checkpoint{}, err
	}
	sm, ferr := x.finish()
	if ferr != nil {
		sm.Error = &store.StepError{Message: "(corrupt: " + ferr.Error() + ")"}
	}
	cp := store.Checkpoint{Summary: sm}
	if len(completed) > 0 {
		cp.CompletedTasks = json.RawMessage(completed)
	}
	if len(pending) > 0 {
		cp.PendingTasks = json.RawMessage(pending)
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(writesQuery, `$1`), checkpointID)
	if err != nil {
		return store.Checkpoint{}, err
	}
	writes, chunked, err := scanWrites(rows)
	if err != nil {
		return store.Checkpoint{}, err
	}
	cp.PendingWrites, err = s.openWrites(ctx, tx.Query, checkpointID, writes, chunked, false)
	return cp, err
}

// Usage adds up checkpoint sizes and counts workflows by state.
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	var u store.Usage
	// the kept counters (figures.go); the resumable workflows through their partial index
	err := s.readRow(ctx, `SELECT (SELECT coalesce(sum(state_bytes), 0)::bigint FROM counters),
		(SELECT coalesce(sum(checkpoint_stored), 0)::bigint FROM counters),
		(SELECT count(*) FROM workflows WHERE completed_at IS NULL AND ckpt_count > 0),
		(SELECT count(*) FROM workflows WHERE completed_at IS NOT NULL)`, nil,
		&u.StateBytes, &u.CheckpointStored, &u.ResumableWorkflow, &u.CompletedWorkflow)
	if err != nil {
		return store.Usage{}, wrapDB("usage", err)
	}
	return u, nil
}

// PutWrites stores pending writes of a task against checkpointID (which must exist in
// workflowID). idx >= 0: stored once (a repeat is ignored); idx < 0: replaced. It returns the
// rows inserted or replaced.
func (s *Store) PutWrites(ctx context.Context, workflowID, namespace, checkpointID string, writes []store.Write) (int, error) {
	return s.putWrites(ctx, workflowID, namespace, checkpointID, writes, 0)
}

// putWrites is PutWrites under fencing token (0: none), checked in its transaction
// (PutWritesFenced).
func (s *Store) putWrites(ctx context.Context, workflowID, namespace, checkpointID string, writes []store.Write, token int64) (int, error) {
	if workflowID == "" {
		return 0, invalid("workflowId", "required")
	}
	if checkpointID == "" {
		return 0, invalid("checkpointId", "required")
	}
	for i, w := range writes {
		if w.TaskID == "" {
			return 0, invalid(fmt.Sprintf("writes[%d].taskId", i), "required")
		}
		if w.Channel == "" {
			return 0, invalid(fmt.Sprintf("writes[%d].channel", i), "required")
		}
		f := fmt.Sprintf("writes[%d].", i)
		if err := noNUL(f+"taskId", w.TaskID, f+"taskPath", w.TaskPath, f+"channel", w.Channel, f+"type", w.Type); err != nil {
			return 0, err
		}
	}
	if err := noNUL("workflowId", workflowID, "namespace", namespace, "checkpointId", checkpointID); err != nil {
		return 0, err
	}
	prepared := s.prepareWrites(writes)
	stored := 0
	err := s.do(ctx, []int64{wfKey(workflowID)}, func(ctx context.Context, w *wtx) error {
		stored = 0
		if err := s.fence(ctx, w, workflowID, token); err != nil {
			return err
		}
		var wf string
		err := w.queryRow(ctx, `SELECT workflow_id FROM checkpoints WHERE checkpoint_id = $1`, checkpointID).Scan(&wf)
		if noRows(err) {
			return fmt.Errorf("checkpoint %q: %w", checkpointID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if wf != workflowID {
			return fmt.Errorf("checkpoint %q belongs to workflow %q: %w", checkpointID, wf, store.ErrConflict)
		}
		for _, pw := range prepared {
			ok, err := s.putWrite(ctx, w, checkpointID, workflowID, namespace, pw, pw.Idx < 0)
			if err != nil {
				return err
			}
			if ok {
				stored++
			}
		}
		return nil
	})
	if err != nil {
		return 0, wrapDB(fmt.Sprintf("put writes for checkpoint %q", checkpointID), err)
	}
	return stored, nil
}
