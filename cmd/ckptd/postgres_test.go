package main

// The PostgreSQL backend through the real binary: every subcommand answers as it does on
// SQLite, the daemon serves it (--db or CKPTD_DB) without ever showing the URL's password,
// other processes' saves reach opted-in clients, and acknowledged saves survive SIGKILLs.

import (
	"context"
	"encoding/json"
	"math/rand"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/pgtest"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store/postgres"
)

// pgPassword is the password in every test URL: trust authentication accepts it, and no output
// may contain it.
const pgPassword = "pg-secret-pw"

// pgURL is a new database of the shared throwaway cluster, its URL with pgPassword.
func pgURL(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(pgtest.Database(t))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), pgPassword)
	return u.String()
}

func noPassword(t *testing.T, what, s string) {
	t.Helper()
	assert.NotContains(t, s, pgPassword, "%s shows the password", what)
}

// TestPostgresCLIParity: each inspection and maintenance command prints the same on
// PostgreSQL as on SQLite for the same checkpoints (the database's name aside; stats and
// verify name their backend's own figures and check).
func TestPostgresCLIParity(t *testing.T) {
	sq := standardFixture(t)
	pg := fillStandard(newPGCLIDB(t, nil))
	sqLG := lgFixture(t)
	pgLG := fillLG(newPGCLIDB(t, nil))
	norm := func(db *cliDB, s string) string {
		s = strings.ReplaceAll(s, db.path, "$DB")
		s = strings.ReplaceAll(s, postgresRedacted(db.path), "$DB")
		return strings.ReplaceAll(s, db.dir, "$DIR")
	}
	run := func(db *cliDB, args ...string) cliResult {
		t.Helper()
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "$DIR", db.dir)
		}
		res := cliRun(t, nil, append(args, "--db", db.path)...)
		noPassword(t, strings.Join(args, " "), res.stdout+res.stderr)
		res.stdout, res.stderr = norm(db, res.stdout), norm(db, res.stderr)
		return res
	}
	same := func(a, b *cliDB, args ...string) {
		t.Helper()
		want := run(a, append([]string(nil), args...)...)
		got := run(b, append([]string(nil), args...)...)
		assert.Equal(t, want.code, got.code, "exit code of %v (stderr %s)", args, got.stderr)
		assert.Equal(t, want.stdout, got.stdout, "stdout of %v", args)
		assert.Equal(t, want.stderr, got.stderr, "stderr of %v", args)
	}
	for _, args := range [][]string{
		{"ls"}, {"ls", "--json"}, {"ls", "--resumable"}, {"ls", "wf-alpha"}, {"ls", "wf-alpha", "--namespace", "sub", "--json"},
		{"ls", "nope"},
		{"show", "a-3"}, {"show", "a-3", "--json"}, {"show", "b-2"}, {"show", "b-1", "--state", "-o", "$DIR/state.bin"},
		{"show", "nope"},
		{"plan", "wf-alpha"}, {"plan", "wf-beta", "--json"}, {"plan", "wf-done"},
		{"drift", "wf-alpha"},
		{"export", "wf-alpha", "-o", "$DIR/wf-alpha.ckpt"},
	} {
		same(sq, pg, args...)
	}
	for _, args := range [][]string{
		{"threads"}, {"threads", "--json"}, {"threads", "support-42"}, {"threads", "support-42", "--checkpoint", "latest", "--values"},
		{"export", "--thread", "support-42", "-o", "$DIR/t.ckpt"},
	} {
		same(sqLG, pgLG, args...)
	}
	a, err := os.ReadFile(filepath.Join(sq.dir, "state.bin"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(pg.dir, "state.bin"))
	require.NoError(t, err)
	assert.Equal(t, a, b)

	// an archive moves between the backends both ways, and imports the same
	sqArchive, pgArchive := filepath.Join(sq.dir, "wf-alpha.ckpt"), filepath.Join(pg.dir, "wf-alpha.ckpt")
	toPG, toSQ := newPGCLIDB(t, nil), newCLIDB(t, nil)
	toPG.close()
	toSQ.close()
	for _, c := range []struct {
		db      *cliDB
		archive string
	}{{toPG, sqArchive}, {toSQ, pgArchive}} {
		res := run(c.db, "import", c.archive)
		require.Equal(t, exitOK, res.code, res.stderr)
		res = run(c.db, "import", c.archive, "--json")
		require.Equal(t, exitOK, res.code, res.stderr)
		assert.Contains(t, res.stdout, `"skipped": 4`)
	}
	same(toSQ, toPG, "ls", "wf-alpha", "--json")
	same(toSQ, toPG, "show", "a-3", "--json")

	// verify: the same findings, each backend's own integrity check
	for _, db := range []*cliDB{sq, pg} {
		res := run(db, "verify", "--json", "--quiet")
		require.Equal(t, exitOK, res.code, res.stderr)
		var rep verifyReport
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep))
		assert.True(t, rep.OK)
		assert.Equal(t, 7, rep.Checkpoints)
		assert.Equal(t, 6, rep.States)
	}
	assert.Equal(t, "ok: 7 checkpoints, 6 states (625 B stored), PostgreSQL integrity ok\n", run(pg, "verify", "--quiet").stdout)

	// stats: the same counts; PostgreSQL's figures instead of file, WAL and free pages
	var sqStats, pgStats statsReport
	for _, x := range []struct {
		db  *cliDB
		out *statsReport
	}{{sq, &sqStats}, {pg, &pgStats}} {
		res := run(x.db, "stats", "--json")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.NoError(t, json.Unmarshal([]byte(res.stdout), x.out))
	}
	assert.Equal(t, "$DB", pgStats.DB.Path)
	pgStats.DB.Path, sqStats.DB.Path = "", ""
	assert.Positive(t, pgStats.DB.SizeBytes)
	pgStats.DB.SizeBytes, sqStats.DB.SizeBytes, sqStats.DB.WALBytes, sqStats.FreeBytes = 0, 0, 0, 0
	assert.Equal(t, sqStats, pgStats)
	text := run(pg, "stats").stdout
	assert.Regexp(t, `(?m)^size +\S+ \S+ \(databaseBytes \S+ \S+, ckptdBytes \S+ \S+, deadRows \d+, connections \d+\)$`, text)

	// the mutating commands (freed bytes are the backend's own: SQLite's free pages, the
	// bytes of the states PostgreSQL deleted)
	freed := regexp.MustCompile(`"freedBytes": \d+|freeing \S+ \S+`)
	for _, args := range [][]string{{"prune", "--keep-last", "1", "--dry-run", "--json"}, {"prune", "--keep-last", "1"}} {
		want, got := run(sq, append([]string(nil), args...)...), run(pg, append([]string(nil), args...)...)
		assert.Equal(t, want.code, got.code)
		assert.Equal(t, freed.ReplaceAllString(want.stdout, "(freed)"), freed.ReplaceAllString(got.stdout, "(freed)"), "%v", args)
		assert.Contains(t, got.stdout, "68", "%v: the states of a-1 (62 B) and b-1 (6 B)", args)
	}
	same(sq, pg, "rm", "b-1")
	same(sq, pg, "rm", "--workflow", "wf-done")
	same(sq, pg, "ls", "--json")
	same(sqLG, pgLG, "rm", "--thread", "triage-7")
	same(sqLG, pgLG, "threads", "--json")

	// an inspection command on a database without checkpoints sets nothing up
	empty := pgURL(t)
	res := cliRun(t, nil, "ls", "--db", empty)
	assert.Equal(t, exitProblem, res.code)
	assert.Contains(t, res.stderr, "no ckptd schema in this database")
	noPassword(t, "ls on an empty database", res.stderr)
}

func postgresRedacted(u string) string {
	if !isURL(u) {
		return u
	}
	return displayDB(u)
}

// TestPostgresDaemon: the sidecar on PostgreSQL, from --db and from CKPTD_DB (then no URL is
// on its command line): the protocol is unchanged, and the password is in no reply or log.
func TestPostgresDaemon(t *testing.T) {
	u := pgURL(t)
	a := startDaemon(t, u, "--log-level", "debug")
	var init protocol.InitializeResult
	a.call("initialize", map[string]any{"clientName": "t"}, nil, &init)
	assert.Equal(t, postgresRedacted(u), init.DBPath)
	noPassword(t, "initialize", init.DBPath)
	var saved protocol.SaveResult
	a.call("checkpoint/save", map[string]any{"workflowId": "wf", "step": 1, "state": map[string]any{"x": 1}}, nil, &saved)
	assert.EqualValues(t, 1, saved.Seq)

	cmd := exec.Command(binPath, "--log-level", "debug")
	cmd.Env = append(os.Environ(), "CKPTD_DB="+u)
	b := startDaemonCmd(t, cmd)
	for _, arg := range cmd.Args {
		assert.NotContains(t, arg, "postgres://")
	}
	var loaded struct {
		CheckpointID string          `json:"checkpointId"`
		State        json.RawMessage `json:"state"`
	}
	b.call("checkpoint/load", map[string]any{"workflowId": "wf"}, nil, &loaded)
	assert.Equal(t, saved.CheckpointID, loaded.CheckpointID)
	assert.JSONEq(t, `{"x":1}`, string(loaded.State))
	var plan map[string]any
	b.call("resume/plan", map[string]any{"workflowId": "wf"}, nil, &plan)
	assert.Equal(t, saved.CheckpointID, plan["checkpointId"])
	var stats protocol.StatsResult
	b.call("stats", map[string]any{}, nil, &stats)
	assert.Equal(t, postgresRedacted(u), stats.DB.Path)
	assert.Equal(t, 1, stats.DB.Checkpoints)
	assert.Equal(t, "on", stats.DB.Pragmas["synchronous_commit"])
	raw, _ := json.Marshal(stats)
	noPassword(t, "stats", string(raw))
	for _, d := range []*daemon{a, b} {
		d.call("shutdown", nil, nil, nil)
		require.NoError(t, waitExit(d.cmd, 10*time.Second))
		noPassword(t, "the daemon's log", d.stderrText())
		assert.Contains(t, d.stderrText(), "xxxxx", "the log names the database, redacted")
	}

	// a server that cannot be reached: the daemon exits with an error naming it, redacted
	bad, err := url.Parse(u)
	require.NoError(t, err)
	bad.RawQuery = url.Values{"host": {t.TempDir()}, "connect_timeout": {"1"}}.Encode()
	res := cliRun(t, nil, "serve", "--db", bad.String())
	assert.Equal(t, exitProblem, res.code)
	noPassword(t, "the error", res.stderr)
	assert.Contains(t, res.stderr, "xxxxx")
}

// TestPostgresNotifications: a client opted in to checkpoint/saved and checkpoint/pruned hears
// those of another ckptd process on the same database (LISTEN/NOTIFY), in the same shape as
// its own.
func TestPostgresNotifications(t *testing.T) {
	u := pgURL(t)
	listener := &noteDaemon{daemon: startDaemon(t, u)}
	listener.call("initialize", map[string]any{"events": []string{"checkpoint/saved", "checkpoint/pruned"}}, nil)
	writer := startDaemon(t, u, "--keep-last", "1")
	var ids []string
	for i := range 2 {
		var r protocol.SaveResult
		writer.call("checkpoint/save", map[string]any{"workflowId": "wf", "namespace": "n", "step": i, "phase": "before_step", "state": i}, nil, &r)
		ids = append(ids, r.CheckpointID)
	}
	deadline := time.Now().Add(10 * time.Second)
	var saved []protocol.SavedEvent
	var pruned []protocol.PrunedEvent
	for time.Now().Before(deadline) && (len(saved) < 2 || len(pruned) < 1) {
		listener.call("workflow/list", map[string]any{}, nil) // reads notifications meanwhile
		saved, pruned = nil, nil
		for _, m := range listener.notes {
			switch m.Method {
			case protocol.NotifySaved:
				var e protocol.SavedEvent
				require.NoError(t, json.Unmarshal(m.Params, &e))
				saved = append(saved, e)
			case protocol.NotifyPruned:
				var e protocol.PrunedEvent
				require.NoError(t, json.Unmarshal(m.Params, &e))
				pruned = append(pruned, e)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Len(t, saved, 2)
	require.Len(t, pruned, 1)
	for i, e := range saved {
		assert.Equal(t, protocol.SavedEvent{CheckpointID: ids[i], WorkflowID: "wf", Namespace: "n", Seq: int64(i + 1),
			Phase: "before_step", Step: int64(i)}, e)
	}
	assert.Equal(t, protocol.PrunedEvent{WorkflowID: "wf", CheckpointIDs: ids[:1], Reason: "retention"}, pruned[0])
}

// TestPostgresCrashKillLoop: three daemons stream saves into one PostgreSQL database and are
// SIGKILLed at random moments; after every round each acknowledged save loads intact, seqs are
// unique and follow the order the saves were sent, and every state is counted exactly.
// CKPTD_PG_CRASH_KILLS sets the number of kills (default 100 under CI=true, else 15),
// CKPTD_CRASH_SEED the seed.
func TestPostgresCrashKillLoop(t *testing.T) {
	def := 15
	if os.Getenv("CI") == "true" {
		def = 100
	}
	kills := envInt("CKPTD_PG_CRASH_KILLS", def)
	if testing.Short() {
		kills = 3
	}
	u := pgURL(t)
	const writers = 3
	seed := int64(envInt("CKPTD_CRASH_SEED", 20261122))
	res := crashLoop(t, u, writers, kills, seed)
	t.Logf("PostgreSQL, seed %d: %d kills (%d writers at once), %d saves sent, %d acknowledged, %d verified, 0 lost or altered, %s",
		seed, res.kills, writers, res.sent, res.acked, res.acked, res.elapsed.Round(time.Second))
	checkPGCounts(t, u)
}

// checkPGCounts checks the reference counts and seq uniqueness of a PostgreSQL database.
func checkPGCounts(t *testing.T, u string) {
	t.Helper()
	c := pgConn(t, u)
	ctx := context.Background()
	for _, q := range []struct{ what, sql string }{
		{"duplicate seqs", `SELECT count(*) FROM (SELECT workflow_id, seq FROM checkpoints GROUP BY 1, 2 HAVING count(*) > 1) d`},
		{"states counted wrong", `SELECT count(*) FROM states s WHERE s.refs <> (SELECT count(*) FROM checkpoints c WHERE c.state_hash = s.hash)`},
		{"checkpoints without state", `SELECT count(*) FROM checkpoints c WHERE c.state_hash IS NOT NULL AND NOT EXISTS (SELECT 1 FROM states s WHERE s.hash = c.state_hash)`},
	} {
		var n int
		require.NoError(t, c.QueryRow(ctx, q.sql).Scan(&n))
		require.Zero(t, n, q.what)
	}
}

type crashResult struct {
	kills, sent, acked int
	elapsed            time.Duration
}

// crashLoop runs rounds of `writers` daemons saving to db at once (to shared workflows),
// SIGKILLed at random moments, until kills daemons were killed; after every round, and at the
// end, it checks every acknowledged save.
func crashLoop(t *testing.T, db string, writers, kills int, seed int64) crashResult {
	t.Helper()
	start := time.Now()
	rng := rand.New(rand.NewSource(seed))
	var all [][]ack // per writer
	all = make([][]ack, writers)
	res := crashResult{}
	for round := 0; res.kills < kills; round++ {
		seeds := make([]int64, writers)
		for w := range seeds {
			seeds[w] = rng.Int63()
		}
		acked := make([][]ack, writers)
		sent := make([]int, writers)
		var wg sync.WaitGroup
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acked[w], sent[w] = saveUntilKilled(t, db, rand.New(rand.NewSource(seeds[w])), round, true)
			}()
		}
		wg.Wait()
		res.kills += writers
		var round []ack
		for w := range acked {
			res.sent += sent[w]
			res.acked += len(acked[w])
			all[w] = append(all[w], acked[w]...)
			round = append(round, acked[w]...)
		}
		verifyAckedPG(t, db, round, acked)
	}
	var every []ack
	for _, a := range all {
		every = append(every, a...)
	}
	verifyAckedPG(t, db, every, all)
	res.elapsed = time.Since(start)
	return res
}

// verifyAckedPG loads every acknowledged save through a new daemon, then checks that each
// writer's seqs of a workflow increase in the order it sent the saves.
func verifyAckedPG(t *testing.T, db string, acked []ack, byWriter [][]ack) {
	t.Helper()
	d := startDaemon(t, db, "--keep-last", "0")
	for _, a := range acked {
		id := d.send("checkpoint/load", map[string]any{"checkpointId": a.checkpointID, "attachment": true}, nil)
		m := d.response()
		require.Equal(t, strconv.Itoa(id), string(m.ID))
		require.Nil(t, m.Error, "acknowledged checkpoint %s lost or corrupt: %+v", a.checkpointID, m.Error)
		require.Equal(t, a.sha, sha(m.Attachment), "checkpoint %s changed", a.checkpointID)
	}
	_ = d.stdin.Close()
	require.NoError(t, waitExit(d.cmd, 20*time.Second))
	for w, acks := range byWriter {
		sorted := append([]ack(nil), acks...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].order < sorted[j].order })
		seen := map[string]int64{}
		for _, a := range sorted {
			require.Greater(t, a.seq, seen[a.workflow], "writer %d: seq not increasing in %s", w, a.workflow)
			seen[a.workflow] = a.seq
		}
	}
	checkPGCounts(t, db)
}

// pgConn is a connection of the test's own to the ckptd schema of u.
func pgConn(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(u)
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = postgres.DefaultSchema
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
