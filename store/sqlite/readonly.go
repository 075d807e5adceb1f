package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ckptd/ckptd/store"
)

// OpenReadOnly opens an existing database file for reading only, however damaged, for a tool
// that salvages what it can (ckptd recover): nothing is written to the file (no migration, no
// journal-mode switch, no compaction, no WAL checkpoint), every write fails with
// store.ReasonReadOnly, and a file SQLite cannot even start reading is an error. Reads that meet
// damage fail as they would on a writable store (a checkpoint on a damaged page is a
// *store.CorruptError).
func OpenReadOnly(ctx context.Context, opts store.Options) (*Store, error) {
	if opts.Path == "" {
		return nil, &store.InvalidError{Field: "path", Reason: "required"}
	}
	abs, err := filepath.Abs(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	var hdr [16]byte
	_, rerr := io.ReadFull(f, hdr[:])
	_ = f.Close()
	if rerr != nil || !bytes.Equal(hdr[:], []byte("SQLite format 3\x00")) {
		return nil, fmt.Errorf("open store: %s is not a SQLite database (bad header)", abs)
	}
	opts.Path = abs
	return openReadOnly(ctx, Options{Options: opts}, store.Condition{Reason: store.ReasonReadOnly,
		Detail: "opened read-only: nothing is written to " + abs, Since: time.Now()})
}

// openReadOnly opens opts.Path (absolute, existing) with a read pool only, in condition cond.
// It reads through SQLite's locks and WAL when it can; when it cannot (SQLite could not set up
// the WAL index: no space for the -shm file, a read-only directory) and the WAL holds nothing, it
// reads the file as immutable (no locks, no WAL), which sees every committed transaction.
func openReadOnly(ctx context.Context, opts Options, cond store.Condition) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxStateBytes <= 0 {
		opts.MaxStateBytes = store.DefaultMaxStateBytes
	}
	if opts.busyTimeout == 0 {
		opts.busyTimeout = busyTimeoutMS * time.Millisecond
	}
	if opts.giveUp == 0 {
		opts.giveUp = busyGiveUp
	}
	opts.NoCompactor = true
	cd, err := store.NewCodec(opts.MaxStateBytes)
	if err != nil {
		return nil, err
	}
	s := &Store{
		opts: opts, path: opts.Path, log: opts.Logger, now: opts.Now, codec: cd, defRet: opts.DefaultRetention,
		wake: make(chan struct{}, 1), stopBG: make(chan struct{}), ckptKick: make(chan struct{}, 1),
		compact: newCompactor(), bites: store.NewBites(opts.Options),
	}
	c := cond
	s.cond.Store(&c)
	busy := fmt.Sprintf("busy_timeout(%d)", opts.busyTimeout.Milliseconds())
	tryOpen := func(extra string) error {
		rdb, err := s.openPool(s.dsnMode("ro", []string{busy, "query_only(1)", "temp_store(MEMORY)", "cache_size(-16384)"})+extra, readPoolSize+1)
		if err != nil {
			return err
		}
		s.rdb = rdb
		s.rpool = newReadPool(rdb, readPoolSize) // reads run on pinned connections, as in Open
		var n int
		err = s.retry(ctx, func() error {
			return s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n)
		})
		if err != nil {
			s.rpool.close()
			_ = s.rdb.Close()
			s.rdb, s.rpool = nil, nil
		}
		return err
	}
	err = tryOpen("")
	if err != nil && !isDamaged(err) && !walHoldsData(opts.Path) {
		s.immutable = true
		if ierr := tryOpen("&immutable=1"); ierr == nil {
			s.log.Debug("ckptd store: reading without locks (immutable): the WAL index cannot be set up", "err", err)
			err = nil
		} else {
			s.immutable = false
		}
	}
	if err != nil {
		cd.Close()
		return nil, fmt.Errorf("open store %s read-only: %w", opts.Path, wrapDB("read", err))
	}
	if s.rdb == nil {
		cd.Close()
		return nil, errors.New("open store: no read pool")
	}
	s.writerWG.Add(1)
	go s.writerLoop() // answers every write with the condition's error
	return s, nil
}

// dsnMode is dsn with another open mode (ro).
func (s *Store) dsnMode(mode string, pragmas []string) string {
	d := s.dsn(pragmas, "")
	return string(bytes.Replace([]byte(d), []byte("?mode=rw"), []byte("?mode="+mode), 1))
}

// walHoldsData reports whether path's WAL exists with content (frames that may be committed).
func walHoldsData(path string) bool {
	fi, err := os.Stat(path + "-wal")
	return err == nil && fi.Size() > 0
}
