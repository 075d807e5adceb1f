package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSelectExpired(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// 6 checkpoints, seq 1..6, created 60s apart, newest at now
	items := func(n int) []RetentionItem {
		var out []RetentionItem
		for i := n; i >= 1; i-- { // deliberately unsorted (descending)
			out = append(out, RetentionItem{Seq: int64(i), ID: fmt.Sprintf("c%d", i), CreatedAt: now.Add(-time.Duration(n-i) * time.Minute)})
		}
		return out
	}
	cases := []struct {
		name string
		n    int
		r    Retention
		want []string
	}{
		{"empty", 0, Retention{KeepLast: 1}, nil},
		{"single never", 1, Retention{KeepLast: 1, MaxAgeSeconds: 1}, nil},
		{"off", 6, Retention{}, nil},
		{"unlimited keepLast 0", 6, Retention{KeepLast: 0}, nil},
		{"keepLast 10 of 6", 6, Retention{KeepLast: 10}, nil},
		{"keepLast 6 of 6", 6, Retention{KeepLast: 6}, nil},
		{"keepLast 3", 6, Retention{KeepLast: 3}, []string{"c1", "c2", "c3"}},
		{"keepLast 1", 6, Retention{KeepLast: 1}, []string{"c1", "c2", "c3", "c4", "c5"}},
		{"keepLast 3 keepFirst", 6, Retention{KeepLast: 3, KeepFirst: true}, []string{"c2", "c3"}},
		{"keepLast 1 keepFirst", 2, Retention{KeepLast: 1, KeepFirst: true}, nil},
		{"maxAge 150s", 6, Retention{MaxAgeSeconds: 150}, []string{"c1", "c2", "c3"}},
		{"maxAge exact boundary kept", 6, Retention{MaxAgeSeconds: 120}, []string{"c1", "c2", "c3"}},
		{"maxAge tiny never newest", 6, Retention{MaxAgeSeconds: 1}, []string{"c1", "c2", "c3", "c4", "c5"}},
		{"maxAge keepFirst", 6, Retention{MaxAgeSeconds: 150, KeepFirst: true}, []string{"c2", "c3"}},
		{"union keepLast 5 + maxAge 150", 6, Retention{KeepLast: 5, MaxAgeSeconds: 150}, []string{"c1", "c2", "c3"}},
		{"union keepLast 2 + maxAge 150", 6, Retention{KeepLast: 2, MaxAgeSeconds: 150}, []string{"c1", "c2", "c3", "c4"}},
		{"negative is off", 6, Retention{KeepLast: -1, MaxAgeSeconds: -5}, nil},
		{"idle ttl ignored", 6, Retention{IdleTTLSeconds: 1}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := items(tc.n)
			orig := append([]RetentionItem(nil), in...)
			require.Equal(t, tc.want, SelectExpired(in, tc.r, now))
			require.Equal(t, orig, in, "input not modified")
		})
	}
}

func TestRetentionInSave(t *testing.T) {
	clock := newClock()
	s := openTest(t, func(o *Options) { o.DefaultRetention = Retention{KeepLast: 3}; o.Now = clock.Now })
	ctx := context.Background()
	var mu sync.Mutex
	var notified []string
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, "retention", reason)
		notified = append(notified, ids...)
	})
	var ids []string
	for i := 0; i < 5; i++ {
		r := mustSave(t, s, SaveRequest{WorkflowID: "w", State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		ids = append(ids, r.CheckpointID)
		if i == 3 {
			require.Equal(t, []string{ids[0]}, r.Pruned)
		}
	}
	// another namespace counts separately
	mustSave(t, s, SaveRequest{WorkflowID: "w", Namespace: "sub"})
	lst, err := s.List(ctx, ListFilter{WorkflowID: "w", Namespace: strp("")})
	require.NoError(t, err)
	require.Len(t, lst, 3)
	require.Equal(t, ids[4], lst[0].CheckpointID)
	require.Equal(t, []string{ids[0], ids[1]}, notified)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.States, "pruned states removed (the sub checkpoint has none)")

	// per-workflow configuration overrides the default
	got, err := s.Configure(ctx, "w", &Retention{KeepLast: 0, MaxAgeSeconds: 3600, KeepFirst: true})
	require.NoError(t, err)
	require.Equal(t, Retention{MaxAgeSeconds: 3600, KeepFirst: true}, got)
	eff, err := s.Configure(ctx, "w", nil)
	require.NoError(t, err)
	require.Equal(t, got, eff)
	eff, err = s.Configure(ctx, "unknown", nil)
	require.NoError(t, err)
	require.Equal(t, Retention{KeepLast: 3}, eff)
	for i := 0; i < 4; i++ {
		mustSave(t, s, SaveRequest{WorkflowID: "w"})
	}
	lst, err = s.List(ctx, ListFilter{WorkflowID: "w", Namespace: strp("")})
	require.NoError(t, err)
	require.Len(t, lst, 7, "keepLast 0 = unlimited")
	clock.Advance(2 * time.Hour)
	r := mustSave(t, s, SaveRequest{WorkflowID: "w"})
	require.Len(t, r.Pruned, 6, "all older than maxAge except the first (keepFirst)")
	lst, err = s.List(ctx, ListFilter{WorkflowID: "w", Namespace: strp("")})
	require.NoError(t, err)
	require.Len(t, lst, 2)
	require.Equal(t, ids[2], lst[1].CheckpointID, "keepFirst keeps the lowest surviving seq")

	_, err = s.Configure(ctx, "w", &Retention{KeepLast: -1})
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
}

func fileSize(t *testing.T, path string) int64 {
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

func TestPruneAndVacuum(t *testing.T) {
	clock := newClock()
	s := openTest(t, func(o *Options) { o.Now = clock.Now })
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 40; i++ {
		mustSave(t, s, SaveRequest{WorkflowID: fmt.Sprintf("w%d", i%2), State: randBytes(rng, 64<<10), StateType: StateBytes})
	}
	var mu sync.Mutex
	pruned := map[string]int{}
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, "prune", reason)
		pruned[wf] += len(ids)
	})
	_, err := s.wconn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	require.NoError(t, err)
	before := fileSize(t, s.Path())

	dry, err := s.Prune(ctx, PruneRequest{WorkflowID: "w0", KeepLast: 5, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 15, dry.Deleted)
	require.Greater(t, dry.FreedBytes, int64(15*60<<10))
	lst, err := s.List(ctx, ListFilter{WorkflowID: "w0"})
	require.NoError(t, err)
	require.Len(t, lst, 20, "dry run deletes nothing")
	require.Empty(t, pruned)

	real, err := s.Prune(ctx, PruneRequest{WorkflowID: "w0", KeepLast: 5})
	require.NoError(t, err)
	require.Equal(t, dry.Deleted, real.Deleted)
	require.Equal(t, dry.FreedBytes, real.FreedBytes)
	require.Equal(t, dry.IDs, real.IDs)
	require.Equal(t, map[string]int{"w0": 15}, pruned)
	lst, err = s.List(ctx, ListFilter{WorkflowID: "w0"})
	require.NoError(t, err)
	require.Len(t, lst, 5)
	after := fileSize(t, s.Path())
	require.Less(t, after, before-real.FreedBytes/2, "file shrank: %d -> %d", before, after)

	// olderThan across all workflows; newest always kept
	clock.Advance(time.Hour)
	res, err := s.Prune(ctx, PruneRequest{OlderThanSeconds: 60})
	require.NoError(t, err)
	require.Equal(t, 4+19, res.Deleted)
	wfs, err := s.Workflows(ctx, false)
	require.NoError(t, err)
	for _, w := range wfs {
		require.Equal(t, 1, w.Count)
	}
}

func TestCompleteAndWorkflows(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var mu sync.Mutex
	var reasons []string
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		mu.Lock()
		reasons = append(reasons, reason+":"+wf)
		mu.Unlock()
	})
	for _, wf := range []string{"a", "b", "c"} {
		for i := 0; i < 3; i++ {
			mustSave(t, s, SaveRequest{WorkflowID: wf, State: []byte(`{"wf":"` + wf + `"}`)})
		}
	}
	_, err := s.Configure(ctx, "empty", &Retention{KeepLast: 2})
	require.NoError(t, err)

	n, err := s.Complete(ctx, "a", false)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = s.Complete(ctx, "b", true)
	require.NoError(t, err)
	require.Zero(t, n)
	for wf, want := range map[string]bool{"a": true, "b": true, "c": false, "empty": false, "none": false} {
		got, err := s.IsCompleted(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, want, got, wf)
	}
	require.Equal(t, []string{"complete:a"}, reasons)

	all, err := s.Workflows(ctx, false)
	require.NoError(t, err)
	byID := map[string]WorkflowInfo{}
	for _, w := range all {
		byID[w.WorkflowID] = w
	}
	require.Len(t, byID, 4)
	require.Equal(t, WorkflowInfo{WorkflowID: "a", Completed: true, UpdatedAt: byID["a"].UpdatedAt}, byID["a"])
	require.Equal(t, 3, byID["b"].Count)
	require.True(t, byID["b"].Completed)
	require.False(t, byID["b"].Resumable)
	require.True(t, byID["c"].Resumable)
	require.Equal(t, int64(3*len(`{"wf":"c"}`)), byID["c"].StoredBytes)
	require.NotNil(t, byID["c"].Latest)
	require.Equal(t, int64(3), byID["c"].Latest.Seq)
	require.Nil(t, byID["empty"].Latest)
	require.False(t, byID["empty"].Resumable)

	res, err := s.Workflows(ctx, true)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, "c", res[0].WorkflowID)

	// a later save makes a completed workflow resumable again, seq continues
	r := mustSave(t, s, SaveRequest{WorkflowID: "a"})
	require.Equal(t, int64(4), r.Seq)
	done, err := s.IsCompleted(ctx, "a")
	require.NoError(t, err)
	require.False(t, done)
	res, err = s.Workflows(ctx, true)
	require.NoError(t, err)
	require.Len(t, res, 2)

	// DeleteWorkflow removes checkpoints and configuration
	n, err = s.DeleteWorkflow(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	_, err = s.LoadLatest(ctx, "c", "")
	require.ErrorIs(t, err, ErrNotFound)
	n, err = s.DeleteWorkflow(ctx, "empty")
	require.NoError(t, err)
	require.Zero(t, n)
	eff, err := s.Configure(ctx, "empty", nil)
	require.NoError(t, err)
	require.Equal(t, s.DefaultRetention(), eff)
}

func TestIdleExpiry(t *testing.T) {
	clock := newClock()
	s := openTest(t, func(o *Options) { o.Now = clock.Now })
	ctx := context.Background()
	var got []string
	s.SetOnPruned(func(wf string, ids []string, reason string) {
		require.Equal(t, "idle", reason)
		got = append(got, wf)
	})
	mustSave(t, s, SaveRequest{WorkflowID: "idle"})
	mustSave(t, s, SaveRequest{WorkflowID: "busy"})
	mustSave(t, s, SaveRequest{WorkflowID: "forever"})
	_, err := s.Configure(ctx, "idle", &Retention{IdleTTLSeconds: 60})
	require.NoError(t, err)
	_, err = s.Configure(ctx, "busy", &Retention{IdleTTLSeconds: 60})
	require.NoError(t, err)
	out, err := s.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Empty(t, out)
	clock.Advance(50 * time.Second)
	mustSave(t, s, SaveRequest{WorkflowID: "busy"})
	clock.Advance(20 * time.Second)
	out, err = s.ExpireIdle(ctx)
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.Len(t, out["idle"], 1)
	require.Equal(t, []string{"idle"}, got)
	wfs, err := s.Workflows(ctx, false)
	require.NoError(t, err)
	require.Len(t, wfs, 2)

	// server default idle TTL, applied at Open too
	path := s.Path()
	require.NoError(t, s.Close())
	clock.Advance(time.Hour)
	s2, err := Open(ctx, Options{Path: path, Now: clock.Now, DefaultRetention: Retention{IdleTTLSeconds: 600}, noBackground: true})
	require.NoError(t, err)
	defer s2.Close()
	wfs, err = s2.Workflows(ctx, false)
	require.NoError(t, err)
	require.Empty(t, wfs, "busy expired by its own TTL, forever by the default at Open")
}

func TestPutWrites(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	cp := mustSave(t, s, SaveRequest{WorkflowID: "w", Namespace: "ns"})
	n, err := s.PutWrites(ctx, "w", "ns", cp.CheckpointID, []Write{
		{TaskID: "t2", Idx: 0, Channel: "messages", Value: []byte(`"hello"`), Type: "json"},
		{TaskID: "t1", Idx: 1, Channel: "b", Value: []byte{1, 2, 3}, IsBytes: true, TaskPath: "p"},
		{TaskID: "t1", Idx: 0, Channel: "a", Value: []byte(`1`)},
		{TaskID: "t1", Idx: -1, Channel: "__error__", Value: []byte(`"first"`)},
	})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	// repeats: idx >= 0 ignored, idx < 0 replaced
	n, err = s.PutWrites(ctx, "w", "ns", cp.CheckpointID, []Write{
		{TaskID: "t1", Idx: 0, Channel: "a", Value: []byte(`999`)},
		{TaskID: "t1", Idx: -1, Channel: "__error__", Value: []byte(`"second"`)},
		{TaskID: "t3", Idx: 0, Channel: "c"},
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got, err := s.Load(ctx, cp.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, []Write{
		{TaskID: "t1", Idx: -1, Channel: "__error__", Value: []byte(`"second"`)},
		{TaskID: "t1", Idx: 0, Channel: "a", Value: []byte(`1`)},
		{TaskID: "t1", Idx: 1, Channel: "b", Value: []byte{1, 2, 3}, IsBytes: true, TaskPath: "p"},
		{TaskID: "t2", Idx: 0, Channel: "messages", Value: []byte(`"hello"`), Type: "json"},
		{TaskID: "t3", Idx: 0, Channel: "c"},
	}, got.PendingWrites)
	lr, err := s.LoadLatest(ctx, "w", "ns")
	require.NoError(t, err)
	require.Len(t, lr.PendingWrites, 5)

	_, err = s.PutWrites(ctx, "other", "ns", cp.CheckpointID, []Write{{TaskID: "t", Channel: "c"}})
	require.ErrorIs(t, err, ErrConflict)
	_, err = s.PutWrites(ctx, "w", "ns", cp.CheckpointID, []Write{{TaskID: "t"}})
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)

	// writes go with their checkpoint
	_, err = s.Delete(ctx, cp.CheckpointID)
	require.NoError(t, err)
	var left int
	require.NoError(t, s.rdb.QueryRow(`SELECT count(*) FROM writes`).Scan(&left))
	require.Zero(t, left)
}

func TestMetadataCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`1`, `1`}, {`1.0`, `1`}, {`1e2`, `100`}, {`"1"`, `"1"`}, {`-0.5`, `-0.5`},
		{` { "b" : [ 1 , true , null ], "a" : "x<y" } `, `{"a":"x<y","b":[1,true,null]}`},
		{`12345678901234567890`, `12345678901234567890`},
		{`"\u00e9"`, `"é"`},
	} {
		got, err := canonicalJSON([]byte(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{``, `{`, `1 2`, `nul`} {
		_, err := canonicalJSON([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestCountArray(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		null bool
		ok   bool
	}{
		{``, 0, true, true}, {`null`, 0, true, true}, {` [ ] `, 0, false, true}, {`[1]`, 1, false, true},
		{`[1,2,3]`, 3, false, true}, {`[[1,2],{"a":[3,4]},"x,y\"]"]`, 3, false, true}, {`[{}]`, 1, false, true},
		{`{}`, 0, false, false}, {`"x"`, 0, false, false}, {`[1,2`, 0, false, false}, {`[1] x`, 0, false, false},
		{`["a\\", "b,c"]`, 2, false, true}, {`["\\\"],", 1]`, 2, false, true}, {`["\"]`, 0, false, false},
		{"[\n\t1 ,\r\n 2 ]\n", 2, false, true}, {`[""]`, 1, false, true}, {`[true,null,-1e5]`, 3, false, true},
	} {
		n, null, ok := countArray([]byte(tc.in))
		require.Equal(t, tc.ok, ok, tc.in)
		if ok {
			require.Equal(t, tc.n, n, tc.in)
			require.Equal(t, tc.null, null, tc.in)
		}
	}
	n, _, ok := countArray(pendingTasksJSON(1000))
	require.True(t, ok)
	require.Equal(t, 1000, n)
	var arr []json.RawMessage
	require.NoError(t, json.Unmarshal(pendingTasksJSON(10), &arr))
	require.Len(t, arr, 10)
}

// TestKeepLastFastPath checks the save path's keepLast shortcut against SelectExpired.
func TestKeepLastFastPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for round := 0; round < 40; round++ {
		r := Retention{KeepLast: 1 + rng.IntN(5), KeepFirst: rng.IntN(2) == 0}
		s := openTest(t)
		ctx := context.Background()
		var items []RetentionItem
		n := rng.IntN(12)
		for i := 0; i < n; i++ {
			res := mustSave(t, s, SaveRequest{WorkflowID: "w"})
			items = append(items, RetentionItem{Seq: res.Seq, ID: res.CheckpointID, CreatedAt: res.CreatedAt})
		}
		want := SelectExpired(items, r, time.Now())
		var got []string
		err := s.do(ctx, func(ctx context.Context, w *wtx) error {
			var err error
			got, err = s.applyKeepLast(ctx, w, "w", "", r)
			return err
		})
		require.NoError(t, err)
		if len(want) == 0 {
			want = []string{}
		}
		require.Equal(t, want, got, "round %d: %+v over %d", round, r, n)
		require.NoError(t, s.Close())
	}
}
