package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ckptd/ckptd/store"
)

// PragmaNames are the SQLite settings Pragmas reports, in a stable order. They are what the
// durability and space promises rest on (docs/durability.md):
//
//	journal_mode        wal
//	synchronous         2 (FULL) for --durability full, 1 (NORMAL) for normal
//	fullfsync           1 for full (F_FULLFSYNC on macOS; ignored elsewhere), 0 for normal
//	busy_timeout        milliseconds SQLite waits on a lock before the store's own retries
//	auto_vacuum         2 (INCREMENTAL): freed pages go back to the file system
//	wal_autocheckpoint  0: WAL checkpoints run in the background, never on the save path
//	journal_size_limit  bytes the WAL is truncated to after a checkpoint
//	foreign_keys        0
var PragmaNames = []string{"journal_mode", "synchronous", "fullfsync", "busy_timeout", "auto_vacuum",
	"wal_autocheckpoint", "journal_size_limit", "foreign_keys"}

// Pragmas reads back PragmaNames on the writer connection, the one every save commits through,
// as SQLite reports them (numbers as decimal strings, journal_mode as a word).
//
// The reads run beside the writer goroutine, not as one of its jobs: they take no lock (a job
// would BEGIN IMMEDIATE and wait behind other processes' writers) and only read settings of the
// connection, so interleaving with the writer's statements is harmless. They are not cancelled
// with ctx: cancelling would interrupt the connection, and with it the writer's transaction.
func (s *Store) Pragmas(ctx context.Context) (map[string]string, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, store.ErrClosed
	}
	if s.wconn == nil { // opened read-only: no connection commits saves
		return nil, fmt.Errorf("read PRAGMAs: %w", s.Condition().Err())
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	bg := context.WithoutCancel(ctx)
	out := make(map[string]string, len(PragmaNames))
	for _, name := range PragmaNames {
		var v sql.NullString
		if err := s.wconn.QueryRowContext(bg, "PRAGMA "+name).Scan(&v); err != nil && !errors.Is(err, sql.ErrNoRows) {
			if errors.Is(err, sql.ErrConnDone) {
				return nil, store.ErrClosed
			}
			return nil, wrapDB(fmt.Sprintf("read PRAGMA %s", name), err)
		}
		out[name] = v.String
	}
	return out, nil
}
