package sqlite

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

	"github.com/ckptd/ckptd/store"
)

// TestGroupCommit: saves that queue up while the writer is busy share transactions, and a
// conflicting or invalid one among them is rolled back alone (storetest checks the order).
func TestGroupCommit(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const saves = 480
	pend := make([]*store.Pending, 0, saves)
	for i := 0; i < saves; i++ {
		req := store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", i%8), CheckpointID: fmt.Sprintf("c-%d", i),
			State: []byte(fmt.Sprintf(`{"i":%d}`, i))}
		if i%20 == 19 {
			req.CheckpointID = fmt.Sprintf("c-%d", i-8) // conflict: same id, other content
		}
		pend = append(pend, s.Enqueue(req))
	}
	ok := 0
	for i, p := range pend {
		_, err := p.Wait(ctx)
		if i%20 == 19 {
			require.ErrorIs(t, err, store.ErrConflict)
			continue
		}
		require.NoError(t, err)
		ok++
	}
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, ok, st.Checkpoints)
	commits := s.writes.Load()
	t.Logf("%d saves in %d transactions", saves, commits)
	require.Less(t, commits, uint64(saves), "saves were group-committed")
}

// TestCloseTruncatesWAL: Close checkpoints the WAL into the database file.
func TestCloseTruncatesWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckptd.db")
	s, err := open(context.Background(), options(path, func(o *Options) { o.noBackground = false }))
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		s.Enqueue(store.SaveRequest{WorkflowID: "w", State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	require.NoError(t, s.Close())
	wi, err := os.Stat(path + "-wal")
	require.True(t, err != nil || wi.Size() == 0, "Close checkpointed the WAL")
	// and every connection closed: SQLite removes the WAL and its index with the last one (a
	// statement the writer cached and never finalized once kept them, and a restart on a full
	// disk then found an index it could not grow).
	for _, f := range []string{path + "-wal", path + "-shm"} {
		_, err := os.Stat(f)
		require.True(t, os.IsNotExist(err), "%s is still there after Close: %v", f, err)
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
	_, err = s.Save(ctx, store.SaveRequest{WorkflowID: "w"})
	require.NoError(t, err)
	require.Greater(t, time.Since(start), 300*time.Millisecond)

	// a lock held too long: ErrUnavailable, never a raw SQLITE_BUSY
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, err = s.Save(ctx, store.SaveRequest{WorkflowID: "w"})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.Contains(t, err.Error(), "busy")
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	res, err := s.Save(ctx, store.SaveRequest{WorkflowID: "w"})
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
	p := s.Enqueue(store.SaveRequest{WorkflowID: "w"})
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
	s, err := open(context.Background(), options(path, func(o *Options) { o.noBackground = false }))
	require.NoError(t, err)
	for i := 0; i < 150; i++ {
		res, err := s.Save(context.Background(), store.SaveRequest{WorkflowID: "proc-b", State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		require.NoError(t, err)
		require.Equal(t, int64(i+1), res.Seq)
		if i%25 == 0 {
			_, err := s.Prune(context.Background(), store.PruneRequest{KeepLast: 1000})
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
	s, err := open(ctx, options(path, func(o *Options) { o.noBackground = false }))
	require.NoError(t, err)
	defer s.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessSaver$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CKPTD_STORE_HELPER_DB="+path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	for i := 0; i < 150; i++ {
		res, err := s.Save(ctx, store.SaveRequest{WorkflowID: "proc-a", State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		require.NoError(t, err)
		require.Equal(t, int64(i+1), res.Seq)
		if i%25 == 0 {
			_, err := s.List(ctx, store.ListFilter{Limit: 10})
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
			mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", i), CheckpointID: fmt.Sprintf("c-%d", i),
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
					_, err = s.List(ctx, store.ListFilter{WorkflowID: fmt.Sprintf("wf-%d", g%8), Limit: g})
				case 3:
					_, err = store.AllWorkflows(ctx, s, g%2 == 0)
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
