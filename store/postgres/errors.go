package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ckptd/ckptd/store"
)

func invalid(field, format string, args ...any) error { return store.Invalid(field, format, args...) }

// sqlState returns the SQLSTATE of a server error, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// isConnErr reports errors of the connection rather than of a statement: the server is
// unreachable, restarting, or went away mid-transaction.
func isConnErr(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch c := sqlState(err); {
	case c == "":
	case strings.HasPrefix(c, "08"), // connection exception
		c == "57P01", c == "57P02", c == "57P03", // admin shutdown, crash shutdown, cannot connect now
		c == "53300": // too many connections
		return true
	default:
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// retryable reports errors worth running the same work again for: serialization failures and
// deadlocks (another process got there first), and a lost connection.
func retryable(err error) bool {
	switch sqlState(err) {
	case "40001", "40P01":
		return true
	}
	return isConnErr(err)
}

// isUnavailable reports errors that mean the storage itself is failing.
func isUnavailable(err error) bool {
	if isConnErr(err) {
		return true
	}
	c := sqlState(err)
	return strings.HasPrefix(c, "53") || // insufficient resources: disk full, out of memory
		strings.HasPrefix(c, "58") || // system error: I/O
		c == "XX001" || c == "XX002" || // data or index corrupted
		c == "25006" // read-only transaction: a standby, or default_transaction_read_only
}

// wrapDB turns a database error into one of the store's errors (store.ErrUnavailable for
// storage failures, *store.InvalidError for text PostgreSQL cannot store), adding op as
// context. Store errors pass through with context.
func wrapDB(op string, err error) error {
	if err == nil {
		return nil
	}
	var ie *store.InvalidError
	var ce *store.CorruptError
	switch {
	case errors.As(err, &ie), errors.As(err, &ce), errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict),
		errors.Is(err, store.ErrTooLarge), errors.Is(err, store.ErrClosed), errors.Is(err, store.ErrUnavailable):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	}
	switch sqlState(err) {
	case "22021", "22P05": // a NUL character, or bytes that are not UTF-8, in a text value
		return fmt.Errorf("%s: %w", op, invalid("params", "a string contains a NUL character (\\u0000), which PostgreSQL cannot store"))
	case "57014": // query_canceled: the context ended while a statement ran
		return fmt.Errorf("%s: %w", op, context.Canceled)
	}
	if isUnavailable(err) {
		return fmt.Errorf("%s: %w: %v", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// noNUL refuses text PostgreSQL cannot store (it keeps NUL-terminated strings): field names it.
func noNUL(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if strings.IndexByte(fields[i+1], 0) >= 0 {
			return invalid(fields[i], "contains a NUL character (\\u0000), which PostgreSQL cannot store")
		}
	}
	return nil
}

// Redact returns the database URL u without its password (in the user info or a password
// query parameter), for logs, errors and results. Something that does not parse as a URL is
// reduced to its scheme.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		scheme, _, _ := strings.Cut(u, "://")
		if len(scheme) > 16 {
			scheme = "postgres"
		}
		return scheme + "://(URL does not parse)"
	}
	if p.User != nil {
		if _, has := p.User.Password(); has {
			p.User = url.UserPassword(p.User.Username(), "xxxxx")
		}
	}
	if q := p.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		p.RawQuery = q.Encode()
	}
	return p.String()
}

// scrub hides password in err's text (a driver error may quote a connection string).
func scrub(err error, password string) error {
	if err == nil || password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return &scrubbed{err: err, password: password}
}

type scrubbed struct {
	err      error
	password string
}

func (e *scrubbed) Error() string { return strings.ReplaceAll(e.err.Error(), e.password, "xxxxx") }
func (e *scrubbed) Unwrap() error { return e.err }

// noRows reports pgx.ErrNoRows.
func noRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// isStoreErr reports the store's own sentinel errors.
func isStoreErr(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrClosed) ||
		errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrTooLarge)
}
