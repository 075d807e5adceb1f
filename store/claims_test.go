package store

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	clT0    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clLease = 30 * time.Second
)

// claims of workflow "wf" in every state a decision can meet, at clT0.
var (
	clNever    = Claim{WorkflowID: "wf"}
	clLive     = Claim{WorkflowID: "wf", Owner: "a", Token: 3, ExpiresAt: clT0.Add(10 * time.Second)}
	clExpired  = Claim{WorkflowID: "wf", Owner: "a", Token: 3, ExpiresAt: clT0.Add(-time.Microsecond)}
	clAtExpiry = Claim{WorkflowID: "wf", Owner: "a", Token: 3, ExpiresAt: clT0}
	clReleased = Claim{WorkflowID: "wf", Token: 3}
)

// wantRefused checks err is a *ClaimedError carrying cur and token.
func wantRefused(t *testing.T, err error, cur Claim, token int64) {
	t.Helper()
	require.ErrorIs(t, err, ErrClaimed)
	var ce *ClaimedError
	require.True(t, errors.As(err, &ce))
	require.Equal(t, cur, ce.Claim)
	require.Equal(t, token, ce.Token)
	require.NotEmpty(t, ce.Reason)
}

func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var ie *InvalidError
	require.True(t, errors.As(err, &ie), "want an *InvalidError, got %v", err)
	require.Equal(t, field, ie.Field)
}

func TestDecideClaim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cur   Claim
		owner string
		now   time.Time
		want  Claim // zero: refused
	}{
		{"clNever claimed: token 1", clNever, "b", clT0, Claim{WorkflowID: "wf", Owner: "b", Token: 1, ExpiresAt: clT0.Add(clLease)}},
		{"clLive, another owner: refused", clLive, "b", clT0, Claim{}},
		{"one microsecond before expiry: refused", clAtExpiry, "b", clT0.Add(-time.Microsecond), Claim{}},
		{"at expiresAt exactly: taken over", clAtExpiry, "b", clT0, Claim{WorkflowID: "wf", Owner: "b", Token: 4, ExpiresAt: clT0.Add(clLease)}},
		{"expired: taken over", clExpired, "b", clT0, Claim{WorkflowID: "wf", Owner: "b", Token: 4, ExpiresAt: clT0.Add(clLease)}},
		{"released: claimed under a higher token", clReleased, "a", clT0, Claim{WorkflowID: "wf", Owner: "a", Token: 4, ExpiresAt: clT0.Add(clLease)}},
		{"clLive, same owner: claimed again under a new token", clLive, "a", clT0, Claim{WorkflowID: "wf", Owner: "a", Token: 4, ExpiresAt: clT0.Add(clLease)}},
		// The database clock stepped back: the clLease lasts longer, clNever shorter.
		{"clock stepped back: still live", clLive, "b", clT0.Add(-time.Hour), Claim{}},
		// Sub-microsecond clock readings are cut like stored times: the clLease is what is stored.
		{"now truncated to microseconds", clNever, "b", clT0.Add(999), Claim{WorkflowID: "wf", Owner: "b", Token: 1, ExpiresAt: clT0.Add(clLease)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecideClaim(tc.cur, tc.owner, clLease, tc.now)
			if tc.want == (Claim{}) {
				wantRefused(t, err, tc.cur, 0)
				require.Equal(t, tc.cur, got, "a refusal changes nothing")
				var ce *ClaimedError
				require.True(t, errors.As(err, &ce))
				require.Contains(t, ce.Error(), `claimed by "a" until `)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Greater(t, got.Token, tc.cur.Token, "every grant raises the token")
		})
	}
}

func TestDecideClaimValidates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		owner   string
		clLease time.Duration
		field   string
	}{
		{"no owner", "", clLease, "owner"},
		{"owner too long", string(make([]byte, MaxOwnerBytes+1)), clLease, "owner"},
		{"owner not UTF-8", "\xff", clLease, "owner"},
		{"zero clLease", "a", 0, "leaseSeconds"},
		{"negative clLease", "a", -time.Second, "leaseSeconds"},
		{"clLease too long", "a", MaxLease + time.Second, "leaseSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecideClaim(clNever, tc.owner, tc.clLease, clT0)
			wantInvalid(t, err, tc.field)
		})
	}
	got, err := DecideClaim(clNever, "a", MaxLease, clT0)
	require.NoError(t, err, "the longest clLease is allowed")
	require.Equal(t, clT0.Add(MaxLease), got.ExpiresAt)
}

// TestTokenNeverGoesBack walks a workflow through claims, take-overs and releases: the token
// rises by one with every grant, whatever happened in between.
func TestTokenNeverGoesBack(t *testing.T) {
	cur := clNever
	now := clT0
	var seen []int64
	steps := []func() error{
		func() (err error) { cur, err = DecideClaim(cur, "a", clLease, now); return },
		func() (err error) { _, err = DecideClaim(cur, "b", clLease, now); return }, // refused
		func() (err error) { now = cur.ExpiresAt; cur, err = DecideClaim(cur, "b", clLease, now); return },
		func() (err error) { cur, _, err = DecideRelease(cur, cur.Token); return },
		func() (err error) { cur, err = DecideClaim(cur, "a", clLease, now); return },
		func() (err error) { cur, err = DecideRenew(cur, cur.Token, clLease, now.Add(time.Hour)); return },
		func() (err error) {
			now = now.Add(2 * time.Hour)
			cur, err = DecideClaim(cur, "c", clLease, now)
			return
		},
	}
	for i, step := range steps {
		err := step()
		if i == 1 {
			require.ErrorIs(t, err, ErrClaimed)
		} else {
			require.NoError(t, err, "step %d", i)
		}
		seen = append(seen, cur.Token)
	}
	require.Equal(t, []int64{1, 1, 2, 2, 3, 3, 4}, seen)
}

func TestDecideRenew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cur     Claim
		token   int64
		now     time.Time
		wantEnd time.Time // zero: refused
	}{
		{"live: extended from now", clLive, 3, clT0, clT0.Add(clLease)},
		{"clExpired, nobody claimed since: extended", clExpired, 3, clT0, clT0.Add(clLease)},
		{"at expiresAt exactly, nobody claimed since: extended", clAtExpiry, 3, clT0, clT0.Add(clLease)},
		// The database clock stepped back an hour: now+clLease is before the current end.
		{"clNever shortened", clLive, 3, clT0.Add(-time.Hour), clLive.ExpiresAt},
		{"stale token", clLive, 2, clT0, time.Time{}},
		{"token clNever issued", clLive, 4, clT0, time.Time{}},
		{"released", clReleased, 3, clT0, time.Time{}},
		{"clNever claimed", clNever, 1, clT0, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecideRenew(tc.cur, tc.token, clLease, tc.now)
			if tc.wantEnd.IsZero() {
				wantRefused(t, err, tc.cur, tc.token)
				require.Equal(t, tc.cur, got)
				return
			}
			require.NoError(t, err)
			want := tc.cur
			want.ExpiresAt = tc.wantEnd
			require.Equal(t, want, got, "a renewal keeps the owner and the token")
		})
	}
	_, err := DecideRenew(clLive, 3, 0, clT0)
	wantInvalid(t, err, "leaseSeconds")
	_, err = DecideRenew(clLive, -1, clLease, clT0)
	wantInvalid(t, err, "fencingToken")
}

func TestDecideRelease(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cur      Claim
		token    int64
		released bool
		refused  bool
	}{
		{"live", clLive, 3, true, false},
		{"clExpired, nobody claimed since", clExpired, 3, true, false},
		{"released already: nothing to do", clReleased, 3, false, false},
		{"stale token", clLive, 2, false, true},
		{"stale token of a released claim", clReleased, 2, false, true},
		{"token clNever issued", clLive, 9, false, true},
		{"clNever claimed", clNever, 1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := DecideRelease(tc.cur, tc.token)
			if tc.refused {
				wantRefused(t, err, tc.cur, tc.token)
				require.Equal(t, tc.cur, got)
				require.False(t, ok)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.released, ok)
			require.Equal(t, Claim{WorkflowID: "wf", Token: 3}, got, "released: no owner, no lease, the token kept")
			require.False(t, got.Held())
			require.True(t, got.Free(clT0))
		})
	}
	_, _, err := DecideRelease(clLive, -3)
	wantInvalid(t, err, "fencingToken")
}

func TestCheckFence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cur   Claim
		token int64
		now   time.Time
		ok    bool
	}{
		{"clNever claimed, no token: as without claims", clNever, 0, clT0, true},
		{"clNever claimed, a token: refused", clNever, 1, clT0, false},
		{"clLive, no token: refused", clLive, 0, clT0, false},
		{"clLive, the holder's token", clLive, 3, clT0, true},
		{"clLive, a stale token", clLive, 2, clT0, false},
		{"clLive, a token clNever issued", clLive, 4, clT0, false},
		{"one microsecond before expiry, no token: refused", clAtExpiry, 0, clT0.Add(-time.Microsecond), false},
		{"at expiresAt exactly, no token: free", clAtExpiry, 0, clT0, true},
		{"clExpired, no token: free", clExpired, 0, clT0, true},
		{"clExpired, the holder's token: nobody claimed since", clExpired, 3, clT0, true},
		{"clExpired, a stale token", clExpired, 2, clT0, false},
		{"released, no token: free", clReleased, 0, clT0, true},
		{"released, its token: refused", clReleased, 3, clT0, false},
		{"clock stepped back, no token: still live", clLive, 0, clT0.Add(-time.Hour), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFence(tc.cur, tc.token, tc.now)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			wantRefused(t, err, tc.cur, tc.token)
		})
	}
	wantInvalid(t, CheckFence(clLive, -1, clT0), "fencingToken")
}

func TestClaimLive(t *testing.T) {
	require.True(t, clLive.Live(clT0))
	require.True(t, clAtExpiry.Live(clT0.Add(-time.Microsecond)))
	require.False(t, clAtExpiry.Live(clT0), "the clLease ends at expiresAt")
	require.False(t, clReleased.Live(clT0))
	require.False(t, clNever.Live(clT0))
	require.True(t, clExpired.Held())
	require.False(t, clReleased.Held())
}
