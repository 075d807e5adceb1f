package sqlite

// Salvage: reading what is left of a damaged database (ckptd recover). Every table is listed in
// rowid order in small batches; a batch that meets a damaged page is resumed past it (the next
// readable rowid is found by probing), and the indexes are listed too, so that rows on damaged
// table pages are still named. Each row is then read, and verified, on its own.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/ckptd/ckptd/store"
)

// SalvageProblem is something a salvage could not read or verify.
type SalvageProblem struct {
	// Kind: "checkpoint", "workflow", "source manifest", "thread checkpoint", "thread value",
	// "thread write" or "table".
	Kind string `json:"kind"`
	// ID names it: a checkpoint id, "channel@version", "checkpointId/taskId/idx", a table name.
	ID string `json:"id,omitempty"`
	// Owner is its workflow or LangGraph thread, when known.
	Owner  string `json:"owner,omitempty"`
	Reason string `json:"reason"`
}

// Survey is what a database holds, as far as it can be listed.
type Survey struct {
	Workflows map[string]*SurveyWorkflow
	Threads   map[string]*SurveyThread
	// Problems are the tables and indexes that could not be listed completely.
	Problems []SalvageProblem
}

// SurveyWorkflow is one workflow of a Survey.
type SurveyWorkflow struct {
	// Record is the workflow's own row; nil when it could not be read (RecordProblem says why).
	Record        *store.WorkflowRecord
	RecordProblem string
	// Checkpoints in seq order (seq 0: not known, listed last).
	Checkpoints []SurveyCheckpoint
}

// SurveyCheckpoint is one checkpoint of a SurveyWorkflow.
type SurveyCheckpoint struct {
	RowID        int64
	CheckpointID string // "" when only an index without it named the row
	Seq          int64
}

// SurveyThread is one LangGraph thread of a Survey: the rowids of its rows.
type SurveyThread struct {
	Checkpoints, Values, Writes []SurveyRow
}

// SurveyRow is a LangGraph row of a SurveyThread.
type SurveyRow struct {
	RowID int64
	Name  string // checkpoint id, "channel@version", "checkpointId/taskId/idx"
	// Namespace, Channel, Version and Variant key a value (Channel@Version in Namespace).
	Namespace, Channel, Version string
	Variant                     int
}

const salvageBatch = 256

// scanRowids lists table's rows in rowid order, resuming past damaged pages. The query selects
// "rowid, cols"; each scans one row and returns its rowid. It returns one SalvageProblem per
// run of rows it could not read.
func (s *Store) scanRowids(ctx context.Context, table, cols string, each func(rows *sql.Rows) (int64, error)) ([]SalvageProblem, error) {
	q := fmt.Sprintf(`SELECT rowid, %s FROM %s WHERE rowid > ? ORDER BY rowid LIMIT %d`, cols, table, salvageBatch)
	first := fmt.Sprintf(`SELECT rowid FROM %s WHERE rowid > ? ORDER BY rowid LIMIT 1`, table)
	// next returns the smallest rowid after k (ok false: none); a damaged page met while
	// seeking is an error.
	next := func(k int64) (int64, bool, error) {
		var r int64
		err := s.rdb.QueryRowContext(ctx, first, k).Scan(&r)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return r, err == nil, err
	}
	var problems []SalvageProblem
	lost := func(from, to int64, err error) {
		r := fmt.Sprintf("rows with rowid %d to %d unreadable: %v", from, to, err)
		if to == math.MaxInt64 {
			r = fmt.Sprintf("rows after rowid %d unreadable: %v", from-1, err)
		}
		problems = append(problems, SalvageProblem{Kind: "table", ID: table, Reason: r})
	}
	after := int64(math.MinInt64)
	for {
		n, err := func() (int, error) {
			rows, err := s.rdb.QueryContext(ctx, q, after)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				rowid, err := each(rows)
				if err != nil {
					return n, err
				}
				after, n = rowid, n+1
			}
			return n, rows.Err()
		}()
		switch {
		case err == nil && n < salvageBatch:
			return problems, nil
		case err == nil:
			continue
		case !isDamaged(err):
			return problems, err
		}
		// The row after `after` could not be read. If its rowid can be found, only that row is
		// lost; otherwise the damage is in the b-tree above it: find where reading resumes.
		if r, ok, nerr := next(after); nerr == nil {
			if !ok {
				return problems, nil
			}
			lost(r, r, err)
			after = r
			continue
		} else if !isDamaged(nerr) {
			return problems, nerr
		}
		resume, end, perr := skipDamage(next, after)
		if perr != nil {
			return problems, perr
		}
		if end {
			lost(after+1, math.MaxInt64, err)
			return problems, nil
		}
		lost(after+1, resume, err)
		after = resume
		if err := ctx.Err(); err != nil {
			return problems, err
		}
	}
}

// skipDamage finds the smallest k > after at which a rowid search works again (next(k) does
// not fail), probing at doubling distances and then bisecting. end: no readable row follows.
func skipDamage(next func(int64) (int64, bool, error), after int64) (resume int64, end bool, err error) {
	failed := after // the largest probe known to fail
	for step := int64(1); ; step *= 2 {
		if step > 1<<62 || after > math.MaxInt64-step {
			return 0, true, nil
		}
		k := after + step
		if _, _, err := next(k); err != nil {
			if !isDamaged(err) {
				return 0, false, err
			}
			failed = k
			continue
		}
		lo, hi := failed, k // next(lo) fails, next(hi) works
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if _, _, err := next(mid); err == nil {
				hi = mid
			} else if isDamaged(err) {
				lo = mid
			} else {
				return 0, false, err
			}
		}
		if _, ok, _ := next(hi); !ok {
			return 0, true, nil
		}
		return hi, false, nil
	}
}

// scanIndex runs q (a covering scan of an index) and calls each per row until the end or the
// first damaged page (then one SalvageProblem naming what).
func (s *Store) scanIndex(ctx context.Context, what, q string, each func(rows *sql.Rows) error) ([]SalvageProblem, error) {
	rows, err := s.rdb.QueryContext(ctx, q)
	if err == nil {
		for rows.Next() {
			if err = each(rows); err != nil {
				break
			}
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
	}
	if err != nil && isDamaged(err) {
		return []SalvageProblem{{Kind: "table", ID: what, Reason: "index listing stopped at damage: " + err.Error()}}, nil
	}
	return nil, err
}

// Survey lists the workflows, checkpoints and LangGraph rows of the database, reading around
// damaged pages: table rows in rowid order, and the rows the indexes name, so that a row on a
// damaged table page is still listed by its key.
func (s *Store) Survey(ctx context.Context) (*Survey, error) {
	sv := &Survey{Workflows: map[string]*SurveyWorkflow{}, Threads: map[string]*SurveyThread{}}
	add := func(ps []SalvageProblem, err error) error {
		sv.Problems = append(sv.Problems, ps...)
		return err
	}
	wf := func(id string) *SurveyWorkflow {
		w := sv.Workflows[id]
		if w == nil {
			w = &SurveyWorkflow{}
			sv.Workflows[id] = w
		}
		return w
	}
	// workflows: their own rows
	err := add(s.scanRowids(ctx, "workflows", "workflow_id, created_at, updated_at, completed_at, retention, config",
		func(rows *sql.Rows) (int64, error) {
			var rowid, created, updated int64
			var id string
			var completed sql.NullInt64
			var ret, cfg sql.NullString
			if err := rows.Scan(&rowid, &id, &created, &updated, &completed, &ret, &cfg); err != nil {
				return 0, err
			}
			rec := &store.WorkflowRecord{WorkflowID: id, CreatedAt: time.UnixMicro(created).UTC(), UpdatedAt: time.UnixMicro(updated).UTC()}
			if completed.Valid {
				rec.CompletedAt = time.UnixMicro(completed.Int64).UTC()
			}
			w := wf(id)
			if ret.Valid {
				var r store.Retention
				if err := json.Unmarshal([]byte(ret.String), &r); err != nil {
					w.RecordProblem = "stored retention does not decode: " + err.Error()
					return rowid, nil
				}
				rec.Retention = &r
			}
			if cfg.Valid && cfg.String != "" {
				if !json.Valid([]byte(cfg.String)) {
					w.RecordProblem = "stored configuration is not JSON"
					return rowid, nil
				}
				rec.Config = json.RawMessage(cfg.String)
			}
			w.Record = rec
			return rowid, nil
		}))
	if err != nil {
		return nil, fmt.Errorf("survey workflows: %w", err)
	}
	// checkpoints: the table, then both indexes that name its rows
	type ck struct {
		id, wf string
		seq    int64
	}
	cks := map[int64]*ck{}
	get := func(rowid int64) *ck {
		c := cks[rowid]
		if c == nil {
			c = &ck{}
			cks[rowid] = c
		}
		return c
	}
	err = add(s.scanRowids(ctx, "checkpoints", "checkpoint_id, workflow_id, seq", func(rows *sql.Rows) (int64, error) {
		var rowid int64
		var c ck
		if err := rows.Scan(&rowid, &c.id, &c.wf, &c.seq); err != nil {
			return 0, err
		}
		*get(rowid) = c
		return rowid, nil
	}))
	if err != nil {
		return nil, fmt.Errorf("survey checkpoints: %w", err)
	}
	err = add(s.scanIndex(ctx, "checkpoints_wf_seq", `SELECT workflow_id, seq, id FROM checkpoints INDEXED BY checkpoints_wf_seq
		ORDER BY workflow_id, seq`, func(rows *sql.Rows) error {
		var wf string
		var seq, rowid int64
		if err := rows.Scan(&wf, &seq, &rowid); err != nil {
			return err
		}
		c := get(rowid)
		c.wf, c.seq = wf, seq
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("survey checkpoints: %w", err)
	}
	err = add(s.scanIndex(ctx, "checkpoint ids", `SELECT checkpoint_id, id FROM checkpoints WHERE checkpoint_id >= ''
		ORDER BY checkpoint_id`, func(rows *sql.Rows) error {
		var id string
		var rowid int64
		if err := rows.Scan(&id, &rowid); err != nil {
			return err
		}
		get(rowid).id = id
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("survey checkpoints: %w", err)
	}
	for rowid, c := range cks {
		w := wf(c.wf) // "" when only the id index named it
		w.Checkpoints = append(w.Checkpoints, SurveyCheckpoint{RowID: rowid, CheckpointID: c.id, Seq: c.seq})
	}
	for id, w := range sv.Workflows {
		sort.Slice(w.Checkpoints, func(i, j int) bool {
			a, b := w.Checkpoints[i], w.Checkpoints[j]
			if (a.Seq == 0) != (b.Seq == 0) {
				return b.Seq == 0
			}
			if a.Seq != b.Seq {
				return a.Seq < b.Seq
			}
			return a.RowID < b.RowID
		})
		if w.Record == nil && w.RecordProblem == "" && id != "" {
			w.RecordProblem = "its row is unreadable or missing"
		}
	}
	// LangGraph rows
	if err := s.surveyLG(ctx, sv); err != nil {
		return nil, err
	}
	return sv, nil
}

func (s *Store) surveyLG(ctx context.Context, sv *Survey) error {
	th := func(id string) *SurveyThread {
		t := sv.Threads[id]
		if t == nil {
			t = &SurveyThread{}
			sv.Threads[id] = t
		}
		return t
	}
	for _, tb := range []struct {
		table, cols, index string
		add                func(t *SurveyThread, r SurveyRow)
		scan               func(rows *sql.Rows, thread *string, r *SurveyRow) error
	}{
		{"lg_checkpoints", "thread_id, namespace, checkpoint_id", `SELECT rowid, thread_id, namespace, checkpoint_id
			FROM lg_checkpoints INDEXED BY lg_checkpoints_key ORDER BY thread_id, namespace, checkpoint_id`,
			func(t *SurveyThread, r SurveyRow) { t.Checkpoints = append(t.Checkpoints, r) },
			func(rows *sql.Rows, thread *string, r *SurveyRow) error {
				return rows.Scan(&r.RowID, thread, &r.Namespace, &r.Name)
			}},
		{"lg_blobs", "thread_id, namespace, channel, version, " + s.lgVariantCol(ctx), `SELECT rowid, thread_id, namespace, channel, version, ` +
			s.lgVariantCol(ctx) + ` FROM lg_blobs INDEXED BY lg_blobs_key ORDER BY thread_id, namespace, channel, version`,
			func(t *SurveyThread, r SurveyRow) { t.Values = append(t.Values, r) },
			func(rows *sql.Rows, thread *string, r *SurveyRow) error {
				if err := rows.Scan(&r.RowID, thread, &r.Namespace, &r.Channel, &r.Version, &r.Variant); err != nil {
					return err
				}
				r.Name = r.Channel + "@" + r.Version
				if r.Variant != 0 {
					r.Name += fmt.Sprintf("#%d", r.Variant)
				}
				return nil
			}},
		{"lg_writes", "thread_id, namespace, checkpoint_id || '/' || task_id || '/' || idx", `SELECT rowid, thread_id, namespace,
			checkpoint_id || '/' || task_id || '/' || idx FROM lg_writes INDEXED BY lg_writes_key
			ORDER BY thread_id, namespace, checkpoint_id, task_id, idx`,
			func(t *SurveyThread, r SurveyRow) { t.Writes = append(t.Writes, r) },
			func(rows *sql.Rows, thread *string, r *SurveyRow) error {
				return rows.Scan(&r.RowID, thread, &r.Namespace, &r.Name)
			}},
	} {
		seen := map[int64]bool{}
		record := func(thread string, r SurveyRow) {
			if !seen[r.RowID] {
				seen[r.RowID] = true
				tb.add(th(thread), r)
			}
		}
		ps, err := s.scanRowids(ctx, tb.table, tb.cols, func(rows *sql.Rows) (int64, error) {
			var thread string
			var r SurveyRow
			if err := tb.scan(rows, &thread, &r); err != nil {
				return 0, err
			}
			record(thread, r)
			return r.RowID, nil
		})
		sv.Problems = append(sv.Problems, ps...)
		if err != nil {
			return fmt.Errorf("survey %s: %w", tb.table, err)
		}
		ps, err = s.scanIndex(ctx, tb.table+" index", tb.index, func(rows *sql.Rows) error {
			var thread string
			var r SurveyRow
			if err := tb.scan(rows, &thread, &r); err != nil {
				return err
			}
			record(thread, r)
			return nil
		})
		sv.Problems = append(sv.Problems, ps...)
		if err != nil {
			return fmt.Errorf("survey %s: %w", tb.table, err)
		}
	}
	for _, t := range sv.Threads {
		for _, rs := range [][]SurveyRow{t.Checkpoints, t.Values, t.Writes} {
			sort.Slice(rs, func(i, j int) bool { return rs[i].RowID < rs[j].RowID })
		}
	}
	return nil
}

// SalvageCheckpoint reads and verifies the checkpoint at rowid, complete (state, task lists,
// pending writes) with its source manifest. A manifest that cannot be read leaves Manifest nil
// and is reported in manifestErr; err is the checkpoint's own failure (a *store.CorruptError
// when it does not verify or sits on a damaged page).
func (s *Store) SalvageCheckpoint(ctx context.Context, rowid int64) (cp store.Checkpoint, manifestErr, err error) {
	err = s.readTx(ctx, func(tx *rtx) error {
		var err error
		if cp, err = s.loadOne(ctx, tx, "c.id = ?", rowid); err != nil {
			return err
		}
		m, merr := s.loadManifestTx(ctx, tx, rowid)
		switch {
		case merr == nil:
			cp.Manifest = &m
		case errors.Is(merr, store.ErrNotFound):
		case isDamaged(merr):
			manifestErr = fmt.Errorf("database page corrupt: %w", merr)
		default:
			var ce *store.CorruptError
			if !errors.As(merr, &ce) {
				return merr
			}
			manifestErr = merr
		}
		return nil
	})
	return cp, manifestErr, err
}

// SalvageLGRow reads and verifies one LangGraph row (kind store.LGKindCheckpoint, LGKindValue or
// LGKindWrite) by rowid.
func (s *Store) SalvageLGRow(ctx context.Context, kind string, rowid int64) (store.LGRecord, error) {
	r := store.LGRecord{Kind: kind}
	var enc int
	var size int64
	var sha, data, raw []byte
	var what string
	var oerr error // the value's verification
	err := s.readTx(ctx, func(tx *rtx) error {
		switch kind {
		case store.LGKindCheckpoint:
			var parent sql.NullString
			var created int64
			var versions string
			var meta, refs []byte
			if err := tx.QueryRowContext(ctx, `SELECT namespace, checkpoint_id, parent_id, created_at, channel_versions, metadata,
					type, encoding, size, sha256, data, `+s.lgRefsCol(ctx)+` FROM lg_checkpoints WHERE id = ?`, rowid).Scan(&r.Namespace, &r.CheckpointID,
				&parent, &created, &versions, &meta, &r.Type, &enc, &size, &sha, &data, &refs); err != nil {
				return err
			}
			var err error
			if r.ValueRefs, err = store.ParseValueRefs(refs); err != nil {
				return &store.CorruptError{CheckpointID: r.CheckpointID, Reason: "stored value refs do not parse: " + err.Error()}
			}
			r.ParentID, r.CreatedAt, r.ChannelVersions = parent.String, time.UnixMicro(created).UTC(), json.RawMessage(versions)
			if meta != nil {
				r.Metadata = json.RawMessage(meta)
			}
			what = "checkpoint"
		case store.LGKindValue:
			if err := tx.QueryRowContext(ctx, `SELECT namespace, channel, version, `+s.lgVariantCol(ctx)+`, type, encoding, size, sha256, data
					FROM lg_blobs WHERE id = ?`, rowid).Scan(&r.Namespace, &r.Channel, &r.Version, &r.Variant, &r.Type, &enc, &size, &sha, &data); err != nil {
				return err
			}
			what = store.LGValueWhat(r.Channel, r.Version, r.Variant)
		case store.LGKindWrite:
			if err := tx.QueryRowContext(ctx, `SELECT namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding,
					size, sha256, data FROM lg_writes WHERE id = ?`, rowid).Scan(&r.Namespace, &r.CheckpointID, &r.TaskID, &r.Idx,
				&r.TaskPath, &r.Channel, &r.Type, &enc, &size, &sha, &data); err != nil {
				return err
			}
			what = fmt.Sprintf("write %s/%d", r.TaskID, r.Idx)
		default:
			return fmt.Errorf("unknown LangGraph row kind %q", kind)
		}
		if enc == store.EncChunked { // reassembled from the chunks in the same snapshot
			raw, oerr = s.lgOpen(ctx, tx.cached, r.CheckpointID, what, data, enc, size, sha)
		}
		return nil
	})
	if err != nil {
		if isDamaged(err) {
			return r, &store.CorruptError{CheckpointID: r.CheckpointID, Reason: "database page corrupt: " + err.Error()}
		}
		return r, wrapDB("read LangGraph row", err)
	}
	if enc != store.EncChunked {
		raw, oerr = store.Unpack(r.CheckpointID, what, data, enc, size, sha)
	}
	if oerr != nil {
		return r, oerr
	}
	r.Data = raw
	return r, r.Check()
}

// SagaLog is a workflow's saga records as a salvage read them: the compensations registered
// (in registration order) and the rollbacks begun.
type SagaLog struct {
	Compensations []store.Compensation
	Rollbacks     []store.Rollback
}

// SalvageSaga reads the compensation log and the rollbacks, resuming past damaged pages. A row
// that does not hold what a compensation or rollback must (an action that is not JSON, an
// unknown status) is a problem of its own; the others are returned per workflow.
func (s *Store) SalvageSaga(ctx context.Context) (map[string]*SagaLog, []SalvageProblem, error) {
	logs := map[string]*SagaLog{}
	log := func(wf string) *SagaLog {
		l := logs[wf]
		if l == nil {
			l = &SagaLog{}
			logs[wf] = l
		}
		return l
	}
	var problems []SalvageProblem
	ps, err := s.scanRowids(ctx, "compensations", compensationCols, func(rows *sql.Rows) (int64, error) {
		var rowid int64
		var c store.Compensation
		var cp, step, task, errMsg, rb sql.NullString
		var created int64
		var done sql.NullInt64
		var action []byte
		if err := rows.Scan(&rowid, &c.CompensationID, &c.WorkflowID, &c.Namespace, &c.Seq, &c.AfterSeq, &cp, &step, &task,
			&c.Description, &c.Status, &errMsg, &rb, &created, &done, &action); err != nil {
			return 0, err
		}
		switch {
		case !json.Valid(action):
			problems = append(problems, SalvageProblem{Kind: "compensation", ID: c.CompensationID, Owner: c.WorkflowID,
				Reason: "its stored action is not JSON"})
			return rowid, nil
		case c.Status != store.CompensationPending && c.Status != store.CompensationDone && c.Status != store.CompensationFailed:
			problems = append(problems, SalvageProblem{Kind: "compensation", ID: c.CompensationID, Owner: c.WorkflowID,
				Reason: fmt.Sprintf("its stored status %q is not pending, done or failed", c.Status)})
			return rowid, nil
		}
		c.CheckpointID, c.StepName, c.TaskID, c.Error, c.RollbackID = cp.String, step.String, task.String, errMsg.String, rb.String
		c.CreatedAt = time.UnixMicro(created).UTC()
		if done.Valid {
			c.DoneAt = time.UnixMicro(done.Int64).UTC()
		}
		c.Action = json.RawMessage(action)
		l := log(c.WorkflowID)
		l.Compensations = append(l.Compensations, c)
		return rowid, nil
	})
	problems = append(problems, ps...)
	if err != nil {
		return nil, problems, fmt.Errorf("salvage compensations: %w", err)
	}
	ps, err = s.scanRowids(ctx, "rollbacks", rollbackCols, func(rows *sql.Rows) (int64, error) {
		var rowid int64
		var r store.Rollback
		var to sql.NullString
		var created int64
		var completed sql.NullInt64
		if err := rows.Scan(&rowid, &r.RollbackID, &r.WorkflowID, &r.Namespace, &to, &r.ToSeq, &r.MaxSeq, &created, &completed); err != nil {
			return 0, err
		}
		r.ToCheckpointID = to.String
		r.CreatedAt = time.UnixMicro(created).UTC()
		if completed.Valid {
			r.CompletedAt = time.UnixMicro(completed.Int64).UTC()
		}
		l := log(r.WorkflowID)
		l.Rollbacks = append(l.Rollbacks, r)
		return rowid, nil
	})
	problems = append(problems, ps...)
	if err != nil {
		return nil, problems, fmt.Errorf("salvage rollbacks: %w", err)
	}
	for _, l := range logs {
		sort.Slice(l.Compensations, func(i, j int) bool { return l.Compensations[i].Seq < l.Compensations[j].Seq })
		sort.Slice(l.Rollbacks, func(i, j int) bool { return l.Rollbacks[i].CreatedAt.Before(l.Rollbacks[j].CreatedAt) })
	}
	return logs, problems, nil
}

// RestoreSaga writes a workflow's salvaged saga records as they were (ids, seqs, statuses,
// times), in one transaction: ckptd recover, after the workflow's checkpoints. The workflow row
// is created if the checkpoints did not create it. A record whose id is already there is left
// as it is.
func (s *Store) RestoreSaga(ctx context.Context, workflowID string, l SagaLog) error {
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		now := s.now().UnixMicro()
		if _, err := w.exec(ctx, `INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at) VALUES (?1, 1, ?2, ?2)
			ON CONFLICT(workflow_id) DO NOTHING`, workflowID, now); err != nil {
			return err
		}
		for _, c := range l.Compensations {
			var done any
			if !c.DoneAt.IsZero() {
				done = c.DoneAt.UnixMicro()
			}
			if _, err := w.exec(ctx, `INSERT INTO compensations(compensation_id, workflow_id, namespace, seq, after_seq,
				checkpoint_id, step_name, task_id, description, status, error, rollback_id, created_at, done_at, action)
				VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING`,
				c.CompensationID, workflowID, c.Namespace, c.Seq, c.AfterSeq, nullStr(c.CheckpointID), nullStr(c.StepName),
				nullStr(c.TaskID), c.Description, c.Status, nullStr(c.Error), nullStr(c.RollbackID), c.CreatedAt.UnixMicro(),
				done, []byte(c.Action)); err != nil {
				return err
			}
		}
		for _, r := range l.Rollbacks {
			var completed any
			if !r.CompletedAt.IsZero() {
				completed = r.CompletedAt.UnixMicro()
			}
			if _, err := w.exec(ctx, `INSERT INTO rollbacks(rollback_id, workflow_id, namespace, to_checkpoint_id, to_seq,
				max_seq, created_at, completed_at) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING`,
				r.RollbackID, workflowID, r.Namespace, nullStr(r.ToCheckpointID), r.ToSeq, r.MaxSeq, r.CreatedAt.UnixMicro(),
				completed); err != nil {
				return err
			}
		}
		return nil
	})
	return wrapDB("restore the saga records of "+workflowID, err)
}

// lgHasVariants reports whether the database has the LangGraph columns of schema version 9 (value
// variants and refs): a damaged database from an older ckptd, opened read-only, does not.
func (s *Store) lgHasVariants(ctx context.Context) bool {
	s.lgVariantsOnce.Do(func() {
		var n int
		err := s.readAuto(ctx, func(tx *rtx) error {
			return tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('lg_blobs') WHERE name = 'variant'`).Scan(&n)
		})
		s.lgVariantsHas = err != nil || n > 0
	})
	return s.lgVariantsHas
}

func (s *Store) lgVariantCol(ctx context.Context) string {
	if s.lgHasVariants(ctx) {
		return "variant"
	}
	return "0"
}

func (s *Store) lgRefsCol(ctx context.Context) string {
	if s.lgHasVariants(ctx) {
		return "value_refs"
	}
	return "NULL"
}
