package sqlite

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/storetest"
)

// TestListQueryPlans: every shape of checkpoint/list query walks an index in its ORDER BY order
// (no temp b-tree sort, no full scan of the checkpoints).
func TestListQueryPlans(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		mustSave(t, s, store.SaveRequest{WorkflowID: "wf-1", Metadata: []byte(`{"source":"loop","step":1}`)})
	}
	conn, err := s.rdb.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for name, f := range storetest.ListShapes("before") {
		if f.Limit == 0 {
			f.Limit = store.DefaultListLimit
		}
		q, args, err := listQuery(f, 10, 5, strings.Contains(name, "wf=wf-1"))
		require.NoError(t, err)
		rows, err := conn.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		require.NoError(t, err, name)
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Close())
		joined := strings.Join(plan, "; ")
		require.NotContains(t, joined, "TEMP B-TREE", "%s: %s", name, joined)
		// The default namespace and phase 'completed' hold most checkpoints: their partial
		// indexes leave them out and such lists walk the table in save order (schema step 8).
		if f.WorkflowID == "" && f.Metadata == nil && (f.Namespace == nil || *f.Namespace == "") &&
			(f.Phase == "" || f.Phase == store.PhaseCompleted) {
			require.Len(t, plan, 1, "%s: %s", name, joined)
			require.True(t, plan[0] == "SCAN c" || strings.HasPrefix(plan[0], "SEARCH c USING INTEGER PRIMARY KEY"), "%s: %s", name, joined)
			continue // plain rowid scan, newest first
		}
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN c") {
				require.Contains(t, step, "USING", "%s: full scan: %s", name, joined)
			}
		}
		if testing.Verbose() && f.Before != "" && f.Limit == 3 {
			t.Logf("%s: %s", name, joined)
		}
	}
}
