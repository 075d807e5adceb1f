// Package sqlite is ckptd's SQLite backend: it implements store.Backend over one database file
// (modernc.org/sqlite, no cgo). It is the only place that knows SQL.
//
// One writer goroutine owns the write connection and commits every mutation in arrival order,
// group-committing saves that queue up; reads go through a small query_only pool; a background
// goroutine runs WAL checkpoints off the save path.
package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/ckptd/ckptd/store"
)

const (
	busyTimeoutMS      = 5000             // SQLite's own busy wait per attempt
	busyGiveUp         = 30 * time.Second // then store.ErrUnavailable
	walTruncateSize    = 64 << 20         // TRUNCATE-checkpoint a WAL larger than this
	walCheckpointBytes = 8 << 20          // checkpoint early once about this much was written
	warnStateBytes     = 10 << 20
	maxBatchJobs       = 128
	maxBatchBytes      = 32 << 20
	readPoolSize       = 4
	closeCompactBudget = time.Second // Close compresses pending states for at most this long
)

// Options configure Open: store.Options (Path is the database file), plus testing hooks.
type Options struct {
	store.Options

	// testing hooks
	maxSchema    int  // migrate only up to this version (0: latest)
	noBackground bool // no checkpointer / idle / compactor goroutines
	idleInterval time.Duration
	ckptInterval time.Duration
	busyTimeout  time.Duration // SQLite busy_timeout (default busyTimeoutMS)
	giveUp       time.Duration // retry budget (default busyGiveUp)
}

// Store is an open checkpoint database: a store.Backend. All methods are safe for concurrent use.
type Store struct {
	opts   Options
	path   string
	log    *slog.Logger
	now    func() time.Time
	codec  *store.Codec
	defRet store.Retention

	wdb   *sql.DB   // the writer's pool (exactly one connection)
	wconn *sql.Conn // held by the writer goroutine
	ws    *writeStmts
	// wcache holds the writer connection's other prepared statements by SQL text (wtx.wstmt);
	// writer goroutine only.
	wcache map[string]*sql.Stmt
	rdb    *sql.DB   // query_only connections, pinned by rpool
	rpool  *readPool // the read path (readpool.go)
	cdb    *sql.DB   // WAL checkpointer connection

	mu       sync.Mutex
	queue    []*job
	closed   bool
	wake     chan struct{}
	writerWG sync.WaitGroup
	bgWG     sync.WaitGroup
	stopBG   chan struct{}
	ckptKick chan struct{}

	writes     atomic.Uint64 // commits, for the checkpointer
	walPending atomic.Int64  // approx. bytes written since the last checkpoint
	lastCommit atomic.Int64  // unix nanos of the writer's last transaction (for the compactor)
	compact    *compactor
	blobs      *store.BlobCache // LangGraph channel values by stored SHA-256; nil: off
	deletes    atomic.Uint64    // checkpoints removed by retention (for background vacuum)
	onPruned   atomic.Pointer[func(workflowID string, ids []string, reason string)]
	closeOnce  sync.Once
	closeErr   error
}

var _ store.Backend = (*Store)(nil)

// Open opens (creating if needed) the database file at opts.Path, validates it and migrates its
// schema.
func Open(ctx context.Context, opts store.Options) (*Store, error) {
	return open(ctx, Options{Options: opts})
}

func open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, &store.InvalidError{Field: "path", Reason: "required"}
	}
	switch strings.ToLower(opts.Durability) {
	case "", store.DurabilityFull:
		opts.Durability = store.DurabilityFull
	case store.DurabilityNormal:
		opts.Durability = store.DurabilityNormal
	default:
		return nil, &store.InvalidError{Field: "durability", Reason: fmt.Sprintf("%q: want full or normal", opts.Durability)}
	}
	if opts.MaxStateBytes <= 0 {
		opts.MaxStateBytes = store.DefaultMaxStateBytes
	}
	if opts.NoCompactor {
		opts.CompressInline = true
	}
	if opts.CompressThreshold == 0 {
		opts.CompressThreshold = store.DefaultCompressThreshold
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.idleInterval == 0 {
		opts.idleInterval = time.Minute
	}
	if opts.busyTimeout == 0 {
		opts.busyTimeout = busyTimeoutMS * time.Millisecond
	}
	if opts.giveUp == 0 {
		opts.giveUp = busyGiveUp
	}
	if opts.ckptInterval == 0 {
		opts.ckptInterval = 250 * time.Millisecond
	}
	if r := opts.DefaultRetention; r.KeepLast < 0 || r.MaxAgeSeconds < 0 || r.IdleTTLSeconds < 0 {
		return nil, &store.InvalidError{Field: "defaultRetention", Reason: "negative value"}
	}
	abs, err := filepath.Abs(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("open store: create directory: %w", err)
	}
	created, err := precheckFile(abs)
	if err != nil {
		return nil, err
	}
	cd, err := store.NewCodec(opts.MaxStateBytes)
	if err != nil {
		return nil, err
	}
	s := &Store{
		opts: opts, path: abs, log: opts.Logger, now: opts.Now, codec: cd, defRet: opts.DefaultRetention,
		wake: make(chan struct{}, 1), stopBG: make(chan struct{}), ckptKick: make(chan struct{}, 1),
		compact: newCompactor(),
	}
	switch {
	case opts.BlobCacheBytes == 0:
		s.blobs = store.NewBlobCache(store.DefaultBlobCacheBytes)
	case opts.BlobCacheBytes > 0:
		s.blobs = store.NewBlobCache(opts.BlobCacheBytes)
	}
	if err := s.openConns(ctx, created); err != nil {
		s.closeConns()
		cd.Close()
		return nil, err
	}
	s.writerWG.Add(1)
	go s.writerLoop()
	if !opts.noBackground {
		s.bgWG.Add(2)
		go s.checkpointLoop()
		go s.idleLoop()
	}
	if s.ws == nil { // opened at an older schema (tests only): read-mostly
		return s, nil
	}
	if opts.NoCompactor {
		return s, nil
	}
	if err := s.scanPending(ctx); err != nil {
		s.log.Warn("ckptd store: looking for states left uncompressed failed", "err", err)
	}
	if !opts.noBackground {
		s.bgWG.Add(1)
		go s.compactLoop()
	}
	if _, err := s.ExpireIdle(ctx); err != nil {
		s.log.Warn("ckptd store: idle expiry at open failed", "err", err)
	}
	s.log.Debug("ckptd store: opened", "path", abs, "durability", opts.Durability, "created", created)
	return s, nil
}

// precheckFile makes sure path is either absent (then creates it 0600 and reports created) or a
// plausible SQLite database. It reads the header before SQLite ever opens the file.
func precheckFile(path string) (created bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err := f.Close(); err != nil {
			return false, fmt.Errorf("open store: create %s: %w", path, err)
		}
		// Mark the empty file as ours until SQLite writes to it, so that another ckptd starting
		// on the same new path at the same moment recognises it (utimensat: no descriptor).
		if err := os.Chtimes(path, freshMark, freshMark); err != nil {
			return false, fmt.Errorf("open store: mark %s: %w", path, err)
		}
		return true, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return false, fmt.Errorf("open store: create %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("open store: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("open store: %s is not a regular file", path)
	}
	size := fi.Size()
	if size == 0 {
		// A brand-new database whose first commit still sits in the WAL is legitimately empty.
		if wi, err := os.Stat(path + "-wal"); err == nil && wi.Size() > 0 {
			return false, nil
		}
		// Another ckptd may have just created the file and not written its first page yet
		// (two processes starting on a new DB at once). Give it a moment; a freshly created
		// empty file is then opened normally (migrations are safe to race), an old one refused.
		switch justCreated(path) {
		case freshEmpty:
			return true, nil // initialise it like a file we created (migrations are safe to race)
		case freshGrown:
			return precheckFile(path) // validate what the other ckptd wrote
		}
		return false, fmt.Errorf("open store: %s is an empty file, not a SQLite database (refusing to overwrite it)", path)
	}
	f, err = os.Open(path)
	if err != nil {
		return false, fmt.Errorf("open store: %w", err)
	}
	var hdr [100]byte
	n, rerr := io.ReadFull(f, hdr[:])
	_ = f.Close()
	if rerr != nil && !errors.Is(rerr, io.ErrUnexpectedEOF) {
		return false, fmt.Errorf("open store: read header of %s: %w", path, rerr)
	}
	if n < 16 || !bytes.Equal(hdr[:16], []byte("SQLite format 3\x00")) {
		return false, fmt.Errorf("open store: %s is not a SQLite database (bad header)", path)
	}
	if n < 100 {
		return false, fmt.Errorf("open store: %s is truncated (%d bytes)", path, size)
	}
	pageSize := int64(binary.BigEndian.Uint16(hdr[16:18]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || pageSize > 65536 || pageSize&(pageSize-1) != 0 {
		return false, fmt.Errorf("open store: %s has an invalid page size %d in its header", path, pageSize)
	}
	if size < pageSize || size%pageSize != 0 {
		return false, fmt.Errorf("open store: %s is truncated: %d bytes is not a whole number of %d-byte pages", path, size, pageSize)
	}
	// A file cut at a page boundary: the header's page count (valid when the change counter
	// matches "version-valid-for") says how long it must be. SQLite would otherwise open it and
	// fail later with "database disk image is malformed". With a non-empty WAL the header may
	// legitimately be ahead of the file (a checkpoint was interrupted): SQLite recovers that.
	if pages := int64(binary.BigEndian.Uint32(hdr[28:32])); pages > 0 && size < pages*pageSize &&
		binary.BigEndian.Uint32(hdr[24:28]) == binary.BigEndian.Uint32(hdr[92:96]) {
		if wi, err := os.Stat(path + "-wal"); err != nil || wi.Size() == 0 {
			return false, fmt.Errorf("open store: %s is truncated: its header says %d pages (%d bytes) but the file has %d bytes",
				path, pages, pages*pageSize, size)
		}
	}
	return false, nil
}

func (s *Store) dsn(pragmas []string, extra string) string {
	u := "file:" + (&url.URL{Path: s.path}).EscapedPath() + "?mode=rw"
	for _, p := range pragmas {
		u += "&_pragma=" + url.QueryEscape(p)
	}
	return u + extra
}

func (s *Store) openConns(ctx context.Context, created bool) error {
	sync, fullfsync := "FULL", "fullfsync(1)"
	if s.opts.Durability == store.DurabilityNormal {
		sync, fullfsync = "NORMAL", "fullfsync(0)"
	}
	// fullfsync: on macOS a plain fsync leaves the data in the drive's write cache, so power
	// loss could still lose acknowledged saves at --durability full; F_FULLFSYNC flushes it.
	// Other systems ignore the setting (docs/durability.md).
	busy := fmt.Sprintf("busy_timeout(%d)", s.opts.busyTimeout.Milliseconds())
	limit := fmt.Sprintf("journal_size_limit(%d)", walTruncateSize)
	// journal_mode is switched only after checkSchema: a refused file must stay untouched.
	wp := []string{busy, "foreign_keys(0)", limit, "synchronous(" + sync + ")", fullfsync, "wal_autocheckpoint(0)",
		"temp_store(MEMORY)", "cache_size(-16384)"}
	if created {
		// must precede the first table; on an existing file it would rewrite the header page
		wp = append(wp, "auto_vacuum(INCREMENTAL)")
	}
	wdsn := s.dsn(wp, "&_txlock=immediate")
	var err error
	if s.wdb, err = sql.Open("sqlite", wdsn); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	if err := s.retry(ctx, func() error {
		c, err := s.wdb.Conn(ctx)
		if err != nil {
			return err
		}
		s.wconn = c
		return nil
	}); err != nil {
		return fmt.Errorf("open store %s: %w", s.path, wrapDB("connect", err))
	}
	if err := checkSchema(ctx, s.wconn, s.retry); err != nil {
		return fmt.Errorf("open store %s: %w", s.path, err)
	}
	var mode string
	if err := s.retry(ctx, func() error { return s.wconn.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode) }); err != nil {
		return fmt.Errorf("open store %s: %w", s.path, wrapDB("journal mode", err))
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("open store %s: cannot switch to WAL mode (journal_mode is %s)", s.path, mode)
	}
	target := SchemaVersion
	if s.opts.maxSchema > 0 {
		target = s.opts.maxSchema
	}
	if err := migrate(ctx, s.wconn, target, s.retry); err != nil {
		return fmt.Errorf("open store %s: %w", s.path, err)
	}
	if created {
		// Get the header page into the main file now, so the file never looks empty.
		_ = s.retry(ctx, func() error {
			_, err := s.wconn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
			return err
		})
	}
	if target == SchemaVersion {
		if s.ws, err = prepareWriteStmts(ctx, s.wconn); err != nil {
			return fmt.Errorf("open store %s: %w", s.path, wrapDB("prepare", err))
		}
	}

	rdsn := s.dsn([]string{busy, "query_only(1)", "temp_store(MEMORY)", "cache_size(-16384)"}, "")
	if s.rdb, err = sql.Open("sqlite", rdsn); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	// rpool pins up to readPoolSize connections; one more serves tests and diagnostics.
	s.rdb.SetMaxOpenConns(readPoolSize + 1)
	s.rdb.SetMaxIdleConns(readPoolSize + 1)
	s.rdb.SetConnMaxLifetime(0)
	s.rdb.SetConnMaxIdleTime(0)
	s.rpool = newReadPool(s.rdb, readPoolSize)

	cdsn := s.dsn([]string{"busy_timeout(1000)", limit, "synchronous(" + sync + ")", fullfsync, "wal_autocheckpoint(0)"}, "")
	if s.cdb, err = sql.Open("sqlite", cdsn); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	s.cdb.SetMaxOpenConns(1)
	s.cdb.SetMaxIdleConns(1)
	s.cdb.SetConnMaxLifetime(0)
	s.cdb.SetConnMaxIdleTime(0)
	return nil
}

func (s *Store) closeConns() {
	if s.ws != nil {
		s.ws.close()
	}
	if s.wconn != nil {
		_ = s.wconn.Close()
	}
	if s.rpool != nil {
		s.rpool.close()
	}
	for _, db := range []*sql.DB{s.rdb, s.cdb, s.wdb} {
		if db != nil {
			_ = db.Close()
		}
	}
}

// Path is the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// About names the backend.
func (s *Store) About() store.About {
	return store.About{Name: "SQLite", Location: s.path, Integrity: "PRAGMA integrity_check"}
}

// DefaultRetention is the retention of workflows that have none configured.
func (s *Store) DefaultRetention() store.Retention { return s.defRet }

// SetOnPruned registers a callback for checkpoints removed by retention ("retention"), Prune
// ("prune"), idle expiry ("idle") or Complete ("complete"). It runs on the writer goroutine after
// the commit and before the affected callers are answered: it must not block or call the Store.
func (s *Store) SetOnPruned(f func(workflowID string, ids []string, reason string)) {
	if f == nil {
		s.onPruned.Store(nil)
		return
	}
	s.onPruned.Store(&f)
}

func (s *Store) notifyPruned(workflowID string, ids []string, reason string) {
	if len(ids) == 0 {
		return
	}
	if f := s.onPruned.Load(); f != nil {
		(*f)(workflowID, ids, reason)
	}
}

// Close stops accepting work, commits everything already accepted, checkpoints the WAL into the
// database file and closes it.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.ws != nil && !s.opts.NoCompactor {
			// Leave a compact database behind when that is quick; whatever is left waits for
			// the next Open.
			ctx, cancel := context.WithTimeout(context.Background(), closeCompactBudget)
			if err := s.Compact(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Warn("ckptd store: compressing pending states at close failed", "err", err)
			}
			cancel()
		}
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.signal()
		s.writerWG.Wait()
		close(s.stopBG)
		s.bgWG.Wait()
		if s.wconn != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := s.wconn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil && !isBusy(err) {
				s.log.Warn("ckptd store: final WAL checkpoint failed", "err", err)
			}
			cancel()
		}
		s.closeConns()
		s.codec.Close()
	})
	return s.closeErr
}

// retry runs f until it succeeds, fails with something other than SQLITE_BUSY/LOCKED, ctx ends, or
// busyGiveUp has passed (then ErrUnavailable). Backoff is exponential with jitter, on top of
// SQLite's own busy_timeout.
func (s *Store) retry(ctx context.Context, f func() error) error {
	start := time.Now()
	delay := time.Millisecond
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || !isBusy(err) {
			return err
		}
		if time.Since(start) > s.opts.giveUp {
			return fmt.Errorf("database busy for %s: %w: %v", time.Since(start).Round(time.Second), store.ErrUnavailable, err)
		}
		if attempt == 0 && s.log != nil {
			s.log.Debug("ckptd store: database busy, retrying", "err", err)
		}
		d := delay/2 + rand.N(delay)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
}

// freshMark is the mtime ckptd gives a database file it has just created and not yet written.
var freshMark = time.Unix(0, applicationID)

type freshness int

const (
	notFresh   freshness = iota
	freshEmpty           // still empty, marked by a ckptd
	freshGrown           // gained content meanwhile
)

// justCreated tells whether an empty database file is a new one being set up by another ckptd:
// it carries freshMark, or it gains content (or a WAL) within two seconds. Any other empty file
// is refused: it may be the remains of something else.
func justCreated(path string) freshness {
	deadline := time.Now().Add(2 * time.Second)
	for {
		cur, err := os.Stat(path)
		if err != nil {
			return notFresh
		}
		if cur.Size() > 0 {
			return freshGrown
		}
		if wi, err := os.Stat(path + "-wal"); err == nil && wi.Size() > 0 {
			return freshEmpty
		}
		if cur.ModTime().Equal(freshMark) {
			return freshEmpty
		}
		if !time.Now().Before(deadline) {
			return notFresh
		}
		time.Sleep(10 * time.Millisecond)
	}
}
