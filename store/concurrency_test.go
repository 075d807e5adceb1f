package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGroupCommitKeepsOrder(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const workers, per = 8, 60
	pend := make([][]*Pending, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				// every third save conflicts / is invalid: it must not disturb the others
				req := SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", w), CheckpointID: fmt.Sprintf("c-%d-%d", w, i),
					State: []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)), Step: int64(i)}
				if i%20 == 19 {
					req.CheckpointID = fmt.Sprintf("c-%d-%d", w, i-1) // conflict: same id, other content
				}
				if i%20 == 10 {
					req.Phase = "bogus"
				}
				pend[w] = append(pend[w], s.Enqueue(req))
			}
		}(w)
	}
	wg.Wait()
	for w := 0; w < workers; w++ {
		seq := int64(0)
		for i, p := range pend[w] {
			res, err := p.Wait(ctx)
			switch i % 20 {
			case 19:
				require.ErrorIs(t, err, ErrConflict)
				continue
			case 10:
				var ie *InvalidError
				require.ErrorAs(t, err, &ie)
				continue
			}
			require.NoError(t, err)
			seq++
			require.Equal(t, seq, res.Seq, "workflow %d save %d", w, i)
		}
		lst, err := s.List(ctx, ListFilter{WorkflowID: fmt.Sprintf("wf-%d", w), Limit: 1000})
		require.NoError(t, err)
		require.Len(t, lst, int(seq))
		for j, sm := range lst { // newest first: steps descending
			if j > 0 {
				require.Less(t, sm.Step, lst[j-1].Step)
			}
		}
	}
	commits := s.writes.Load()
	t.Logf("%d saves in %d transactions", workers*per, commits)
	require.Less(t, commits, uint64(workers*per), "saves were group-committed")
}

func TestCloseDrainsQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckptd.db")
	s, err := Open(context.Background(), Options{Path: path})
	require.NoError(t, err)
	var pend []*Pending
	for i := 0; i < 300; i++ {
		pend = append(pend, s.Enqueue(SaveRequest{WorkflowID: fmt.Sprintf("w%d", i%3), State: []byte(fmt.Sprintf(`{"i":%d}`, i))}))
	}
	require.NoError(t, s.Close())
	for _, p := range pend {
		select {
		case <-p.Done():
		default:
			t.Fatal("Close returned before a save was answered")
		}
		_, err := p.Wait(context.Background())
		require.NoError(t, err)
	}
	_, err = s.Enqueue(SaveRequest{WorkflowID: "w"}).Wait(context.Background())
	require.ErrorIs(t, err, ErrClosed)
	wi, err := os.Stat(path + "-wal")
	require.True(t, err != nil || wi.Size() == 0, "Close checkpointed the WAL")
	s2, err := Open(context.Background(), Options{Path: path, noBackground: true})
	require.NoError(t, err)
	defer s2.Close()
	st, err := s2.Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, 300, st.Checkpoints)
}

func TestTwoStoresOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckptd.db")
	ctx := context.Background()
	var stores []*Store
	for i := 0; i < 2; i++ {
		s, err := Open(ctx, Options{Path: path, Durability: DurabilityNormal, ckptInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		defer s.Close()
		stores = append(stores, s)
	}
	const per = 100
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for si, s := range stores {
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func(s *Store, wf string) {
				defer wg.Done()
				for i := 0; i < per; i++ {
					res, err := s.Save(ctx, SaveRequest{WorkflowID: wf, State: []byte(fmt.Sprintf(`{"i":%d,"pad":"%0200d"}`, i, i))})
					if err != nil {
						errs <- err
						return
					}
					if res.Seq != int64(i+1) {
						errs <- fmt.Errorf("%s: seq %d, want %d", wf, res.Seq, i+1)
					}
					if i%10 == 0 {
						if _, err := s.LoadLatest(ctx, wf, ""); err != nil {
							errs <- err
						}
						if _, err := s.List(ctx, ListFilter{Limit: 5}); err != nil {
							errs <- err
						}
					}
				}
			}(s, fmt.Sprintf("store%d-wf%d", si, g))
		}
	}
	// both prune / delete concurrently too
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			if _, err := stores[i%2].Prune(ctx, PruneRequest{KeepLast: 50}); err != nil {
				errs <- err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, s := range stores {
		wfs, err := s.Workflows(ctx, false)
		require.NoError(t, err)
		require.Len(t, wfs, 6)
	}
}

func TestBusyRetryAndGiveUp(t *testing.T) {
	s := openTest(t, func(o *Options) { o.busyTimeout = 50 * time.Millisecond; o.giveUp = 2 * time.Second })
	ctx := context.Background()
	db := rawDB(t, s.Path())
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()

	// a lock held for a while: the save waits and succeeds
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	go func() {
		time.Sleep(400 * time.Millisecond)
		_, _ = conn.ExecContext(ctx, "COMMIT")
	}()
	start := time.Now()
	_, err = s.Save(ctx, SaveRequest{WorkflowID: "w"})
	require.NoError(t, err)
	require.Greater(t, time.Since(start), 300*time.Millisecond)

	// a lock held too long: ErrUnavailable, never a raw SQLITE_BUSY
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, err = s.Save(ctx, SaveRequest{WorkflowID: "w"})
	require.ErrorIs(t, err, ErrUnavailable)
	require.Contains(t, err.Error(), "busy")
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	res, err := s.Save(ctx, SaveRequest{WorkflowID: "w"})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Seq)
}

func TestWaitContext(t *testing.T) {
	s := openTest(t)
	db := rawDB(t, s.Path())
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
	require.NoError(t, err)
	p := s.Enqueue(SaveRequest{WorkflowID: "w"})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = p.Wait(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = conn.ExecContext(context.Background(), "COMMIT")
	require.NoError(t, err)
	res, err := p.Wait(context.Background())
	require.NoError(t, err, "the accepted save is committed anyway")
	require.Equal(t, int64(1), res.Seq)
}

// TestHelperProcessSaver is the other process of TestTwoProcesses.
func TestHelperProcessSaver(t *testing.T) {
	path := os.Getenv("CKPTD_STORE_HELPER_DB")
	if path == "" {
		t.Skip("helper process for TestTwoProcesses")
	}
	s, err := Open(context.Background(), Options{Path: path})
	require.NoError(t, err)
	for i := 0; i < 150; i++ {
		res, err := s.Save(context.Background(), SaveRequest{WorkflowID: "proc-b", State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		require.NoError(t, err)
		require.Equal(t, int64(i+1), res.Seq)
		if i%25 == 0 {
			_, err := s.Prune(context.Background(), PruneRequest{KeepLast: 1000})
			require.NoError(t, err)
		}
	}
	require.NoError(t, s.Close())
}

func TestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	path := filepath.Join(t.TempDir(), "ckptd.db")
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: path})
	require.NoError(t, err)
	defer s.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessSaver$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CKPTD_STORE_HELPER_DB="+path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	for i := 0; i < 150; i++ {
		res, err := s.Save(ctx, SaveRequest{WorkflowID: "proc-a", State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		require.NoError(t, err)
		require.Equal(t, int64(i+1), res.Seq)
		if i%25 == 0 {
			_, err := s.List(ctx, ListFilter{Limit: 10})
			require.NoError(t, err)
		}
	}
	require.NoError(t, cmd.Wait(), out.String())
	for _, wf := range []string{"proc-a", "proc-b"} {
		lr, err := s.LoadLatest(ctx, wf, "")
		require.NoError(t, err)
		require.Equal(t, int64(150), lr.Seq, wf)
	}
}

// TestConcurrentFirstReads: more first-time reads than the read pool has connections, each
// inside its own read transaction, must not wait on each other for a connection to prepare
// their statements on (they once deadlocked: every pooled connection held by a transaction
// that waited for one more).
func TestConcurrentFirstReads(t *testing.T) {
	for round := 0; round < 5; round++ {
		s := openTest(t)
		for i := 0; i < 8; i++ {
			mustSave(t, s, SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", i), CheckpointID: fmt.Sprintf("c-%d", i),
				State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, 4*readPoolSize*4)
		for g := 0; g < 4*readPoolSize; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				var err error
				switch g % 4 {
				case 0:
					_, err = s.Load(ctx, fmt.Sprintf("c-%d", g%8))
				case 1:
					_, err = s.LoadLatest(ctx, fmt.Sprintf("wf-%d", g%8), "")
				case 2:
					_, err = s.List(ctx, ListFilter{WorkflowID: fmt.Sprintf("wf-%d", g%8), Limit: g})
				case 3:
					_, err = s.Workflows(ctx, g%2 == 0)
				}
				errs <- err
			}(g)
		}
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "round %d", round)
		}
	}
}
