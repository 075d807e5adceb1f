// Package postgres is ckptd's PostgreSQL backend: it implements store.Backend over one
// PostgreSQL database (github.com/jackc/pgx/v5, pure Go), so that any number of ckptd
// processes on any number of hosts can share checkpoints. It is the only place that knows its
// SQL; every table lives in one schema of the database the URL names ("ckptd", or the URL's
// ckptd_schema parameter).
//
// The guarantees are SQLite's: a save is acknowledged once its transaction committed (with
// synchronous_commit on at --durability full), every load verifies the state's SHA-256,
// retention runs in the save's transaction, and a workflow's seq strictly increases in the
// order its saves were sent. Within a process one writer goroutine commits mutations in
// arrival order, group-committing saves that queue up; across processes a transaction-scoped
// advisory lock per workflow (and per LangGraph thread) serialises writers, taken in one global
// order so that batches never deadlock on them, and the workflow row's upsert hands out seqs.
// Deadlocks and serialization failures the database reports anyway (shared state and manifest
// rows) are retried with the whole batch. Reads run on a small pool, in REPEATABLE READ
// read-only transactions where they need one snapshot.
//
// Saves and prunes are announced with NOTIFY (Feed): other processes, on any host, hear them
// through LISTEN.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ckptd/ckptd/store"
)

// DefaultSchema is the PostgreSQL schema holding ckptd's tables, unless the URL's ckptd_schema
// parameter names another (several ckptd databases side by side in one PostgreSQL database).
const DefaultSchema = "ckptd"

// SchemaParam is the URL query parameter naming the schema.
const SchemaParam = "ckptd_schema"

// validSchema matches the schema names ckptd accepts: lower-case identifiers that leave room
// for the notification channel's prefix within PostgreSQL's 63-byte names.
var validSchema = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,56}$`)

const (
	giveUpAfter    = 30 * time.Second // retry budget of a batch or read, then store.ErrUnavailable
	openGiveUp     = 10 * time.Second // and of Open: a server that is not there at start-up is reported soon
	maxBatchJobs   = 128
	maxBatchBytes  = 32 << 20
	poolSize       = 8
	connectTimeout = 10 * time.Second
)

// Options configure Open: store.Options (Path is the postgres:// URL), plus testing hooks.
type Options struct {
	store.Options

	// MustExist refuses a database without a ckptd schema instead of creating one (the
	// inspection commands: a wrong URL must not leave tables behind).
	MustExist bool

	// testing hooks
	maxSchema    int           // migrate only up to this version (0: latest)
	noBackground bool          // no idle-expiry goroutine
	giveUp       time.Duration // retry budget (default giveUpAfter)
}

// Store is an open PostgreSQL checkpoint database: a store.Backend. All methods are safe for
// concurrent use.
type Store struct {
	opts     Options
	schema   string // holding ckptd's tables
	channel  string // of notifications, per schema
	location string // the URL without its password
	log      *slog.Logger
	now      func() time.Time
	codec    *store.Codec
	defRet   store.Retention
	pool     *pgxpool.Pool
	cfg      *pgxpool.Config
	origin   string // this Store's id in notifications
	amcheck  bool   // the amcheck extension can be used
	blobs    *store.BlobCache
	states   *store.StateCache   // each workflow's last state saved (chunking base, wire deltas); nil: off
	lgvals   *store.LGValueCache // each LangGraph channel's last value put (chunking base, wire deltas); nil: off

	mu       sync.Mutex
	queue    []*job
	closed   bool
	wake     chan struct{}
	writerWG sync.WaitGroup
	bgWG     sync.WaitGroup
	stopBG   chan struct{}

	cond      atomic.Pointer[store.Condition] // nil: writes accepted (condition.go)
	onPruned  atomic.Pointer[func(workflowID string, ids []string, reason string)]
	feed      feed
	closeOnce sync.Once
	// staged holds the ids of the LangGraph values this store staged and no put took yet (dropped
	// at Close); retaining the (thread, namespace) keys a retention runs on in the background.
	staged, retaining sync.Map
	closeErr          error
	shard             int16        // this process's row of counters (figures.go)
	bites             *store.Bites // sizes and counts the bites of long maintenance (bites.go)
	// sweeping holds the workflows whose retention is being swept (sweepLater); under mu.
	sweeping map[string]bool
}

var _ store.Backend = (*Store)(nil)
var _ store.Feed = (*Store)(nil)

// IsURL reports whether a --db value names a PostgreSQL database (postgres:// or postgresql://).
func IsURL(s string) bool {
	l := strings.ToLower(s)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// Open connects to the database the URL opts.Path names, creates or migrates ckptd's schema in
// it, and starts the writer.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, &store.InvalidError{Field: "path", Reason: "required"}
	}
	loc := Redact(opts.Path)
	if !IsURL(opts.Path) {
		return nil, &store.InvalidError{Field: "path", Reason: fmt.Sprintf("%s is not a postgres:// or postgresql:// URL", loc)}
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
	if opts.CompressThreshold == 0 {
		opts.CompressThreshold = store.DefaultCompressThreshold
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.giveUp == 0 {
		opts.giveUp = giveUpAfter
	}
	if r := opts.DefaultRetention; r.KeepLast < 0 || r.MaxAgeSeconds < 0 || r.IdleTTLSeconds < 0 {
		return nil, &store.InvalidError{Field: "defaultRetention", Reason: "negative value"}
	}
	cfg, err := pgxpool.ParseConfig(opts.Path)
	if err != nil {
		// pgx redacts what it recognises; say nothing of the URL beyond its redacted form
		return nil, fmt.Errorf("open %s: not a valid PostgreSQL URL", loc)
	}
	cfg.MaxConns = poolSize
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = 5 * time.Minute
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = connectTimeout
	}
	schema := DefaultSchema
	if v, ok := cc.RuntimeParams[SchemaParam]; ok {
		delete(cc.RuntimeParams, SchemaParam) // ckptd's, not a server setting
		if !validSchema.MatchString(v) {
			return nil, &store.InvalidError{Field: "path", Reason: fmt.Sprintf("%s=%q: want a lower-case identifier of at most 57 characters", SchemaParam, v)}
		}
		schema = v
	}
	cc.RuntimeParams["search_path"] = schema
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "ckptd"
	}
	// full: a commit returns once its WAL is flushed (and replicated, if the server is set up
	// so); normal: once it reached the server, which may lose the last ones if it crashes.
	cc.RuntimeParams["synchronous_commit"] = "on"
	if opts.Durability == store.DurabilityNormal {
		cc.RuntimeParams["synchronous_commit"] = "off"
	}
	cd, err := store.NewCodec(opts.MaxStateBytes)
	if err != nil {
		return nil, err
	}
	s := &Store{
		opts: opts, schema: schema, channel: "ckptd:" + schema, location: loc, log: opts.Logger, now: opts.Now, codec: cd, defRet: opts.DefaultRetention,
		cfg: cfg, origin: uuid.NewString(), wake: make(chan struct{}, 1), stopBG: make(chan struct{}),
		shard: pickShard(), bites: store.NewBites(opts.Options),
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
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		cd.Close()
		return nil, s.openError(err)
	}
	if err := s.setUp(ctx); err != nil {
		s.pool.Close()
		cd.Close()
		return nil, s.openError(err)
	}
	s.writerWG.Add(1)
	go s.writerLoop()
	if !opts.noBackground {
		s.bgWG.Add(1)
		go s.idleLoop()
	}
	if s.opts.maxSchema == 0 || s.opts.maxSchema >= SchemaVersion {
		if _, err := s.ExpireIdle(ctx); err != nil {
			s.log.Warn("ckptd store: idle expiry at open failed", "err", err)
		}
	}
	s.log.Debug("ckptd store: opened", "db", loc, "durability", opts.Durability)
	return s, nil
}

// setUp checks the server, migrates the schema and looks at what maintenance may use.
func (s *Store) setUp(ctx context.Context) error {
	giveUp := s.opts.giveUp
	s.opts.giveUp = min(giveUp, openGiveUp)
	defer func() { s.opts.giveUp = giveUp }()
	target := SchemaVersion
	if s.opts.maxSchema > 0 {
		target = s.opts.maxSchema
	}
	if err := s.retry(ctx, func() error { return migrate(ctx, s.pool, s.schema, target, s.opts.MustExist) }); err != nil {
		return err
	}
	return s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'amcheck')
			OR (EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'amcheck')
				AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))`).Scan(&s.amcheck)
	})
}

// openError wraps an error of Open with the database's location, never its password.
func (s *Store) openError(err error) error {
	var ie *store.InvalidError
	if errors.As(err, &ie) || errors.Is(err, errNoSchema) || errors.Is(err, errNewerSchema) || errors.Is(err, errNotOurs) {
		return fmt.Errorf("open %s: %w", s.location, err)
	}
	return fmt.Errorf("open %s: %w", s.location, wrapDB("connect", scrub(err, s.cfg.ConnConfig.Password)))
}

// Location is the database's URL without its password.
func (s *Store) Location() string { return s.location }

// About names the backend.
func (s *Store) About() store.About {
	integrity := "not available (the amcheck extension is not installed and cannot be created: CREATE EXTENSION amcheck)"
	if s.amcheck {
		integrity = "amcheck: verify_heapam and bt_index_check on every ckptd table and index"
	}
	return store.About{Name: "PostgreSQL", Location: s.location, Integrity: integrity}
}

// DefaultRetention is the retention of workflows that have none configured.
func (s *Store) DefaultRetention() store.Retention { return s.defRet }

// SetOnPruned registers a callback for checkpoints this process removed by retention, Prune,
// idle expiry or Complete. It runs on the writer goroutine after the commit: it must not block
// or call the Store. (Other processes' prunes come through Subscribe.)
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

// Close stops accepting work, commits everything already accepted and closes the connections.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.Condition().Writable() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
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
		s.feed.stop()
		s.pool.Close()
		s.codec.Close()
	})
	return s.closeErr
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// retry runs f until it succeeds, fails with an error not worth retrying, ctx ends, or the
// retry budget is spent (then ErrUnavailable).
func (s *Store) retry(ctx context.Context, f func() error) error {
	start := time.Now()
	delay := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || !retryable(err) {
			return err
		}
		if s.isClosed() && isConnErr(err) {
			return fmt.Errorf("%w: %v", store.ErrClosed, err)
		}
		if time.Since(start) > s.opts.giveUp {
			return fmt.Errorf("database unavailable for %s: %w: %v", time.Since(start).Round(time.Second), store.ErrUnavailable, err)
		}
		if attempt == 0 {
			s.log.Debug("ckptd store: retrying", "err", err)
		}
		t := time.NewTimer(delay/2 + rand.N(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if delay < 500*time.Millisecond {
			delay *= 2
		}
	}
}

// readTx runs f in a REPEATABLE READ read-only transaction (one snapshot), retrying while the
// database cannot be reached.
func (s *Store) readTx(ctx context.Context, f func(tx pgx.Tx) error) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	return s.observe(s.retry(ctx, func() error {
		tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if err := f(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}))
}

// readRow runs one single-statement read (its own snapshot), retrying while the database cannot
// be reached.
func (s *Store) readRow(ctx context.Context, q string, args []any, dest ...any) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	return s.observe(s.retry(ctx, func() error { return s.pool.QueryRow(ctx, q, args...).Scan(dest...) }))
}

func (s *Store) idleLoop() {
	defer s.bgWG.Done()
	every := s.opts.SweepInterval
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopBG:
			return
		case <-t.C:
		}
		if _, err := s.ExpireIdle(context.Background()); err != nil && !errors.Is(err, store.ErrClosed) {
			s.log.Warn("ckptd store: idle expiry failed", "err", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-s.stopBG:
				cancel()
			case <-ctx.Done():
			}
		}()
		if _, err := s.LGExpireIdle(store.Paced(ctx)); err != nil && !errors.Is(err, store.ErrClosed) && !errors.Is(err, context.Canceled) {
			s.log.Warn("ckptd store: idle expiry of LangGraph threads failed", "err", err)
		}
		cancel()
	}
}
