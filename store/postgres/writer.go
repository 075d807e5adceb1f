package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ckptd/ckptd/store"
)

// job is one unit of work for the writer goroutine: a save or a generic mutation.
type job struct {
	save  *saveJob
	fn    func(ctx context.Context, w *wtx) error
	ctx   context.Context // generic jobs: skipped if already done when their turn comes
	ready chan struct{}   // closed when the save's preparation is done; nil: ready
	done  chan struct{}   // closed after the commit (or failure)
	err   error
	// locks are the advisory lock keys (workflows, threads) the job needs, taken with the
	// batch's in one sorted statement at its start. A job whose keys are only known once it runs
	// is alone: it runs in a transaction of its own and takes them itself (wtx.lock).
	locks []int64
	alone bool

	// per attempt
	post   []func()
	events []event
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

// lockKey is the advisory lock key of a workflow ("w") or LangGraph thread ("t").
func lockKey(kind byte, id string) int64 {
	h := sha256.New()
	h.Write([]byte{kind, 0})
	h.Write([]byte(id))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

func wfKey(id string) int64     { return lockKey('w', id) }
func threadKey(id string) int64 { return lockKey('t', id) }

// lockSQL takes transaction-scoped advisory locks on the keys of $1 in ascending order: every
// writer takes its locks in that one order, so two batches never wait on each other in a cycle.
const lockSQL = `SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT DISTINCT k FROM unnest($1::bigint[]) AS k ORDER BY k) AS l`

// wtx is what a job sees while running inside the writer's transaction. Statements whose
// outcome nothing waits for (BEGIN, savepoints, locks, notifications) are queued in pre and sent
// in one round trip with the next statement that returns something.
type wtx struct {
	s    *Store
	conn *pgx.Conn
	job  *job
	pre  []queued
	tot  totals // the job's changes to the counters (figures.go)
}

type queued struct {
	sql  string
	args []any
}

// defer queues a statement to run before the next one.
func (w *wtx) queue(sql string, args ...any) { w.pre = append(w.pre, queued{sql, args}) }

// flush sends the queued statements (and q, when not empty) in one batch.
func (w *wtx) batch(ctx context.Context, last *queued) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	for _, q := range w.pre {
		b.Queue(q.sql, q.args...)
	}
	n := len(w.pre)
	w.pre = w.pre[:0]
	if last != nil {
		b.Queue(last.sql, last.args...)
	}
	br := w.conn.SendBatch(ctx, b)
	for i := 0; i < n; i++ {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
}

// flush sends the queued statements now.
func (w *wtx) flush(ctx context.Context) error {
	if len(w.pre) == 0 {
		return nil
	}
	br, err := w.batch(ctx, nil)
	if err != nil {
		return err
	}
	return br.Close()
}

func (w *wtx) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(w.pre) == 0 {
		return w.conn.Exec(ctx, sql, args...)
	}
	br, err := w.batch(ctx, &queued{sql, args})
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	ct, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return ct, err
}

func (w *wtx) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if len(w.pre) == 0 {
		return w.conn.QueryRow(ctx, sql, args...)
	}
	br, err := w.batch(ctx, &queued{sql, args})
	if err != nil {
		return errRow{err}
	}
	return batchRow{br.QueryRow(), br}
}

func (w *wtx) query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	return w.conn.Query(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// batchRow is a row of a batch: the batch is closed once it is scanned.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil || (noRows(err) && cerr != nil) {
		err = cerr
	}
	return err
}

// sendBatch sends the queued statements and b in one round trip, running b's callbacks.
func (w *wtx) sendBatch(ctx context.Context, b *pgx.Batch) error {
	all := &pgx.Batch{}
	for _, q := range w.pre {
		all.Queue(q.sql, q.args...)
	}
	w.pre = w.pre[:0]
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	return w.conn.SendBatch(ctx, all).Close()
}

// lock takes the advisory locks of keys (sorted) now: for alone jobs, which learn the workflows
// they touch as they run.
func (w *wtx) lock(ctx context.Context, keys []int64) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := w.exec(ctx, lockSQL, keys)
	return err
}

// after registers f to run once the transaction has committed.
func (w *wtx) after(f func()) { w.job.post = append(w.job.post, f) }

// announce queues an event for other processes (NOTIFY at commit).
func (w *wtx) announce(e event) { w.job.events = append(w.job.events, e) }

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

// do runs fn in the writer goroutine inside a write transaction, after taking the advisory
// locks of locks (nil: fn runs alone and takes its own), and waits for the commit.
func (s *Store) do(ctx context.Context, locks []int64, fn func(ctx context.Context, w *wtx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j := &job{fn: fn, ctx: ctx, done: make(chan struct{}), locks: locks, alone: locks == nil}
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
		for !head.alone && n < len(s.queue) && n < maxBatchJobs {
			j := s.queue[n]
			if j.alone || !j.isReady() || size+j.size() > maxBatchBytes {
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
			s.queue = nil
		}
		s.mu.Unlock()
		s.runBatch(batch)
	}
}

// runBatch commits batch in one transaction, one savepoint per job, retrying the whole batch
// after a deadlock, a serialization failure or a lost connection, then answers every job.
func (s *Store) runBatch(batch []*job) {
	ctx := context.Background() // never interrupted: accepted work is committed
	start := time.Now()
	delay := 5 * time.Millisecond
	for {
		if cerr := s.Condition().Err(); cerr != nil { // stopped writing: refuse without a transaction
			for _, j := range batch {
				j.err = fmt.Errorf("write: %w", cerr)
				j.post, j.events = nil, nil
			}
			break
		}
		err := s.tryBatchSafe(ctx, batch)
		if err == nil {
			break
		}
		if retryable(err) && time.Since(start) < s.opts.giveUp {
			s.log.Debug("ckptd store: write transaction retried", "err", err, "jobs", len(batch))
			time.Sleep(delay/2 + rand.N(delay))
			if delay < 500*time.Millisecond {
				delay *= 2
			}
			continue
		}
		var e error
		if s.observe(err); isDamaged(err) {
			e = fmt.Errorf("write: %w", s.Condition().Err())
		} else if retryable(err) {
			e = fmt.Errorf("write: database unavailable for %s: %w: %v", time.Since(start).Round(time.Second), store.ErrUnavailable, err)
		} else {
			e = wrapDB("write", err)
		}
		s.log.Error("ckptd store: write transaction failed", "err", err, "jobs", len(batch))
		for _, j := range batch {
			j.err = e
			j.post, j.events = nil, nil
		}
		break
	}
	for _, j := range batch {
		if j.err == nil {
			for _, f := range j.post {
				s.runHook(f)
			}
		}
		close(j.done)
	}
}

// tryBatchSafe is tryBatch with a panic turned into a failed (rolled back) batch.
func (s *Store) tryBatchSafe(ctx context.Context, batch []*job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("ckptd store: panic in write transaction", "panic", r)
			err = fmt.Errorf("internal error in write transaction: %v", r)
		}
	}()
	return s.tryBatch(ctx, batch)
}

func (s *Store) runHook(f func()) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("ckptd store: panic in post-commit hook", "panic", r)
		}
	}()
	f()
}

func (s *Store) tryBatch(ctx context.Context, batch []*job) (err error) {
	var keys []int64
	for _, j := range batch {
		j.err, j.post, j.events = nil, nil, nil
		if j.save != nil {
			j.save.res = store.SaveResult{}
		}
		keys = append(keys, j.locks...)
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer pc.Release()
	w := &wtx{s: s, conn: pc.Conn()}
	w.queue("BEGIN")
	// the shard the footprint's deferred trigger adds to: this process's, as its totals
	// (figures.go), so that a transaction locks one counters row
	w.queue(`SELECT set_config('ckptd.shard', $1, true)`, strconv.Itoa(int(s.shard)))
	open := true
	defer func() {
		if open {
			abort(pc)
		}
	}()
	if len(keys) > 0 {
		slices.Sort(keys)
		w.queue(lockSQL, slices.Compact(keys))
	}
	var batchTotals totals
	for i, j := range batch {
		if j.save != nil && j.save.err != nil {
			j.err = j.save.err
			continue
		}
		if j.ctx != nil && j.ctx.Err() != nil {
			j.err = j.ctx.Err()
			continue
		}
		sp := fmt.Sprintf("j%d", i)
		w.queue("SAVEPOINT " + sp)
		w.job = j
		w.tot = totals{}
		var jerr error
		if j.save != nil {
			jerr = s.runSave(ctx, w, j.save, sp)
		} else {
			jerr = j.fn(ctx, w)
		}
		if jerr != nil {
			if retryable(jerr) || isUnavailable(jerr) {
				return jerr // the whole batch is retried, or fails
			}
			j.err = jerr
			j.post, j.events = nil, nil
			w.queue("ROLLBACK TO SAVEPOINT " + sp)
		} else {
			batchTotals.add(w.tot)
		}
		w.queue("RELEASE SAVEPOINT " + sp)
	}
	w.queueTotals(s.shard, batchTotals)
	var events []event
	for _, j := range batch {
		if j.err == nil {
			events = append(events, j.events...)
		}
	}
	for _, payload := range s.payloads(events) {
		w.queue(`SELECT pg_notify($1, $2)`, s.channel, payload)
	}
	ct, err := w.exec(ctx, "COMMIT")
	if err != nil {
		return err
	}
	open = false
	if ct.String() != "COMMIT" { // the transaction had failed: the server rolled it back
		return errRolledBack
	}
	return nil
}

// errRolledBack: COMMIT found the transaction failed (a statement error nothing caught).
var errRolledBack = errors.New("write transaction rolled back by the server")

// abort ends a transaction that did not finish; a connection that cannot is dropped.
func abort(pc *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pc.Conn().Exec(ctx, "ROLLBACK"); err != nil {
		_ = pc.Conn().Close(ctx)
	}
}
