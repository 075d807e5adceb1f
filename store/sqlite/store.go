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
	// wmu is held by the writer goroutine while it uses wconn (a batch, a shrink), and by a read
	// that borrows wconn while the writer is idle (hotRead, readpool.go); hot is that read's
	// view of wconn (its own prepared statements), made on first use.
	wmu    sync.Mutex
	hot    *rconn
	recent recentSaves  // what this store saved lately: loads of it may borrow wconn (hotread.go)
	lent   atomic.Int64 // reads that ran on wconn (hotRead)
	known  knownIDs     // ids of runs and chunks the writer met lately (knownids.go); writer goroutine only
	// ref_log (reflog.go): its rows as this process counts them, whether the next job raises
	// its counts, and refLogLoop's wake-up
	refLog     bool // the schema has ref_log (refLogStep); else listings are counted at once (tests of older schemas)
	refLogRows atomic.Int64
	refLogDue  atomic.Bool
	refLogKick chan struct{}
	ws         *writeStmts
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

	writes atomic.Uint64 // commits, for the checkpointer
	reads  atomic.Uint64 // reads begun, for idleRelease (memory.go)
	// shrinkWriter asks the writer goroutine to release its connection's cache when idle.
	shrinkWriter atomic.Bool
	releases     atomic.Uint64 // times releaseMemory ran (tests)
	walPending   atomic.Int64  // approx. bytes written since the last checkpoint
	lastCommit   atomic.Int64  // unix nanos of the writer's last transaction (for the compactor)
	compact      *compactor
	blobs        *store.BlobCache    // LangGraph channel values by stored SHA-256; nil: off
	states       *store.StateCache   // each workflow's last state saved (chunking base, wire deltas); nil: off
	lgvals       *store.LGValueCache // each LangGraph channel's last value put (chunking base, wire deltas); nil: off
	deletes      atomic.Uint64       // checkpoints removed by retention (for background vacuum)
	onPruned     atomic.Pointer[func(workflowID string, ids []string, reason string)]
	closeOnce    sync.Once
	closeErr     error

	// cond is set once the store stops writing (health.go); nil while it writes.
	cond atomic.Pointer[store.Condition]
	// files are the database file and WAL as opened (checkFiles).
	files fileID
	// immutable: opened read-only without locks around a full disk (openReadOnly).
	immutable bool
	// cancelCheck stops a background quick_check (checkAtOpen).
	cancelCheck context.CancelFunc
	// gate orders the write transactions of the processes sharing the database (gate_linux.go).
	gate *writeGate
	// staged holds the ids of the LangGraph values this store staged and no put took yet
	// (dropped at Close); retaining the (thread, namespace) keys a retention runs on in the
	// background (lgmaint.go).
	staged, retaining sync.Map
	// lgVariantsHas: the database has schema version 9's LangGraph columns (salvage.go).
	lgVariantsOnce sync.Once
	lgVariantsHas  bool
	// packs: the database has packs (schema step 17; packs.go).
	packs packsFlag
	// bites sizes and counts the bites of long maintenance (bites.go).
	bites *store.Bites
	// sweeping holds the workflows whose retention is being swept (sweepLater); under mu.
	sweeping map[string]bool
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
		opts.idleInterval = opts.SweepInterval
	}
	if opts.idleInterval <= 0 {
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
		compact: newCompactor(), refLogKick: make(chan struct{}, 1), bites: store.NewBites(opts.Options),
	}
	switch {
	case opts.BlobCacheBytes == 0:
		s.blobs = store.NewBlobCache(store.DefaultBlobCacheBytes)
	case opts.BlobCacheBytes > 0:
		s.blobs = store.NewBlobCache(opts.BlobCacheBytes)
	}
	switch {
	case opts.ChunkCacheBytes == 0:
		cd.UseChunkCache(store.NewChunkCache(store.DefaultChunkCacheBytes))
	case opts.ChunkCacheBytes > 0:
		cd.UseChunkCache(store.NewChunkCache(opts.ChunkCacheBytes))
	}
	switch {
	case opts.StateCacheBytes == 0:
		s.states = store.NewStateCache(store.DefaultStateCacheBytes)
	case opts.StateCacheBytes > 0:
		s.states = store.NewStateCache(opts.StateCacheBytes)
	}
	switch {
	case opts.StateCacheBytes == 0:
		s.lgvals = store.NewLGValueCache(store.DefaultStateCacheBytes)
	case opts.StateCacheBytes > 0:
		s.lgvals = store.NewLGValueCache(opts.StateCacheBytes)
	}
	if err := s.openConns(ctx, created); err != nil {
		s.closeConns()
		cd.Close()
		if !created && diskFull(abs, err) {
			// An existing database on a full disk (SQLite could not even size its WAL index):
			// serve reads, refuse writes, say why.
			return openReadOnly(ctx, opts, store.Condition{Reason: store.ReasonDiskFull, Since: time.Now(),
				Detail: fmt.Sprintf("the disk holding %s was full when ckptd started (%v): it opened the database read-only "+
					"and serves reads; free some space and restart ckptd to save again", abs, err)})
		}
		return nil, err
	}
	if err := s.warmReadPool(ctx); err != nil {
		s.closeConns()
		cd.Close()
		return nil, fmt.Errorf("open store %s: %w", abs, wrapDB("read", err))
	}
	s.recordFiles()
	s.gate = openGate(abs)
	if fi, err := os.Stat(abs); err == nil && !created && !opts.NoOpenCheck && fi.Size() > syncQuickCheckBytes {
		s.checkInBackground()
	}
	s.writerWG.Add(1)
	go s.writerLoop()
	if !opts.noBackground {
		s.bgWG.Add(2)
		go s.checkpointLoop()
		go s.idleLoop()
	}
	if s.ws == nil { // damaged, or opened at an older schema (tests only): read-mostly
		return s, nil
	}
	if opts.NoCompactor {
		return s, nil
	}
	if err := s.scanPending(ctx); err != nil {
		s.log.Warn("ckptd store: looking for states left uncompressed failed", "err", err)
	}
	if n, err := s.countRefLog(ctx); err != nil {
		s.log.Warn("ckptd store: counting the logged listings failed", "err", err)
	} else if n > 0 {
		s.refLogRows.Store(n)
		s.kickRefLog()
	}
	if !opts.noBackground {
		s.bgWG.Add(2)
		go s.compactLoop()
		go s.refLogLoop()
	}
	if _, err := s.ExpireIdle(ctx); err != nil {
		s.log.Warn("ckptd store: idle expiry at open failed", "err", err)
	}
	s.log.Debug("ckptd store: opened", "path", abs, "durability", opts.Durability, "created", created)
	return s, nil
}

// precheckFile makes sure path is either absent (then creates it 0600 and reports created), a
// database that has not been written yet (reported as created), or a plausible SQLite database.
// It reads the header before SQLite ever opens the file.
//
// A crash while a database is being created leaves an empty file (killed before SQLite wrote
// its first page), or, after a power loss, one whose first page never reached the disk (all
// zeros): neither holds anything, so either is a new database, not a damaged one. A file with a
// header but no committed schema is handled once SQLite has opened it (initEmptySchema). A
// non-empty WAL next to an empty file holds the database's first commits: SQLite reads them.
func precheckFile(path string) (created bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err := f.Close(); err != nil {
			return false, fmt.Errorf("open store: create %s: %w", path, err)
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
		// Nothing written yet: a new database (another ckptd may be creating it at this very
		// moment: migrations are safe to race), unless its first commits sit in the WAL.
		return !walHoldsData(path), nil
	}
	f, err = os.Open(path)
	if err != nil {
		return false, fmt.Errorf("open store: %w", err)
	}
	var hdr [100]byte
	n, rerr := io.ReadFull(f, hdr[:])
	if rerr != nil && !errors.Is(rerr, io.ErrUnexpectedEOF) {
		_ = f.Close()
		return false, fmt.Errorf("open store: read header of %s: %w", path, rerr)
	}
	if n < 16 || !bytes.Equal(hdr[:16], []byte("SQLite format 3\x00")) {
		zero, err := allZero(f, size)
		_ = f.Close()
		if err != nil {
			return false, fmt.Errorf("open store: read %s: %w", path, err)
		}
		if zero && !walHoldsData(path) && !sideHoldsData(path+"-journal") {
			// Its first page never reached the disk: empty it and start over.
			if err := os.Truncate(path, 0); err != nil {
				return false, fmt.Errorf("open store: %s: %w", path, err)
			}
			return true, nil
		}
		return false, fmt.Errorf("open store: %s is not a SQLite database (bad header)", path)
	}
	_ = f.Close()
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

// maxZeroCheck: a file up to this size whose bytes are all zero is an unwritten new database.
const maxZeroCheck = 64 << 10

// allZero reports whether f (size bytes) is small and holds only zero bytes.
func allZero(f *os.File, size int64) (bool, error) {
	if size > maxZeroCheck {
		return false, nil
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	for _, c := range b {
		if c != 0 {
			return false, nil
		}
	}
	return true, nil
}

// sideHoldsData reports whether the file at path exists with content.
func sideHoldsData(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Size() > 0
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
	// cache_size: 8 MiB holds every interior page of a database of millions of checkpoints; the
	// leaves a save touches at random miss anyway (random saves at 1M checkpoints: the same latency
	// as with 16 MiB, 16 MiB less RSS).
	wp := []string{busy, "foreign_keys(0)", limit, "synchronous(" + sync + ")", fullfsync, "wal_autocheckpoint(0)",
		"temp_store(MEMORY)", "cache_size(-8192)"}
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
	if !created && !s.opts.NoOpenCheck {
		if fi, err := os.Stat(s.path); err == nil && fi.Size() <= syncQuickCheckBytes {
			if err := s.checkNow(ctx); err != nil {
				return fmt.Errorf("open store %s: %w", s.path, err)
			}
		}
	}
	if !s.Condition().Writable() {
		// Damaged: no journal-mode switch, no migration, no prepared writes; reads only.
		return s.openReaders(busy, limit, sync, fullfsync)
	}
	if !created {
		if err := s.initEmptySchema(ctx); err != nil {
			return fmt.Errorf("open store %s: %w", s.path, err)
		}
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
	s.packs.once.Do(func() { s.packs.has = target >= packsStep })
	s.refLog = target >= refLogStep
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
	return s.openReaders(busy, limit, sync, fullfsync)
}

// readCacheSize is each read connection's page cache (1 MiB; about twice that in RSS, with
// the allocator's overhead): the read pool's five connections each keep a cache of their own,
// and on a database of millions of checkpoints reads of random workflows fill them all while
// the daemon is busy (memory.go gives them back once it is idle), which with 4 MiB each and the
// writer's 16 MiB took its RSS past 64 MiB under load (#22's bench). Pages a read misses come
// from the operating system's page cache.
const readCacheSize = "cache_size(-1024)"

// openReaders opens the read pool and the WAL checkpointer's pool (connections come lazily).
func (s *Store) openReaders(busy, limit, sync, fullfsync string) error {
	var err error
	if s.rdb, err = s.openPool(s.dsn([]string{busy, "query_only(1)", "temp_store(MEMORY)", readCacheSize}, ""), readPoolSize+1); err != nil {
		return err
	}
	// rpool pins up to readPoolSize connections; one more serves tests and diagnostics.
	s.rpool = newReadPool(s.rdb, readPoolSize)
	s.cdb, err = s.openPool(s.dsn([]string{"busy_timeout(1000)", limit, "synchronous(" + sync + ")", fullfsync, "wal_autocheckpoint(0)"}, ""), 1)
	return err
}

// openPool opens a pool of at most n connections to dsn that are kept open for the store's
// life. A new connection is refused once the database's path names another file or none
// (checkFiles): it would open that other file, or fail.
func (s *Store) openPool(dsn string, n int) (*sql.DB, error) {
	probe, err := sql.Open("sqlite", dsn) // connects to nothing: only names the driver
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	drv := probe.Driver()
	_ = probe.Close()
	db := sql.OpenDB(&connector{s: s, dsn: dsn, drv: drv})
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}

// warmReadPool opens a connection of the read pool now, and the others on a goroutine right
// after (each parses the schema: most of a millisecond that the start need not wait for), and
// reads through each, so that each holds the database file and its WAL open: if the path is
// later deleted or replaced, reads keep answering from the files this store opened (a
// connection that could not be opened by then is done without: readPool.get).
func (s *Store) warmReadPool(ctx context.Context) error {
	if err := s.warmReaders(ctx, 1); err != nil {
		return err
	}
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		ctx := context.WithoutCancel(ctx)
		// Through the read pool, one connection at a time: reads may already hold some of its
		// connections (pinned for good), so the warm-up must never wait for a connection of
		// rdb while holding another.
		err := s.rpool.warm(ctx, func(rc *rconn) error {
			return s.retry(ctx, func() error {
				var n int
				return rc.conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n)
			})
		})
		if err != nil && isDamaged(err) {
			s.observe(err) // reads will say what fails
		} else if err != nil {
			s.log.Debug("ckptd store: opening the read connections failed", "err", err)
		}
	}()
	return nil
}

// warmReaders makes n connections of the read pool (those already open count) read at once.
func (s *Store) warmReaders(ctx context.Context, n int) error {
	txs := make([]*sql.Tx, 0, n)
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback()
		}
	}()
	for range n {
		var tx *sql.Tx
		err := s.retry(ctx, func() error {
			var err error
			if tx, err = s.rdb.BeginTx(ctx, nil); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil {
				_ = tx.Rollback()
				return err
			}
			return nil
		})
		if err != nil {
			if isDamaged(err) {
				s.observe(err)
				return nil // reads will say what fails
			}
			return err
		}
		txs = append(txs, tx)
	}
	return nil
}

func (s *Store) closeConns() {
	if s.ws != nil {
		s.ws.close()
	}
	// The writer's cached statements first: a statement left to the connection's close can
	// keep SQLite from seeing the last connection go, and the WAL then stays behind.
	for q, st := range s.wcache {
		_ = st.Close()
		delete(s.wcache, q)
	}
	s.wmu.Lock()
	if s.hot != nil {
		s.hot.closeStmts()
		s.hot = nil
	}
	s.wmu.Unlock()
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
	// Last: closing another descriptor of the file would drop the POSIX locks SQLite's
	// connections hold on it.
	s.gate.close()
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
		if s.cancelCheck != nil {
			s.cancelCheck()
		}
		if s.ws != nil && !s.opts.NoCompactor && s.Condition().Writable() {
			// Leave a compact database behind when that is quick; whatever is left waits for
			// the next Open.
			ctx, cancel := context.WithTimeout(context.Background(), closeCompactBudget)
			if err := s.Compact(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Warn("ckptd store: compressing pending states at close failed", "err", err)
			}
			cancel()
		}
		if s.ws != nil && s.Condition().Writable() {
			ctx, cancel := context.WithTimeout(context.Background(), closeCompactBudget)
			s.lgDropOwnStaged(ctx)
			cancel()
		}
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.signal()
		s.writerWG.Wait()
		close(s.stopBG)
		s.bgWG.Wait()
		if s.wconn != nil && s.Condition().Writable() {
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
			s.observe(err)
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
