package main

// Issue #20, transport and server side, through the real binary: backpressure, absurd declared
// lengths, $/cancelRequest, per-workflow ordering while a long source scan runs, and stopping
// within a second or two whatever is running.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
)

// slowTree makes a source tree whose fingerprint would take minutes and costs nothing to make:
// one sparse file of 1 TiB (the scanner hashes a hole as zeros, ~2.5 GB/s, checking its context
// every 128 KiB). slowSources gives it as a save's sources param, bounded by timeoutMs so that a
// scan nobody stops ends with -32006 after that long, whatever the machine's speed.
func slowTree(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	f, err := os.Create(filepath.Join(dir, "f.bin"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(1<<40))
	require.NoError(t, f.Close())
	return dir
}

// cancelBound is how soon a cancelled request over slowTree must be answered: typically within
// milliseconds, but a test machine running other tests under -race may not schedule the daemon
// for a while.
const cancelBound = 3 * time.Second

// slowSources is a sources param for tree (slowTree) whose scan gives up after timeoutMs.
func slowSources(tree string, timeoutMs int) map[string]any {
	return map[string]any{"root": tree, "limits": map[string]any{"maxBytes": int64(1) << 42, "timeoutMs": timeoutMs}}
}

// rawReq builds a request frame.
func rawReq(id any, method string, params any) []byte {
	m := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	if id != nil {
		m["id"] = id
	}
	b, _ := json.Marshal(m)
	return framing.AppendFrame(nil, b, nil, false)
}

type timedMsg struct {
	msg
	at time.Duration
}

// timedReplies reads n responses (skipping notifications), keyed by raw id, with the time each
// arrived since start.
func (d *daemon) timedReplies(n int, start time.Time) map[string]timedMsg {
	d.t.Helper()
	out := map[string]timedMsg{}
	for len(out) < n {
		m := d.response()
		out[string(m.ID)] = timedMsg{m, time.Since(start)}
	}
	return out
}

// TestHostileOtherWorkflowsAnsweredDuringScan: while a save of workflow A fingerprints a big
// tree (bounded at 3 s, then refused with -32006), a save, loads and a list of workflow B, and
// stats, are answered at once; A's later requests and a list of every workflow wait for A's save.
func TestHostileOtherWorkflowsAnsweredDuringScan(t *testing.T) {
	tree := slowTree(t)
	d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"))
	d.call("checkpoint/save", map[string]any{"workflowId": "B", "checkpointId": "b-0", "state": 0}, nil, nil)

	var burst []byte
	for _, f := range [][]byte{
		rawReq("a-0", "checkpoint/save", map[string]any{"workflowId": "A", "checkpointId": "a-0", "state": 0}),
		rawReq("a", "checkpoint/save", map[string]any{"workflowId": "A", "checkpointId": "a-1", "state": 1, "sources": slowSources(tree, 3000)}),
		rawReq("a-list", "checkpoint/list", map[string]any{"workflowId": "A"}),
		rawReq("all", "checkpoint/list", map[string]any{}),
		rawReq("b-save", "checkpoint/save", map[string]any{"workflowId": "B", "checkpointId": "b-1", "state": 1}),
		rawReq("b-load", "checkpoint/load", map[string]any{"workflowId": "B"}),
		rawReq("b-list", "checkpoint/list", map[string]any{"workflowId": "B"}),
		rawReq("b-by-id", "checkpoint/load", map[string]any{"checkpointId": "b-0"}),
		rawReq("stats", "stats", map[string]any{}),
	} {
		burst = append(burst, f...)
	}
	start := time.Now()
	d.raw(burst)
	rs := d.timedReplies(9, start)
	for id, m := range rs {
		if id != `"a"` {
			require.Nil(t, m.Error, "%s: %+v", id, m.Error)
		}
	}
	a := rs[`"a"`]
	require.NotNil(t, a.Error, "A's save must reach its scan bound: %s", a.Result)
	assert.Equal(t, -32006, a.Error.Code, a.Error.Message)
	assert.Contains(t, a.Error.Message, "sources.limits.timeoutMs")
	t.Logf("A's save (fingerprinting %s) answered after %s", tree, a.at.Round(time.Millisecond))
	require.Greater(t, a.at, 2900*time.Millisecond, "the scan ran to its bound")
	for _, id := range []string{`"b-save"`, `"b-load"`, `"b-list"`, `"b-by-id"`, `"stats"`, `"a-0"`} {
		assert.Less(t, rs[id].at, a.at/2, "%s was held up by workflow A's save (%s vs %s)", id, rs[id].at, a.at)
	}
	for _, id := range []string{`"a-list"`, `"all"`} { // waited for A's save (replies may cross)
		assert.GreaterOrEqual(t, rs[id].at, a.at-100*time.Millisecond, "%s did not wait for A's save", id)
		assert.Contains(t, string(rs[id].Result), `"checkpointId":"a-0"`, id)
		assert.NotContains(t, string(rs[id].Result), `"checkpointId":"a-1"`, id)
	}
	assert.Contains(t, string(rs[`"b-load"`].Result), `"checkpointId":"b-1"`, "a load sees the save of its workflow sent before it")
	assert.Contains(t, string(rs[`"b-list"`].Result), `"checkpointId":"b-1"`)
	d.shutdownWait()
}

// TestHostileCancelRequest: $/cancelRequest cancels a save while it fingerprints its sources,
// and the save queued behind it: both answer -32800 at once and store nothing. A drift/status
// rehashing a big tree is cancelled the same way.
func TestHostileCancelRequest(t *testing.T) {
	tree := slowTree(t)
	d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"))
	d.raw(append(rawReq("scan", "checkpoint/save", map[string]any{"workflowId": "A", "checkpointId": "a-1", "sources": slowSources(tree, 600000)}),
		rawReq(7, "checkpoint/save", map[string]any{"workflowId": "A", "checkpointId": "a-2", "state": 2})...))
	time.Sleep(300 * time.Millisecond) // the scan is under way
	start := time.Now()
	d.raw(append(rawReq(nil, "$/cancelRequest", map[string]any{"id": 7}),
		append(rawReq(nil, "$/cancelRequest", map[string]any{"id": "scan"}),
			rawReq(nil, "$/cancelRequest", map[string]any{"id": "never-sent"})...)...))
	rs := d.timedReplies(2, start)
	for _, id := range []string{`"scan"`, `7`} {
		require.NotNil(t, rs[id].Error, "%s was not cancelled: %s", id, rs[id].Result)
		assert.Equal(t, -32800, rs[id].Error.Code, rs[id].Error.Message)
		// The scan would run for minutes: an answer within a few seconds (the bound leaves room
		// for a machine loaded by other tests) can only come from the cancellation.
		assert.Less(t, rs[id].at, cancelBound, "%s answered %s after the cancellation", id, rs[id].at)
	}
	var list struct{ Checkpoints []map[string]any }
	d.call("checkpoint/list", map[string]any{"workflowId": "A"}, nil, &list)
	assert.Empty(t, list.Checkpoints, "a cancelled save stores nothing")

	// The daemon goes on: save with a small tree as sources, then make its file 1 TiB (sparse)
	// so that drift/status must hash it all again, and cancel that.
	small := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.MkdirAll(small, 0o755))
	f := filepath.Join(small, "f.bin")
	require.NoError(t, os.WriteFile(f, []byte("small"), 0o644))
	d.call("checkpoint/save", map[string]any{"workflowId": "A", "checkpointId": "a-3", "sources": map[string]any{"root": small}}, nil, nil)
	require.NoError(t, os.Truncate(f, 1<<40))
	d.raw(rawReq("status", "drift/status", map[string]any{"workflowId": "A",
		"limits": map[string]any{"maxBytes": int64(1) << 42, "timeoutMs": 600000}}))
	time.Sleep(300 * time.Millisecond)
	start = time.Now()
	d.raw(rawReq(nil, "$/cancelRequest", map[string]any{"id": "status"}))
	rs = d.timedReplies(1, start)
	require.NotNil(t, rs[`"status"`].Error, "drift/status was not cancelled: %.200s", rs[`"status"`].Result)
	assert.Equal(t, -32800, rs[`"status"`].Error.Code)
	assert.Less(t, rs[`"status"`].at, cancelBound)
	d.call("checkpoint/load", map[string]any{"checkpointId": "a-3"}, nil, nil)
	d.shutdownWait()
}

// TestHostileStopWhileScanning: stdin closed, shutdown or SIGTERM while a save fingerprints a
// tree that would take minutes: the daemon exits 0 within a second or two, the scanning save is
// answered -32007, and the save acknowledged before is on disk.
func TestHostileStopWhileScanning(t *testing.T) {
	tree := slowTree(t)
	for _, how := range []string{"stdin closed", "shutdown", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "c.db")
			d := startDaemon(t, db)
			d.call("checkpoint/save", map[string]any{"workflowId": "W", "checkpointId": "kept", "state": "acknowledged"}, nil, nil)
			d.raw(rawReq("scan", "checkpoint/save", map[string]any{"workflowId": "A", "sources": slowSources(tree, 600000)}))
			time.Sleep(300 * time.Millisecond)
			start := time.Now()
			n := 1
			switch how {
			case "stdin closed":
				require.NoError(t, d.stdin.Close())
			case "shutdown":
				d.raw(rawReq("bye", "shutdown", nil))
				n = 2
			case "SIGTERM":
				require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
			}
			rs := d.timedReplies(n, start)
			require.NotNil(t, rs[`"scan"`].Error, "the scanning save: %s", rs[`"scan"`].Result)
			assert.Equal(t, -32007, rs[`"scan"`].Error.Code, rs[`"scan"`].Error.Message)
			if how == "shutdown" {
				assert.Nil(t, rs[`"bye"`].Error)
			}
			require.NoError(t, waitExit(d.cmd, 20*time.Second), "exit status")
			elapsed := time.Since(start)
			t.Logf("%s: exited %s after the stop", how, elapsed.Round(time.Millisecond))
			assert.Less(t, elapsed, 10*time.Second, "the stop waited for the scan (which would take minutes)")

			d2 := startDaemon(t, db)
			m := d2.call("checkpoint/load", map[string]any{"checkpointId": "kept"}, nil, nil)
			assert.Contains(t, string(m.Result), `"state":"acknowledged"`)
			var list struct{ Checkpoints []map[string]any }
			d2.call("checkpoint/list", map[string]any{"workflowId": "A"}, nil, &list)
			assert.Empty(t, list.Checkpoints)
		})
	}
}

// TestHostileAbsurdFrameLengths: a declared length of 10^15 (body or attachment) is answered
// -32004 naming the limit as soon as the header is read; the stream cannot be resynchronised,
// so the daemon says so on stderr and exits non-zero, with what it acknowledged on disk. A
// length over the limit but within reach is answered before the body is sent, and skipped.
func TestHostileAbsurdFrameLengths(t *testing.T) {
	const attBody = `{"jsonrpc":"2.0","id":"att","method":"checkpoint/save","params":{"workflowId":"w","stateAttachment":true}}`
	for _, tc := range []struct {
		name, header, id string
		field            string
	}{
		{"Content-Length", "Content-Length: 1000000000000000\r\n\r\n" + `{"jsonrpc":"2.0","id":"huge","method":"stats"}`, `"huge"`, "body"},
		{"Ckptd-Attachment-Length", fmt.Sprintf("Content-Length: %d\r\nCkptd-Attachment-Length: 1000000000000000\r\n\r\n%s", len(attBody), attBody), `"att"`, "attachment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "c.db")
			d := startDaemon(t, db)
			d.call("checkpoint/save", map[string]any{"workflowId": "W", "checkpointId": "kept", "state": 1}, nil, nil)
			d.raw(append([]byte(tc.header), rawReq("next", "stats", nil)...))
			m := d.response()
			require.NotNil(t, m.Error, "%s", m.Result)
			assert.Equal(t, tc.id, string(m.ID))
			assert.Equal(t, -32004, m.Error.Code)
			assert.Contains(t, m.Error.Message, "1000000000000000 bytes")
			assert.Contains(t, m.Error.Message, "closing the connection")
			var data struct {
				Limit int64
				Size  int64
				Field string
			}
			require.NoError(t, json.Unmarshal(m.Error.Data, &data))
			assert.Equal(t, int64(1e15), data.Size)
			assert.Equal(t, tc.field, data.Field)
			assert.Positive(t, data.Limit)
			err := waitExit(d.cmd, 10*time.Second)
			var ee interface{ ExitCode() int }
			require.ErrorAs(t, err, &ee, "the daemon must exit, non-zero")
			assert.Equal(t, 1, ee.ExitCode())
			assert.Contains(t, d.stderr.String(), "closing the connection")

			d2 := startDaemon(t, db)
			d2.call("checkpoint/load", map[string]any{"checkpointId": "kept"}, nil, nil)
		})
	}

	t.Run("over the limit: answered before the body, then skipped", func(t *testing.T) {
		d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"), "--max-state-size", "64KiB")
		const size = 3_000_000 // the body limit is 2 × 64 KiB + 1 MiB
		head := `{"jsonrpc":"2.0","id":"big","method":"checkpoint/save","params":{"workflowId":"w","state":"`
		d.raw([]byte(fmt.Sprintf("Content-Length: %d\r\n\r\n%s", size, head)))
		m := d.response() // read before the rest of the body is sent
		require.NotNil(t, m.Error)
		assert.Equal(t, `"big"`, string(m.ID))
		assert.Equal(t, -32004, m.Error.Code)
		assert.Contains(t, m.Error.Message, fmt.Sprintf("limit of %d bytes", 2*64<<10+1<<20))
		d.raw(append(bytes.Repeat([]byte("x"), size-len(head)), rawReq("next", "stats", nil)...))
		m = d.response()
		assert.Equal(t, `"next"`, string(m.ID))
		assert.Nil(t, m.Error)
		d.shutdownWait()
	})
}

// TestHostileBackpressure: a client that pipelines requests without reading the replies is
// held back by its pipe: the daemon stops reading once its in-flight bound is reached, so the
// client's writes block. Once the client reads, every request is answered.
func TestHostileBackpressure(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"), "--keep-last", "0")
	big := make([]byte, 1<<20)
	d.call("checkpoint/save", map[string]any{"workflowId": "L", "stateAttachment": true, "stateType": "bytes"}, big, nil)
	// Replies of 1 MiB fill the stdout pipe at once; then requests pile up.
	var frames [][]byte
	for i := range 8 {
		frames = append(frames, rawReq(fmt.Sprint("load-", i), "checkpoint/load", map[string]any{"workflowId": "L", "attachment": true}))
	}
	state := bytes.Repeat([]byte{'s'}, 64<<10)
	for i := range 400 {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": fmt.Sprint("save-", i), "method": "checkpoint/save",
			"params": map[string]any{"workflowId": fmt.Sprint("w", i%4), "stateAttachment": true, "stateType": "bytes"}})
		frames = append(frames, framing.AppendFrame(nil, body, state, true))
	}
	var written atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, f := range frames {
			if _, err := d.stdin.Write(f); err != nil {
				return
			}
			written.Add(1)
		}
	}()
	last, since := int64(-1), time.Now()
	for time.Since(since) < time.Second {
		select {
		case <-done:
			t.Fatalf("all %d requests (%d MB) were taken in without a reply being read: no backpressure", len(frames), len(frames)*len(state)>>20)
		case <-time.After(50 * time.Millisecond):
		}
		if w := written.Load(); w != last {
			last, since = w, time.Now()
		}
	}
	t.Logf("the client's writes blocked after %d of %d requests", last, len(frames))
	assert.Less(t, last, int64(200))
	rs := d.replies(len(frames))
	for id, m := range rs {
		require.Nil(t, m.Error, "%s: %+v", id, m.Error)
	}
	<-done
	var list struct{ Checkpoints []map[string]any }
	d.call("checkpoint/list", map[string]any{"limit": 1000}, nil, &list)
	assert.Len(t, list.Checkpoints, 401)
	assert.True(t, strings.Contains(d.stderr.String(), "serving"))
	d.shutdownWait()
}
