package sqlite

// What only SQLite has of validation checkpoints and the compensation log: the query plans of
// the validation list filter and the migration from the schema before it. The behaviour every
// backend shares is in store/storetest/saga.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// TestSagaListQueryPlans: every shape of checkpoint/list with a validation filter walks an
// index in list order (no temp b-tree, no full scan).
func TestSagaListQueryPlans(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		req := store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", i%3), CheckpointID: fmt.Sprintf("c-%d", i)}
		if i%2 == 0 {
			req.Validation = &store.Validation{Status: []string{"passed", "warning", "failed"}[i%3], Confidence: 0.5, Min: 0.7, Warning: 0.85}
		}
		mustSave(t, s, req)
	}
	conn, err := s.rdb.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	ns := ""
	for _, f := range []store.ListFilter{{Validation: "failed"}, {Validation: "failed", Before: "c-3"}, {Validation: "failed", Phase: store.PhaseCompleted},
		{Validation: "failed", WorkflowID: "wf-1"}, {Validation: "failed", Namespace: &ns}, {Validation: "warning", WorkflowID: "wf-1", Namespace: &ns}} {
		f.Limit = 10
		q, args, err := listQuery(f, 10, 5, false)
		require.NoError(t, err)
		rows, err := conn.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
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
		require.NotContains(t, joined, "TEMP B-TREE", "%+v: %s", f, joined)
		require.Contains(t, joined, "USING", "%+v: %s", f, joined)
	}
}

// TestSagaMigrateFromV5: a database of the schema before validation and compensations migrates;
// its checkpoints list without a validation and it takes the new rows.
func TestSagaMigrateFromV5(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckptd.db")
	ctx := context.Background()
	s, err := open(ctx, options(path, func(o *Options) { o.maxSchema = 5 }))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = rawDB(t, path).Exec(`INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at) VALUES ('wf', 2, 1, 1);
		INSERT INTO checkpoints(checkpoint_id, workflow_id, namespace, seq, phase, step, state_type, size, stored_size, dedup,
		completed_count, pending_count, created_at, format_version, content_hash) VALUES ('old', 'wf', '', 1, 'completed', 0,
		'none', 0, 0, 0, 0, 0, 1, 1, X'00')`)
	require.NoError(t, err)
	s = openPath(t, path)
	require.Equal(t, SchemaVersion, userVersion(t, path))
	sms, err := s.List(ctx, store.ListFilter{WorkflowID: "wf"})
	require.NoError(t, err)
	require.Len(t, sms, 1)
	assert.Nil(t, sms[0].Validation)
	c, err := s.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf", Action: json.RawMessage(`1`)})
	require.NoError(t, err)
	assert.Equal(t, int64(1), c.AfterSeq)
	res := mustSave(t, s, store.SaveRequest{WorkflowID: "wf", Validation: &store.Validation{Status: "failed", Confidence: 0.2, Min: 0.7, Warning: 0.85}})
	assert.Equal(t, int64(2), res.Seq)
}
