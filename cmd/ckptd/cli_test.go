package main

// Helpers of the subcommand tests: they run the binary built by TestMain (binPath), compare its
// output with golden files in testdata/cli (go test ./cmd/ckptd -run TestCLI... -update rewrites
// them), and build deterministic databases through the store with a fixed clock and
// client-chosen checkpoint ids.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
	"github.com/ckptd/ckptd/store/postgres"
	"github.com/ckptd/ckptd/store/sqlite"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/cli")

const cliGoldenDir = "../../testdata/cli"

// cliResult is what one run of the binary produced.
type cliResult struct {
	args   []string
	stdout string
	stderr string
	code   int
}

// cliRun runs the built ckptd with args, HOME set to a fresh directory and XDG_STATE_HOME
// unset (so no test ever touches a real default database), and extra env "K=V" entries.
func cliRun(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	return cliRunIn(t, nil, env, args...)
}

// cliRunIn is cliRun with stdin.
func cliRunIn(t *testing.T, stdin []byte, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = cliEnv(t, env)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("running ckptd %v: %v", args, err)
	}
	return res
}

func cliEnv(t *testing.T, extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "XDG_STATE_HOME=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+t.TempDir())
	return append(env, extra...)
}

// cliGolden compares res with testdata/cli/name.golden after replacing dir (the test's
// temporary directory) with $DIR, any other test temporary directory with $TMP, and applying
// the extra regexp replacements (pairs).
func cliGolden(t *testing.T, name, dir string, res cliResult, replace ...string) {
	t.Helper()
	tmp := regexp.MustCompile(regexp.QuoteMeta(os.TempDir()) + `/[^/\s]+/[0-9]{3}`)
	norm := func(s string) string {
		if dir != "" {
			s = strings.ReplaceAll(s, dir, "$DIR")
		}
		s = tmp.ReplaceAllString(s, "$$TMP") // any other t.TempDir()
		for i := 0; i+1 < len(replace); i += 2 {
			s = regexp.MustCompile(replace[i]).ReplaceAllString(s, replace[i+1])
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "$ ckptd %s\n", norm(strings.Join(res.args, " ")))
	fmt.Fprintf(&b, "[exit %d]\n", res.code)
	fmt.Fprintf(&b, "-- stdout --\n%s", norm(res.stdout))
	if res.stdout != "" && !strings.HasSuffix(res.stdout, "\n") {
		b.WriteString("\n[no newline at end]\n")
	}
	fmt.Fprintf(&b, "-- stderr --\n%s", norm(res.stderr))
	got := b.String()
	path := filepath.Join(cliGoldenDir, name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll(cliGoldenDir, 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file: run go test ./cmd/ckptd -run %s -update", t.Name())
	assert.Equal(t, string(want), got, "output differs from %s (go test ./cmd/ckptd -run '%s' -update rewrites it)", path, t.Name())
}

// cliClock is a deterministic store clock: every call is one minute after the previous one.
type cliClock struct {
	mu sync.Mutex
	t  time.Time
}

func newCLIClock(start time.Time) *cliClock { return &cliClock{t: start.Add(-time.Minute)} }

func (c *cliClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Minute)
	return c.t
}

// cliStart is the fixtures' first timestamp.
var cliStart = time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)

// cliDB is a database being filled through the store for a test.
type cliDB struct {
	t    *testing.T
	dir  string
	path string
	st   store.Backend
}

// newCLIDB opens (creating) dir/ckptd.db with the given clock (nil: cliStart, one minute per save).
func newCLIDB(t *testing.T, clock func() time.Time) *cliDB {
	t.Helper()
	dir := t.TempDir()
	if clock == nil {
		clock = newCLIClock(cliStart).Now
	}
	db := &cliDB{t: t, dir: dir, path: filepath.Join(dir, "ckptd.db")}
	// CompressInline: the fixtures must be stored the same way whatever the machine's load (the
	// compactor at Close has a time budget), since goldens show stored sizes and corruption texts.
	st, err := sqlite.Open(context.Background(), store.Options{Path: db.path, Now: clock, CompressInline: true})
	require.NoError(t, err)
	db.st = st
	t.Cleanup(func() { _ = db.st.Close() })
	return db
}

// newPGCLIDB is newCLIDB on a new PostgreSQL database (its URL carries a password, which trust
// authentication accepts: the output must never show it).
func newPGCLIDB(t *testing.T, clock func() time.Time) *cliDB {
	t.Helper()
	if clock == nil {
		clock = newCLIClock(cliStart).Now
	}
	db := &cliDB{t: t, dir: t.TempDir(), path: pgURL(t)}
	st, err := postgres.Open(context.Background(), postgres.Options{Options: store.Options{Path: db.path, Now: clock, CompressInline: true}})
	require.NoError(t, err)
	db.st = st
	t.Cleanup(func() { _ = db.st.Close() })
	return db
}

func (db *cliDB) save(req store.SaveRequest) store.SaveResult {
	db.t.Helper()
	res, err := db.st.Save(context.Background(), req)
	require.NoError(db.t, err)
	return res
}

// close closes the store so the binary sees a quiet database.
func (db *cliDB) close() {
	db.t.Helper()
	require.NoError(db.t, db.st.Close())
}

// exec runs SQL directly on the closed database file (to damage it).
func (db *cliDB) exec(q string, args ...any) {
	db.t.Helper()
	raw, err := sql.Open("sqlite", "file:"+db.path)
	require.NoError(db.t, err)
	defer raw.Close()
	_, err = raw.Exec(q, args...)
	require.NoError(db.t, err)
}

// corruptState flips a byte of the stored state of checkpointID (the SHA-256 no longer matches):
// of its stored bytes, or of its first chunk's when it is stored as chunks.
func (db *cliDB) corruptState(checkpointID string) {
	db.t.Helper()
	raw, err := sql.Open("sqlite", "file:"+db.path)
	require.NoError(db.t, err)
	defer raw.Close()
	var enc int
	var index []byte
	require.NoError(db.t, raw.QueryRow(`SELECT s.encoding, s.data FROM states s JOIN checkpoints c ON c.state_hash = s.hash
		WHERE c.checkpoint_id = ?`, checkpointID).Scan(&enc, &index))
	if enc != store.EncChunked {
		db.exec(`UPDATE states SET data = CAST(substr(data, 1, length(data) - 1) || X'00' AS BLOB) WHERE hash =
			(SELECT state_hash FROM checkpoints WHERE checkpoint_id = ?)`, checkpointID)
		return
	}
	var run []byte
	require.NoError(db.t, raw.QueryRow(`SELECT r.data FROM runs r JOIN run_addrs a ON a.id = r.id WHERE a.address = ?`,
		index[:32]).Scan(&run))
	refs, err := chunk.DecodeRun(run)
	require.NoError(db.t, err)
	// the chunk's last byte, in its own row or in its pack
	db.exec(`UPDATE chunks SET data = CAST(substr(data, 1, length(data) - 1) || X'00' AS BLOB) WHERE pack IS NULL AND id =
		(SELECT id FROM chunk_addrs WHERE address = ?)`, refs[0].Addr[:])
	db.exec(`UPDATE packs SET data = CAST(substr(data, 1, c.pack_off + c.pack_len - 1) || X'00' || substr(data, c.pack_off + c.pack_len + 1) AS BLOB)
		FROM (SELECT pack, pack_off, pack_len FROM chunks WHERE id = (SELECT id FROM chunk_addrs WHERE address = ?)) c
		WHERE packs.id = c.pack`, refs[0].Addr[:])
}

func cliCopyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
}

// cliState is a deterministic JSON state of about n bytes that compresses well.
func cliState(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"messages":[`)
	for i := 0; b.Len() < n-40; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"assistant","content":"step %d of the plan"}`, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// standardFixture fills db with the workflows most golden tests use:
//
//	wf-alpha  a-1 before_step 0, a-2 completed 0 (same state as a-1), s-1 in namespace "sub",
//	          a-3 before_step 1 with a 10 KiB state (zstd), tasks and pending writes
//	wf-beta   b-1 completed 0 (bytes state), b-2 failed 1, not retryable, workflow hash h1
//	wf-done   d-1 completed 0, then the workflow is marked completed (checkpoints kept)
func standardFixture(t *testing.T) *cliDB {
	t.Helper()
	return fillStandard(newCLIDB(t, nil))
}

// fillStandard fills db as standardFixture describes, then closes it.
func fillStandard(db *cliDB) *cliDB {
	t := db.t
	t.Helper()
	small := []byte(`{"messages":[{"role":"user","content":"hello <world> & all"}]}`)
	db.save(store.SaveRequest{WorkflowID: "wf-alpha", CheckpointID: "a-1", Phase: store.PhaseBeforeStep, Step: 0,
		StepName: "fetch", State: small, StateType: store.StateJSON, WorkflowHash: "h-alpha"})
	db.save(store.SaveRequest{WorkflowID: "wf-alpha", CheckpointID: "a-2", ParentID: "a-1", Phase: store.PhaseCompleted,
		Step: 0, StepName: "fetch", State: small, StateType: store.StateJSON, WorkflowHash: "h-alpha",
		CompletedTasks: []byte(`["fetch"]`), Metadata: []byte(`{"source": "loop", "attempt": 1}`)})
	db.save(store.SaveRequest{WorkflowID: "wf-alpha", Namespace: "sub", CheckpointID: "s-1", Phase: store.PhaseCompleted,
		Step: 0, StepName: "child", State: []byte(`{"child":true}`), StateType: store.StateJSON})
	db.save(store.SaveRequest{WorkflowID: "wf-alpha", CheckpointID: "a-3", ParentID: "a-2", Phase: store.PhaseBeforeStep,
		Step: 1, StepName: "summarize", State: cliState(10 << 10), StateType: store.StateJSON, WorkflowHash: "h-alpha",
		CompletedTasks: []byte(`["fetch"]`),
		PendingTasks:   []byte(`[{"id": "t-1", "name": "summarize", "input": {"docs": 3}}, {"id": "t-2", "name": "notify"}]`)})
	_, err := db.st.PutWrites(context.Background(), "wf-alpha", "", "a-3", []store.Write{
		{TaskID: "t-1", Idx: 0, Channel: "messages", Value: []byte(`{"role":"ai","content":"draft"}`)},
		{TaskID: "t-1", Idx: 1, Channel: "blob", Value: []byte{0, 1, 2, 3}, IsBytes: true, Type: "bytes"},
	})
	require.NoError(t, err)
	db.save(store.SaveRequest{WorkflowID: "wf-beta", CheckpointID: "b-1", Phase: store.PhaseCompleted, Step: 0,
		State: []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0x01}, StateType: store.StateBytes, WorkflowHash: "h1"})
	db.save(store.SaveRequest{WorkflowID: "wf-beta", CheckpointID: "b-2", ParentID: "b-1", Phase: store.PhaseFailed, Step: 1,
		StepName: "call-api", Error: &store.StepError{Message: "bad input: field x", Retryable: false},
		State: []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0x02}, StateType: store.StateBytes, WorkflowHash: "h1"})
	db.save(store.SaveRequest{WorkflowID: "wf-done", CheckpointID: "d-1", Phase: store.PhaseCompleted, Step: 0,
		State: []byte(`{"done":true}`), StateType: store.StateJSON})
	_, err = db.st.Complete(context.Background(), "wf-done", true)
	require.NoError(t, err)
	db.close()
	return db
}

// TestCLIHelpEveryCommand: every subcommand has --help (and -h, and ckptd help COMMAND) with an
// example, printed to stdout with exit 0 (help asked for is output, #19 point 7); an unknown flag
// is a usage error on stderr (exit 2).
func TestCLIHelpEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		if c.name == "version" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
				res := cliRun(t, nil, args...)
				assert.Equal(t, exitOK, res.code, res.stderr)
				assert.Contains(t, res.stdout, "usage: ckptd", args)
				assert.Contains(t, res.stdout, "example", args)
				assert.Contains(t, res.stdout, "-db", args)
				assert.Empty(t, res.stderr, args)
			}
			res := cliRun(t, nil, c.name, "--no-such-flag")
			assert.Equal(t, exitUsage, res.code, res.stderr)
			assert.Contains(t, res.stderr, "no-such-flag")
			assert.Contains(t, res.stderr, "usage: ckptd")
			assert.Empty(t, res.stdout)
		})
	}
}

// TestCLIHelp: ckptd --help (-h, help) lists every subcommand on stdout, exit 0 (#19 point 7).
func TestCLIHelp(t *testing.T) {
	t.Parallel()
	res := cliRun(t, nil, "--help")
	cliGolden(t, "help", "", res)
	for _, args := range [][]string{{"-h"}, {"help"}, {"-help"}} {
		again := cliRun(t, nil, args...)
		assert.Equal(t, res.stdout, again.stdout, args)
		assert.Equal(t, exitOK, again.code, args)
	}
	assert.Equal(t, exitOK, res.code)
	for _, c := range commands() {
		assert.Contains(t, res.stdout, "  "+c.name+" ", "ckptd --help lists %s", c.name)
	}
	res = cliRun(t, nil, "no-such-command")
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "unknown command")
}

// TestCLIMissingDatabase: commands that read never create a database; they exit 1 naming it.
func TestCLIMissingDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "none.db")
	for _, args := range [][]string{
		{"ls"}, {"show", "x"}, {"plan", "wf"}, {"prune", "--keep-last", "1"}, {"rm", "x"}, {"verify"},
		{"export", "wf", "-o", filepath.Join(dir, "x.ckpt")}, {"stats"},
	} {
		t.Run(args[0], func(t *testing.T) {
			res := cliRun(t, nil, append(args, "--db", path)...)
			assert.Equal(t, exitProblem, res.code)
			assert.Contains(t, res.stderr, "no database at "+path)
			assert.NoFileExists(t, path)
		})
	}
}

// TestCLIDefaultPath: without --db the commands use $XDG_STATE_HOME/ckptd/ckptd.db, else
// ~/.local/state/ckptd/ckptd.db, like the sidecar.
func TestCLIDefaultPath(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	home := t.TempDir()
	def := filepath.Join(home, ".local", "state", "ckptd", "ckptd.db")
	require.NoError(t, os.MkdirAll(filepath.Dir(def), 0o700))
	cliCopyFile(t, db.path, def)
	res := cliRun(t, []string{"HOME=" + home}, "ls")
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Contains(t, res.stdout, "wf-alpha")

	xdg := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(xdg, "ckptd"), 0o700))
	cliCopyFile(t, db.path, filepath.Join(xdg, "ckptd", "ckptd.db"))
	res = cliRun(t, []string{"XDG_STATE_HOME=" + xdg}, "stats", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Contains(t, res.stdout, filepath.Join(xdg, "ckptd", "ckptd.db"))
}

func TestCLIParseArgsInterspersed(t *testing.T) {
	t.Parallel()
	e := &env{stderr: &bytes.Buffer{}}
	fs := newFlagSet(e, "x", "")
	j := fs.Bool("json", false, "")
	n := fs.String("namespace", "", "")
	pos, err := parseArgs(fs, []string{"wf", "--json", "--namespace", "sub", "--", "--weird"})
	require.NoError(t, err)
	assert.Equal(t, []string{"wf", "--weird"}, pos)
	assert.True(t, *j)
	assert.Equal(t, "sub", *n)
}

func TestCLIFormatBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		10 << 20: "10.0 MiB", 3 << 30: "3.0 GiB"} {
		assert.Equal(t, want, fmtBytes(n), n)
	}
}

type storePending struct {
	p interface {
		Wait(context.Context) (store.SaveResult, error)
	}
}

func (p *storePending) wait(t *testing.T) {
	t.Helper()
	_, err := p.p.Wait(context.Background())
	require.NoError(t, err)
}

// enqueue saves checkpoint i of workflow "big" without waiting (group commit).
func (db *cliDB) enqueue(i int) *storePending {
	return &storePending{p: db.st.Enqueue(store.SaveRequest{WorkflowID: "big", CheckpointID: fmt.Sprintf("big-%05d", i),
		Step: int64(i), State: []byte(fmt.Sprintf(`{"i":%d}`, i)), StateType: store.StateJSON})}
}
