package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// Claims run on the database's clock, which a test cannot set: leases that must stay live are
// long (a minute), leases that must run out are short and the case waits until the database
// says they have (waitFree).

func init() {
	add(
		testCase{"ClaimRefuseTakeOver", testClaimRefuseTakeOver},
		testCase{"ClaimTokenNeverGoesBack", testClaimTokenNeverGoesBack},
		testCase{"ClaimRenewRelease", testClaimRenewRelease},
		testCase{"ClaimFencesEveryWrite", testClaimFencesEveryWrite},
		testCase{"ClaimFenceInBatch", testClaimFenceInBatch},
		testCase{"ClaimConcurrentClaimers", testClaimConcurrentClaimers},
		testCase{"ClaimTwoBackends", testClaimTwoBackends},
		testCase{"ClaimTakeOverFencesRacingWriter", testClaimTakeOverFencesRacingWriter},
		testCase{"Claimable", testClaimable},
	)
}

const (
	longLease  = time.Minute
	shortLease = 150 * time.Millisecond
)

// requireClaimed checks err is a *ClaimedError whose claim is held by owner (""): released or
// never claimed) under token.
func requireClaimed(t testing.TB, err error, owner string, token int64) *store.ClaimedError {
	t.Helper()
	require.ErrorIs(t, err, store.ErrClaimed)
	var ce *store.ClaimedError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, owner, ce.Claim.Owner, "the refusal names the holder")
	require.Equal(t, token, ce.Claim.Token)
	require.NotEmpty(t, ce.Reason)
	return ce
}

// waitFree waits until the database's clock has passed the end of wf's lease.
func waitFree(t testing.TB, s store.Backend, wf string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, now, err := s.ClaimOf(context.Background(), wf)
		require.NoError(t, err)
		if !c.Live(now) {
			return
		}
		require.True(t, time.Now().Before(deadline), "the lease of %s (until %s) did not run out", wf, c.ExpiresAt)
		time.Sleep(c.ExpiresAt.Sub(now) + time.Millisecond)
	}
}

// testClaimRefuseTakeOver: a live claim is refused to another owner, naming the holder and the
// end of its lease; once the database's clock passes it, the workflow is taken over under the
// next token.
func testClaimRefuseTakeOver(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	before := time.Now()
	a, err := s.Claim(ctx, "wf", "worker-a", longLease)
	require.NoError(t, err)
	require.Equal(t, store.Claim{WorkflowID: "wf", Owner: "worker-a", Token: 1, ExpiresAt: a.ExpiresAt}, a)
	// the database's clock, not ours; but the two agree to well within the lease
	require.WithinDuration(t, before.Add(longLease), a.ExpiresAt, 30*time.Second)
	got, now, err := s.ClaimOf(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, a, got)
	require.True(t, got.Live(now))

	_, err = s.Claim(ctx, "wf", "worker-b", longLease)
	ce := requireClaimed(t, err, "worker-a", 1)
	require.True(t, ce.Claim.ExpiresAt.Equal(a.ExpiresAt))
	got, _, err = s.ClaimOf(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, a, got, "a refused claim changes nothing")

	// A short lease runs out; then it is taken over.
	c, err := s.Claim(ctx, "short", "worker-a", shortLease)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "short", "worker-b", longLease)
	requireClaimed(t, err, "worker-a", 1)
	waitFree(t, s, "short")
	b, err := s.Claim(ctx, "short", "worker-b", longLease)
	require.NoError(t, err)
	require.Equal(t, "worker-b", b.Owner)
	require.Equal(t, c.Token+1, b.Token)
	_, err = s.Renew(ctx, "short", c.Token, longLease)
	requireClaimed(t, err, "worker-b", 2)

	// The same owner claims again at once, under a new token that fences its old one.
	a2, err := s.Claim(ctx, "wf", "worker-a", longLease)
	require.NoError(t, err)
	require.Equal(t, int64(2), a2.Token)
	_, err = s.Renew(ctx, "wf", 1, longLease)
	requireClaimed(t, err, "worker-a", 2)

	// Bad input is an *InvalidError naming the param.
	for _, tc := range []struct {
		wf, owner string
		lease     time.Duration
		field     string
	}{
		{"", "a", longLease, "workflowId"},
		{"wf", "", longLease, "owner"},
		{"wf", "a", 0, "leaseSeconds"},
		{"wf", "a", store.MaxLease + time.Second, "leaseSeconds"},
	} {
		_, err := s.Claim(ctx, tc.wf, tc.owner, tc.lease)
		invalidField(tc.field)(t, err)
	}
	_, err = s.Renew(ctx, "wf", 2, -time.Second)
	invalidField("leaseSeconds")(t, err)
	_, err = s.Renew(ctx, "wf", -2, longLease)
	invalidField("fencingToken")(t, err)
}

// testClaimTokenNeverGoesBack: release keeps the token, the next claim raises it, and so does
// every claim after the database is opened again.
func testClaimTokenNeverGoesBack(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	var tokens []int64
	for i := 0; i < 3; i++ {
		c, err := s.Claim(ctx, "wf", fmt.Sprintf("w%d", i), longLease)
		require.NoError(t, err)
		tokens = append(tokens, c.Token)
		ok, err := s.Release(ctx, "wf", c.Token)
		require.NoError(t, err)
		require.True(t, ok)
		got, now, err := s.ClaimOf(ctx, "wf")
		require.NoError(t, err)
		require.Equal(t, store.Claim{WorkflowID: "wf", Token: c.Token}, got, "released: free, the token kept")
		require.True(t, got.Free(now))
	}
	require.Equal(t, []int64{1, 2, 3}, tokens)
	// Deleting and completing the workflow keep its claim row.
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf", State: []byte(`{}`)})
	_, err := s.Complete(ctx, "wf", false)
	require.NoError(t, err)
	_, err = s.DeleteWorkflow(ctx, "wf")
	require.NoError(t, err)

	s2 := h.reopen(t, s)
	got, _, err := s2.ClaimOf(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, int64(3), got.Token)
	c, err := s2.Claim(ctx, "wf", "w9", longLease)
	require.NoError(t, err)
	require.Equal(t, int64(4), c.Token)
	got, _, err = s2.ClaimOf(ctx, "never")
	require.NoError(t, err)
	require.Equal(t, store.Claim{WorkflowID: "never"}, got)
}

// testClaimRenewRelease: renewals extend the lease of the holder's token only; releases free
// the claim once.
func testClaimRenewRelease(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	c, err := s.Claim(ctx, "wf", "a", shortLease)
	require.NoError(t, err)
	r, err := s.Renew(ctx, "wf", c.Token, longLease)
	require.NoError(t, err)
	require.Equal(t, c.Owner, r.Owner)
	require.Equal(t, c.Token, r.Token)
	require.True(t, r.ExpiresAt.After(c.ExpiresAt))
	// a renewal never shortens the lease
	r2, err := s.Renew(ctx, "wf", c.Token, shortLease)
	require.NoError(t, err)
	require.True(t, r2.ExpiresAt.Equal(r.ExpiresAt), "%s, want %s", r2.ExpiresAt, r.ExpiresAt)
	_, err = s.Claim(ctx, "wf", "b", longLease)
	requireClaimed(t, err, "a", 1)

	_, err = s.Renew(ctx, "wf", c.Token+1, longLease)
	requireClaimed(t, err, "a", 1)
	_, err = s.Release(ctx, "wf", c.Token+1)
	requireClaimed(t, err, "a", 1)
	ok, err := s.Release(ctx, "wf", c.Token)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Release(ctx, "wf", c.Token)
	require.NoError(t, err)
	require.False(t, ok, "released already")
	_, err = s.Renew(ctx, "wf", c.Token, longLease)
	requireClaimed(t, err, "", 1)
	_, err = s.Renew(ctx, "unknown", 1, longLease)
	requireClaimed(t, err, "", 0)
	_, err = s.Release(ctx, "unknown", 1)
	requireClaimed(t, err, "", 0)

	// A lease that ran out is renewed when nobody claimed the workflow since.
	e, err := s.Claim(ctx, "ran-out", "a", shortLease)
	require.NoError(t, err)
	waitFree(t, s, "ran-out")
	e2, err := s.Renew(ctx, "ran-out", e.Token, longLease)
	require.NoError(t, err)
	require.Equal(t, e.Token, e2.Token)
	_, err = s.Claim(ctx, "ran-out", "b", longLease)
	requireClaimed(t, err, "a", e.Token)
}

// fencedWrite is one kind of write, made under a token; stored counts what it left behind.
type fencedWrite struct {
	name   string
	write  func(s store.Backend, wf string, token int64) error
	stored func(s store.Backend, wf string) int
}

func fencedWrites(t *testing.T) []fencedWrite {
	ctx := context.Background()
	n := 0
	next := func() string { n++; return fmt.Sprintf("x%d", n) }
	return []fencedWrite{
		{"Save", func(s store.Backend, wf string, token int64) error {
			_, err := s.Save(ctx, store.SaveRequest{WorkflowID: wf, CheckpointID: next(), State: []byte(`{"v":1}`), FencingToken: token})
			return err
		}, func(s store.Backend, wf string) int {
			l, err := s.List(ctx, store.ListFilter{WorkflowID: wf, Limit: 1000})
			require.NoError(t, err)
			return len(l)
		}},
		{"Enqueue", func(s store.Backend, wf string, token int64) error {
			_, err := s.Enqueue(store.SaveRequest{WorkflowID: wf, State: []byte(`{"v":2}`), FencingToken: token}).Wait(ctx)
			return err
		}, func(s store.Backend, wf string) int {
			l, err := s.List(ctx, store.ListFilter{WorkflowID: wf, Limit: 1000})
			require.NoError(t, err)
			return len(l)
		}},
		{"PutWritesFenced", func(s store.Backend, wf string, token int64) error {
			_, err := s.PutWritesFenced(ctx, wf, "", "base-"+wf, []store.Write{{TaskID: next(), Channel: "c", Value: []byte(`1`)}}, token)
			return err
		}, func(s store.Backend, wf string) int {
			cp, err := s.Load(ctx, "base-"+wf)
			require.NoError(t, err)
			return len(cp.PendingWrites)
		}},
		{"CompleteFenced", func(s store.Backend, wf string, token int64) error {
			_, err := s.CompleteFenced(ctx, wf, true, token)
			return err
		}, func(s store.Backend, wf string) int {
			done, err := s.IsCompleted(ctx, wf)
			require.NoError(t, err)
			if done {
				return 1
			}
			return 0
		}},
		{"LGPut", func(s store.Backend, wf string, token int64) error {
			p, _ := s.LGPut(store.LGPutRequest{ThreadID: wf, CheckpointID: next(), Type: "json", Checkpoint: []byte(`{}`),
				ChannelVersions: []byte(`{}`), FencingToken: token})
			return p.Wait(ctx)
		}, func(s store.Backend, wf string) int {
			res, err := s.LGList(ctx, store.LGListFilter{ThreadID: wf})
			require.NoError(t, err)
			return len(res.Tuples)
		}},
		{"LGPutWritesFenced", func(s store.Backend, wf string, token int64) error {
			p, _ := s.LGPutWritesFenced(wf, "", "lg-base", []store.LGWrite{{TaskID: next(), Channel: "c", Type: "json", Data: []byte(`1`)}}, token)
			return p.Wait(ctx)
		}, func(s store.Backend, wf string) int {
			tu, err := s.LGGet(ctx, wf, "", "lg-base")
			require.NoError(t, err)
			return len(tu.Writes)
		}},
	}
}

// testClaimFencesEveryWrite: every write of a workflow (or thread) is checked against its
// claim: a stale, unknown or released token, or no token while the claim is live, is refused
// and stores nothing; the holder's token is accepted; a workflow never claimed is written as
// without claims, but not under a token.
func testClaimFencesEveryWrite(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	for _, fw := range fencedWrites(t) {
		t.Run(fw.name, func(t *testing.T) {
			wf := "wf-" + fw.name
			mustSave(t, s, store.SaveRequest{WorkflowID: wf, CheckpointID: "base-" + wf, State: []byte(`{}`)})
			PutLG(t, s, wf, "", "lg-base", "", map[string]any{}, nil, "")
			// never claimed: no token works as today; a token is refused
			requireClaimed(t, fw.write(s, wf, 1), "", 0)
			base := fw.stored(s, wf)

			c1, err := s.Claim(ctx, wf, "a", shortLease)
			require.NoError(t, err)
			waitFree(t, s, wf)
			c2, err := s.Claim(ctx, wf, "b", longLease) // takes over: c1's token is stale
			require.NoError(t, err)
			requireClaimed(t, fw.write(s, wf, c1.Token), "b", c2.Token)
			requireClaimed(t, fw.write(s, wf, 0), "b", c2.Token)
			requireClaimed(t, fw.write(s, wf, c2.Token+1), "b", c2.Token)
			require.Equal(t, base, fw.stored(s, wf), "a refused write stored something")

			require.NoError(t, fw.write(s, wf, c2.Token))
			after := fw.stored(s, wf)
			if fw.name != "CompleteFenced" {
				require.Greater(t, after, base)
			} else {
				require.Equal(t, 1, after)
			}

			ok, err := s.Release(ctx, wf, c2.Token)
			require.NoError(t, err)
			require.True(t, ok)
			requireClaimed(t, fw.write(s, wf, c2.Token), "", c2.Token)
			require.Equal(t, after, fw.stored(s, wf))
			if fw.name != "CompleteFenced" {
				require.NoError(t, fw.write(s, wf, 0), "released: written as without claims")
			}
		})
	}
	// Without a token, a live claim refuses even a write a lease ago would have been fine.
	wf := "wf-tokenless"
	mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: []byte(`{}`)})
	_, err := s.Claim(ctx, wf, "a", shortLease)
	require.NoError(t, err)
	_, err = s.Save(ctx, store.SaveRequest{WorkflowID: wf, State: []byte(`{}`)})
	requireClaimed(t, err, "a", 1)
	waitFree(t, s, wf)
	mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: []byte(`{}`)}) // the lease ran out: free
}

// testClaimFenceInBatch: saves queued together (committed in one batch by backends that batch)
// are fenced one by one: the refused ones store nothing, the others keep their order and seqs.
func testClaimFenceInBatch(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	c, err := s.Claim(ctx, "wf", "a", longLease)
	require.NoError(t, err)
	var ps []*store.Pending
	for i := 0; i < 40; i++ {
		token := c.Token
		if i%3 == 1 {
			token = c.Token + 7 // never issued
		}
		if i%3 == 2 {
			token = 0
		}
		ps = append(ps, s.Enqueue(store.SaveRequest{WorkflowID: "wf", Step: int64(i), State: []byte(fmt.Sprintf(`{"i":%d}`, i)), FencingToken: token}))
	}
	var seqs []int64
	for i, p := range ps {
		res, err := p.Wait(ctx)
		if i%3 == 0 {
			require.NoError(t, err)
			seqs = append(seqs, res.Seq)
			continue
		}
		requireClaimed(t, err, "a", c.Token)
	}
	l, err := s.List(ctx, store.ListFilter{WorkflowID: "wf", Limit: 1000})
	require.NoError(t, err)
	require.Len(t, l, len(seqs))
	for i, sm := range l { // newest first
		require.Equal(t, int64(3*(len(l)-1-i)), sm.Step)
	}
	for i := 1; i < len(seqs); i++ {
		require.Greater(t, seqs[i], seqs[i-1])
	}
}

// testClaimConcurrentClaimers: many claimers of one free workflow at once: exactly one wins,
// every other is refused naming it.
func testClaimConcurrentClaimers(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	results := make([]error, n)
	claims := make([]store.Claim, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			claims[i], results[i] = s.Claim(ctx, "wf", fmt.Sprintf("w%02d", i), longLease)
		}(i)
	}
	wg.Wait()
	winner := -1
	for i, err := range results {
		if err == nil {
			require.Equal(t, -1, winner, "two claimers won")
			winner = i
		}
	}
	require.NotEqual(t, -1, winner)
	require.Equal(t, int64(1), claims[winner].Token)
	for i, err := range results {
		if i != winner {
			requireClaimed(t, err, fmt.Sprintf("w%02d", winner), 1)
		}
	}
}

// testClaimTwoBackends: two backends on one database (two ckptd processes) see one claim: a
// claim made through one is refused, renewed and fences writes through the other.
func testClaimTwoBackends(t *testing.T, h *harness) {
	ctx := context.Background()
	a := h.db(t)
	b := h.reopen(t, a)
	c, err := a.Claim(ctx, "wf", "worker-a", shortLease)
	require.NoError(t, err)
	mustSave(t, a, store.SaveRequest{WorkflowID: "wf", State: []byte(`{"by":"a"}`), FencingToken: c.Token})
	_, err = b.Claim(ctx, "wf", "worker-b", longLease)
	requireClaimed(t, err, "worker-a", 1)
	_, err = b.Save(ctx, store.SaveRequest{WorkflowID: "wf", State: []byte(`{"by":"b"}`)})
	requireClaimed(t, err, "worker-a", 1)
	waitFree(t, b, "wf")
	c2, err := b.Claim(ctx, "wf", "worker-b", longLease)
	require.NoError(t, err)
	require.Equal(t, int64(2), c2.Token)
	_, err = a.Save(ctx, store.SaveRequest{WorkflowID: "wf", State: []byte(`{"by":"late a"}`), FencingToken: c.Token})
	requireClaimed(t, err, "worker-b", 2)
	_, err = a.Renew(ctx, "wf", c.Token, longLease)
	requireClaimed(t, err, "worker-b", 2)
	res := mustSave(t, b, store.SaveRequest{WorkflowID: "wf", State: []byte(`{"by":"b"}`), FencingToken: c2.Token})
	require.Equal(t, int64(2), res.Seq, "the late save took no seq")
	lr, err := a.LoadLatest(ctx, "wf", "")
	require.NoError(t, err)
	require.JSONEq(t, `{"by":"b"}`, string(lr.State))
}

// testClaimTakeOverFencesRacingWriter: a writer saving under its token while its lease runs
// out and another worker takes over: every save acknowledged under the old token committed
// before the take-over (its seq is below the new owner's first), and every one after it is
// refused.
func testClaimTakeOverFencesRacingWriter(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	c, err := s.Claim(ctx, "wf", "old", shortLease)
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		acked   []int64
		refused int
	)
	tookOver := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			res, err := s.Save(ctx, store.SaveRequest{WorkflowID: "wf", Step: int64(i), State: []byte(fmt.Sprintf(`{"i":%d}`, i)), FencingToken: c.Token})
			mu.Lock()
			if err != nil {
				if !errors.Is(err, store.ErrClaimed) {
					mu.Unlock()
					t.Errorf("save %d: %v", i, err)
					return
				}
				refused++
			} else {
				acked = append(acked, res.Seq)
			}
			n := refused
			mu.Unlock()
			time.Sleep(time.Millisecond)
			if n > 0 {
				select {
				case <-tookOver:
					return
				default:
				}
			}
		}
	}()
	waitFree(t, s, "wf")
	c2, err := s.Claim(ctx, "wf", "new", longLease)
	require.NoError(t, err)
	close(tookOver)
	first := mustSave(t, s, store.SaveRequest{WorkflowID: "wf", State: []byte(`{"new":true}`), FencingToken: c2.Token})
	<-done
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, acked)
	require.Positive(t, refused)
	for _, seq := range acked {
		require.Less(t, seq, first.Seq)
	}
	l, err := s.List(ctx, store.ListFilter{WorkflowID: "wf", Limit: 10000})
	require.NoError(t, err)
	require.Len(t, l, len(acked)+1, "only acknowledged saves are stored")
}

// testClaimable: the resumable workflows whose claim is free (never claimed, released, lease
// run out), least recently updated first; live claims, completed workflows and workflows
// without checkpoints are left out.
func testClaimable(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	for _, wf := range []string{"a", "b", "c", "d", "e", "done"} {
		mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: []byte(`{"wf":"` + wf + `"}`)})
	}
	mustSave(t, s, store.SaveRequest{WorkflowID: "a", Step: 1, State: []byte(`{}`)}) // a is now the newest
	_, err := s.Complete(ctx, "done", true)
	require.NoError(t, err)
	require.NoError(t, s.SetWorkflowSources(ctx, "no-checkpoints", []byte(`{"root":"/nowhere"}`)))
	_, err = s.Claim(ctx, "no-checkpoints", "x", shortLease)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "b", "worker", longLease)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "c", "worker", shortLease)
	require.NoError(t, err)
	d, err := s.Claim(ctx, "d", "worker", longLease)
	require.NoError(t, err)
	_, err = s.Release(ctx, "d", d.Token)
	require.NoError(t, err)

	ids := func(limit int) []string {
		ws, err := s.Claimable(ctx, limit)
		require.NoError(t, err)
		out := []string{}
		for _, w := range ws {
			require.True(t, w.Resumable)
			require.NotNil(t, w.Latest)
			require.Equal(t, w.WorkflowID, w.Latest.WorkflowID)
			require.Positive(t, w.Count)
			out = append(out, w.WorkflowID)
		}
		return out
	}
	// c's lease is short: it may or may not have run out yet
	got := ids(0)
	if len(got) == 4 {
		require.Equal(t, []string{"c", "d", "e", "a"}, got)
	} else {
		require.Equal(t, []string{"d", "e", "a"}, got)
	}
	waitFree(t, s, "c")
	require.Equal(t, []string{"c", "d", "e", "a"}, ids(0))
	require.Equal(t, []string{"c", "d"}, ids(2))
	ws, err := s.Claimable(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), ws[0].Latest.Seq)
	// claiming takes a workflow off the list; saving moves it to the end
	_, err = s.Claim(ctx, "c", "worker-2", longLease)
	require.NoError(t, err)
	mustSave(t, s, store.SaveRequest{WorkflowID: "d", Step: 1, State: []byte(`{}`)})
	require.Equal(t, []string{"e", "a", "d"}, ids(0))
	_, err = s.Claimable(ctx, -1)
	invalidField("limit")(t, err)
}
