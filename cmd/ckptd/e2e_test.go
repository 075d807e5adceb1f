package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/internal/pgtest"
)

// binPath is the ckptd binary built once for the end-to-end tests.
var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// Fuzzing (FuzzArchive) needs no binary: every fuzz worker process runs TestMain, and
		// building ckptd in each would take most of a bounded fuzz run.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ckptd-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "ckptd")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building ckptd:", err)
		os.Exit(1)
	}
	code := m.Run()
	pgtest.StopShared() // the PostgreSQL tests' throwaway cluster, if one ran
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is a ckptd subprocess driven over its stdio with raw frames.
type daemon struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	r      *framing.Reader
	stderr *bytes.Buffer
	nextID int
}

// msg is one frame read back from the daemon.
type msg struct {
	ID         json.RawMessage `json:"id"`
	Method     string          `json:"method"`
	Params     json.RawMessage `json:"params"`
	Result     json.RawMessage `json:"result"`
	Error      *rpcErr         `json:"error"`
	Attachment []byte          `json:"-"`
	HasAtt     bool            `json:"-"`
}

type rpcErr struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

func startDaemon(t *testing.T, db string, args ...string) *daemon {
	t.Helper()
	return startDaemonTB(t, db, args...)
}

// startDaemonB is startDaemon for benchmarks.
func startDaemonB(b *testing.B, db string, args ...string) *daemon {
	return startDaemonTB(b, db, args...)
}

func startDaemonTB(t testing.TB, db string, args ...string) *daemon {
	bin := binPath
	if _, bench := t.(*testing.B); bench && os.Getenv("CKPTD_BENCH_BIN") != "" {
		bin = os.Getenv("CKPTD_BENCH_BIN") // benchmarks of another build (a baseline)
	}
	cmd := exec.Command(bin, append([]string{"--db", db}, args...)...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	require.NoError(t, cmd.Start())
	d := &daemon{t: t, cmd: cmd, stdin: stdin, r: framing.NewReader(stdout, framing.Limits{MaxBody: 1 << 30, MaxAttachment: 1 << 30}), stderr: &stderr}
	t.Cleanup(func() {
		_ = d.stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("ckptd stderr:\n%s", d.stderr.String())
		}
	})
	return d
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (d *daemon) rawB(b *testing.B, frame []byte) {
	if _, err := d.stdin.Write(frame); err != nil {
		b.Fatal(err)
	}
}

func (d *daemon) readB(b *testing.B) {
	f, err := d.r.Next()
	if err != nil {
		b.Fatal(err)
	}
	if strings.Contains(string(f.Body[:min(len(f.Body), 200)]), `"error"`) {
		b.Fatalf("error reply: %s", f.Body)
	}
}

// send writes one request frame and returns its id.
func (d *daemon) send(method string, params any, att []byte) int {
	d.nextID++
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": d.nextID, "method": method, "params": params})
	require.NoError(d.t, err)
	d.raw(framing.AppendFrame(nil, body, att, att != nil))
	return d.nextID
}

func (d *daemon) raw(b []byte) {
	_, err := d.stdin.Write(b)
	require.NoError(d.t, err)
}

// read returns the next frame from the daemon.
func (d *daemon) read() msg {
	d.t.Helper()
	type res struct {
		f   framing.Frame
		err error
	}
	ch := make(chan res, 1)
	go func() { f, err := d.r.Next(); ch <- res{f, err} }()
	select {
	case r := <-ch:
		require.NoError(d.t, r.err, "reading from ckptd")
		var m msg
		require.NoError(d.t, json.Unmarshal(r.f.Body, &m), "body: %s", r.f.Body)
		m.Attachment, m.HasAtt = r.f.Attachment, r.f.HasAttachment
		return m
	case <-time.After(20 * time.Second):
		d.t.Fatalf("no frame from ckptd within 20s; stderr:\n%s", d.stderr.String())
		return msg{}
	}
}

// response reads frames until the response (skipping notifications).
func (d *daemon) response() msg {
	d.t.Helper()
	for {
		m := d.read()
		if m.Method == "" {
			return m
		}
	}
}

// call sends a request and decodes its result into out (nil: ignore), failing on an error reply.
func (d *daemon) call(method string, params any, att []byte, out any) msg {
	d.t.Helper()
	id := d.send(method, params, att)
	m := d.response()
	require.Equal(d.t, fmt.Sprint(id), string(m.ID))
	require.Nil(d.t, m.Error, "%s failed: %+v", method, m.Error)
	if out != nil {
		require.NoError(d.t, json.Unmarshal(m.Result, out))
	}
	return m
}

// callErr sends a request expecting an error reply and returns it.
func (d *daemon) callErr(method string, params any, att []byte) *rpcErr {
	d.t.Helper()
	d.send(method, params, att)
	m := d.response()
	require.NotNil(d.t, m.Error, "%s: expected an error, got %s", method, m.Result)
	return m.Error
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestEndToEndSaveLoadResume(t *testing.T) {
	db := filepath.Join(t.TempDir(), "sub", "c.db")
	d := startDaemon(t, db)

	var init map[string]any
	d.call("initialize", map[string]any{"clientName": "e2e", "events": []string{"checkpoint/saved"}}, nil, &init)
	assert.Equal(t, "ckptd", init["serverName"])
	assert.EqualValues(t, 1, init["protocolVersion"])
	assert.Equal(t, db, init["dbPath"])

	// state through an attachment, byte-exact (key order, spacing, HTML chars kept)
	state := []byte(`{"z": 1, "a": "<b>&</b>", "msgs": ["héllo", "\u00e9"]}`)
	var saved map[string]any
	id := d.send("checkpoint/save", map[string]any{"workflowId": "wf", "step": 0, "phase": "completed", "stateAttachment": true, "stateType": "json", "metadata": map[string]any{"source": "loop"}}, state)
	// the saved notification may come before or after the reply
	var gotNotif bool
	for {
		m := d.read()
		if m.Method == "checkpoint/saved" {
			gotNotif = true
			continue
		}
		require.Nil(t, m.Error)
		require.Equal(t, fmt.Sprint(id), string(m.ID))
		require.NoError(t, json.Unmarshal(m.Result, &saved))
		break
	}
	assert.Equal(t, sha(state), saved["sha256"])
	assert.EqualValues(t, 1, saved["seq"])
	if !gotNotif {
		n := d.read()
		assert.Equal(t, "checkpoint/saved", n.Method)
	}

	// inline JSON state is kept byte-for-byte too (sent as a raw body: json.Marshal would compact it)
	inline := []byte(`{"b":2,  "a":[1,2,3], "h":"<&>"}`)
	d.nextID++
	d.raw(framing.AppendFrame(nil, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":"wf","step":1,"phase":"before_step","state":%s}}`, d.nextID, inline)), nil, false))
	m := d.response()
	require.Nil(t, m.Error)
	var saved2 map[string]any
	require.NoError(t, json.Unmarshal(m.Result, &saved2))
	assert.Equal(t, sha(inline), saved2["sha256"])
	assert.EqualValues(t, 2, saved2["seq"])

	// load latest with attachment
	m = d.call("checkpoint/load", map[string]any{"workflowId": "wf", "attachment": true}, nil, nil)
	require.True(t, m.HasAtt)
	assert.Equal(t, inline, m.Attachment)
	// and inline on load, byte-exact
	m = d.call("checkpoint/load", map[string]any{"workflowId": "wf"}, nil, nil)
	assert.Contains(t, string(m.Result), `"state":`+string(inline))
	// load by id, inline
	var loaded map[string]any
	d.call("checkpoint/load", map[string]any{"checkpointId": saved["checkpointId"]}, nil, &loaded)
	assert.Equal(t, "json", loaded["stateType"])
	assert.Equal(t, map[string]any{"source": "loop"}, loaded["metadata"])

	// resume: before_step 1 -> run 1 again
	var plan map[string]any
	d.call("resume/plan", map[string]any{"workflowId": "wf"}, nil, &plan)
	assert.EqualValues(t, 1, plan["startStep"])
	assert.Equal(t, true, plan["retry"])

	// hash mismatch + not retryable failure: all problems listed
	d.call("checkpoint/save", map[string]any{"workflowId": "wf2", "step": 3, "phase": "failed", "workflowHash": "h1", "error": map[string]any{"message": "bad input", "retryable": false}}, nil, nil)
	e := d.callErr("resume/plan", map[string]any{"workflowId": "wf2", "workflowHash": "h2"}, nil)
	assert.Equal(t, -32005, e.Code)
	var data struct {
		Problems []struct{ Code, Expected, Actual string }
	}
	require.NoError(t, json.Unmarshal(e.Data, &data))
	require.Len(t, data.Problems, 2)
	assert.Equal(t, "workflow_hash_mismatch", data.Problems[0].Code)
	assert.Equal(t, "h1", data.Problems[0].Expected)
	assert.Equal(t, "h2", data.Problems[0].Actual)
	assert.Equal(t, "not_retryable", data.Problems[1].Code)
	d.call("resume/plan", map[string]any{"workflowId": "wf2", "workflowHash": "h2", "force": true}, nil, &plan)
	assert.Len(t, plan["warnings"], 2)

	// list newest first, metadata filter
	var list struct{ Checkpoints []map[string]any }
	d.call("checkpoint/list", map[string]any{"workflowId": "wf"}, nil, &list)
	require.Len(t, list.Checkpoints, 2)
	assert.EqualValues(t, 2, list.Checkpoints[0]["seq"])
	d.call("checkpoint/list", map[string]any{"metadata": map[string]any{"source": "loop"}}, nil, &list)
	require.Len(t, list.Checkpoints, 1)

	var st map[string]any
	d.call("stats", nil, nil, &st)
	assert.EqualValues(t, 3, st["counters"].(map[string]any)["saves"])

	d.call("shutdown", nil, nil, nil)
	require.NoError(t, waitExit(d.cmd, 10*time.Second))
	info, err := os.Stat(db)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	dirInfo, err := os.Stat(filepath.Dir(db))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), dirInfo.Mode().Perm())
}

func waitExit(cmd *exec.Cmd, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		return errors.New("ckptd did not exit in time")
	}
}

func TestEndToEndSurvivesKill(t *testing.T) {
	db := filepath.Join(t.TempDir(), "c.db")
	d := startDaemon(t, db)
	var acked []map[string]any
	for i := 0; i < 20; i++ {
		var r map[string]any
		d.call("checkpoint/save", map[string]any{"workflowId": "w", "step": i, "state": map[string]any{"i": i}}, nil, &r)
		acked = append(acked, r)
	}
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGKILL))
	_ = d.cmd.Wait()

	d2 := startDaemon(t, db, "--keep-last", "0")
	var plan map[string]any
	d2.call("resume/plan", map[string]any{"workflowId": "w"}, nil, &plan)
	assert.EqualValues(t, 20, plan["startStep"])
	var list struct{ Checkpoints []map[string]any }
	d2.call("checkpoint/list", map[string]any{"workflowId": "w", "limit": 100}, nil, &list)
	// default retention keeps the newest 10
	require.Len(t, list.Checkpoints, 10)
	assert.Equal(t, acked[19]["checkpointId"], list.Checkpoints[0]["checkpointId"])
}

func TestEndToEndBadInputKeepsServing(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"))
	cases := []struct {
		name string
		send func()
		code int
	}{
		{"invalid json", func() { d.raw(framing.AppendFrame(nil, []byte(`{"jsonrpc":`), nil, false)) }, -32700},
		{"batch", func() {
			d.raw(framing.AppendFrame(nil, []byte(`[{"jsonrpc":"2.0","id":1,"method":"stats"}]`), nil, false))
		}, -32600},
		{"unknown method", func() { d.send("nope/nope", nil, nil) }, -32601},
		{"missing workflowId", func() { d.send("checkpoint/save", map[string]any{"step": 1}, nil) }, -32602},
		{"wrong type", func() { d.send("checkpoint/save", map[string]any{"workflowId": "w", "step": "one"}, nil) }, -32602},
		{"bad phase", func() { d.send("checkpoint/save", map[string]any{"workflowId": "w", "phase": "done"}, nil) }, -32602},
		{"not found", func() { d.send("checkpoint/load", map[string]any{"checkpointId": "nope"}, nil) }, -32001},
		{"header garbage", func() { d.raw([]byte("Hello: there\r\n\r\n{}")) }, -32700},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.send()
			m := d.response()
			require.NotNil(t, m.Error, "reply: %s", m.Result)
			assert.Equal(t, tc.code, m.Error.Code, m.Error.Message)
			// the daemon keeps serving
			var st map[string]any
			d.call("stats", nil, nil, &st)
		})
	}
	e := d.callErr("checkpoint/save", map[string]any{"step": 1}, nil)
	assert.Contains(t, e.Message, "workflowId")
}

func TestEndToEndConflictAndIdempotency(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"))
	p := map[string]any{"workflowId": "w", "checkpointId": "c-1", "step": 1, "state": []int{1}}
	var a, b map[string]any
	d.call("checkpoint/save", p, nil, &a)
	d.call("checkpoint/save", p, nil, &b)
	assert.Equal(t, a["seq"], b["seq"])
	p["state"] = []int{2}
	e := d.callErr("checkpoint/save", p, nil)
	assert.Equal(t, -32003, e.Code)
}

func TestEndToEndRefusesNonSQLiteFile(t *testing.T) {
	db := filepath.Join(t.TempDir(), "c.db")
	require.NoError(t, os.WriteFile(db, []byte(strings.Repeat("not a database\n", 500)), 0o600))
	cmd := exec.Command(binPath, "--db", db)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, strings.ToLower(string(out)), "not")
	after, _ := os.ReadFile(db)
	assert.Equal(t, strings.Repeat("not a database\n", 500), string(after))
}

// TestEndToEndShutdownAnswersRequestsSentWithIt: requests written in the same burst as shutdown
// get a reply (refused with -32007) before the daemon exits, never silence.
func TestEndToEndShutdownAnswersRequestsSentWithIt(t *testing.T) {
	for i := 0; i < 20; i++ {
		d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"))
		var burst []byte
		for id, method := range []string{"shutdown", "stats", "checkpoint/list", "stats"} {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{}}`, id+1, method)
			burst = framing.AppendFrame(burst, []byte(body), nil, false)
		}
		d.raw(burst)
		got := map[string]*rpcErr{}
		for len(got) < 4 {
			m := d.read()
			got[string(m.ID)] = m.Error
		}
		require.Nil(t, got["1"], "shutdown")
		for _, id := range []string{"2", "3", "4"} {
			require.NotNil(t, got[id], "request %s", id)
			require.Equal(t, -32007, got[id].Code, "request %s", id)
		}
		require.NoError(t, waitExit(d.cmd, 10*time.Second))
	}
}
