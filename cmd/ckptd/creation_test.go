package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store/sqlite"
)

// TestStartAfterInterruptedCreation: a crash while a database is being created (TestCrashKillLoop
// once killed the daemon before SQLite wrote the file's first page) leaves a file that holds
// nothing; the next start must treat it as the new database it is, set up exactly like one
// (schema, auto_vacuum), not refuse it.
func TestStartAfterInterruptedCreation(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"empty file", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o600))
			require.NoError(t, os.Chtimes(path, old, old))
		}},
		{"empty file and empty WAL", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o600))
			require.NoError(t, os.WriteFile(path+"-wal", nil, 0o600))
		}},
		{"empty file and a journal left behind", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o600))
			require.NoError(t, os.WriteFile(path+"-journal", make([]byte, 512), 0o600))
		}},
		{"header written, no schema", func(t *testing.T, path string) {
			db, err := sql.Open("sqlite", "file:"+path)
			require.NoError(t, err)
			var mode string
			require.NoError(t, db.QueryRow("PRAGMA journal_mode = WAL").Scan(&mode))
			require.NoError(t, db.Close())
			fi, err := os.Stat(path)
			require.NoError(t, err)
			require.Positive(t, fi.Size(), "SQLite wrote the header")
		}},
		{"first page never reached the disk", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, make([]byte, 4096), 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.db")
			tc.setup(t, path)
			d := startDaemon(t, path, "--keep-last", "0")
			id := d.saveState("wf", 0, []byte(`{"after":"crash"}`))
			m := d.call("checkpoint/load", map[string]any{"checkpointId": id}, nil, nil)
			assert.Contains(t, string(m.Result), `"after":"crash"`)
			d.shutdownWait()

			db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
			require.NoError(t, err)
			defer db.Close()
			var av, v int
			require.NoError(t, db.QueryRow("PRAGMA auto_vacuum").Scan(&av))
			require.NoError(t, db.QueryRow("PRAGMA user_version").Scan(&v))
			assert.Equal(t, 2, av, "auto_vacuum INCREMENTAL, like any new database")
			assert.Equal(t, sqlite.SchemaVersion, v)
		})
	}
}
