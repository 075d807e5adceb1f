package main

// End-to-end tests of source drift through the real binary: sources on checkpoint/save and
// workflow/configure, drift/status, resume/plan's drift problem, drift/watch notifications,
// a second ckptd process on the same database, bad sources; and the ckptd drift command.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// noteDaemon drives a daemon and keeps the notifications read while waiting for responses.
type noteDaemon struct {
	*daemon
	notes []msg
}

func (n *noteDaemon) call(method string, params any, out any) msg {
	n.t.Helper()
	id := n.send(method, params, nil)
	for {
		m := n.read()
		if m.Method != "" {
			n.notes = append(n.notes, m)
			continue
		}
		require.Equal(n.t, fmt.Sprint(id), string(m.ID))
		require.Nil(n.t, m.Error, "%s failed: %+v", method, m.Error)
		if out != nil {
			require.NoError(n.t, json.Unmarshal(m.Result, out))
		}
		return m
	}
}

func (n *noteDaemon) callErr(method string, params any) *rpcErr {
	n.t.Helper()
	id := n.send(method, params, nil)
	for {
		m := n.read()
		if m.Method != "" {
			n.notes = append(n.notes, m)
			continue
		}
		require.Equal(n.t, fmt.Sprint(id), string(m.ID))
		require.NotNil(n.t, m.Error, "%s: expected an error, got %s", method, m.Result)
		return m.Error
	}
}

// status calls drift/status.
func (n *noteDaemon) status(params map[string]any) protocol.DriftStatus {
	n.t.Helper()
	var st protocol.DriftStatus
	n.call("drift/status", params, &st)
	return st
}

// nextChange returns the next drift/changed notification of watchID (waiting up to 20 s).
func (n *noteDaemon) nextChange(watchID string) protocol.DriftChangedEvent {
	n.t.Helper()
	for {
		var m msg
		if len(n.notes) > 0 {
			m, n.notes = n.notes[0], n.notes[1:]
		} else {
			m = n.read()
		}
		if m.Method != protocol.NotifyDriftChanged {
			continue
		}
		var ev protocol.DriftChangedEvent
		require.NoError(n.t, json.Unmarshal(m.Params, &ev))
		if ev.WatchID == watchID {
			return ev
		}
	}
}

// changeOf waits for the notification that mentions path and returns that change and event.
func (n *noteDaemon) changeOf(watchID, path string) (drift.Change, protocol.DriftChangedEvent) {
	n.t.Helper()
	for {
		ev := n.nextChange(watchID)
		for _, c := range ev.Changes {
			if c.Path == path {
				return c, ev
			}
		}
	}
}

// quiet asserts no drift/changed for watchID arrives within d (a stats round trip fences it).
func (n *noteDaemon) quiet(watchID string, d time.Duration) {
	n.t.Helper()
	time.Sleep(d)
	n.call("stats", nil, nil)
	for _, m := range n.notes {
		if m.Method == protocol.NotifyDriftChanged {
			var ev protocol.DriftChangedEvent
			require.NoError(n.t, json.Unmarshal(m.Params, &ev))
			assert.NotEqual(n.t, watchID, ev.WatchID, "unexpected notification %s", m.Params)
		}
	}
	n.notes = nil
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	require.NoError(t, os.Chmod(path, 0o644))
}

// sourceTree makes dir/src with n files (a/f000.py ...), a .gitignore and an ignored file.
func sourceTree(t *testing.T, dir string, n int) string {
	t.Helper()
	src := filepath.Join(dir, "src")
	for i := range n {
		writeFile(t, filepath.Join(src, fmt.Sprintf("pkg%d/f%03d.py", i%4, i)), fmt.Sprintf("def f%d():\n    return %d\n", i, i))
	}
	writeFile(t, filepath.Join(src, "agent.py"), "def fetch():\n    return 'v1'\n")
	writeFile(t, filepath.Join(src, ".gitignore"), "*.log\n__pycache__/\n")
	writeFile(t, filepath.Join(src, "run.log"), "ignored\n")
	return src
}

func paths(fcs []protocol.DriftFileChange) []string {
	out := []string{}
	for _, fc := range fcs {
		out = append(out, fc.Path)
	}
	return out
}

func TestDriftStatusAndResumePlan(t *testing.T) {
	dir := t.TempDir()
	src := sourceTree(t, dir, 10)
	d := &noteDaemon{daemon: startDaemon(t, filepath.Join(dir, "c.db"))}

	var init struct{ Capabilities map[string]any }
	d.call("initialize", map[string]any{"clientName": "drift-e2e"}, &init)
	assert.Equal(t, true, init.Capabilities["drift"])

	var saved struct {
		CheckpointID string
		Sources      protocol.SourcesInfo
	}
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "step": 0, "state": map[string]any{"x": 1},
		"workflowHash": "h1", "sources": map[string]any{"root": src}}, &saved)
	assert.Equal(t, src, saved.Sources.Root)
	assert.Equal(t, 12, saved.Sources.Files, "10 files, agent.py, .gitignore; run.log ignored")
	// a second save: no sources, no fingerprint
	var plain map[string]any
	d.call("checkpoint/save", map[string]any{"workflowId": "other", "state": 1}, &plain)
	assert.NotContains(t, plain, "sources")

	var st protocol.DriftStatus
	st = d.status(map[string]any{"workflowId": "wf"})
	assert.False(t, st.Drifted)
	assert.Equal(t, saved.CheckpointID, st.CheckpointID)
	assert.Equal(t, "wf", st.WorkflowID)
	assert.Equal(t, src, st.Root)
	assert.Equal(t, 12, st.FilesChecked)
	assert.Empty(t, st.Changed)
	assert.NotNil(t, st.Changed, "arrays are never null")
	var plan map[string]any
	d.call("resume/plan", map[string]any{"workflowId": "wf"}, &plan)
	assert.Equal(t, false, plan["drift"].(map[string]any)["drifted"])

	// edit, add, delete; an ignored file and a temp file of an editor do not count
	writeFile(t, filepath.Join(src, "agent.py"), "def fetch():\n    return 'v2!'\n")
	writeFile(t, filepath.Join(src, "pkg1", "new.py"), "x = 1\n")
	require.NoError(t, os.Remove(filepath.Join(src, "pkg2", "f002.py")))
	writeFile(t, filepath.Join(src, "other.log"), "ignored too\n")
	writeFile(t, filepath.Join(src, ".agent.py.swp"), "vim\n")

	for _, target := range []map[string]any{{"workflowId": "wf"}, {"checkpointId": saved.CheckpointID}} {
		st = d.status(target)
		assert.True(t, st.Drifted)
		assert.Equal(t, []string{"agent.py"}, paths(st.Changed))
		assert.Equal(t, []string{"pkg1/new.py"}, paths(st.Added))
		assert.Equal(t, []string{"pkg2/f002.py"}, paths(st.Deleted))
		ch := st.Changed[0]
		assert.EqualValues(t, 29, ch.OldSize)
		assert.EqualValues(t, 30, ch.NewSize)
		assert.Len(t, ch.OldHash, 64)
		assert.NotEqual(t, ch.OldHash, ch.NewHash)
		assert.Equal(t, "file", ch.NewType)
		assert.Equal(t, "0644", ch.NewMode)
		assert.Empty(t, st.Added[0].OldHash)
		assert.EqualValues(t, 6, st.Added[0].NewSize)
		assert.Empty(t, st.Deleted[0].NewHash)
		assert.Equal(t, 12, st.FilesChecked)
	}

	// resume/plan: drift blocks, with the report in the error data
	e := d.callErr("resume/plan", map[string]any{"workflowId": "wf"})
	assert.Equal(t, -32005, e.Code)
	assert.Contains(t, e.Message, "agent.py")
	var data struct {
		Problems []struct{ Code, Message, CheckpointID string }
		Drift    protocol.DriftStatus
	}
	require.NoError(t, json.Unmarshal(e.Data, &data))
	require.Len(t, data.Problems, 1)
	assert.Equal(t, "drift", data.Problems[0].Code)
	assert.Equal(t, saved.CheckpointID, data.Problems[0].CheckpointID)
	assert.Contains(t, data.Problems[0].Message, "1 changed, 1 added, 1 deleted")
	assert.True(t, data.Drift.Drifted)

	// driftAsWarning: the plan, with drift as a warning and the report
	var res struct {
		StartStep int
		Warnings  []struct{ Code string }
		Drift     *protocol.DriftStatus
	}
	d.call("resume/plan", map[string]any{"workflowId": "wf", "driftAsWarning": true}, &res)
	assert.Equal(t, 1, res.StartStep)
	require.Len(t, res.Warnings, 1)
	assert.Equal(t, "drift", res.Warnings[0].Code)
	require.NotNil(t, res.Drift)
	assert.Equal(t, []string{"agent.py"}, paths(res.Drift.Changed))
	// force: the same, the problem turned warning
	res.Warnings = nil
	d.call("resume/plan", map[string]any{"workflowId": "wf", "force": true}, &res)
	require.Len(t, res.Warnings, 1)
	assert.Equal(t, "drift", res.Warnings[0].Code)
	// another problem plus drift: both listed
	e = d.callErr("resume/plan", map[string]any{"workflowId": "wf", "workflowHash": "other", "driftAsWarning": true})
	assert.Equal(t, -32005, e.Code)
	assert.NotContains(t, string(e.Data), `"code":"drift"`, "drift is a warning here")

	// restore everything: clean again
	writeFile(t, filepath.Join(src, "agent.py"), "def fetch():\n    return 'v1'\n")
	require.NoError(t, os.Remove(filepath.Join(src, "pkg1", "new.py")))
	writeFile(t, filepath.Join(src, "pkg2", "f002.py"), "def f2():\n    return 2\n")
	st = d.status(map[string]any{"workflowId": "wf"})
	assert.False(t, st.Drifted, "%+v", st)
	d.call("resume/plan", map[string]any{"workflowId": "wf"}, &plan)

	// the next save records the tree as it is now; namespaces are separate
	writeFile(t, filepath.Join(src, "agent.py"), "v3\n")
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "step": 1, "sources": map[string]any{"root": src}}, &saved)
	st = d.status(map[string]any{"workflowId": "wf"})
	assert.False(t, st.Drifted)
	assert.Equal(t, saved.CheckpointID, st.CheckpointID)
	d.callErr("drift/status", map[string]any{"workflowId": "wf", "namespace": "sub"})
}

func TestDriftBadParams(t *testing.T) {
	dir := t.TempDir()
	src := sourceTree(t, dir, 2)
	d := &noteDaemon{daemon: startDaemon(t, filepath.Join(dir, "c.db"))}
	save := func(sources any) *rpcErr {
		return d.callErr("checkpoint/save", map[string]any{"workflowId": "wf", "state": 1, "sources": sources})
	}
	for _, tc := range []struct {
		name    string
		sources any
		field   string
		reason  string
	}{
		{"missing root", map[string]any{"root": filepath.Join(dir, "nope")}, "sources.root", "does not exist"},
		{"root is a file", map[string]any{"root": filepath.Join(src, "agent.py")}, "sources.root", "is not a directory"},
		{"empty root", map[string]any{"root": ""}, "sources.root", "required"},
		{"no root", map[string]any{"include": []string{"*.py"}}, "sources.root", "required"},
		{"root not a string", map[string]any{"root": 7}, "sources.root", "expected string"},
		{"bad glob", map[string]any{"root": src, "include": []string{"ok/**", "[bad"}}, "sources.include[1]", "not a valid glob"},
		{"absolute pattern", map[string]any{"root": src, "exclude": []string{"/abs"}}, "sources.exclude[0]", "relative"},
		{"include element not a string", map[string]any{"root": src, "include": []any{"ok/**", 1}}, "sources.include[1]", "expected string"},
		{"exclude element not a string", map[string]any{"root": src, "exclude": []any{map[string]any{}}}, "sources.exclude[0]", "expected string"},
		{"include not an array", map[string]any{"root": src, "include": "*.py"}, "sources.include", "expected array"},
		{"limits not an object", map[string]any{"root": src, "limits": 5}, "sources.limits", "expected object"},
		{"pseudo file system", map[string]any{"root": "/proc"}, "sources.root", "pseudo file system"},
		{"array", []string{src}, "sources", "must be an object"},
		{"string", src, "sources", "must be an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := save(tc.sources)
			assert.Equal(t, -32602, e.Code, e.Message)
			assert.Contains(t, e.Message, tc.field)
			assert.Contains(t, e.Message, tc.reason)
			var data struct{ Field, Reason string }
			require.NoError(t, json.Unmarshal(e.Data, &data))
			assert.Equal(t, tc.field, data.Field)
		})
	}
	var list struct{ Checkpoints []any }
	d.call("checkpoint/list", map[string]any{"workflowId": "wf"}, &list)
	assert.Empty(t, list.Checkpoints, "a save with bad sources stores nothing")

	// configure validates the same way
	e := d.callErr("workflow/configure", map[string]any{"workflowId": "wf", "sources": map[string]any{"root": filepath.Join(dir, "nope")}})
	assert.Equal(t, -32602, e.Code)
	assert.Contains(t, e.Message, "sources.root")

	// drift methods
	var saved struct{ CheckpointID string }
	d.call("checkpoint/save", map[string]any{"workflowId": "plain", "state": 1}, &saved)
	e = d.callErr("drift/status", map[string]any{"checkpointId": saved.CheckpointID})
	assert.Equal(t, -32602, e.Code)
	assert.Contains(t, e.Message, "no sources recorded for checkpoint")
	e = d.callErr("drift/status", map[string]any{"workflowId": "plain"})
	assert.Equal(t, -32602, e.Code)
	assert.Contains(t, e.Message, "workflowId: no sources recorded")
	e = d.callErr("drift/watch", map[string]any{"workflowId": "plain"})
	assert.Equal(t, -32602, e.Code)
	for _, tc := range []struct {
		method string
		params map[string]any
		code   int
		text   string
	}{
		{"drift/status", map[string]any{"checkpointId": "nope"}, -32001, "nope"},
		{"drift/status", map[string]any{"workflowId": "nope"}, -32001, "nope"},
		{"drift/status", map[string]any{}, -32602, "checkpointId: required"},
		{"drift/status", map[string]any{"workflowId": "a", "checkpointId": "b"}, -32602, "not both"},
		{"drift/watch", map[string]any{"workflowId": "plain", "debounceMs": 0}, -32602, "debounceMs"},
		{"drift/watch", map[string]any{"workflowId": "plain", "debounceMs": "x"}, -32602, "debounceMs"},
		{"drift/unwatch", map[string]any{}, -32602, "watchId: required"},
		{"drift/unwatch", map[string]any{"watchId": "w-99"}, -32001, "w-99"},
	} {
		e := d.callErr(tc.method, tc.params)
		assert.Equal(t, tc.code, e.Code, "%s %v: %s", tc.method, tc.params, e.Message)
		assert.Contains(t, e.Message, tc.text)
	}
	// the daemon keeps serving
	d.call("stats", nil, nil)
}

// TestDriftTreeProblems: symlink loops and dangling links are recorded, never followed;
// unreadable files are warnings; nothing hangs.
func TestDriftTreeProblems(t *testing.T) {
	dir := t.TempDir()
	src := sourceTree(t, dir, 3)
	require.NoError(t, os.Symlink("loop-b", filepath.Join(src, "loop-a")))
	require.NoError(t, os.Symlink("loop-a", filepath.Join(src, "loop-b")))
	require.NoError(t, os.Symlink(".", filepath.Join(src, "self")))
	require.NoError(t, os.Symlink("/nonexistent/target", filepath.Join(src, "dangling")))
	unreadable := os.Geteuid() != 0 // root reads anything
	if unreadable {
		writeFile(t, filepath.Join(src, "secret.py"), "x\n")
		require.NoError(t, os.Chmod(filepath.Join(src, "secret.py"), 0))
	}
	d := &noteDaemon{daemon: startDaemon(t, filepath.Join(dir, "c.db"))}
	var saved struct{ Sources protocol.SourcesInfo }
	start := time.Now()
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "sources": map[string]any{"root": src}}, &saved)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.GreaterOrEqual(t, saved.Sources.Files, 9) // 5 files + 4 symlinks (+ secret.py)
	if unreadable {
		assert.Contains(t, strings.Join(saved.Sources.Warnings, "\n"), "secret.py")
	}
	var st protocol.DriftStatus
	st = d.status(map[string]any{"workflowId": "wf"})
	assert.False(t, st.Drifted)
	// retargeting a symlink is a change
	require.NoError(t, os.Remove(filepath.Join(src, "dangling")))
	require.NoError(t, os.Symlink("agent.py", filepath.Join(src, "dangling")))
	st = d.status(map[string]any{"workflowId": "wf"})
	assert.Equal(t, []string{"dangling"}, paths(st.Changed))
	assert.Equal(t, "symlink", st.Changed[0].NewType)

	// the root itself vanishing: every file deleted, with a warning, not an error
	require.NoError(t, os.Rename(src, src+".moved"))
	st = d.status(map[string]any{"workflowId": "wf"})
	assert.True(t, st.Drifted)
	assert.Len(t, st.Deleted, saved.Sources.Files)
	assert.Contains(t, strings.Join(st.Warnings, "\n"), "no longer exists")
	e := d.callErr("drift/watch", map[string]any{"workflowId": "wf"})
	assert.Equal(t, -32602, e.Code)
	assert.Contains(t, e.Message, "sources.root")
}

func TestDriftWatch(t *testing.T) {
	dir := t.TempDir()
	src := sourceTree(t, dir, 6)
	d := &noteDaemon{daemon: startDaemon(t, filepath.Join(dir, "c.db"))}
	// notifications need no opt-in, and naming drift/changed in events is accepted
	d.call("initialize", map[string]any{"events": []string{"checkpoint/saved", "drift/changed"}}, nil)
	var saved struct{ CheckpointID string }
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "state": 1, "sources": map[string]any{"root": src}}, &saved)

	var w protocol.DriftWatchResult
	d.call("drift/watch", map[string]any{"workflowId": "wf", "debounceMs": 20}, &w)
	assert.NotEmpty(t, w.WatchID)
	assert.Equal(t, saved.CheckpointID, w.CheckpointID)
	assert.Equal(t, src, w.Root)
	d.quiet(w.WatchID, 100*time.Millisecond) // clean at the start: no notification

	// edit -> changed
	agent := filepath.Join(src, "agent.py")
	writeFile(t, agent, "def fetch():\n    return 'v2'\n")
	c, ev := d.changeOf(w.WatchID, "agent.py")
	assert.Equal(t, drift.KindChanged, c.Kind)
	assert.True(t, ev.Drifted)
	assert.Equal(t, saved.CheckpointID, ev.CheckpointID)
	// drift/status is answered from the watch
	var st protocol.DriftStatus
	st = d.status(map[string]any{"checkpointId": saved.CheckpointID})
	assert.True(t, st.Watched)
	assert.True(t, st.Drifted)
	assert.Equal(t, []string{"agent.py"}, paths(st.Changed))
	assert.Less(t, st.ElapsedMs, 50.0)

	// restore -> restored, no drift left
	writeFile(t, agent, "def fetch():\n    return 'v1'\n")
	c, ev = d.changeOf(w.WatchID, "agent.py")
	assert.Equal(t, drift.KindRestored, c.Kind)
	assert.False(t, ev.Drifted)

	// add then delete, rename
	writeFile(t, filepath.Join(src, "pkg0", "extra.py"), "pass\n")
	c, _ = d.changeOf(w.WatchID, "pkg0/extra.py")
	assert.Equal(t, drift.KindAdded, c.Kind)
	require.NoError(t, os.Remove(filepath.Join(src, "pkg0", "extra.py")))
	c, _ = d.changeOf(w.WatchID, "pkg0/extra.py")
	assert.Equal(t, drift.KindRestored, c.Kind)
	require.NoError(t, os.Rename(filepath.Join(src, "pkg1", "f001.py"), filepath.Join(src, "pkg1", "g001.py")))
	c, ev = d.changeOf(w.WatchID, "pkg1/g001.py")
	assert.Equal(t, drift.KindRenamed, c.Kind)
	assert.Equal(t, "pkg1/f001.py", c.From)
	assert.True(t, ev.Drifted)
	require.NoError(t, os.Rename(filepath.Join(src, "pkg1", "g001.py"), filepath.Join(src, "pkg1", "f001.py")))
	d.changeOf(w.WatchID, "pkg1/f001.py")

	// a second watch on the same checkpoint, then unwatch the first: it goes quiet
	var w2 protocol.DriftWatchResult
	d.call("drift/watch", map[string]any{"checkpointId": saved.CheckpointID}, &w2)
	assert.NotEqual(t, w.WatchID, w2.WatchID)
	var empty map[string]any
	d.call("drift/unwatch", map[string]any{"watchId": w.WatchID}, &empty)
	assert.Empty(t, empty)
	writeFile(t, agent, "edited after unwatch\n")
	c, _ = d.changeOf(w2.WatchID, "agent.py")
	assert.Equal(t, drift.KindChanged, c.Kind)
	d.quiet(w.WatchID, 150*time.Millisecond)
	e := d.callErr("drift/unwatch", map[string]any{"watchId": w.WatchID})
	assert.Equal(t, -32001, e.Code)

	// a watch started on a tree that already drifted says so at once (rescan "initial scan")
	var w3 protocol.DriftWatchResult
	d.call("drift/watch", map[string]any{"workflowId": "wf"}, &w3)
	ev = d.nextChange(w3.WatchID)
	assert.True(t, ev.Rescan)
	assert.Equal(t, "initial scan", ev.Reason)
	assert.True(t, ev.Drifted)
	assert.Equal(t, []drift.Change{{Path: "agent.py", Kind: drift.KindChanged}}, ev.Changes)

	// closing the connection ends the watches and the daemon exits cleanly
	require.NoError(t, d.stdin.Close())
	require.NoError(t, waitExit(d.cmd, 10*time.Second))
}

func TestDriftWatchLimit(t *testing.T) {
	dir := t.TempDir()
	src := sourceTree(t, dir, 1)
	d := &noteDaemon{daemon: startDaemon(t, filepath.Join(dir, "c.db"))}
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "sources": map[string]any{"root": src}}, nil)
	var ids []string
	for range 16 {
		var w protocol.DriftWatchResult
		d.call("drift/watch", map[string]any{"workflowId": "wf"}, &w)
		ids = append(ids, w.WatchID)
	}
	e := d.callErr("drift/watch", map[string]any{"workflowId": "wf"})
	assert.Equal(t, -32004, e.Code)
	assert.Contains(t, e.Message, "too many drift watches")
	var data struct{ Limit, Size int }
	require.NoError(t, json.Unmarshal(e.Data, &data))
	assert.Equal(t, 16, data.Limit)
	d.call("drift/unwatch", map[string]any{"watchId": ids[3]}, nil)
	d.call("drift/watch", map[string]any{"workflowId": "wf"}, nil)
	d.call("shutdown", nil, nil)
	require.NoError(t, waitExit(d.cmd, 10*time.Second))
}

// TestDriftSecondProcess: an editor tool runs its own ckptd on the agent's database: drift/status
// and drift/watch work there from the stored manifest.
func TestDriftSecondProcess(t *testing.T) {
	dir := t.TempDir()
	src := sourceTree(t, dir, 5)
	db := filepath.Join(dir, "c.db")
	agent := &noteDaemon{daemon: startDaemon(t, db)}
	var saved struct{ CheckpointID string }
	agent.call("checkpoint/save", map[string]any{"workflowId": "wf", "step": 2, "state": 1, "sources": map[string]any{"root": src}}, &saved)

	editor := &noteDaemon{daemon: startDaemon(t, db)}
	var st protocol.DriftStatus
	st = editor.status(map[string]any{"workflowId": "wf"})
	assert.False(t, st.Drifted)
	assert.Equal(t, saved.CheckpointID, st.CheckpointID)
	assert.Equal(t, 7, st.FilesChecked)
	var w protocol.DriftWatchResult
	editor.call("drift/watch", map[string]any{"workflowId": "wf", "debounceMs": 10}, &w)

	writeFile(t, filepath.Join(src, "pkg3", "f003.py"), "changed\n")
	c, ev := editor.changeOf(w.WatchID, "pkg3/f003.py")
	assert.Equal(t, drift.KindChanged, c.Kind)
	assert.True(t, ev.Drifted)
	st = editor.status(map[string]any{"checkpointId": saved.CheckpointID})
	assert.True(t, st.Watched)
	assert.Equal(t, []string{"pkg3/f003.py"}, paths(st.Changed))
	// the agent's process sees the same (by checking), and got no notification
	st = agent.status(map[string]any{"workflowId": "wf"})
	assert.False(t, st.Watched)
	assert.Equal(t, []string{"pkg3/f003.py"}, paths(st.Changed))
	e := agent.callErr("resume/plan", map[string]any{"workflowId": "wf"})
	assert.Equal(t, -32005, e.Code)
	for _, m := range agent.notes {
		assert.NotEqual(t, protocol.NotifyDriftChanged, m.Method)
	}
	// a new save in the agent's process: the editor's plan/status follow the latest checkpoint
	agent.call("checkpoint/save", map[string]any{"workflowId": "wf", "step": 3, "state": 1, "sources": map[string]any{"root": src}}, &saved)
	st = editor.status(map[string]any{"workflowId": "wf"})
	assert.False(t, st.Drifted)
	assert.Equal(t, saved.CheckpointID, st.CheckpointID)
}

func TestDriftConfiguredSources(t *testing.T) {
	dir := t.TempDir()
	src := sourceTree(t, dir, 3)
	d := &noteDaemon{daemon: startDaemon(t, filepath.Join(dir, "c.db"))}
	var cfg struct {
		Retention map[string]any
		Sources   map[string]any
	}
	d.call("workflow/configure", map[string]any{"workflowId": "wf", "sources": map[string]any{"root": src, "exclude": []string{"pkg2"}}}, &cfg)
	assert.Equal(t, src, cfg.Sources["root"])
	assert.Equal(t, true, cfg.Sources["gitignore"], "gitignore defaults to true")
	assert.NotNil(t, cfg.Retention)
	// retention-only configure keeps the sources and reports them
	cfg.Sources = nil
	d.call("workflow/configure", map[string]any{"workflowId": "wf", "retention": map[string]any{"keepLast": 5}}, &cfg)
	assert.Equal(t, src, cfg.Sources["root"])

	var saved struct {
		CheckpointID string
		Sources      *protocol.SourcesInfo
	}
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "state": 1}, &saved)
	require.NotNil(t, saved.Sources)
	assert.Equal(t, 4, saved.Sources.Files, "pkg2 excluded: 2 files, agent.py, .gitignore")
	writeFile(t, filepath.Join(src, "pkg2", "f002.py"), "excluded: no drift\n")
	writeFile(t, filepath.Join(src, "pkg0", "f000.py"), "drift\n")
	var st protocol.DriftStatus
	st = d.status(map[string]any{"workflowId": "wf"})
	assert.Equal(t, []string{"pkg0/f000.py"}, paths(st.Changed))
	assert.Empty(t, st.Added)

	// an explicit sources param wins over the configured one
	other := filepath.Join(dir, "other")
	writeFile(t, filepath.Join(other, "x.txt"), "x\n")
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "state": 2, "sources": map[string]any{"root": other}}, &saved)
	assert.Equal(t, 1, saved.Sources.Files)
	assert.Equal(t, other, saved.Sources.Root)

	// the configured root vanishing never blocks a save: it is saved without a fingerprint
	require.NoError(t, os.RemoveAll(src))
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "state": 3}, &saved)
	require.NotNil(t, saved.Sources)
	assert.Contains(t, saved.Sources.Error, "does not exist")
	e := d.callErr("drift/status", map[string]any{"checkpointId": saved.CheckpointID})
	assert.Contains(t, e.Message, "no sources recorded")

	// sources: null removes them
	cfg.Sources = nil
	d.call("workflow/configure", map[string]any{"workflowId": "wf", "sources": nil}, &cfg)
	assert.Nil(t, cfg.Sources)
	var plain map[string]any
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "state": 4}, &plain)
	assert.NotContains(t, plain, "sources")
}

// TestCLIDrift: ckptd drift prints drift/status's answer; exit 0 clean, 1 drifted, 2 usage.
func TestCLIDrift(t *testing.T) {
	db := newCLIDB(t, nil)
	src := filepath.Join(db.dir, "src")
	writeFile(t, filepath.Join(src, "agent.py"), "def fetch():\n    return 'v1'\n")
	writeFile(t, filepath.Join(src, "lib", "util.py"), "def util():\n    pass\n")
	writeFile(t, filepath.Join(src, "old.py"), "old\n")
	m, err := drift.Scan(t.Context(), drift.Spec{Root: src, Gitignore: true}, nil, drift.ScanOptions{})
	require.NoError(t, err)
	enc, err := drift.EncodeManifest(m, nil)
	require.NoError(t, err)
	db.save(store.SaveRequest{WorkflowID: "wf-src", CheckpointID: "c-1", Phase: store.PhaseCompleted, Step: 2,
		StepName: "analyze", State: []byte(`{}`), StateType: store.StateJSON, Manifest: engine.ManifestRecord(enc)})
	db.save(store.SaveRequest{WorkflowID: "wf-plain", CheckpointID: "p-1", State: []byte(`{}`), StateType: store.StateJSON})
	db.close()
	ms := []string{`"elapsedMs": [0-9.e+-]+`, `"elapsedMs": $$MS`}

	cliGolden(t, "drift-clean", db.dir, cliRun(t, nil, "drift", "wf-src", "--db", db.path))
	writeFile(t, filepath.Join(src, "agent.py"), "def fetch():\n    return 'v2!'\n")
	writeFile(t, filepath.Join(src, "lib", "new.py"), "new\n")
	require.NoError(t, os.Remove(filepath.Join(src, "old.py")))
	cliGolden(t, "drift", db.dir, cliRun(t, nil, "drift", "wf-src", "--db", db.path))
	cliGolden(t, "drift-json", db.dir, cliRun(t, nil, "drift", "wf-src", "--json", "--db", db.path), ms...)
	cliGolden(t, "drift-checkpoint", db.dir, cliRun(t, nil, "drift", "wf-src", "--checkpoint", "c-1", "--db", db.path))
	cliGolden(t, "drift-no-sources", db.dir, cliRun(t, nil, "drift", "wf-plain", "--db", db.path))
	// no sources recorded is neither "no drift" (0) nor "drifted" (1): exit 3 (#19 point 7)
	res := cliRun(t, nil, "drift", "wf-plain", "--json", "--db", db.path)
	cliGolden(t, "drift-no-sources-json", db.dir, res)
	assert.Equal(t, exitNoSources, res.code)
	cliGolden(t, "drift-unknown", db.dir, cliRun(t, nil, "drift", "nope", "--db", db.path))
	cliGolden(t, "drift-usage", db.dir, cliRun(t, nil, "drift", "--db", db.path))
	cliGolden(t, "drift-usage-both", db.dir, cliRun(t, nil, "drift", "wf-src", "--checkpoint", "c-1", "--namespace", "x", "--db", db.path))
	// ckptd plan reports the drift as a problem (or a warning)
	res = cliRun(t, nil, "plan", "wf-src", "--db", db.path)
	assert.Equal(t, exitProblem, res.code)
	assert.Contains(t, res.stdout, "drift ")
	assert.Contains(t, res.stdout, "agent.py (changed)")
	res = cliRun(t, nil, "plan", "wf-src", "--drift-as-warning", "--json", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stdout)
	var pr planReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &pr))
	require.Len(t, pr.Warnings, 1)
	assert.Equal(t, "drift", pr.Warnings[0].Code)
	require.NotNil(t, pr.Drift)
	assert.True(t, pr.Drift.Drifted)

	// --sources-root: the tree as it was, checked out elsewhere, has not drifted
	checkout := filepath.Join(db.dir, "checkout")
	writeFile(t, filepath.Join(checkout, "agent.py"), "def fetch():\n    return 'v1'\n")
	writeFile(t, filepath.Join(checkout, "lib", "util.py"), "def util():\n    pass\n")
	writeFile(t, filepath.Join(checkout, "old.py"), "old\n")
	res = cliRun(t, nil, "drift", "wf-src", "--sources-root", checkout, "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stdout+res.stderr)
	assert.Contains(t, res.stdout, "sources      "+checkout+" (3 files checked)")
	assert.Contains(t, res.stdout, "recorded at  "+src)
	assert.Contains(t, res.stdout, "drifted      no")
	res = cliRun(t, nil, "plan", "wf-src", "--sources-root", checkout, "--json", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stdout+res.stderr)
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &pr))
	assert.Empty(t, pr.Warnings)
	assert.Equal(t, src, pr.Drift.RecordedRoot)
	writeFile(t, filepath.Join(checkout, "old.py"), "changed\n")
	res = cliRun(t, nil, "drift", "wf-src", "--sources-root", checkout, "--json", "--db", db.path)
	assert.Equal(t, exitProblem, res.code)
	var ds protocol.DriftStatus
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &ds))
	assert.Equal(t, []string{"old.py"}, []string{ds.Changed[0].Path})
	for _, cmd := range []string{"drift", "plan"} {
		res = cliRun(t, nil, cmd, "wf-src", "--sources-root", filepath.Join(db.dir, "missing"), "--db", db.path)
		assert.Equal(t, exitUsage, res.code)
		assert.Contains(t, res.stderr, "--sources-root: directory")
	}
}
