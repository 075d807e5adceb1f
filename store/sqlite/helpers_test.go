package sqlite

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/storetest"
)

// options are the Options of a test database at path, without background goroutines unless a
// mutation turns them on.
func options(path string, mut ...func(*Options)) Options {
	o := Options{Options: store.Options{Path: path}, noBackground: true}
	for _, m := range mut {
		m(&o)
	}
	return o
}

func openTest(t testing.TB, mut ...func(*Options)) *Store {
	t.Helper()
	s, err := open(context.Background(), options(filepath.Join(t.TempDir(), "ckptd.db"), mut...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openPath opens (and closes when the test ends) the database at path.
func openPath(t testing.TB, path string, mut ...func(*Options)) *Store {
	t.Helper()
	s, err := open(context.Background(), options(path, mut...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustSave(t testing.TB, s *Store, req store.SaveRequest) store.SaveResult {
	t.Helper()
	res, err := s.Save(context.Background(), req)
	require.NoError(t, err)
	return res
}

// rawDB opens a separate plain connection to the store's file (to corrupt or inspect it).
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func checkpointJSON(rng *rand.Rand, size int) []byte { return storetest.CheckpointJSON(rng, size) }

func randBytes(rng *rand.Rand, n int) []byte { return storetest.RandBytes(rng, n) }

func strp(s string) *string { return &s }

// querier is a database or a transaction (one snapshot).
type querier interface {
	Query(query string, args ...any) (*sql.Rows, error)
	QueryRow(query string, args ...any) *sql.Row
}

// rawSnapshot is a read transaction on the database at path through a connection of its own,
// for checks that read several tables: every query sees one snapshot, whatever the store's
// background jobs commit meanwhile. done ends it.
func rawSnapshot(t testing.TB, path string) (db querier, done func()) {
	t.Helper()
	tx, err := rawDB(t, path).Begin()
	require.NoError(t, err)
	return tx, func() { _ = tx.Rollback() }
}

// corruptState overwrites the stored bytes of a checkpoint's state through a separate connection.
func corruptState(t *testing.T, s *Store, checkpointID string, data []byte) {
	t.Helper()
	(&testBackend{s}).SetStateBytes(t, checkpointID, data)
}
