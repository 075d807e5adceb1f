package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/pgtest"
	"github.com/ckptd/ckptd/store"
)

// skewed is a host clock off by d.
func skewed(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }

// TestClaimsUseTheServerClock: ckptd processes on hosts whose clocks are hours apart agree on
// every lease, because the server's clock decides. A host two hours ahead does not see a live
// lease as run out (its claim and its tokenless save are refused); a host two hours behind
// takes over a lease the server says ran out (its own clock would keep it live for hours); and
// every expiresAt is the server's clock plus the lease.
func TestClaimsUseTheServerClock(t *testing.T) {
	u := pgtest.Database(t)
	ctx := context.Background()
	a := openURL(t, u)
	ahead := openURL(t, u, func(o *Options) { o.Now = skewed(2 * time.Hour) })
	behind := openURL(t, u, func(o *Options) { o.Now = skewed(-2 * time.Hour) })

	live, err := ahead.Claim(ctx, "live", "ahead", time.Minute)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Minute), live.ExpiresAt, 30*time.Second, "the server's clock, not the host's")
	_, err = a.Claim(ctx, "live", "a", time.Minute)
	require.ErrorIs(t, err, store.ErrClaimed)
	ok, err := ahead.Release(ctx, "live", live.Token)
	require.NoError(t, err)
	require.True(t, ok)

	live, err = a.Claim(ctx, "live", "a", time.Minute)
	require.NoError(t, err)
	_, err = ahead.Claim(ctx, "live", "ahead", time.Minute)
	require.ErrorIs(t, err, store.ErrClaimed)
	_, err = ahead.Save(ctx, store.SaveRequest{WorkflowID: "live", State: []byte(`{}`)})
	require.ErrorIs(t, err, store.ErrClaimed)
	p, _ := ahead.LGPut(store.LGPutRequest{ThreadID: "live", CheckpointID: "1", Type: "json", Checkpoint: []byte(`{}`), ChannelVersions: []byte(`{}`)})
	require.ErrorIs(t, p.Wait(ctx), store.ErrClaimed)

	short, err := a.Claim(ctx, "short", "a", 300*time.Millisecond)
	require.NoError(t, err)
	_, err = a.Save(ctx, store.SaveRequest{WorkflowID: "short", State: []byte(`{"by":"a"}`), FencingToken: short.Token})
	require.NoError(t, err)
	for {
		c, now, err := behind.ClaimOf(ctx, "short")
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), now, 30*time.Second, "ClaimOf reports the server's clock")
		if c.Free(now) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	ws, err := behind.Claimable(ctx, 0)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, "short", ws[0].WorkflowID)
	took, err := behind.Claim(ctx, "short", "behind", time.Minute)
	require.NoError(t, err)
	require.Equal(t, short.Token+1, took.Token)
	require.WithinDuration(t, time.Now().Add(time.Minute), took.ExpiresAt, 30*time.Second)
	_, err = a.Save(ctx, store.SaveRequest{WorkflowID: "short", State: []byte(`{"by":"a, late"}`), FencingToken: short.Token})
	require.ErrorIs(t, err, store.ErrClaimed)
}

// TestClaimTokenGuard: the claims row never takes a lower token, whatever asks for it.
func TestClaimTokenGuard(t *testing.T) {
	s := openURL(t, pgtest.Database(t))
	ctx := context.Background()
	c, err := s.Claim(ctx, "wf", "a", time.Minute)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "wf", "a", time.Minute)
	require.NoError(t, err)
	err = s.do(ctx, claimLocks("wf"), func(ctx context.Context, w *wtx) error {
		return putClaim(ctx, w, store.Claim{WorkflowID: "wf", Owner: "z", Token: c.Token, ExpiresAt: time.Now()})
	})
	require.ErrorContains(t, err, "would go back")
	got, _, err := s.ClaimOf(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Token)
	require.Equal(t, "a", got.Owner)
}

// TestWorkflowPageQueryPlans: every shape of a workflow/list page walks its index in its ORDER
// BY order from the cursor, stopping at the limit: no sort, no scan of the workflows table
// (20,000 workflows with checkpoints, a tenth of them completed).
func TestWorkflowPageQueryPlans(t *testing.T) {
	u := pgtest.Database(t)
	s := openURL(t, u)
	ctx := context.Background()
	for _, wf := range []string{"a", "b", "c"} {
		_, err := s.Save(ctx, store.SaveRequest{WorkflowID: wf, State: []byte(`{}`)})
		require.NoError(t, err)
	}
	_, err := s.Claim(ctx, "a", "w", time.Minute)
	require.NoError(t, err)
	c := rawConn(t, u)
	_, err = c.Exec(ctx, `INSERT INTO workflows (workflow_id, created_at, updated_at, completed_at, ckpt_count, latest_seq)
		SELECT 'bulk-' || i, now(), now() - i * interval '1 second', CASE WHEN i % 10 = 0 THEN now() END, 2, 2
		FROM generate_series(1, 20000) AS i`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `INSERT INTO checkpoints (checkpoint_id, workflow_id, namespace, seq, phase, step, state_type, size,
			stored_size, dedup, completed_count, pending_count, created_at, format_version, content_hash)
		SELECT 'bulk-' || i || '-' || n, 'bulk-' || i, '', n, 'completed', n, 'none', 0, 0, false, 0, 0, now(), 1, '\x00'
		FROM generate_series(1, 20000) AS i, generate_series(1, 2) AS n`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `UPDATE counters SET checkpoints = checkpoints + 40000 WHERE shard = 0`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)
	key := &store.WorkflowKey{UpdatedAt: time.Now().Add(-time.Hour), ID: "bulk-5"}
	for _, tc := range []struct {
		name  string
		f     store.WorkflowFilter
		index string
	}{
		{"updated", store.WorkflowFilter{Limit: 5}, "workflows_rest"},
		{"id", store.WorkflowFilter{Order: store.OrderID, Limit: 5}, "workflows_pkey"},
		{"resumable updated", store.WorkflowFilter{ResumableOnly: true, Limit: 5}, "workflows_claimable"},
		{"resumable id", store.WorkflowFilter{ResumableOnly: true, Order: store.OrderID, Limit: 5}, "workflows_open"},
		{"claimable", store.WorkflowFilter{Claimable: true, Limit: 5}, "workflows_claimable"},
		{"claimable id", store.WorkflowFilter{Claimable: true, Order: store.OrderID, Limit: 5}, "workflows_open"},
	} {
		for _, k := range []*store.WorkflowKey{nil, key} {
			f := tc.f
			require.NoError(t, f.Normalize())
			q, args := workflowPageQuery(f, k)
			rows, err := c.Query(ctx, "EXPLAIN "+q, args...)
			require.NoError(t, err)
			var plan []string
			for rows.Next() {
				var line string
				require.NoError(t, rows.Scan(&line))
				plan = append(plan, line)
			}
			require.NoError(t, rows.Err())
			joined := strings.Join(plan, "\n")
			require.Contains(t, joined, tc.index, "%s cursor=%v:\n%s", tc.name, k != nil, joined)
			require.NotContains(t, joined, "Seq Scan on workflows", "%s cursor=%v:\n%s", tc.name, k != nil, joined)
			for _, line := range plan { // a Merge Append's "Sort Key" merges sorted walks: no Sort node
				l := strings.TrimLeft(strings.TrimSpace(line), "-> ")
				sortNode := (strings.HasPrefix(l, "Sort ") && !strings.HasPrefix(l, "Sort Key")) || strings.HasPrefix(l, "Incremental Sort")
				require.False(t, sortNode, "%s cursor=%v:\n%s", tc.name, k != nil, joined)
			}
		}
	}

	ws, err := s.Claimable(ctx, 2)
	require.NoError(t, err)
	require.Len(t, ws, 2)
	// the oldest updated first (bulk-20000 is completed)
	require.Equal(t, []string{"bulk-19999", "bulk-19998"}, []string{ws[0].WorkflowID, ws[1].WorkflowID})
	require.Equal(t, 2, ws[0].Count)
}
