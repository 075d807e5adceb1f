package sqlite

import (
	"context"
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ckptd/ckptd/store"
)

func invalid(field, format string, args ...any) error { return store.Invalid(field, format, args...) }

// sqliteCode returns the primary SQLite result code of err, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

// isBusy reports SQLITE_BUSY / SQLITE_LOCKED: worth retrying.
func isBusy(err error) bool {
	switch sqliteCode(err) {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// isCorrupt reports SQLITE_CORRUPT: SQLite found a damaged page.
func isCorrupt(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CORRUPT }

// isUnavailable reports errors that mean the storage itself is failing (disk full, I/O, ...).
func isUnavailable(err error) bool {
	switch sqliteCode(err) {
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY,
		sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED,
		sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_NOLFS:
		return true
	}
	return false
}

// wrapDB turns a database error into one of the store's errors (store.ErrUnavailable for
// storage failures), adding op as context. Errors that are already store errors pass through
// with context.
func wrapDB(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if sqliteCode(err) == sqlite3.SQLITE_INTERRUPT {
		return fmt.Errorf("%s: %w", op, context.Canceled)
	}
	if isUnavailable(err) {
		return fmt.Errorf("%s: %w: %v", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
