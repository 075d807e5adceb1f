package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ckptd/ckptd/store"
)

// workflowCols are the workflows columns of a WorkflowInfo, in scanWorkflow's order: the row and
// its kept figures (figures.go).
const workflowCols = `w.workflow_id, w.updated_at, w.completed_at, w.ckpt_count, w.stored_bytes, w.latest_seq`

type workflowRow struct {
	info   store.WorkflowInfo
	latest int64
}

func scanWorkflow(rows interface{ Scan(...any) error }) (workflowRow, error) {
	var r workflowRow
	var updated int64
	var completed sql.NullInt64
	if err := rows.Scan(&r.info.WorkflowID, &updated, &completed, &r.info.Count, &r.info.StoredBytes, &r.latest); err != nil {
		return r, err
	}
	r.info.UpdatedAt = time.UnixMicro(updated).UTC()
	r.info.Completed = completed.Valid
	r.info.Resumable = r.info.Count > 0 && !completed.Valid
	return r, nil
}

// latestQuery reads a workflow's newest checkpoint by its kept seq.
const latestQuery = `SELECT ` + summaryCols + ` FROM checkpoints c WHERE c.workflow_id = ? AND c.seq = ?`

// joinedSummaryCols are summaryCols for a LEFT JOIN of the newest checkpoint: the columns that
// cannot be NULL in the table read as zero values when the workflow has no checkpoint (c.id 0).
const joinedSummaryCols = `coalesce(c.id, 0), coalesce(c.checkpoint_id, ''), coalesce(c.workflow_id, ''),
	coalesce(c.namespace, ''), coalesce(c.seq, 0), c.parent_id, coalesce(c.phase, ''), coalesce(c.step, 0), c.step_name,
	c.error, c.workflow_hash, c.metadata, coalesce(c.created_at, 0), coalesce(c.state_type, ''), coalesce(c.size, 0),
	coalesce(c.stored_size, 0), c.state_hash, coalesce(c.completed_count, 0), coalesce(c.pending_count, 0),
	coalesce(c.format_version, 0), c.validation_status, c.validation`

// latestJoin joins each listed workflow's newest checkpoint, probed by key (workflow_id, seq).
const latestJoin = ` LEFT JOIN checkpoints c ON c.workflow_id = w.workflow_id AND c.seq = w.latest_seq`

// withLatest reads the newest checkpoint of each row (a probe by key each) and returns the
// infos.
func withLatest(ctx context.Context, tx *rtx, rs []workflowRow) ([]store.WorkflowInfo, error) {
	out := make([]store.WorkflowInfo, 0, len(rs))
	for _, r := range rs {
		if r.latest > 0 {
			var x summaryScan
			err := tx.cachedRow(ctx, latestQuery, r.info.WorkflowID, r.latest).Scan(x.dest()...)
			switch {
			case err == nil:
				sm, _ := x.finish() // a bad stored error is reported when the checkpoint is loaded
				r.info.Latest = &sm
			case !errors.Is(err, sql.ErrNoRows):
				return nil, err
			}
		}
		out = append(out, r.info)
	}
	return out, nil
}

// scanWorkflowLatest scans a row of workflowCols and joinedSummaryCols.
func scanWorkflowLatest(rows *sql.Rows) (store.WorkflowInfo, error) {
	var r workflowRow
	var updated int64
	var completed sql.NullInt64
	var x summaryScan
	dest := append([]any{&r.info.WorkflowID, &updated, &completed, &r.info.Count, &r.info.StoredBytes, &r.latest}, x.dest()...)
	if err := rows.Scan(dest...); err != nil {
		return r.info, err
	}
	r.info.UpdatedAt = time.UnixMicro(updated).UTC()
	r.info.Completed = completed.Valid
	r.info.Resumable = r.info.Count > 0 && !completed.Valid
	if x.rowid != 0 {
		sm, _ := x.finish() // a bad stored error is reported when the checkpoint is loaded
		r.info.Latest = &sm
	}
	return r.info, nil
}

// workflowPageQuery builds the SQL of one page of f after k (nil: the first page), reading
// Limit+1 rows, each with its newest checkpoint (latestJoin). Every shape walks partial indexes
// of schema step 9 from the cursor on, stopping at the limit: workflows_claimable (the
// resumable workflows by update time, newest first, or oldest first for claimable),
// workflows_open (the workflows not completed, by id: the resumable ones by id), the primary key
// (every workflow by id), and for every workflow by update time workflows_claimable and
// workflows_rest (the others) walked side by side and merged: at most twice a page is sorted.
// The indexes by update time carry the listed columns, so those rows are read from the index
// alone. Claimable probes claims by key at the clock now. Stored (one page of the largest) reads
// the whole table: it serves reports only.
func workflowPageQuery(f store.WorkflowFilter, k *store.WorkflowKey, now int64) (string, []any) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("?%d", len(args))
	}
	limit := arg(f.Limit + 1)
	desc := `w.updated_at DESC, w.workflow_id DESC`
	if f.Ascending() {
		desc = `w.updated_at, w.workflow_id`
	}
	var after string // the cursor's condition
	if k != nil {
		cmp := "<"
		if f.Ascending() {
			cmp = ">"
		}
		if f.Order == store.OrderID {
			after = `w.workflow_id ` + cmp + ` ` + arg(k.ID)
		} else {
			after = `(w.updated_at, w.workflow_id) ` + cmp + ` (` + arg(k.UpdatedAt.UnixMicro()) + `, ` + arg(k.ID) + `)`
		}
	}
	page := func(from, order string, where ...string) string {
		if after != "" {
			where = append(where, after)
		}
		if f.Claimable {
			where = append(where, `NOT EXISTS (SELECT 1 FROM claims k WHERE k.workflow_id = w.workflow_id
				AND k.owner IS NOT NULL AND k.expires_at > `+arg(now)+`)`)
		}
		q := ` FROM ` + from + latestJoin
		if len(where) > 0 {
			q += ` WHERE ` + strings.Join(where, ` AND `)
		}
		return q + ` ORDER BY ` + order + ` LIMIT ` + limit
	}
	const resumable, rest = `w.completed_at IS NULL AND w.ckpt_count > 0`, `(w.completed_at IS NOT NULL OR w.ckpt_count = 0)`
	sel := `SELECT ` + workflowCols + `, ` + joinedSummaryCols
	switch {
	case f.Order == store.OrderStored:
		return sel + page(`workflows w`, `w.stored_bytes DESC, w.workflow_id`), args
	case f.Order == store.OrderID && f.ResumableOnly:
		return sel + page(`workflows w INDEXED BY workflows_open`, `w.workflow_id`, resumable), args
	case f.Order == store.OrderID:
		return sel + page(`workflows w`, `w.workflow_id`), args
	case f.ResumableOnly:
		return sel + page(`workflows w INDEXED BY workflows_claimable`, desc, resumable), args
	}
	// every workflow by update time: the two halves merged as they come, each walking its index
	// downwards, so that the merge reads at most a page (plus one row) of each and needs no
	// temporary b-tree (a compound SELECT's ORDER BY; each half in a subquery of its own with an
	// ORDER BY would be sorted again, two temporary b-trees per page)
	arm := func(from, where string) string {
		q := sel + ` FROM ` + from + latestJoin + ` WHERE ` + where
		if after != "" {
			q += ` AND ` + after
		}
		return q
	}
	q := arm(`workflows w INDEXED BY workflows_claimable`, resumable) + ` UNION ALL ` +
		arm(`workflows w INDEXED BY workflows_rest`, rest) + ` ORDER BY 2 DESC, 1 DESC LIMIT ` + limit
	return q, args
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
	var page store.WorkflowPage
	// one statement, its own snapshot: no BEGIN and ROLLBACK around it
	err = s.readAuto(ctx, func(tx *rtx) error {
		q, args := workflowPageQuery(f, k, s.now().UnixMicro())
		var infos []store.WorkflowInfo
		err := scanCached(ctx, tx, q, func(rows *sql.Rows) error {
			info, err := scanWorkflowLatest(rows)
			if err != nil {
				return err
			}
			infos = append(infos, info)
			return nil
		}, args...)
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
	err := s.readTx(ctx, func(tx *rtx) error {
		r, err := scanWorkflow(tx.cachedRow(ctx, `SELECT `+workflowCols+` FROM workflows w WHERE w.workflow_id = ?`, workflowID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("workflow %q: %w", workflowID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		infos, err := withLatest(ctx, tx, []workflowRow{r})
		if err != nil {
			return err
		}
		info = infos[0]
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.WorkflowInfo{}, err
		}
		return store.WorkflowInfo{}, wrapDB(fmt.Sprintf("workflow %q", workflowID), err)
	}
	return info, nil
}

// Claimable summarises the resumable workflows whose claim is free now, least recently updated
// first (at most limit; 0: all), page by page through ListWorkflows.
func (s *Store) Claimable(ctx context.Context, limit int) ([]store.WorkflowInfo, error) {
	if limit < 0 {
		return nil, invalid("limit", "must be >= 0")
	}
	return store.ClaimableWorkflows(ctx, s, limit)
}
