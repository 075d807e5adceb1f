package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
	"github.com/ckptd/ckptd/store/sqlite"
)

// lgPut stores a LangGraph checkpoint through the daemon: blobs maps channel -> value (JSON),
// every channel at version.
func (d *daemon) lgPut(thread, id, parent string, version int, blobs map[string]string) {
	d.t.Helper()
	cp := fmt.Sprintf(`{"id":%q,"v":%d}`, id, version)
	att := []byte(cp)
	versions := map[string]any{}
	var bl []map[string]any
	chans := make([]string, 0, len(blobs))
	for ch := range blobs {
		chans = append(chans, ch)
	}
	sort.Strings(chans)
	for _, ch := range chans {
		versions[ch] = version
		bl = append(bl, map[string]any{"channel": ch, "version": version, "type": "json", "offset": len(att), "length": len(blobs[ch])})
		att = append(att, blobs[ch]...)
	}
	params := map[string]any{"threadId": thread, "checkpointId": id, "checkpoint": map[string]any{"type": "json", "offset": 0, "length": len(cp)},
		"channelVersions": versions, "blobs": bl, "metadata": map[string]any{"step": version}}
	if parent != "" {
		params["parentId"] = parent
	}
	d.call("lg/put", params, att, nil)
}

// recoverFixture builds, through the daemon, a database holding workflows (one with a source
// manifest, one with states on pages of their own, one whose checkpoint rows fill several
// pages) and two LangGraph threads, and returns its path.
func recoverFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "c.db")
	src := sourceTree(t, filepath.Join(dir, "src"), 5)
	d := startDaemon(t, path, "--keep-last", "0")
	d.call("workflow/configure", map[string]any{"workflowId": "wf-conf", "retention": map[string]any{"keepLast": 7}}, nil, nil)
	d.call("checkpoint/save", map[string]any{"workflowId": "wf-conf", "step": 0, "state": map[string]any{"conf": 1},
		"sources": map[string]any{"root": src}}, nil, nil)
	for i := 0; i < 12; i++ {
		marker := fmt.Sprintf("PAGE-%02d-MARKER", i)
		d.saveState("wf-pages", i, markedState(marker, 3000))
	}
	w := testgen.NewWorkload(7, 40<<10) // states stored as shared chunks
	for i := 0; i < 3; i++ {
		d.saveState("wf-chunks", i, w.State())
		w.Advance()
	}
	for i := 0; i < 60; i++ { // rows of ~300 bytes: the checkpoints table spans pages
		d.call("checkpoint/save", map[string]any{"workflowId": "wf-rows", "step": i,
			"stepName": fmt.Sprintf("ROWNAME-%02d-", i) + strings.Repeat("r", 250), "state": map[string]any{"i": i}}, nil, nil)
	}
	for i := 1; i <= 3; i++ {
		d.lgPut("thread-a", fmt.Sprintf("1f0-%d", i), map[bool]string{true: fmt.Sprintf("1f0-%d", i-1)}[i > 1], i,
			map[string]string{"messages": fmt.Sprintf(`["LGVALUE-A-%d-%s"]`, i, strings.Repeat("m", 3000))})
	}
	d.lgPut("thread-b", "1f0-1", "", 1, map[string]string{"x": `"b"`})
	// a branch replayed from 1f0-1 that makes version 1 again with other bytes: a second variant
	d.lgPut("thread-b", "1f0-2", "", 1, map[string]string{"x": `"b, replayed"`})
	// a saga: a validated checkpoint, compensations registered after each step, a rollback to
	// the first step begun and one compensation of it run
	var cp0, cp1 struct{ CheckpointID string }
	d.call("checkpoint/save", map[string]any{"workflowId": "wf-saga", "step": 0, "stepName": "charge", "state": map[string]any{"s": 0},
		"validation": map[string]any{"confidence": 0.9, "message": "looks right"}}, nil, &cp0)
	d.call("compensation/register", map[string]any{"workflowId": "wf-saga", "checkpointId": cp0.CheckpointID, "stepName": "charge",
		"action": map[string]any{"refund": 10}, "description": "refund the charge"}, nil, nil)
	d.call("checkpoint/save", map[string]any{"workflowId": "wf-saga", "step": 1, "stepName": "ship", "state": map[string]any{"s": 1}}, nil, &cp1)
	for _, step := range []string{"ship", "email"} {
		d.call("compensation/register", map[string]any{"workflowId": "wf-saga", "checkpointId": cp1.CheckpointID, "stepName": step,
			"action": map[string]any{"undo": step}, "description": "undo " + step}, nil, nil)
	}
	var plan struct {
		RollbackID string
		Actions    []struct{ CompensationID string }
	}
	d.call("rollback/plan", map[string]any{"workflowId": "wf-saga", "toCheckpointId": cp0.CheckpointID}, nil, &plan)
	require.NotEmpty(t, plan.Actions)
	d.call("compensation/done", map[string]any{"compensationId": plan.Actions[0].CompensationID, "rollbackId": plan.RollbackID, "ok": true}, nil, nil)
	d.shutdownWait()
	return path
}

// sagaOf reads wf-saga's compensations and newest rollback from path.
func sagaOf(t *testing.T, path string) ([]store.Compensation, *store.Rollback) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.OpenReadOnly(ctx, store.Options{Path: path})
	require.NoError(t, err)
	defer st.Close()
	comps, err := st.Compensations(ctx, "wf-saga", "", 0, 0)
	require.NoError(t, err)
	rb, err := st.LatestRollback(ctx, "wf-saga", "")
	require.NoError(t, err)
	return comps, rb
}

// exported reads every workflow's checkpoints and every thread's rows from path, verified.
func exported(t *testing.T, path string) (map[string]store.Checkpoint, map[string][]store.LGRecord) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.OpenReadOnly(ctx, store.Options{Path: path})
	require.NoError(t, err)
	defer st.Close()
	cps := map[string]store.Checkpoint{}
	wfs, err := store.AllWorkflows(ctx, st, false)
	require.NoError(t, err)
	for _, w := range wfs {
		require.NoError(t, st.Export(ctx, w.WorkflowID, func(store.WorkflowRecord, int) error { return nil },
			func(cp store.Checkpoint) error { cps[cp.CheckpointID] = cp; return nil }))
	}
	threads := map[string][]store.LGRecord{}
	ths, err := st.LGThreads(ctx)
	require.NoError(t, err)
	for _, th := range ths {
		require.NoError(t, st.LGExport(ctx, th.ThreadID, func(store.LGThreadCounts) error { return nil },
			func(r store.LGRecord) error { threads[th.ThreadID] = append(threads[th.ThreadID], r); return nil }))
	}
	return cps, threads
}

func recoverJSON(t *testing.T, broken, out string) (cliResult, recoverReport) {
	t.Helper()
	res := cliRun(t, nil, "recover", "--db", broken, "-o", out, "--json")
	var rep recoverReport
	if res.code != exitUsage {
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep), "stdout: %s\nstderr: %s", res.stdout, res.stderr)
	}
	return res, rep
}

// TestRecover (#19 point 9): ckptd recover copies every checkpoint, workflow configuration,
// source manifest and LangGraph row that still verifies out of a database with wrecked pages
// into a new one, byte for byte with ids, seqs and times, names each thing it could not save,
// and exits 1 when something was lost, 0 when nothing was.
func TestRecover(t *testing.T) {
	fixture := recoverFixture(t)
	wantCPs, wantThreads := exported(t, fixture)
	require.Len(t, wantThreads, 2)
	variants := 0
	for _, r := range wantThreads["thread-b"] {
		if r.Kind == store.LGKindValue && r.Variant == 1 || r.Kind == store.LGKindCheckpoint && r.ValueRefs["x"] == 1 {
			variants++
		}
	}
	require.Equal(t, 2, variants, "the fixture holds a second variant and a checkpoint reading it")

	t.Run("intact", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "new.db")
		res, rep := recoverJSON(t, fixture, out)
		require.Equal(t, exitOK, res.code, res.stderr)
		assert.Empty(t, rep.Lost)
		assert.Equal(t, recoverCount{Found: len(wantCPs), Recovered: len(wantCPs)}, rep.Checkpoints)
		assert.Equal(t, recoverCount{Found: 1, Recovered: 1}, rep.Manifests)
		assert.Equal(t, recoverCount{Found: 2, Recovered: 2}, rep.Threads)
		gotCPs, gotThreads := exported(t, out)
		assertSameCheckpoints(t, wantCPs, gotCPs, nil)
		assert.Equal(t, wantThreads, gotThreads)
		// the saga records came along as they were: ids, order, statuses, the unfinished rollback
		wantComps, wantRB := sagaOf(t, fixture)
		require.Len(t, wantComps, 3)
		require.NotNil(t, wantRB)
		gotComps, gotRB := sagaOf(t, out)
		assert.Equal(t, wantComps, gotComps)
		assert.Equal(t, wantRB, gotRB)
		assert.Equal(t, recoverCount{Found: 3, Recovered: 3}, rep.Compensations)
		assert.Equal(t, recoverCount{Found: 1, Recovered: 1}, rep.Rollbacks)
		// the configuration came along
		res = cliRun(t, nil, "ls", "--db", out, "--json")
		require.Equal(t, exitOK, res.code, res.stderr)
		// and the human report says nothing was lost
		res = cliRun(t, nil, "recover", "--db", fixture, "-o", filepath.Join(t.TempDir(), "again.db"))
		require.Equal(t, exitOK, res.code, res.stderr)
		assert.Contains(t, res.stdout, "nothing lost")
		st, err := sqlite.OpenReadOnly(context.Background(), store.Options{Path: out})
		require.NoError(t, err)
		r, err := st.Configure(context.Background(), "wf-conf", nil)
		require.NoError(t, err)
		assert.Equal(t, 7, r.KeepLast)
		require.NoError(t, st.Close())
	})

	t.Run("wrecked pages", func(t *testing.T) {
		dir := t.TempDir()
		broken := filepath.Join(dir, "broken.db")
		copyFile(t, fixture, broken)
		wreckPage(t, broken, "PAGE-05-MARKER", 1)                     // a state
		wreckPage(t, broken, "ROWNAME-30-", 2)                        // checkpoint rows (named by the indexes)
		wreckPage(t, broken, "LGVALUE-A-2-", 3)                       // a channel value of thread-a's second checkpoint
		wreckChunk(t, broken, firstChunk(t, wantCPs, "wf-chunks"), 4) // a chunk every wf-chunks state lists
		before, err := os.ReadFile(broken)
		require.NoError(t, err)

		out := filepath.Join(dir, "new.db")
		res, rep := recoverJSON(t, broken, out)
		require.Equal(t, exitProblem, res.code, "something was lost: exit 1; stderr: %s", res.stderr)
		after, err := os.ReadFile(broken)
		require.NoError(t, err)
		require.Equal(t, before, after, "recover wrote to the damaged database")

		lost := map[string]bool{}
		for _, l := range rep.Lost {
			lost[l.Kind+" "+l.ID] = true
			assert.NotEmpty(t, l.Reason)
		}
		// the wrecked state's checkpoint, named
		pageID := ""
		for id, cp := range wantCPs {
			if strings.Contains(string(cp.State), "PAGE-05-MARKER") {
				pageID = id
			}
		}
		assert.True(t, lost["checkpoint "+pageID], "the checkpoint whose state page was wrecked is listed: %+v", rep.Lost)
		// the checkpoints whose rows sat on the wrecked page, named by id
		rowLost := 0
		for id, cp := range wantCPs {
			if cp.WorkflowID == "wf-rows" && lost["checkpoint "+id] {
				rowLost++
			}
		}
		assert.Positive(t, rowLost, "checkpoints on the wrecked rows page are named: %+v", rep.Lost)
		// the chunked states listing the wrecked chunk, named
		chunkLost := 0
		for id, cp := range wantCPs {
			if cp.WorkflowID == "wf-chunks" {
				assert.True(t, lost["checkpoint "+id], "checkpoint %s lists the wrecked chunk: %+v", id, rep.Lost)
				chunkLost++
			}
		}
		require.Equal(t, 3, chunkLost)
		// thread-a's checkpoint whose value is gone, and the value
		assert.True(t, lost["thread checkpoint 1f0-2"], "%+v", rep.Lost)

		gotCPs, gotThreads := exported(t, out)
		assertSameCheckpoints(t, wantCPs, gotCPs, lost)
		assert.Equal(t, len(wantCPs)-1-rowLost-chunkLost, len(gotCPs), "every checkpoint not listed as lost was recovered")
		assert.Equal(t, rep.Checkpoints.Recovered, len(gotCPs))
		assert.Equal(t, wantThreads["thread-b"], gotThreads["thread-b"])
		var ids []string
		for _, r := range gotThreads["thread-a"] {
			if r.Kind == store.LGKindCheckpoint {
				ids = append(ids, r.CheckpointID)
			}
		}
		assert.Equal(t, []string{"1f0-1", "1f0-3"}, ids)

		// the new database serves: the manifest drives drift, saves work
		res = cliRun(t, nil, "drift", "wf-conf", "--db", out)
		assert.Equal(t, exitOK, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
		res = cliRun(t, nil, "verify", "--db", out)
		assert.Equal(t, exitOK, res.code, res.stdout+res.stderr)
		d := startDaemon(t, out)
		d.saveState("wf-pages", 99, []byte(`{"after":"recovery"}`))
		d.shutdownWait()

		// the human report names what was lost
		res = cliRun(t, nil, "recover", "--db", broken, "-o", filepath.Join(dir, "again.db"))
		assert.Equal(t, exitProblem, res.code)
		assert.Contains(t, res.stdout, "could not save")
		assert.Contains(t, res.stdout, pageID)
		// the README's example is this report (its paths and the lost checkpoint's id as printed there)
		for _, ex := range readmeExamples(t, "Inspecting checkpoints") {
			if !strings.HasPrefix(ex.cmd, "ckptd recover ") {
				continue
			}
			lost := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`).FindString(strings.Join(ex.out, "\n"))
			printed := strings.NewReplacer(broken, "/home/me/broken.db", filepath.Join(dir, "again.db"), "/home/me/new.db",
				pageID, lost).Replace(res.stdout)
			requireShownLines(t, ex.cmd, ex.out, printed)
		}
	})

	t.Run("usage", func(t *testing.T) {
		dir := t.TempDir()
		exists := filepath.Join(dir, "exists.db")
		copyFile(t, fixture, exists)
		res := cliRun(t, nil, "recover", "--db", fixture, "-o", exists)
		assert.Equal(t, exitUsage, res.code)
		assert.Contains(t, res.stderr, "already exists")
		res = cliRun(t, nil, "recover", "--db", fixture)
		assert.Equal(t, exitUsage, res.code)
		// a SQLite-file tool: a PostgreSQL URL on either side is refused, saying what to use
		res = cliRun(t, nil, "recover", "--db", "postgres://u:secret@localhost/db", "-o", filepath.Join(dir, "p.db"))
		assert.Equal(t, exitUsage, res.code)
		assert.Contains(t, res.stderr, "is a PostgreSQL database: ckptd recover reads a damaged SQLite file")
		assert.Contains(t, res.stderr, "pg_amcheck")
		assert.NotContains(t, res.stderr, "secret")
		res = cliRun(t, nil, "recover", "--db", fixture, "-o", "postgresql://localhost/db")
		assert.Equal(t, exitUsage, res.code)
		assert.Contains(t, res.stderr, "new SQLite file")
		assert.NoFileExists(t, filepath.Join(dir, "p.db"))
		res = cliRun(t, nil, "recover", "--db", filepath.Join(dir, "none.db"), "-o", filepath.Join(dir, "n.db"))
		assert.Equal(t, exitProblem, res.code)
		assert.Contains(t, res.stderr, "no database at")
		assert.NoFileExists(t, filepath.Join(dir, "n.db"))
		notDB := filepath.Join(dir, "text.db")
		require.NoError(t, os.WriteFile(notDB, []byte(strings.Repeat("not a database\n", 400)), 0o600))
		res = cliRun(t, nil, "recover", "--db", notDB, "-o", filepath.Join(dir, "n2.db"))
		assert.Equal(t, exitProblem, res.code)
		assert.Contains(t, res.stderr, "not a SQLite database")
	})
}

// firstChunk returns the address of the first chunk of the state of wf's first checkpoint (in
// want): with states that grow at their end, every state of wf lists it.
func firstChunk(t *testing.T, want map[string]store.Checkpoint, wf string) chunk.Address {
	t.Helper()
	for _, cp := range want {
		if cp.WorkflowID == wf && cp.Seq == 1 {
			require.False(t, chunk.Inline(len(cp.State)), "the state is stored as chunks")
			_, cs := chunk.Split(cp.State)
			return cs[0].Addr
		}
	}
	t.Fatalf("no first checkpoint of %s", wf)
	return chunk.Address{}
}

// wreckChunk overwrites the database page holding the stored bytes of the chunk at addr.
func wreckChunk(t *testing.T, path string, addr chunk.Address, seed int64) {
	t.Helper()
	conn, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	var data []byte
	// its own row's bytes, or its bytes in its pack
	require.NoError(t, conn.QueryRow(`SELECT CASE WHEN c.pack IS NULL THEN c.data ELSE substr(p.data, c.pack_off + 1, c.pack_len) END
		FROM chunks c LEFT JOIN packs p ON p.id = c.pack WHERE c.id = (SELECT id FROM chunk_addrs WHERE address = ?)`, addr[:]).Scan(&data))
	require.NoError(t, conn.Close())
	require.Greater(t, len(data), 64)
	wreckPage(t, path, string(data[:64]), seed)
}

// assertSameCheckpoints: every checkpoint of got is want's, byte for byte, and every one of
// want not in lost is in got.
func assertSameCheckpoints(t *testing.T, want, got map[string]store.Checkpoint, lost map[string]bool) {
	t.Helper()
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			assert.True(t, lost["checkpoint "+id], "checkpoint %s neither recovered nor listed as lost", id)
			continue
		}
		ws, gs := w.Summary, g.Summary
		if !chunk.Inline(int(ws.SizeBytes)) {
			// a chunked state's storedBytes is what its save added: the chunks it was the first
			// to store, which depends on the order the states reached the database
			ws.StoredBytes, gs.StoredBytes = 0, 0
		}
		assert.Equal(t, ws, gs, id)
		assert.Equal(t, w.State, g.State, id)
		assert.Equal(t, w.Manifest != nil, g.Manifest != nil, id)
		if w.Manifest != nil && g.Manifest != nil {
			assert.Equal(t, *w.Manifest, *g.Manifest, id)
		}
	}
	for id := range got {
		_, ok := want[id]
		assert.True(t, ok, "checkpoint %s came from nowhere", id)
	}
}
