package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/storetest"
)

const v1Fixture = "../../testdata/store/v1.db"

// TestGenerateV1Fixture writes testdata/store/v1.db: a real schema-v1 database. Run it only when
// the fixture must be rebuilt: CKPTD_GEN_FIXTURE=1 go test -run TestGenerateV1Fixture ./store/sqlite/
func TestGenerateV1Fixture(t *testing.T) {
	if os.Getenv("CKPTD_GEN_FIXTURE") == "" {
		t.Skip("set CKPTD_GEN_FIXTURE=1 to regenerate " + v1Fixture)
	}
	path := filepath.Join(t.TempDir(), "v1.db")
	s, err := open(context.Background(), options(path, func(o *Options) { o.maxSchema = 1 }))
	require.NoError(t, err)
	ctx := context.Background()
	seqs := map[string]int64{}
	base := int64(1795000000000000)
	for i, req := range storetest.OldestCheckpoints() {
		sj := &saveJob{}
		sj.Req = req
		require.NoError(t, s.prepare(sj))
		seqs[req.WorkflowID]++
		created := base + int64(i)*1000000
		_, err := s.wconn.ExecContext(ctx, `INSERT INTO workflows(workflow_id, next_seq, created_at, updated_at) VALUES (?1, 2, ?2, ?2)
			ON CONFLICT(workflow_id) DO UPDATE SET next_seq = next_seq + 1, updated_at = ?2`, req.WorkflowID, created)
		require.NoError(t, err)
		_, err = s.wconn.ExecContext(ctx, `INSERT OR IGNORE INTO states(hash, encoding, size, stored_size, data) VALUES (?,?,?,?,?)`,
			sj.SHA, sj.Encoding, len(req.State), len(sj.Data), sj.Data)
		require.NoError(t, err)
		var rowid int64
		require.NoError(t, s.wconn.QueryRowContext(ctx, `INSERT INTO checkpoints(checkpoint_id, workflow_id, namespace, seq,
			parent_id, phase, step, step_name, error, state_type, state_hash, size, stored_size, dedup, completed_count,
			pending_count, workflow_hash, created_at, format_version, content_hash, metadata, completed_tasks, pending_tasks)
			VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,0,?,?,?,?,1,?,?,?,?) RETURNING id`,
			sj.ID, req.WorkflowID, req.Namespace, seqs[req.WorkflowID], nullStr(req.ParentID), string(req.Phase), req.Step,
			req.StepName, nullBytes(sj.ErrorJSON), string(sj.StateType), sj.SHA, len(req.State), len(sj.Data), sj.CompletedN,
			sj.PendingN, req.WorkflowHash, created, sj.ContentHash, sj.MetaRaw, []byte(req.CompletedTasks),
			[]byte(req.PendingTasks)).Scan(&rowid))
		for _, kv := range sj.Meta {
			_, err := s.wconn.ExecContext(ctx, `INSERT INTO checkpoint_meta(key, value, ckpt) VALUES (?,?,?)`, kv[0], kv[1], rowid)
			require.NoError(t, err)
		}
	}
	require.NoError(t, s.Close())
	require.NoError(t, os.MkdirAll(filepath.Dir(v1Fixture), 0o755))
	copyFile(t, path, v1Fixture)
	_, err = os.Stat(path + "-wal")
	require.True(t, err != nil || fileSize(t, path+"-wal") == 0, "WAL checkpointed into the file")
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

func userVersion(t *testing.T, path string) int {
	var v int
	require.NoError(t, rawDB(t, path).QueryRow("PRAGMA user_version").Scan(&v))
	return v
}

func TestNewerSchemaRefused(t *testing.T) {
	s := openTest(t)
	path := s.Path()
	require.NoError(t, s.Close())
	_, err := rawDB(t, path).Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+7))
	require.NoError(t, err)
	_, err = open(context.Background(), options(path))
	require.Error(t, err)
	require.Contains(t, err.Error(), fmt.Sprint(SchemaVersion+7))
	require.Contains(t, err.Error(), fmt.Sprintf("(%d)", SchemaVersion))
}

func TestOpenRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	s, err := open(context.Background(), options(good))
	require.NoError(t, err)
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"x":1}`)})
	require.NoError(t, s.Close())
	goodBytes, err := os.ReadFile(good)
	require.NoError(t, err)
	require.Zero(t, len(goodBytes)%4096)

	foreign := filepath.Join(dir, "foreign.db")
	db, err := sql.Open("sqlite", foreign)
	require.NoError(t, err)
	_, err = db.Exec("CREATE TABLE t(x)")
	require.NoError(t, err)
	require.NoError(t, db.Close())

	for _, tc := range []struct {
		name    string
		content []byte
		path    string
		want    string
	}{
		{"zeros past a page", make([]byte, 100<<10), "", "not a SQLite database"},
		{"text", []byte("this is my precious text file, not a database at all. " + strings.Repeat("x", 200)), "", "not a SQLite database"},
		{"short", []byte("SQLite"), "", "not a SQLite database"},
		{"header only", goodBytes[:50], "", "truncated"},
		{"truncated", goodBytes[:len(goodBytes)-100], "", "truncated"},
		{"less than a page", goodBytes[:1000], "", "truncated"},
		{"foreign sqlite", nil, foreign, "not a ckptd database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.path
			if p == "" {
				p = filepath.Join(dir, tc.name+".db")
				require.NoError(t, os.WriteFile(p, tc.content, 0o600))
			}
			before, err := os.ReadFile(p)
			require.NoError(t, err)
			_, err = open(context.Background(), options(p))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			after, err := os.ReadFile(p)
			require.NoError(t, err)
			require.True(t, bytes.Equal(before, after), "file untouched")
		})
	}
}

func TestOpenFreshEmptyFileOfAnotherCkptd(t *testing.T) {
	// another ckptd created the file but has not written to it yet
	path := filepath.Join(t.TempDir(), "ckptd.db")
	created, err := precheckFile(path)
	require.NoError(t, err)
	require.True(t, created)
	s, err := open(context.Background(), options(path))
	require.NoError(t, err)
	mustSave(t, s, store.SaveRequest{WorkflowID: "w"})
	var av int
	require.NoError(t, s.rdb.QueryRow("PRAGMA auto_vacuum").Scan(&av))
	require.Equal(t, 2, av)
	require.NoError(t, s.Close())
}

func TestOpenCreatesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "ckptd.db")
	s, err := open(context.Background(), options(path))
	require.NoError(t, err)
	mustSave(t, s, store.SaveRequest{WorkflowID: "w"})
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), di.Mode().Perm())
	fi, err = os.Stat(path + "-wal")
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	var av int
	require.NoError(t, s.rdb.QueryRow("PRAGMA auto_vacuum").Scan(&av))
	require.Equal(t, 2, av, "auto_vacuum=INCREMENTAL")
	require.NoError(t, s.Close())
	// reopen works (closing is covered by storetest); a bad durability is refused
	s, err = open(context.Background(), options(path))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = open(context.Background(), options(path, func(o *Options) { o.Durability = "fast"; o.noBackground = false }))
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
}
