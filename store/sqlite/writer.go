package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"time"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// job is one unit of work for the writer goroutine: a save or a generic mutation.
type job struct {
	save  *saveJob
	fn    func(ctx context.Context, w *wtx) error
	ctx   context.Context // generic jobs: skipped if already done when their turn comes
	ready chan struct{}   // closed when the save's preparation is done; nil: ready
	done  chan struct{}   // closed after the commit (or failure)
	err   error

	// per attempt
	vacuum bool
	post   []func()
}

func (j *job) isReady() bool {
	if j.ready == nil {
		return true
	}
	select {
	case <-j.ready:
		return true
	default:
		return false
	}
}

func (j *job) size() int {
	if j.save != nil {
		return len(j.save.Data) + len(j.save.Req.PendingTasks) + len(j.save.Req.CompletedTasks)
	}
	return 0
}

// wtx is what a job sees while running inside the writer's transaction.
type wtx struct {
	s    *Store
	conn *sql.Conn
	job  *job
	fig  *figures    // the job's changes to the kept figures (figures.go)
	rel  chunk.Tally // runs of chunked values the job removed, counted down when it ends (chunks.go)
	// listings of stored runs and chunks the job made (id -> how many more), logged or counted
	// when it ends (reflog.go)
	ups [2]map[int64]int64
}

// wtxMark is a job's chunk bookkeeping at a savepoint of its own (mark), which rolling back to
// that savepoint must put back (restore): what it released, the listings it made, the ids it
// learned. A job that rolls back to a savepoint of its own (a dry run) calls both.
type wtxMark struct {
	rel   chunk.Tally
	ups   [2]map[int64]int64
	known [2]map[chunk.Address]int64
}

func (w *wtx) mark() wtxMark {
	m := wtxMark{rel: maps.Clone(w.rel)}
	for k := range w.ups {
		m.ups[k] = maps.Clone(w.ups[k])
		m.known[k] = maps.Clone(w.s.known.job[k])
	}
	return m
}

func (w *wtx) restore(m wtxMark) {
	w.rel, w.ups, w.s.known.job = m.rel, m.ups, m.known
}

// exec, query and queryRow run q as a prepared statement of the writer connection (wstmt).
func (w *wtx) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := w.wstmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (w *wtx) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := w.wstmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (w *wtx) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := w.wstmt(ctx, q)
	if err != nil {
		return w.conn.QueryRowContext(ctx, q, args...) // reports the same error through Scan
	}
	return st.QueryRowContext(ctx, args...)
}

// after registers f to run once the transaction has committed.
func (w *wtx) after(f func()) { w.job.post = append(w.job.post, f) }

// vacuumAfter asks for PRAGMA incremental_vacuum + a WAL checkpoint after the commit.
func (w *wtx) vacuumAfter() { w.job.vacuum = true }

func (s *Store) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// push appends j to the write queue; false if the store is closed.
func (s *Store) push(j *job) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, j)
	s.mu.Unlock()
	s.signal()
	return true
}

// do runs fn in the writer goroutine inside a write transaction and waits for the commit.
func (s *Store) do(ctx context.Context, fn func(ctx context.Context, w *wtx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j := &job{fn: fn, ctx: ctx, done: make(chan struct{})}
	if !s.push(j) {
		return store.ErrClosed
	}
	select {
	case <-j.done:
		return j.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) writerLoop() {
	defer s.writerWG.Done()
	for {
		s.mu.Lock()
		for len(s.queue) == 0 {
			if s.closed {
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			if s.shrinkWriter.Swap(false) { // idle: give the page cache back (memory.go)
				s.wmu.Lock()
				_, _ = s.wconn.ExecContext(context.Background(), "PRAGMA shrink_memory")
				s.wmu.Unlock()
			}
			<-s.wake
			s.mu.Lock()
		}
		head := s.queue[0]
		s.mu.Unlock()
		if head.ready != nil {
			<-head.ready
		}
		s.mu.Lock()
		n, size := 1, head.size()
		for n < len(s.queue) && n < maxBatchJobs {
			j := s.queue[n]
			if !j.isReady() || size+j.size() > maxBatchBytes {
				break
			}
			size += j.size()
			n++
		}
		batch := make([]*job, n)
		copy(batch, s.queue[:n])
		clear(s.queue[:n])
		s.queue = s.queue[n:]
		if len(s.queue) == 0 {
			s.queue = nil // let the backing array go
		}
		s.mu.Unlock()
		s.runBatch(batch)
	}
}

// runBatch commits batch in one transaction, one savepoint per job, retrying the whole batch while
// the database is busy, then answers every job.
func (s *Store) runBatch(batch []*job) {
	ctx := context.Background() // never interrupted: accepted work is committed
	if err := s.Condition().Err(); err != nil {
		// The store stopped writing (damaged, file gone): refuse without touching the database.
		for _, j := range batch {
			j.err = err
			if j.save != nil && j.save.err != nil {
				j.err = j.save.err // a request the store would refuse anyway says so
			}
			close(j.done)
		}
		return
	}
	start := time.Now()
	delay := time.Millisecond
	careful := false // see tryBatch
	s.wmu.Lock()     // a read borrowing the connection (hotRead) finishes first
	for {
		in := s.gate.enter() // take turns with the other processes writing to this database
		err := s.tryBatchSafe(ctx, batch, careful)
		if in {
			s.gate.leave()
		}
		if errors.Is(err, errJobFailed) { // rolled back: again, each job in a savepoint of its own
			careful = true
			continue
		}
		if err == nil {
			// Committed: acknowledge only if it went into the file at the database's path.
			if ferr := s.checkFiles(); ferr != nil {
				s.log.Error("ckptd store: committed into a database file that is gone or replaced: refusing the batch", "jobs", len(batch))
				for _, j := range batch {
					if j.err == nil {
						j.err = ferr
					}
					j.post = nil
					j.vacuum = false
				}
			}
			break
		}
		s.observe(err)
		if isBusy(err) && time.Since(start) < s.opts.giveUp {
			d := delay/2 + rand.N(delay)
			time.Sleep(d)
			if delay < 200*time.Millisecond {
				delay *= 2
			}
			continue
		}
		var e error
		if isBusy(err) {
			e = fmt.Errorf("write: database busy for %s: %w: %v", time.Since(start).Round(time.Second), store.ErrUnavailable, err)
		} else if c := s.Condition().Err(); c != nil && isDamaged(err) {
			e = fmt.Errorf("write: %w", c)
		} else {
			e = wrapDB("write", err)
		}
		s.log.Error("ckptd store: write transaction failed", "err", err, "jobs", len(batch))
		for _, j := range batch {
			j.err = e
			j.post = nil
			j.vacuum = false
		}
		break
	}
	s.writes.Add(1)
	s.lastCommit.Store(time.Now().UnixNano())
	vacuum := false
	for _, j := range batch {
		if j.err == nil && j.vacuum {
			vacuum = true
		}
	}
	if vacuum {
		s.vacuumNow(ctx)
	}
	s.wmu.Unlock() // before the callers hear of it: a load right after its save may borrow it
	for _, j := range batch {
		if j.err == nil && j.save != nil && !j.save.res.Existing {
			s.noteSaved(j.save)
		}
		if j.err == nil {
			for _, f := range j.post {
				s.runHook(f)
			}
		}
		close(j.done)
	}
}

// tryBatchSafe is tryBatch with a panic turned into a failed (rolled back) batch.
func (s *Store) tryBatchSafe(ctx context.Context, batch []*job, careful bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("ckptd store: panic in write transaction", "panic", r)
			_, _ = s.ws.rollback.ExecContext(ctx)
			err = fmt.Errorf("internal error in write transaction: %v", r)
		}
	}()
	return s.tryBatch(ctx, batch, careful)
}

func (s *Store) runHook(f func()) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("ckptd store: panic in post-commit hook", "panic", r)
		}
	}()
	f()
}

// errJobFailed: a job of a batch run without savepoints failed, and the batch was rolled back.
var errJobFailed = errors.New("a job of the batch failed")

// tryBatch runs batch in one transaction. Jobs seldom fail (their requests were checked before
// they were queued), so a batch first runs without a savepoint per job: a savepoint costs two
// statements and a copy of every page the job writes first (the statement journal), ~10% of a
// 1 KB save's CPU in a batch of 32. If a job fails, the whole transaction is rolled back and
// tryBatch returns errJobFailed; runBatch then runs the batch again careful, each job in a
// savepoint of its own, so that a job that fails is undone alone. A job runs again exactly as
// after SQLITE_BUSY: what it does beside the database waits for the commit (wtx.after).
func (s *Store) tryBatch(ctx context.Context, batch []*job, careful bool) (err error) {
	for _, j := range batch {
		j.err, j.post, j.vacuum = nil, nil, false
	}
	ws := s.ws
	if _, err := ws.begin.ExecContext(ctx); err != nil {
		return err
	}
	open := true
	defer func() {
		if err != nil && open {
			_, _ = ws.rollback.ExecContext(ctx)
		}
		if err != nil {
			s.known.rollback()
		}
	}()
	s.known.begin(ctx, ws.dataVersion)
	// A lone job needs no savepoint: on failure the whole transaction is rolled back instead.
	single := len(batch) == 1
	savepoints := careful && !single
	w := &wtx{s: s, conn: s.wconn}
	var batchTotals totals
	for _, j := range batch {
		if j.save != nil && j.save.err != nil {
			j.err = j.save.err
			continue
		}
		if j.ctx != nil && j.ctx.Err() != nil {
			j.err = j.ctx.Err()
			continue
		}
		if savepoints {
			if _, err := ws.savepoint.ExecContext(ctx); err != nil {
				return err
			}
		}
		w.job, w.rel, w.ups = j, nil, [2]map[int64]int64{}
		w.fig = &figures{}
		var jerr error
		if j.save != nil {
			jerr = s.runSave(ctx, w, j.save)
		} else {
			jerr = j.fn(ctx, w)
		}
		if jerr == nil {
			jerr = s.flushReleases(ctx, w) // in the job's savepoint: undone with it
		}
		w.rel, w.ups = nil, [2]map[int64]int64{}
		if jerr == nil {
			jerr = s.flushWorkflows(ctx, w)
		}
		if jerr == nil {
			batchTotals.add(w.fig.totals)
		}
		if jerr != nil {
			if isUnavailable(jerr) {
				return jerr // storage trouble: the whole batch fails (or is retried when busy)
			}
			j.err = jerr
			j.post, j.vacuum = nil, false
			s.known.jobDone(false)
			if single || !savepoints {
				open = false
				if _, err := ws.rollback.ExecContext(ctx); err != nil || single {
					return err
				}
				return errJobFailed
			}
			if _, err := ws.rollbackTo.ExecContext(ctx); err != nil {
				return err
			}
		}
		if jerr == nil {
			s.known.jobDone(true)
		}
		if savepoints {
			if _, err := ws.release.ExecContext(ctx); err != nil {
				return err
			}
		}
	}
	if err := flushTotals(ctx, w, batchTotals); err != nil {
		return err
	}
	// Before committing: is the file still the one at the database's path? If not, roll back,
	// so that not even this process reads what it refuses (runBatch checks again after the
	// commit, for a file that goes away in between).
	if err := s.checkFiles(); err != nil {
		return err
	}
	if _, err := ws.commit.ExecContext(ctx); err != nil {
		return err
	}
	open = false
	s.known.commit()
	return nil
}

// vacuumNowPages bounds what vacuumNow gives back at once: it holds the write lock meanwhile.
// More free pages are left to the background (maybeVacuum, in bites).
const vacuumNowPages = 8 * store.BiteUnits

// vacuumNow returns free pages to the file system and checkpoints the WAL so the file shrinks.
func (s *Store) vacuumNow(ctx context.Context) {
	if err := s.retry(ctx, func() error {
		_, err := s.wconn.ExecContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", vacuumNowPages))
		return err
	}); err != nil {
		s.log.Warn("ckptd store: incremental_vacuum failed", "err", err)
		return
	}
	if _, err := s.wconn.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil && !isBusy(err) {
		s.log.Warn("ckptd store: WAL checkpoint failed", "err", err)
	}
}

// checkpointLoop runs WAL checkpoints off the save path: PASSIVE every interval when something was
// written, TRUNCATE when the WAL grew past walTruncateSize. It also reclaims free pages left by
// retention now and then.
func (s *Store) checkpointLoop() {
	defer s.bgWG.Done()
	t := time.NewTicker(s.opts.ckptInterval)
	defer t.Stop()
	var seen uint64
	lastCkpt, lastVacuum := time.Now(), time.Now()
	ctx := context.Background()
	var mem memState
	for {
		select {
		case <-s.stopBG:
			return
		case <-t.C:
		}
		s.idleRelease(&mem)
		if !s.Condition().Writable() {
			continue // damaged or gone: leave the files as they are
		}
		n := s.writes.Load()
		// Checkpoint when something was written and either enough piled up or a quiet-ish second
		// passed: fewer, larger checkpoints compete less with the saves' own fsyncs.
		if n != seen && (s.walPending.Load() >= walCheckpointBytes || time.Since(lastCkpt) >= 4*s.opts.ckptInterval) {
			seen = n
			lastCkpt = time.Now()
			s.walPending.Store(0)
			// busy, frames in the WAL, frames copied into the database (-1, -1 when not in WAL mode)
			var busy, frames, copied int64
			if err := s.cdb.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil && !isBusy(err) {
				s.log.Warn("ckptd store: WAL checkpoint failed", "err", err)
			}
			// TRUNCATE holds every writer off until it is done: only once a PASSIVE one has copied
			// every frame (it then has nothing to copy), unless the WAL keeps growing beyond four
			// times the limit because PASSIVE checkpoints cannot catch up with the writes (a long
			// prune's bites): then it is the only way to bound the file.
			if fi, err := os.Stat(s.path + "-wal"); err == nil && fi.Size() > walTruncateSize &&
				(copied >= frames || fi.Size() > 4*walTruncateSize) {
				if _, err := s.cdb.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil && !isBusy(err) {
					s.log.Warn("ckptd store: WAL truncate failed", "err", err)
				}
			}
		}
		if s.deletes.Load() > 0 && time.Since(lastVacuum) > 10*time.Second {
			lastVacuum = time.Now()
			s.deletes.Store(0)
			s.maybeVacuum()
		}
	}
}

// maybeVacuum runs incremental_vacuum through the writer when many pages are free.
func (s *Store) maybeVacuum() {
	var free, total int64
	if err := s.rdb.QueryRow("PRAGMA freelist_count").Scan(&free); err != nil {
		return
	}
	if err := s.rdb.QueryRow("PRAGMA page_count").Scan(&total); err != nil {
		return
	}
	if free < 256 || free*4 < total {
		return
	}
	s.vacuumBites(context.Background())
}

// bgContext is a context that ends when the store stops its background work.
func (s *Store) bgContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.stopBG
		cancel()
	}()
	return ctx
}

func (s *Store) idleLoop() {
	defer s.bgWG.Done()
	t := time.NewTicker(s.opts.idleInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopBG:
			return
		case <-t.C:
		}
		if !s.Condition().Writable() {
			continue
		}
		if _, err := s.ExpireIdle(context.Background()); err != nil && !errors.Is(err, store.ErrClosed) {
			s.log.Warn("ckptd store: idle expiry failed", "err", err)
		}
		if _, err := s.LGExpireIdle(store.Paced(s.bgContext())); err != nil && !errors.Is(err, store.ErrClosed) && !errors.Is(err, context.Canceled) {
			s.log.Warn("ckptd store: idle expiry of LangGraph threads failed", "err", err)
		}
	}
}
