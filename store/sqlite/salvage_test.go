package sqlite

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSkipDamage: past a run of rows whose page is damaged, the scan resumes at the first rowid
// a search reaches again, whatever the run's length and position.
func TestSkipDamage(t *testing.T) {
	damagedErr := errCorrupt(t)
	for _, tc := range []struct {
		name           string
		rows           int64 // rowids 1..rows
		lo, hi         int64 // damaged rows lo..hi: a search that would land on one fails
		after          int64
		resume         int64
		end            bool
		otherErrorFrom int64 // a search from here fails with a non-damage error (0: never)
	}{
		{"one row", 100, 31, 31, 30, 31, false, 0},
		{"a page", 100, 31, 60, 30, 60, false, 0},
		{"long run", 1_000_000, 11, 700_000, 10, 700_000, false, 0},
		{"to the end", 100, 91, 100, 90, 0, true, 0},
		{"other error", 100, 31, 60, 30, 0, false, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := func(k int64) (int64, bool, error) {
				if tc.otherErrorFrom > 0 && k >= tc.otherErrorFrom {
					return 0, false, errors.New("disk unplugged")
				}
				r := k + 1
				if r < 1 {
					r = 1
				}
				if r > tc.rows {
					return 0, false, nil
				}
				if r >= tc.lo && r <= tc.hi {
					return 0, false, damagedErr
				}
				return r, true, nil
			}
			resume, end, err := skipDamage(next, tc.after)
			if tc.otherErrorFrom > 0 {
				require.Error(t, err)
				assert.False(t, isDamaged(err))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.end, end)
			if !tc.end {
				assert.Equal(t, tc.resume, resume)
			}
		})
	}
}

// errCorrupt is a real damage error from the driver (SQLITE_NOTADB: a file that is not a
// database).
func errCorrupt(t *testing.T) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "junk.db")
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("junk"), 1024), 0o600))
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var n int
	err = db.QueryRow("SELECT count(*) FROM sqlite_schema").Scan(&n)
	require.True(t, isDamaged(err), "%v", err)
	return err
}
