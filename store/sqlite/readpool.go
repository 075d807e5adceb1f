package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// The read path. Reads run on a small pool of query_only connections that are pinned for the
// store's lifetime (sql.Conn), each with its own prepared statements, including the BEGIN and
// ROLLBACK of its read transactions. What it avoids, measured per read on this machine:
//
//   - database/sql's Tx prepares "begin" and "rollback" afresh on every transaction (the driver
//     has no statement cache): about 15 µs;
//   - a cancellable context makes database/sql (for every Rows) and modernc (for every
//     statement) start a goroutine that waits for it: about 18,000 instructions and two
//     goroutine wake-ups per statement, 20-30 µs of wall time on a busy machine;
//   - preparing a statement: tens of µs for a query with subqueries.
//
// So statements run with context.Background(), and the caller's context is checked before each
// statement and while waiting for a connection: a cancelled read stops at its next statement,
// and a read waiting for the database (a busy retry, a free connection) stops at once. A single
// statement is not interrupted midway; read statements are bounded (list limits, one
// checkpoint), so that costs at most a few milliseconds.

// maxConnStmts bounds each connection's statement cache (queries built from filters have a few
// dozen shapes; ones with a variable number of placeholders are many and each used once).
const maxConnStmts = 256

// rconn is one pinned read connection.
type rconn struct {
	conn            *sql.Conn
	stmts           map[string]*sql.Stmt
	begin, rollback *sql.Stmt
}

// readPool hands out rconns, opening up to size of them on demand.
type readPool struct {
	db   *sql.DB
	size int
	free chan *rconn

	mu     sync.Mutex
	open   int
	closed bool
	all    []*rconn
}

func newReadPool(db *sql.DB, size int) *readPool {
	return &readPool{db: db, size: size, free: make(chan *rconn, size)}
}

// get returns a free connection, opening one while fewer than size are open, else waiting for
// one (or ctx).
func (p *readPool) get(ctx context.Context) (*rconn, error) {
	select {
	case rc := <-p.free:
		return rc, nil
	default:
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, sql.ErrConnDone
	}
	if p.open < p.size {
		p.open++
		p.mu.Unlock()
		rc, err := p.dial(ctx)
		if err == nil {
			return rc, nil
		}
		p.mu.Lock()
		p.open--
		if p.open == 0 {
			p.mu.Unlock()
			return nil, err
		}
		// Another connection exists (the database's path may name another file by now, which
		// the connector refuses to open): wait for it.
	}
	p.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case rc := <-p.free:
		return rc, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *readPool) dial(ctx context.Context) (*rconn, error) {
	c, err := p.db.Conn(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	rc := &rconn{conn: c, stmts: map[string]*sql.Stmt{}}
	bg := context.Background()
	if rc.begin, err = c.PrepareContext(bg, "BEGIN"); err == nil {
		rc.rollback, err = c.PrepareContext(bg, "ROLLBACK")
	}
	if err != nil {
		rc.close()
		return nil, err
	}
	p.mu.Lock()
	p.all = append(p.all, rc)
	p.mu.Unlock()
	return rc, nil
}

// put returns rc to the pool; a connection that may be in a bad state (a failed rollback) is
// closed instead, and a new one opened when needed.
func (p *readPool) put(rc *rconn, bad bool) {
	p.mu.Lock()
	if bad || p.closed {
		for i, x := range p.all {
			if x == rc {
				p.all = append(p.all[:i], p.all[i+1:]...)
				break
			}
		}
		p.open--
		p.mu.Unlock()
		rc.close()
		return
	}
	p.mu.Unlock()
	p.free <- rc // never blocks: at most size connections exist
}

// warm opens the connections of the pool not open yet, one at a time, runs read on each (so
// that it holds the database file and its WAL open) and leaves it free. A read that takes one
// meanwhile is welcome to it: warm never waits for a connection the pool does not count.
func (p *readPool) warm(ctx context.Context, read func(rc *rconn) error) error {
	for {
		p.mu.Lock()
		if p.closed || p.open >= p.size {
			p.mu.Unlock()
			return nil
		}
		p.open++
		p.mu.Unlock()
		rc, err := p.dial(ctx)
		if err != nil {
			p.mu.Lock()
			p.open--
			p.mu.Unlock()
			return err
		}
		err = read(rc)
		p.put(rc, err != nil)
		if err != nil {
			return err
		}
	}
}

// close closes the free connections now and the others as they are returned.
func (p *readPool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for {
		select {
		case rc := <-p.free:
			p.mu.Lock()
			p.open--
			p.mu.Unlock()
			rc.close()
		default:
			return
		}
	}
}

func (rc *rconn) close() {
	rc.closeStmts()
	_ = rc.conn.Close()
}

// closeStmts closes rc's prepared statements, not its connection.
func (rc *rconn) closeStmts() {
	for _, st := range rc.stmts {
		_ = st.Close()
	}
	for _, st := range []*sql.Stmt{rc.begin, rc.rollback} {
		if st != nil {
			_ = st.Close()
		}
	}
}

// stmt returns rc's prepared statement for q, preparing it on first use; nil (and no error) when
// the cache is full.
func (rc *rconn) stmt(q string) (*sql.Stmt, error) {
	if st, ok := rc.stmts[q]; ok {
		return st, nil
	}
	if len(rc.stmts) >= maxConnStmts {
		return nil, nil
	}
	st, err := rc.conn.PrepareContext(context.Background(), q)
	if err != nil {
		return nil, err
	}
	rc.stmts[q] = st
	return st, nil
}

// rtx is a read on one pinned connection: a transaction (readTx) or single statements in
// autocommit mode (readAuto). Its methods mirror *sql.Tx's; statements run on
// context.Background() once the caller's context was checked (see above).
type rtx struct {
	rc *rconn
}

var bg = context.Background()

// QueryContext runs q without caching its prepared statement (see Store.query for that).
func (tx *rtx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return tx.rc.conn.QueryContext(bg, q, args...)
}

// QueryRowContext runs q without caching its prepared statement.
func (tx *rtx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if ctx.Err() != nil {
		return tx.rc.conn.QueryRowContext(ctx, q, args...) // carries ctx's error to Scan
	}
	return tx.rc.conn.QueryRowContext(bg, q, args...)
}

// cached runs q through rc's prepared statement.
func (tx *rtx) cached(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := tx.rc.stmt(q)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return tx.rc.conn.QueryContext(bg, q, args...)
	}
	return st.QueryContext(bg, args...)
}

// cachedRow is cached for one row.
func (tx *rtx) cachedRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := tx.rc.stmt(q)
	if ctx.Err() != nil || err != nil || st == nil {
		return tx.QueryRowContext(ctx, q, args...) // reports ctx's or the prepare's error through Scan
	}
	return st.QueryRowContext(bg, args...)
}

// openRead takes a pooled connection and, when inTx, begins a read transaction on it (one
// snapshot for every statement; else each statement is its own snapshot). end gives the
// connection back, ending the transaction.
func (s *Store) openRead(ctx context.Context, inTx bool) (tx *rtx, end func(), err error) {
	rc, err := s.rpool.get(ctx)
	if err != nil {
		return nil, nil, err
	}
	s.noteRead()
	if inTx {
		if _, err := rc.begin.ExecContext(bg); err != nil {
			s.rpool.put(rc, true)
			return nil, nil, err
		}
	}
	end = func() {
		bad := false
		if inTx {
			// ROLLBACK ends the snapshot. It fails only with a statement still open on the
			// connection (a bug) or a connection gone wrong: do not reuse it then.
			_, rerr := rc.rollback.ExecContext(bg)
			bad = rerr != nil
		}
		s.rpool.put(rc, bad)
	}
	return &rtx{rc: rc}, end, nil
}

// withRead runs f on a pooled connection (see openRead), retried while the database is busy.
func (s *Store) withRead(ctx context.Context, inTx bool, f func(tx *rtx) error) error {
	return s.retry(ctx, func() error {
		tx, end, err := s.openRead(ctx, inTx)
		if err != nil {
			return err
		}
		defer end()
		return f(tx)
	})
}

// readTx runs f in a read transaction (one snapshot), retried while the database is busy.
func (s *Store) readTx(ctx context.Context, f func(tx *rtx) error) error {
	return s.withRead(ctx, true, f)
}

// readAuto runs f, which runs a single statement, on a read connection without a transaction.
func (s *Store) readAuto(ctx context.Context, f func(tx *rtx) error) error {
	return s.withRead(ctx, false, f)
}
