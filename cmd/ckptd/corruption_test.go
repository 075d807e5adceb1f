package main

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// markedState is a JSON state of exactly n bytes (n < 4096: stored uncompressed) that starts with
// marker, so that its bytes can be found in the database file.
func markedState(marker string, n int) []byte {
	head := `{"marker":"` + marker + `","pad":"`
	pad := n - len(head) - 2
	var b strings.Builder
	b.WriteString(head)
	for i := 0; b.Len() < len(head)+pad; i++ {
		b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[(i*7+i/36)%36])
	}
	b.WriteString(`"}`)
	return []byte(b.String())
}

// collect sends a request and reads frames up to its response, returning the notifications
// that came before it. ckptd sends the checkpoint/corrupted notifications of a load before its
// response.
func (d *daemon) collect(method string, params any) (msg, []msg) {
	d.t.Helper()
	id := d.send(method, params, nil)
	var notes []msg
	for {
		m := d.read()
		if m.Method != "" {
			notes = append(notes, m)
			continue
		}
		require.Equal(d.t, fmt.Sprint(id), string(m.ID))
		return m, notes
	}
}

type corruptData struct {
	CheckpointID string `json:"checkpointId"`
	Reason       string `json:"reason"`
}

type corruptedEvent struct {
	CheckpointID string `json:"checkpointId"`
	WorkflowID   string `json:"workflowId"`
	Reason       string `json:"reason"`
}

func corruptedEvents(t *testing.T, notes []msg) []corruptedEvent {
	t.Helper()
	var out []corruptedEvent
	for _, n := range notes {
		require.Equal(t, "checkpoint/corrupted", n.Method)
		var ev corruptedEvent
		require.NoError(t, json.Unmarshal(n.Params, &ev))
		out = append(out, ev)
	}
	return out
}

// saveState saves state (inline JSON) and returns the checkpoint id.
func (d *daemon) saveState(workflow string, step int, state []byte) string {
	d.t.Helper()
	var r struct {
		CheckpointID string `json:"checkpointId"`
		SHA256       string `json:"sha256"`
	}
	d.call("checkpoint/save", map[string]any{"workflowId": workflow, "step": step, "state": json.RawMessage(state)}, nil, &r)
	require.Equal(d.t, sha(state), r.SHA256)
	return r.CheckpointID
}

func (d *daemon) shutdownWait() {
	d.t.Helper()
	d.call("shutdown", nil, nil, nil)
	require.NoError(d.t, waitExit(d.cmd, 20*time.Second))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
}

// flipMiddle returns b with a few bytes in its middle inverted.
func flipMiddle(b []byte) []byte {
	out := bytes.Clone(b)
	for i := len(out)/2 - 2; i < len(out)/2+2; i++ {
		out[i] ^= 0xff
	}
	return out
}

// TestCorruptionDetected damages stored states, in their rows and in the database file's pages,
// and checks what the daemon reports: -32002 {checkpointId, reason} for an explicit load, a
// checkpoint/corrupted notification, a latest-load that falls back to the newest intact
// checkpoint with recoveredFrom, and resume/plan's corrupt problems.
func TestCorruptionDetected(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "c.db")
	d := startDaemon(t, db, "--keep-last", "0")
	rowsStates := [][]byte{
		markedState("ROWS-C1", 3000),
		checkpointState(20000, 2),    // zstd
		checkpointState(20000, 3),    // zstd: corrupted below
		markedState("ROWS-C4", 3000), // raw: corrupted below
	}
	var rowIDs []string
	for i, st := range rowsStates {
		rowIDs = append(rowIDs, d.saveState("wf-rows", i, st))
	}
	pageStates := [][]byte{markedState("PAGES-P1-MARKER", 3000), markedState("PAGES-P2-MARKER", 3000)}
	var pageIDs []string
	for i, st := range pageStates {
		pageIDs = append(pageIDs, d.saveState("wf-pages", i, st))
	}
	d.shutdownWait()
	if fi, err := os.Stat(db + "-wal"); err == nil {
		require.Zero(t, fi.Size(), "a clean shutdown checkpoints the WAL into the database file")
	}
	pagesDB := filepath.Join(dir, "pages.db")
	copyFile(t, db, pagesDB)
	headerDB := filepath.Join(dir, "header.db")
	copyFile(t, db, headerDB)

	// --- rows: flip bytes of c3's compressed and c4's raw state through a separate connection
	raw, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	for _, st := range rowsStates[2:] {
		var data []byte
		var enc int
		h := shaBytes(st)
		require.NoError(t, raw.QueryRow(`SELECT data, encoding FROM states WHERE hash = ?`, h).Scan(&data, &enc))
		res, err := raw.Exec(`UPDATE states SET data = ? WHERE hash = ?`, flipMiddle(data), h)
		require.NoError(t, err)
		n, _ := res.RowsAffected()
		require.EqualValues(t, 1, n)
	}
	require.NoError(t, raw.Close())

	d = startDaemon(t, db, "--keep-last", "0")
	d.call("initialize", map[string]any{"clientName": "corruption", "events": []string{"checkpoint/corrupted"}}, nil, nil)

	// explicit load of a corrupt checkpoint: -32002 with data, one notification naming the workflow
	for i, id := range []string{rowIDs[3], rowIDs[2]} {
		m, notes := d.collect("checkpoint/load", map[string]any{"checkpointId": id})
		require.NotNil(t, m.Error, "load %s: %s", id, m.Result)
		assert.Equal(t, -32002, m.Error.Code)
		var data corruptData
		require.NoError(t, json.Unmarshal(m.Error.Data, &data), "data: %s", m.Error.Data)
		assert.Equal(t, id, data.CheckpointID)
		if i == 0 {
			assert.Equal(t, "state SHA-256 mismatch", data.Reason)
		} else {
			assert.NotEmpty(t, data.Reason)
		}
		evs := corruptedEvents(t, notes)
		require.Len(t, evs, 1)
		assert.Equal(t, corruptedEvent{CheckpointID: id, WorkflowID: "wf-rows", Reason: data.Reason}, evs[0])
	}
	// intact neighbours still load byte-exact
	for i := 0; i < 2; i++ {
		m := d.call("checkpoint/load", map[string]any{"checkpointId": rowIDs[i], "attachment": true}, nil, nil)
		assert.Equal(t, sha(rowsStates[i]), sha(m.Attachment))
	}

	// latest: falls back to c2, listing c4 and c3, with a notification for each
	m, notes := d.collect("checkpoint/load", map[string]any{"workflowId": "wf-rows", "attachment": true})
	require.Nil(t, m.Error)
	var lr struct {
		CheckpointID  string        `json:"checkpointId"`
		RecoveredFrom []corruptData `json:"recoveredFrom"`
	}
	require.NoError(t, json.Unmarshal(m.Result, &lr))
	assert.Equal(t, rowIDs[1], lr.CheckpointID)
	assert.Equal(t, sha(rowsStates[1]), sha(m.Attachment))
	require.Len(t, lr.RecoveredFrom, 2)
	assert.Equal(t, rowIDs[3], lr.RecoveredFrom[0].CheckpointID)
	assert.Equal(t, rowIDs[2], lr.RecoveredFrom[1].CheckpointID)
	evs := corruptedEvents(t, notes)
	require.Len(t, evs, 2)
	assert.Equal(t, rowIDs[3], evs[0].CheckpointID)
	assert.Equal(t, rowIDs[2], evs[1].CheckpointID)
	assert.Equal(t, "wf-rows", evs[0].WorkflowID)

	// resume/plan: corrupt problems; forced, it plans from c2 (completed 1 -> start at 2)
	m, _ = d.collect("resume/plan", map[string]any{"workflowId": "wf-rows"})
	require.NotNil(t, m.Error)
	assert.Equal(t, -32005, m.Error.Code)
	var pd struct {
		Problems []struct{ Code, CheckpointID string }
	}
	require.NoError(t, json.Unmarshal(m.Error.Data, &pd))
	var corruptIDs []string
	for _, p := range pd.Problems {
		if p.Code == "corrupt" {
			corruptIDs = append(corruptIDs, p.CheckpointID)
		}
	}
	assert.Equal(t, []string{rowIDs[3], rowIDs[2]}, corruptIDs, "problems: %+v", pd.Problems)
	m, _ = d.collect("resume/plan", map[string]any{"workflowId": "wf-rows", "checkpointId": rowIDs[3]})
	require.NotNil(t, m.Error)
	assert.Equal(t, -32005, m.Error.Code)
	assert.Contains(t, string(m.Error.Data), `"corrupt"`)
	m, _ = d.collect("resume/plan", map[string]any{"workflowId": "wf-rows", "force": true})
	require.Nil(t, m.Error)
	var plan struct {
		CheckpointID  string
		StartStep     int
		Warnings      []struct{ Code, CheckpointID string }
		RecoveredFrom []corruptData
	}
	require.NoError(t, json.Unmarshal(m.Result, &plan))
	assert.Equal(t, rowIDs[1], plan.CheckpointID)
	assert.Equal(t, 2, plan.StartStep)
	require.Len(t, plan.Warnings, 2)
	assert.Equal(t, "corrupt", plan.Warnings[0].Code)
	assert.Len(t, plan.RecoveredFrom, 2)

	// still listed, counted, and the daemon keeps saving
	var list struct{ Checkpoints []map[string]any }
	d.call("checkpoint/list", map[string]any{"workflowId": "wf-rows"}, nil, &list)
	assert.Len(t, list.Checkpoints, 4)
	var st struct {
		Counters struct{ IntegrityFailures int }
	}
	d.call("stats", nil, nil, &st)
	assert.GreaterOrEqual(t, st.Counters.IntegrityFailures, 6)
	next := markedState("ROWS-C5", 500)
	id5 := d.saveState("wf-rows", 4, next)
	m = d.call("checkpoint/load", map[string]any{"workflowId": "wf-rows", "attachment": true}, nil, nil)
	lr.RecoveredFrom = nil
	require.NoError(t, json.Unmarshal(m.Result, &lr))
	assert.Equal(t, id5, lr.CheckpointID)
	assert.Empty(t, lr.RecoveredFrom)
	d.shutdownWait()

	// --- pages: overwrite bytes in the middle of the state inside the file's page
	pageSize := dbPageSize(t, pagesDB)
	file, err := os.ReadFile(pagesDB)
	require.NoError(t, err)
	at := bytes.Index(file, []byte("PAGES-P2-MARKER"))
	require.Positive(t, at, "marker not found in the database file")
	victim := at + 1500
	require.Equal(t, at/pageSize, victim/pageSize, "the state spans pages")
	copy(file[victim:], "XXXX")
	require.NoError(t, os.WriteFile(pagesDB, file, 0o600))

	d = startDaemon(t, pagesDB, "--keep-last", "0")
	d.call("initialize", map[string]any{"events": []string{"checkpoint/corrupted"}}, nil, nil)
	m, notes = d.collect("checkpoint/load", map[string]any{"checkpointId": pageIDs[1]})
	require.NotNil(t, m.Error)
	assert.Equal(t, -32002, m.Error.Code)
	require.Len(t, corruptedEvents(t, notes), 1)
	m, notes = d.collect("checkpoint/load", map[string]any{"workflowId": "wf-pages"})
	require.Nil(t, m.Error)
	require.NoError(t, json.Unmarshal(m.Result, &lr))
	assert.Equal(t, pageIDs[0], lr.CheckpointID)
	require.Len(t, lr.RecoveredFrom, 1)
	assert.Equal(t, pageIDs[1], lr.RecoveredFrom[0].CheckpointID)
	assert.Len(t, corruptedEvents(t, notes), 1)
	m, _ = d.collect("resume/plan", map[string]any{"workflowId": "wf-pages"})
	require.NotNil(t, m.Error)
	assert.Equal(t, -32005, m.Error.Code)
	assert.Contains(t, string(m.Error.Data), `"corrupt"`)
	// the other workflow is unaffected
	m = d.call("checkpoint/load", map[string]any{"checkpointId": rowIDs[3], "attachment": true}, nil, nil)
	assert.Equal(t, sha(rowsStates[3]), sha(m.Attachment))
	d.shutdownWait()

	// --- page structure: wreck the b-tree header of the page holding p2's state. SQLite itself
	// now fails (SQLITE_CORRUPT) when it reads that page: still -32002 naming the checkpoint,
	// and the latest-load still falls back.
	file, err = os.ReadFile(headerDB)
	require.NoError(t, err)
	at = bytes.Index(file, []byte("PAGES-P2-MARKER"))
	require.Positive(t, at)
	pageStart := at / pageSize * pageSize
	require.NotZero(t, pageStart, "the state is on page 1")
	file[pageStart] = 0x6b // not a b-tree page type
	require.NoError(t, os.WriteFile(headerDB, file, 0o600))
	d = startDaemon(t, headerDB, "--keep-last", "0")
	d.call("initialize", map[string]any{"events": []string{"checkpoint/corrupted"}}, nil, nil)
	m, notes = d.collect("checkpoint/load", map[string]any{"checkpointId": pageIDs[1]})
	require.NotNil(t, m.Error)
	assert.Equal(t, -32002, m.Error.Code, m.Error.Message)
	var data corruptData
	require.NoError(t, json.Unmarshal(m.Error.Data, &data), "data: %s", m.Error.Data)
	assert.Equal(t, pageIDs[1], data.CheckpointID)
	evs = corruptedEvents(t, notes)
	require.Len(t, evs, 1)
	assert.Equal(t, corruptedEvent{CheckpointID: pageIDs[1], WorkflowID: "wf-pages", Reason: data.Reason}, evs[0])
	assert.Contains(t, data.Reason, "database page corrupt")
	m, notes = d.collect("checkpoint/load", map[string]any{"workflowId": "wf-pages", "attachment": true})
	require.Nil(t, m.Error, "latest-load must fall back past a wrecked page")
	lr.RecoveredFrom = nil
	require.NoError(t, json.Unmarshal(m.Result, &lr))
	assert.Equal(t, pageIDs[0], lr.CheckpointID)
	assert.Equal(t, sha(pageStates[0]), sha(m.Attachment))
	require.Len(t, lr.RecoveredFrom, 1)
	assert.Equal(t, pageIDs[1], lr.RecoveredFrom[0].CheckpointID)
	assert.Len(t, corruptedEvents(t, notes), 1)
	m, _ = d.collect("resume/plan", map[string]any{"workflowId": "wf-pages"})
	require.NotNil(t, m.Error)
	assert.Equal(t, -32005, m.Error.Code)
	assert.Contains(t, string(m.Error.Data), `"corrupt"`)
	// SQLite found the file damaged (at open): no more writes (TestDamagedDatabaseNotWritten),
	// and the exit status says so.
	e := d.callErr("checkpoint/save", map[string]any{"workflowId": "wf-pages", "state": map[string]any{}}, nil)
	assert.Equal(t, -32006, e.Code)
	d.call("shutdown", nil, nil, nil)
	var ee *exec.ExitError
	require.ErrorAs(t, waitExit(d.cmd, 20*time.Second), &ee)

	// --- ckptd verify lists every corrupt checkpoint and exits 1
	for _, tc := range []struct {
		path string
		want []string
	}{
		{db, []string{rowIDs[3], rowIDs[2]}},
		{pagesDB, []string{pageIDs[1]}},
	} {
		code, rep, out := runVerifyJSON(t, tc.path)
		assert.Equal(t, 1, code, "%s: verify exit code; output:\n%s", filepath.Base(tc.path), out)
		require.NotNil(t, rep, "%s: no JSON report; output:\n%s", filepath.Base(tc.path), out)
		var ids []string
		for _, c := range rep.Corrupt {
			ids = append(ids, c.CheckpointID)
			assert.NotEmpty(t, c.WorkflowID)
			assert.NotEmpty(t, c.Reason)
		}
		assert.ElementsMatch(t, tc.want, ids, "%s: verify output:\n%s", filepath.Base(tc.path), out)
	}
	// With a wrecked b-tree page the database totals cannot be read, but verify still reports:
	// the damage under database problems and the checkpoint it hits under corrupt ones.
	code, rep, out := runVerifyJSON(t, headerDB)
	assert.Equal(t, 1, code, "header.db: verify exit code; output:\n%s", out)
	require.NotNil(t, rep, "header.db: verify gave no report: %s", out)
	var ids []string
	for _, c := range rep.Corrupt {
		ids = append(ids, c.CheckpointID)
	}
	assert.Contains(t, ids, pageIDs[1], "header.db: verify output:\n%s", out)
	assert.NotEmpty(t, rep.Database, "header.db: the damage itself is reported")
}

// runVerifyJSON runs `ckptd verify --json` on path; the report is nil if stdout is not one.
func runVerifyJSON(t *testing.T, path string) (int, *verifyReport, string) {
	t.Helper()
	cmd := exec.Command(binPath, "verify", "--json", "--quiet", "--db", path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	var rep verifyReport
	if json.Unmarshal(stdout.Bytes(), &rep) != nil {
		return code, nil, stdout.String() + stderr.String()
	}
	return code, &rep, stdout.String() + stderr.String()
}

func shaBytes(b []byte) []byte {
	h := sha(b)
	out := make([]byte, len(h)/2)
	_, _ = fmt.Sscanf(h, "%x", &out)
	return out
}

func dbPageSize(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	hdr := make([]byte, 100)
	_, err = f.ReadAt(hdr, 0)
	require.NoError(t, err)
	ps := int(binary.BigEndian.Uint16(hdr[16:18]))
	if ps == 1 {
		ps = 65536
	}
	return ps
}

// TestStartupRefusesDamagedFile: a database file that is truncated, has lost its first page, or is
// not SQLite at all gives a clear startup error naming the file and a non-zero exit, and the
// file is left exactly as it was (never replaced by a new empty database). (An empty file holds
// nothing: it is a new database, TestStartAfterInterruptedCreation.)
func TestStartupRefusesDamagedFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	d := startDaemon(t, good, "--keep-last", "0")
	for i := 0; i < 6; i++ {
		d.saveState("w", i, checkpointState(30000, int64(i)))
	}
	d.shutdownWait()
	full, err := os.ReadFile(good)
	require.NoError(t, err)
	pageSize := dbPageSize(t, good)
	require.Greater(t, len(full), 4*pageSize)

	hdr := bytes.Clone(full[:100])
	binary.BigEndian.PutUint16(hdr[16:18], 3000) // not a power of two
	old := time.Now().Add(-time.Minute)
	cases := []struct {
		name    string
		content []byte
		mtime   time.Time
		want    string
	}{
		{"truncated mid-page", full[:len(full)-pageSize/2], time.Time{}, "truncated"},
		{"truncated to whole pages", full[:2*pageSize], time.Time{}, "truncated"},
		{"header only", full[:60], time.Time{}, "truncated"},
		{"not sqlite", []byte(strings.Repeat("this is not a database\n", 300)), time.Time{}, "not a SQLite database"},
		{"bad page size", append(hdr, make([]byte, 4096-100)...), time.Time{}, "page size"},
		{"first page zeroed", append(make([]byte, pageSize), full[pageSize:]...), old, "not a SQLite database"},
		{"all zeros, too large to be unwritten", make([]byte, 128<<10), old, "not a SQLite database"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.db")
			require.NoError(t, os.WriteFile(path, tc.content, 0o600))
			if !tc.mtime.IsZero() {
				require.NoError(t, os.Chtimes(path, tc.mtime, tc.mtime))
			}
			cmd := exec.Command(binPath, "--db", path)
			cmd.Stdin = strings.NewReader("")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "ckptd accepted the file; stderr:\n%s", stderr.String())
			assert.Equal(t, 1, ee.ExitCode())
			assert.Contains(t, stderr.String(), path, "the error names the file")
			// (the path holds the subtest's name: look for the reason without it)
			assert.Contains(t, strings.ReplaceAll(stderr.String(), path, "PATH"), tc.want)
			assert.Empty(t, stdout.String(), "nothing on the protocol stream")
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(tc.content, after), "the file was modified")
			for _, side := range []string{"-wal", "-journal"} {
				fi, err := os.Stat(path + side)
				assert.True(t, err != nil || fi.Size() == 0, "%s written", side)
			}
		})
	}
}

// TestEndToEndEveryCheckpointCorrupt: a latest-load that finds no intact checkpoint answers
// -32002 naming the newest, with every older corrupt one in data.alsoCorrupt.
func TestEndToEndEveryCheckpointCorrupt(t *testing.T) {
	db := filepath.Join(t.TempDir(), "c.db")
	d := startDaemon(t, db, "--keep-last", "0")
	var ids []string
	for i := 0; i < 3; i++ {
		var r struct{ CheckpointID string }
		d.call("checkpoint/save", map[string]any{"workflowId": "wf", "state": map[string]any{"i": i}}, nil, &r)
		ids = append(ids, r.CheckpointID)
	}
	raw, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.Exec(`UPDATE states SET data = CAST('{"bad":1}' AS BLOB)`)
	require.NoError(t, err)
	e := d.callErr("checkpoint/load", map[string]any{"workflowId": "wf"}, nil)
	assert.Equal(t, -32002, e.Code)
	var data struct {
		CheckpointID string `json:"checkpointId"`
		Reason       string `json:"reason"`
		AlsoCorrupt  []struct {
			CheckpointID string `json:"checkpointId"`
			Reason       string `json:"reason"`
		} `json:"alsoCorrupt"`
	}
	require.NoError(t, json.Unmarshal(e.Data, &data))
	assert.Equal(t, ids[2], data.CheckpointID)
	require.Len(t, data.AlsoCorrupt, 2)
	assert.Equal(t, ids[1], data.AlsoCorrupt[0].CheckpointID)
	assert.Equal(t, ids[0], data.AlsoCorrupt[1].CheckpointID)
	assert.NotEmpty(t, data.AlsoCorrupt[0].Reason)
}
