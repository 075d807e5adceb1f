package sqlite

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// fakeClock is a settable Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// TestClaimsUseTheStoreClock: on SQLite the database's clock is the host's (Options.Now): a
// lease is live until the microsecond before expiresAt and free at expiresAt exactly, for
// claims and for writes alike.
func TestClaimsUseTheStoreClock(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: t0}
	s := openTest(t, func(o *Options) { o.Now = clk.Now })
	ctx := context.Background()
	a, err := s.Claim(ctx, "wf", "a", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, t0.Add(10*time.Second), a.ExpiresAt)

	clk.Set(a.ExpiresAt.Add(-time.Microsecond))
	_, err = s.Claim(ctx, "wf", "b", time.Minute)
	require.ErrorIs(t, err, store.ErrClaimed)
	_, err = s.Save(ctx, store.SaveRequest{WorkflowID: "wf"})
	require.ErrorIs(t, err, store.ErrClaimed)
	ws, err := s.Claimable(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, ws)

	clk.Set(a.ExpiresAt)
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf"}) // free: a tokenless write goes through
	ws, err = s.Claimable(ctx, 0)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	b, err := s.Claim(ctx, "wf", "b", time.Minute)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Token)
	require.Equal(t, a.ExpiresAt.Add(time.Minute), b.ExpiresAt)

	// the clock steps back an hour: b's lease lasts longer, a renewal does not shorten it
	clk.Set(t0.Add(-time.Hour))
	r, err := s.Renew(ctx, "wf", b.Token, time.Second)
	require.NoError(t, err)
	require.Equal(t, b.ExpiresAt, r.ExpiresAt)
	_, err = s.Claim(ctx, "wf", "c", time.Minute)
	require.ErrorIs(t, err, store.ErrClaimed)
}

// TestClaimTokenGuard: the claims row never takes a lower token, whatever asks for it.
func TestClaimTokenGuard(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	c, err := s.Claim(ctx, "wf", "a", time.Minute)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "wf", "a", time.Minute)
	require.NoError(t, err)
	err = s.do(ctx, func(ctx context.Context, w *wtx) error {
		return s.putClaim(ctx, w, store.Claim{WorkflowID: "wf", Owner: "z", Token: c.Token, ExpiresAt: time.Now()})
	})
	require.ErrorContains(t, err, "would go back")
	got, _, err := s.ClaimOf(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Token)
	require.Equal(t, "a", got.Owner)
}
