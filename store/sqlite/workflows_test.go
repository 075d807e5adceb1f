package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// TestWorkflowPageQueryPlans: every shape of a workflow/list page walks one index in its ORDER
// BY order from the cursor and probes claims by key: no sort, no full scan, whatever is stored.
func TestWorkflowPageQueryPlans(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%02d", i)})
	}
	_, err := s.Claim(ctx, "wf-00", "w", time.Minute)
	require.NoError(t, err)
	key := &store.WorkflowKey{UpdatedAt: time.Now(), ID: "wf-05"}
	for _, tc := range []struct {
		name  string
		f     store.WorkflowFilter
		index string // "COVERING INDEX x": the workflows' columns come from the index alone
	}{
		{"updated", store.WorkflowFilter{}, "COVERING INDEX workflows_rest"},
		{"id", store.WorkflowFilter{Order: store.OrderID}, "INDEX sqlite_autoindex_workflows_1"},
		{"resumable updated", store.WorkflowFilter{ResumableOnly: true}, "COVERING INDEX workflows_claimable"},
		{"resumable id", store.WorkflowFilter{ResumableOnly: true, Order: store.OrderID}, "INDEX workflows_open"},
		{"claimable", store.WorkflowFilter{Claimable: true}, "COVERING INDEX workflows_claimable"},
		{"claimable id", store.WorkflowFilter{Claimable: true, Order: store.OrderID}, "INDEX workflows_open"},
	} {
		for _, k := range []*store.WorkflowKey{nil, key} {
			t.Run(fmt.Sprintf("%s cursor=%v", tc.name, k != nil), func(t *testing.T) {
				f := tc.f
				require.NoError(t, f.Normalize())
				q, args := workflowPageQuery(f, k, time.Now().UnixMicro())
				rows, err := s.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
				require.NoError(t, err)
				var plan []string
				for rows.Next() {
					var id, parent, notused int
					var detail string
					require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
					plan = append(plan, detail)
				}
				require.NoError(t, rows.Close())
				joined := strings.Join(plan, "; ")
				if tc.name == "updated" { // two walks of at most a page each, merged
					require.Contains(t, joined, "MERGE (UNION ALL)", joined)
					require.Contains(t, joined, "COVERING INDEX workflows_claimable", joined)
				} else {
					require.NotContains(t, joined, "TEMP B-TREE", joined)
				}
				for _, step := range plan {
					if strings.HasPrefix(step, "SCAN w") {
						require.Contains(t, step, "USING", "a full scan: %s", joined)
					}
				}
				require.Contains(t, joined, tc.index, joined)
				require.Contains(t, joined, "SEARCH c USING INDEX checkpoints_wf_seq (workflow_id=? AND seq=?)", joined)
				if k != nil {
					require.Contains(t, joined, "SEARCH w USING", "the cursor starts the walk: %s", joined)
				}
				if f.Claimable {
					require.Contains(t, joined, "SEARCH k USING PRIMARY KEY (workflow_id=?)", joined)
				}
			})
		}
	}
}

// TestLGThreadPageWalksItsIndex: a page of LangGraph threads walks lg_threads_updated from the
// cursor, and reads each thread's figures by key.
func TestLGThreadPageWalksItsIndex(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for _, q := range []string{
		`SELECT thread_id, updated_at FROM lg_threads INDEXED BY lg_threads_updated
			WHERE updated_at <= ?1 AND (updated_at < ?1 OR thread_id > ?2) ORDER BY updated_at DESC, thread_id LIMIT ?3`,
		`SELECT count(*), count(DISTINCT namespace), coalesce(sum(length(data)), 0) FROM lg_checkpoints WHERE thread_id = ?1`,
		`SELECT coalesce(sum(length(data)), 0) FROM lg_blobs WHERE thread_id = ?1`,
		`SELECT count(*), coalesce(sum(length(data)), 0) FROM lg_writes WHERE thread_id = ?1`,
	} {
		rows, err := s.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, 1, "t", 5)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Close())
		joined := strings.Join(plan, "; ")
		require.NotContains(t, joined, "TEMP B-TREE FOR ORDER BY", joined)
		require.Contains(t, joined, "SEARCH", joined)
		require.NotContains(t, joined, "SCAN", joined)
	}
}
