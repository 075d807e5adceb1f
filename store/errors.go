package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// InvalidError says a request carried a value the store cannot accept.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return "invalid " + e.Field + ": " + e.Reason }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// TooLargeError says a state exceeds Options.MaxStateBytes. It matches ErrTooLarge with errors.Is.
type TooLargeError struct {
	Limit int64
	Size  int64
}

func (e *TooLargeError) Error() string {
	return "state of " + strconv.FormatInt(e.Size, 10) + " bytes exceeds the limit of " +
		strconv.FormatInt(e.Limit, 10) + " bytes: " + ErrTooLarge.Error()
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

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

// wrapDB turns a database error into one of the store's errors (ErrUnavailable for storage failures),
// adding op as context. Errors that are already store errors pass through with context.
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
		return fmt.Errorf("%s: %w: %v", op, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
