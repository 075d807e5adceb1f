package sqlite

// The store's condition (store.Condition): once the database is found damaged, or its file is
// no longer the file at its path, the store stops writing for good. Every write then fails with
// a *store.UnavailableError; reads keep going through the connections already open.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ckptd/ckptd/store"
)

// syncQuickCheckBytes: a database up to this size gets PRAGMA quick_check before Open returns
// (a few milliseconds for 1 MiB); a larger one is checked in the background after Open, so that
// starting stays fast (#18: initialize answered within 25 ms; the check of a 38 MB database took
// 240 ms). Either way a damaged
// database stops being written to as soon as the check finds the damage.
const syncQuickCheckBytes = 1 << 20

// backgroundCheckDelay is how long after Open the background quick check of a larger database
// starts.
const backgroundCheckDelay = 500 * time.Millisecond

// Condition reports whether the store still accepts writes (store.Condition).
func (s *Store) Condition() store.Condition {
	if c := s.cond.Load(); c != nil {
		return *c
	}
	return store.Condition{}
}

// stopWrites records why the store stops writing; the first reason wins. It logs once, saying
// what to do.
func (s *Store) stopWrites(reason, detail string) {
	c := &store.Condition{Reason: reason, Detail: detail, Since: time.Now()}
	if !s.cond.CompareAndSwap(nil, c) {
		return
	}
	s.log.Error("ckptd store: writes stopped", "reason", reason, "detail", detail, "db", s.path)
}

// damagedDetail is what the log and a refused write say about a damaged database.
func (s *Store) damagedDetail(what string) string {
	return fmt.Sprintf("%s; ckptd no longer writes to %s and answers reads from what is intact. "+
		"To get a working database: stop ckptd, run 'ckptd recover --db %s -o NEW.db' (it copies every "+
		"checkpoint, LangGraph thread and source manifest that still verifies and lists what it could not), "+
		"then start ckptd with --db NEW.db", what, s.path, s.path)
}

// observe looks at an error a statement returned: SQLite reporting corruption (a damaged page,
// a file that is not a database any more) means the file is damaged, and the store stops
// writing. A read-only store opened around a full disk reads without locks (immutable) and may
// see another process's half-done checkpoint as damage: it only reports it.
func (s *Store) observe(err error) {
	if err == nil || !isDamaged(err) || s.immutable {
		return
	}
	s.stopWrites(store.ReasonDamaged, s.damagedDetail("SQLite reported corruption: "+err.Error()))
}

// quickCheckConn runs PRAGMA quick_check through query (a connection's or pool's QueryContext)
// and returns SQLite's complaints ("ok" is none). An error that is itself corruption (the check
// could not even walk the file) is returned as one complaint.
func quickCheckConn(ctx context.Context, query func(ctx context.Context, q string) ([]string, error)) ([]string, error) {
	msgs, err := query(ctx, "PRAGMA quick_check(20)")
	if err != nil {
		if isDamaged(err) {
			return []string{err.Error()}, nil
		}
		return nil, err
	}
	var out []string
	for _, m := range msgs {
		if !strings.EqualFold(m, "ok") {
			out = append(out, m)
		}
	}
	return out, nil
}

// checkNow runs the open-time quick check on the writer's connection, before Open returns (a
// database up to syncQuickCheckBytes).
func (s *Store) checkNow(ctx context.Context) error {
	problems, err := quickCheckConn(ctx, s.queryStrings(s.wconn.QueryContext))
	if err != nil {
		return wrapDB("quick_check", err)
	}
	s.reportCheck(problems)
	return nil
}

// checkInBackground runs the open-time quick check of a large database on the read pool after
// Open returned; Close stops it.
func (s *Store) checkInBackground() {
	bg, cancel := context.WithCancel(context.Background())
	s.cancelCheck = cancel
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		defer cancel()
		// Let the daemon finish starting first: the check reads the whole file, and on a
		// small machine it would hold up the first requests (#18: initialize within 25 ms).
		select {
		case <-time.After(backgroundCheckDelay):
		case <-bg.Done():
			return
		}
		start := time.Now()
		problems, err := quickCheckConn(bg, s.queryStrings(s.rdb.QueryContext))
		if err != nil {
			if bg.Err() == nil {
				s.log.Warn("ckptd store: background quick_check failed", "err", err)
			}
			return
		}
		s.log.Debug("ckptd store: background quick_check done", "took", time.Since(start), "problems", len(problems))
		s.reportCheck(problems)
	}()
}

func (s *Store) reportCheck(problems []string) {
	if len(problems) == 0 {
		return
	}
	what := "PRAGMA quick_check found damage: " + strings.Join(problems, "; ")
	if len(problems) > 3 {
		what = fmt.Sprintf("PRAGMA quick_check found damage (%d problems): %s; ...", len(problems), strings.Join(problems[:3], "; "))
	}
	s.stopWrites(store.ReasonDamaged, s.damagedDetail(what))
}

// queryStrings adapts a QueryContext to quickCheckConn: it collects one string column.
func (s *Store) queryStrings(qc func(ctx context.Context, q string, args ...any) (*sql.Rows, error)) func(ctx context.Context, q string) ([]string, error) {
	return func(ctx context.Context, q string) ([]string, error) {
		rows, err := qc(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var m string
			if err := rows.Scan(&m); err != nil {
				return out, err
			}
			out = append(out, m)
		}
		return out, rows.Err()
	}
}

// fileID identifies the database file (and its WAL) as opened, to notice when the path names
// another file or none.
type fileID struct {
	db, wal os.FileInfo
}

// recordFiles remembers which files the database's path and its WAL's path name now, right
// after the connections opened them.
func (s *Store) recordFiles() {
	if fi, err := os.Stat(s.path); err == nil {
		s.files.db = fi
	}
	if fi, err := os.Stat(s.path + "-wal"); err == nil {
		s.files.wal = fi
	}
}

// checkFiles makes sure the files this store writes are still the files at their paths: after
// a commit and before it is acknowledged (two stat calls per commit batch). A commit into a
// file that was deleted, or that another file replaced at its path, is lost for everyone else
// and for this process once it exits: the store stops writing and the batch is refused.
func (s *Store) checkFiles() error {
	if s.files.db == nil {
		return nil
	}
	for _, f := range []struct {
		path string
		was  os.FileInfo
		name string
		wal  bool
	}{{s.path, s.files.db, "database file", false}, {s.path + "-wal", s.files.wal, "write-ahead log (-wal)", true}} {
		if f.was == nil {
			continue
		}
		fi, err := os.Stat(f.path)
		switch {
		case err == nil && os.SameFile(fi, f.was):
			continue
		case errors.Is(err, os.ErrNotExist):
			s.stopWrites(store.ReasonRemoved, fmt.Sprintf("the %s %s was deleted while ckptd had it open "+
				"(its directory removed, or the file unlinked): nothing written from now on could be read back once ckptd exits. "+
				"ckptd stopped writing and answers reads from what it still has open; restart it to create a new database, "+
				"or export what you need first (reads still work)", f.name, f.path))
		case err == nil && f.wal:
			// The WAL that ckptd writes was unlinked: whether another WAL appeared at its path
			// since (SQLite creates one when a connection opens the database and finds none) is
			// a matter of timing, the loss is the same.
			s.stopWrites(store.ReasonRemoved, fmt.Sprintf("the %s %s was deleted while ckptd had it open "+
				"(another file is at that path now): nothing written from now on could be read back once ckptd exits. "+
				"ckptd stopped writing and answers reads from what it still has open; restart it to use the database again, "+
				"or export what you need first (reads still work)", f.name, f.path))
		case err == nil:
			s.stopWrites(store.ReasonReplaced, fmt.Sprintf("%s is no longer the %s ckptd opened: another file was "+
				"moved or copied over it while ckptd had it open, so ckptd's writes would go to a file no one else can open. "+
				"ckptd stopped writing and answers reads from the file it opened; restart it to use the file now at that path",
				f.path, f.name))
		default:
			// Cannot tell (permissions changed on the directory, say): not a reason to stop.
			s.log.Warn("ckptd store: cannot check the database file", "path", f.path, "err", err)
			continue
		}
		return s.Condition().Err()
	}
	return nil
}

// connector opens the store's pooled connections (openPool).
type connector struct {
	s   *Store
	dsn string
	drv driver.Driver
}

func (c *connector) Connect(context.Context) (driver.Conn, error) {
	if r := c.s.Condition().Reason; r == store.ReasonRemoved || r == store.ReasonReplaced {
		return nil, c.s.Condition().Err()
	}
	return c.drv.Open(c.dsn)
}

func (c *connector) Driver() driver.Driver { return c.drv }

// diskFullBytes: less free space than this on the database's file system is a full disk (SQLite
// needs 32 KiB for the WAL index alone, more for the WAL).
const diskFullBytes = 1 << 20

// diskFull reports whether err, from opening the database at path, comes from a full disk:
// SQLITE_FULL, or storage failing (an I/O error growing the -shm or -wal file: "disk I/O error
// (4874)") while the file system has next to no space left.
func diskFull(path string, err error) bool {
	if sqliteCode(err) == sqlite3.SQLITE_FULL {
		return true
	}
	if sqliteCode(err) != sqlite3.SQLITE_IOERR && !errors.Is(err, store.ErrUnavailable) {
		return false
	}
	free, ok := freeBytes(filepath.Dir(path))
	return ok && free < diskFullBytes
}
