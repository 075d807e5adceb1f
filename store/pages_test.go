package store

import (
	"context"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGroupBoundsMatchSelectExpired: deciding checkpoint by checkpoint from the group's bounds
// (what a prune in bites reads) selects exactly what SelectExpired selects from the whole group,
// and the walk may stop where Exhausted says.
func TestGroupBoundsMatchSelectExpired(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for round := 0; round < 2000; round++ {
		n := rng.IntN(30)
		var items []RetentionItem
		seq := int64(0)
		for i := 0; i < n; i++ {
			seq += 1 + rng.Int64N(3)
			items = append(items, RetentionItem{Seq: seq, ID: string(rune('a' + i)),
				CreatedAt: now.Add(-time.Duration(rng.IntN(100)) * time.Minute)})
		}
		r := Retention{KeepLast: rng.IntN(8), KeepFirst: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			r.MaxAgeSeconds = int64(rng.IntN(80)) * 60
		}
		want := SelectExpired(items, r, now)
		var got []string
		if len(items) > 0 {
			b := GroupBounds{Newest: items[len(items)-1].Seq, First: items[0].Seq}
			if r.KeepLast > 0 && len(items) >= r.KeepLast {
				b.Boundary = items[len(items)-r.KeepLast].Seq
			}
			after := int64(0)
			for _, it := range items {
				if b.Exhausted(after, r) {
					break
				}
				if b.Expired(it, r, now) {
					got = append(got, it.ID)
				}
				after = it.Seq
			}
		}
		sort.Strings(want)
		sort.Strings(got)
		if len(want) == 0 {
			want = nil
		}
		require.Equal(t, want, got, "round %d: %+v over %d", round, r, n)
		var count int64 = int64(n)
		if len(want) > 0 {
			require.True(t, r.Prunes(count), "round %d: Prunes must not skip a group with something to prune", round)
		}
	}
}

// TestWorkflowFilterCursors: a cursor continues only the listing it came from; defaults and
// bounds are checked with the field at fault named.
func TestWorkflowFilterCursors(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	for _, tc := range []struct {
		name  string
		f     WorkflowFilter
		field string // "" : valid
	}{
		{"defaults", WorkflowFilter{}, ""},
		{"id", WorkflowFilter{Order: OrderID, Limit: 10000}, ""},
		{"updated explicit", WorkflowFilter{Order: OrderUpdated, ResumableOnly: true}, ""},
		{"claimable by id", WorkflowFilter{Claimable: true, Order: OrderID}, ""},
		{"claimable newest first", WorkflowFilter{Claimable: true, Order: OrderUpdated}, "order"},
		{"unknown order", WorkflowFilter{Order: "name"}, "order"},
		{"stored with a cursor", WorkflowFilter{Order: OrderStored, Cursor: "x"}, "order"},
		{"limit 0 is the default", WorkflowFilter{Limit: 0}, ""},
		{"negative limit", WorkflowFilter{Limit: -1}, "limit"},
		{"limit too large", WorkflowFilter{Limit: MaxWorkflowPage + 1}, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			err := f.Normalize()
			if tc.field != "" {
				var ie *InvalidError
				require.ErrorAs(t, err, &ie)
				require.Equal(t, tc.field, ie.Field)
				return
			}
			require.NoError(t, err)
			require.Positive(t, f.Limit)
			require.Equal(t, tc.f.Claimable || tc.f.ResumableOnly, f.ResumableOnly)
		})
	}
	filters := []WorkflowFilter{{}, {Order: OrderID}, {Claimable: true}, {Claimable: true, Order: OrderID}, {ResumableOnly: true}}
	for i, f := range filters {
		require.NoError(t, f.Normalize())
		c := f.EncodeCursor(WorkflowKey{UpdatedAt: at, ID: "wf-\u00e9\"x"})
		for j, g := range filters {
			require.NoError(t, g.Normalize())
			g.Cursor = c
			k, err := g.DecodeCursor()
			sameKind := f.cursorKind() == g.cursorKind()
			if !sameKind {
				var ie *InvalidError
				require.ErrorAs(t, err, &ie, "%d's cursor given to %d", i, j)
				require.Equal(t, "cursor", ie.Field)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, "wf-\u00e9\"x", k.ID)
			if g.Order != OrderID {
				require.True(t, at.Equal(k.UpdatedAt))
			}
		}
	}
	for _, bad := range []string{"%%%", "e30", "WyJ1Il0", "WyJ1IiwxLDJd", "WyJpIiwid2YiLDFd"} {
		f := WorkflowFilter{Cursor: bad}
		_, err := f.DecodeCursor()
		var ie *InvalidError
		require.ErrorAs(t, err, &ie, bad)
	}
	// a page: the cursor is the last row's key, none after the last page
	f := WorkflowFilter{Limit: 2}
	p := f.Page([]WorkflowInfo{{WorkflowID: "a", UpdatedAt: at}, {WorkflowID: "b", UpdatedAt: at}, {WorkflowID: "c"}})
	require.Len(t, p.Workflows, 2)
	f.Cursor = p.Cursor
	k, err := f.DecodeCursor()
	require.NoError(t, err)
	require.Equal(t, "b", k.ID)
	require.Empty(t, f.Page([]WorkflowInfo{{WorkflowID: "a"}}).Cursor)

	// LangGraph thread cursors, threads without checkpoints included
	for _, th := range []LGThread{{ThreadID: "t", UpdatedAt: at}, {ThreadID: "u"}} {
		k, err := DecodeLGThreadCursor(EncodeLGThreadCursor(th))
		require.NoError(t, err)
		require.Equal(t, th.ThreadID, k.ID)
		if th.UpdatedAt.IsZero() {
			require.Zero(t, k.UpdatedAt.UnixMicro())
		} else {
			require.True(t, th.UpdatedAt.Equal(k.UpdatedAt))
		}
	}
	_, err = DecodeLGThreadCursor(f.Cursor)
	require.Error(t, err)
}

// TestBiteSpend: a bite reads the clock every BiteUnits units, not before: a budget of 1ns cuts
// at the first BiteUnits, a long budget never does.
func TestBiteSpend(t *testing.T) {
	b := NewBites(Options{BiteBudget: time.Nanosecond}).Start()
	for i := 1; i < BiteUnits; i++ {
		require.False(t, b.Spend(1), i)
	}
	require.True(t, b.Spend(1))
	require.True(t, b.Full())
	require.Equal(t, BiteUnits, b.Units())
	long := NewBites(Options{BiteBudget: time.Hour}).Start()
	for i := 0; i < 10*BiteUnits; i++ {
		require.False(t, long.Spend(1))
	}
	n := 0
	bs := NewBites(Options{AfterBite: func(k int) { n = k }})
	bs.Committed()
	bs.Committed()
	require.Equal(t, 2, n)
	require.EqualValues(t, 2, bs.Count())
	require.Equal(t, DefaultBiteBudget, bs.budget)
}

// TestPace: only paced maintenance waits after a bite, PaceFactor times the bite, and a context
// that ends stops the wait.
func TestPace(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	require.NoError(t, Pace(ctx, time.Second), "not paced: no wait")
	require.Less(t, time.Since(start), 500*time.Millisecond)

	start = time.Now()
	require.NoError(t, Pace(Paced(ctx), 10*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), PaceFactor*10*time.Millisecond)

	cctx, cancel := context.WithCancel(Paced(ctx))
	cancel()
	require.ErrorIs(t, Pace(cctx, time.Hour), context.Canceled)
	require.NoError(t, Pace(Paced(ctx), 0), "a bite that took no time: no wait")
}
