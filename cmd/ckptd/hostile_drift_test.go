package main

// End-to-end tests of the drift side of issue #20 ("hold under hostile conditions"): source
// scans bounded by files, bytes and time (checked while a file is hashed), pseudo file
// systems refused as roots, sparse files, drift watches when file descriptors run out, and a
// tree that could not be read never reported as "no drift". Real subprocesses, real files.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/protocol"
)

// nofileEnv makes the test binary a launcher: with CKPTD_TEST_NOFILE=N in its environment
// it lowers RLIMIT_NOFILE (soft and hard, so the Go runtime of the child cannot raise it
// again) to N and execs its arguments. init runs before TestMain, so nothing else starts.
const nofileEnv = "CKPTD_TEST_NOFILE"

func init() {
	n := os.Getenv(nofileEnv)
	if n == "" {
		return
	}
	lim, err := strconv.ParseUint(n, 10, 64)
	if err == nil {
		err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: lim, Max: lim})
	}
	if err == nil {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, nofileEnv+"=") {
				env = append(env, kv)
			}
		}
		err = syscall.Exec(os.Args[1], os.Args[1:], env)
	}
	fmt.Fprintln(os.Stderr, "nofile launcher:", err)
	os.Exit(127)
}

// startDaemonCmd starts cmd (a ckptd serve) as startDaemon does.
func startDaemonCmd(t *testing.T, cmd *exec.Cmd) *daemon {
	t.Helper()
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

// startDaemonNofile starts ckptd with RLIMIT_NOFILE lowered to n.
func startDaemonNofile(t *testing.T, n int, db string, args ...string) *daemon {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, append([]string{binPath, "--db", db}, args...)...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", nofileEnv, n))
	return startDaemonCmd(t, cmd)
}

type errData struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
	Limit  string `json:"limit"`
	Value  int64  `json:"value"`
}

func dataOf(t *testing.T, e *rpcErr) errData {
	t.Helper()
	var d errData
	if len(e.Data) > 0 {
		require.NoError(t, json.Unmarshal(e.Data, &d), "%s", e.Data)
	}
	return d
}

// genTree writes n small files spread over n/50 directories under dir/tree.
func genTree(t *testing.T, dir string, n int) string {
	t.Helper()
	root := filepath.Join(dir, "tree")
	for i := range n {
		writeFile(t, filepath.Join(root, fmt.Sprintf("d%03d/f%05d.txt", i/50, i)), fmt.Sprintf("file %d\n", i))
	}
	return root
}

// sparseFile makes a file of size bytes with only a few KB allocated.
func sparseFile(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("data at the start\n"), 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("data in the middle\n"), size/2)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
}

// TestDriftScanBounds: a save's scan stops at its bounds (files, bytes, time) with -32006
// naming the bound, the time bound checked while one file is hashed; the defaults and the
// overrides of sources.limits; bad limits are -32602 naming the field.
func TestDriftScanBounds(t *testing.T) {
	dir := t.TempDir()
	many := genTree(t, dir, 1200) // 1200 files in 24 directories: stands in for "/"
	big := filepath.Join(dir, "big")
	writeFile(t, filepath.Join(big, "small.txt"), "x\n")
	writeFile(t, filepath.Join(big, "a.bin"), strings.Repeat("a", 3<<20))
	slow := filepath.Join(dir, "slow")
	writeFile(t, filepath.Join(slow, "small.txt"), "x\n")
	sparseFile(t, filepath.Join(slow, "huge.img"), 1<<40) // 1 TiB, hashing its zeros takes minutes

	d := &noteDaemon{daemon: startDaemon(t, filepath.Join(dir, "c.db"))}
	save := func(wf string, sources map[string]any) (*rpcErr, time.Duration) {
		t0 := time.Now()
		id := d.send("checkpoint/save", map[string]any{"workflowId": wf, "state": 1, "sources": sources}, nil)
		m := d.response()
		require.Equal(t, fmt.Sprint(id), string(m.ID))
		return m.Error, time.Since(t0)
	}

	// within the defaults: fine
	e, _ := save("wf-ok", map[string]any{"root": many})
	require.Nil(t, e)

	for _, tc := range []struct {
		name   string
		root   string
		limits map[string]any
		bound  string
		within time.Duration
	}{
		{"files", many, map[string]any{"maxFiles": 100}, "maxFiles", 10 * time.Second},
		{"bytes", big, map[string]any{"maxBytes": 1 << 20}, "maxBytes", 10 * time.Second},
		// 1 TiB sparse file under the default maxBytes: refused before it is read
		{"bytes, default", slow, nil, "maxBytes", 10 * time.Second},
		// the time bound is checked while the 1 TiB file is hashed, not only between files
		{"time, mid-file", slow, map[string]any{"maxBytes": 1 << 41, "timeoutMs": 300}, "timeoutMs", 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := map[string]any{"root": tc.root}
			if tc.limits != nil {
				src["limits"] = tc.limits
			}
			e, took := save("wf-"+tc.bound, src)
			require.NotNil(t, e, "the scan should have hit %s", tc.bound)
			t.Logf("%s: answered in %v: %s", tc.name, took, e.Message)
			assert.Equal(t, -32006, e.Code, e.Message)
			assert.Contains(t, e.Message, "sources.limits."+tc.bound)
			assert.Equal(t, tc.bound, dataOf(t, e).Limit)
			assert.Less(t, took, tc.within)
		})
	}
	var list struct{ Checkpoints []any }
	d.call("checkpoint/list", map[string]any{"workflowId": "wf-maxFiles"}, &list)
	assert.Empty(t, list.Checkpoints, "a save whose scan failed stores nothing")

	// raising a bound lets the same save through; configured limits apply to later saves
	e, _ = save("wf-raised", map[string]any{"root": big, "limits": map[string]any{"maxBytes": 8 << 20}})
	assert.Nil(t, e)
	d.call("workflow/configure", map[string]any{"workflowId": "wf-conf", "sources": map[string]any{"root": many, "limits": map[string]any{"maxFiles": 10}}}, nil)
	var saved struct{ Sources protocol.SourcesInfo }
	d.call("checkpoint/save", map[string]any{"workflowId": "wf-conf", "state": 1}, &saved)
	assert.Contains(t, saved.Sources.Error, "sources.limits.maxFiles", "configured sources over their bound: saved without a fingerprint")

	// bad limits name the field
	for _, tc := range []struct {
		limits any
		field  string
	}{
		{map[string]any{"maxFiles": 0}, "sources.limits.maxFiles"},
		{map[string]any{"maxBytes": -1}, "sources.limits.maxBytes"},
		{map[string]any{"timeoutMs": "x"}, "sources.limits.timeoutMs"},
		{map[string]any{"timeoutMs": 1e12}, "sources.limits.timeoutMs"},
		{"fast", "sources.limits"},
	} {
		e, _ := save("wf-bad", map[string]any{"root": many, "limits": tc.limits})
		require.NotNil(t, e, "%v", tc.limits)
		assert.Equal(t, -32602, e.Code, e.Message)
		assert.Equal(t, tc.field, dataOf(t, e).Field, e.Message)
	}
	d.call("stats", nil, nil)
}

// TestDriftSparseFile: a sparse file is fingerprinted from what is allocated (its holes are
// hashed as zeros without being read), with the hash of its content: the same bytes written
// densely are no change, one byte in a hole is. (BenchmarkHashSparse has the speed.)
func TestDriftSparseFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	writeFile(t, filepath.Join(src, "a.txt"), "a\n")
	img := filepath.Join(src, "disk.img")
	sparseFile(t, img, 256<<20)
	d := &noteDaemon{daemon: startDaemon(t, filepath.Join(dir, "c.db"))}
	t0 := time.Now()
	var saved struct{ Sources protocol.SourcesInfo }
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "state": 1, "sources": map[string]any{"root": src}}, &saved)
	t.Logf("256 MiB sparse file fingerprinted in %v", time.Since(t0))
	assert.Equal(t, 2, saved.Sources.Files)
	st := d.status(map[string]any{"workflowId": "wf"})
	assert.False(t, st.Drifted)
	writeAt := func(b []byte, off int64) {
		f, err := os.OpenFile(img, os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	writeAt(make([]byte, 1<<20), 64<<20) // zeros over a hole: allocated now, same content
	st = d.status(map[string]any{"workflowId": "wf"})
	assert.False(t, st.Drifted, "%+v", st)
	writeAt([]byte{1}, 192<<20)
	st = d.status(map[string]any{"workflowId": "wf"})
	assert.Equal(t, []string{"disk.img"}, paths(st.Changed))
	// a check is bounded like a save: drift/status takes limits (the file changed again, so
	// it must be hashed again)
	writeAt([]byte{2}, 200<<20)
	e := d.callErr("drift/status", map[string]any{"workflowId": "wf", "limits": map[string]any{"maxBytes": 128 << 20}})
	assert.Equal(t, -32006, e.Code)
	assert.Contains(t, e.Message, "limits.maxBytes")
	assert.Equal(t, "maxBytes", dataOf(t, e).Limit)
}

// TestDriftPseudoFileSystemRoots: /proc, /sys and /dev (whatever their mount) are refused
// as roots, fast, with -32602 naming sources.root.
func TestDriftPseudoFileSystemRoots(t *testing.T) {
	dir := t.TempDir()
	d := &noteDaemon{daemon: startDaemon(t, filepath.Join(dir, "c.db"))}
	for _, root := range []string{"/proc", "/proc/self", "/sys", "/sys/kernel", "/dev", "/dev/shm"} {
		if _, err := os.Stat(root); err != nil {
			continue
		}
		t0 := time.Now()
		e := d.callErr("checkpoint/save", map[string]any{"workflowId": "wf", "state": 1, "sources": map[string]any{"root": root}})
		assert.Equal(t, -32602, e.Code, "%s: %s", root, e.Message)
		assert.Equal(t, "sources.root", dataOf(t, e).Field, "%s: %s", root, e.Message)
		assert.Contains(t, e.Message, "pseudo file system", root)
		assert.Less(t, time.Since(t0), 5*time.Second)
		e = d.callErr("workflow/configure", map[string]any{"workflowId": "wf", "sources": map[string]any{"root": root}})
		assert.Equal(t, "sources.root", dataOf(t, e).Field, "%s: %s", root, e.Message)
	}
	d.call("stats", nil, nil)
}

// TestDriftWatchesWhenFileDescriptorsRunOut: with RLIMIT_NOFILE at 24 or 32 and 20 trees
// watched, editing a file in each tree must never take the daemon down: each watch reports
// the change or says it stopped; a watch that cannot start is -32006 blaming the open-file
// limit (not fs.inotify.max_user_instances) or -32004 past the 16-watch cap.
func TestDriftWatchesWhenFileDescriptorsRunOut(t *testing.T) {
	for _, nofile := range []int{24, 32} {
		t.Run(fmt.Sprintf("nofile=%d", nofile), func(t *testing.T) {
			dir := t.TempDir()
			const trees = 20
			srcs := make([]string, trees)
			for i := range trees {
				srcs[i] = sourceTree(t, filepath.Join(dir, fmt.Sprintf("t%02d", i)), 3)
			}
			d := &noteDaemon{daemon: startDaemonNofile(t, nofile, filepath.Join(dir, "c.db"))}
			for i, src := range srcs {
				d.call("checkpoint/save", map[string]any{"workflowId": fmt.Sprintf("wf%02d", i), "state": 1, "sources": map[string]any{"root": src}}, nil)
			}
			watches := map[string]int{}
			sawFdLimit := false
			for i := range trees {
				id := d.send("drift/watch", map[string]any{"workflowId": fmt.Sprintf("wf%02d", i), "debounceMs": 20}, nil)
				m := d.response()
				require.Equal(t, fmt.Sprint(id), string(m.ID))
				if m.Error == nil {
					var w protocol.DriftWatchResult
					require.NoError(t, json.Unmarshal(m.Result, &w))
					watches[w.WatchID] = i
					continue
				}
				switch m.Error.Code {
				case -32004:
				case -32006:
					sawFdLimit = true
					assert.Contains(t, m.Error.Message, "open files", m.Error.Message)
					assert.NotContains(t, m.Error.Message, "max_user_instances", m.Error.Message)
				default:
					t.Fatalf("drift/watch: %+v", m.Error)
				}
			}
			t.Logf("%d watches started, fd limit hit: %v", len(watches), sawFdLimit)
			if nofile >= 32 {
				require.NotEmpty(t, watches)
			}
			for i, src := range srcs {
				writeFile(t, filepath.Join(src, "agent.py"), fmt.Sprintf("edited %d\n", i))
			}
			// every watch reports the edit, or that it stopped
			pending := maps.Clone(watches)
			stopped := 0
			for len(pending) > 0 {
				m := d.read()
				if m.Method != protocol.NotifyDriftChanged {
					continue
				}
				var ev protocol.DriftChangedEvent
				require.NoError(t, json.Unmarshal(m.Params, &ev))
				if _, ok := pending[ev.WatchID]; !ok {
					continue
				}
				if ev.Stopped {
					assert.NotEmpty(t, ev.Reason)
					t.Logf("%s stopped: %s", ev.WatchID, ev.Reason)
					stopped++
					delete(pending, ev.WatchID)
				} else if slices.Contains(ev.Changes, drift.Change{Path: "agent.py", Kind: drift.KindChanged}) {
					delete(pending, ev.WatchID)
				}
			}
			t.Logf("%d watches reported the edit, %d stopped", len(watches)-stopped, stopped)
			// drift/status answers for every tree, from a watch or from the disk (or -32006
			// when no file descriptor is left even for that)
			for i := range trees {
				id := d.send("drift/status", map[string]any{"workflowId": fmt.Sprintf("wf%02d", i)}, nil)
				m := d.response()
				require.Equal(t, fmt.Sprint(id), string(m.ID))
				if m.Error != nil {
					assert.Equal(t, -32006, m.Error.Code, m.Error.Message)
					continue
				}
				var st protocol.DriftStatus
				require.NoError(t, json.Unmarshal(m.Result, &st))
				assert.True(t, st.Drifted, "tree %d: %+v", i, st)
			}
			d.call("stats", nil, nil)
			require.NoError(t, d.stdin.Close())
			require.NoError(t, waitExit(d.cmd, 10*time.Second))
			assert.NotContains(t, d.stderrText(), "panic")
		})
	}
}

// asNobody runs cmd as an unprivileged user when the test runs as root: root searches
// directories whatever their mode, so chmod 000 would hide nothing from it.
func asNobody(t *testing.T, cmd *exec.Cmd, dirs ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	const uid, gid = 65534, 65534
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	// the binary and the test's directories must be reachable by that user
	require.NoError(t, os.Chmod(filepath.Dir(binPath), 0o755))
	for _, d := range dirs {
		for p := d; p != "/" && p != "."; p = filepath.Dir(p) {
			fi, err := os.Stat(p)
			require.NoError(t, err)
			if fi.Mode().Perm()&0o005 != 0o005 {
				require.NoError(t, os.Chmod(p, fi.Mode().Perm()|0o005))
			}
		}
		require.NoError(t, filepath.Walk(d, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, gid)
		}))
	}
}

// TestDriftUnreadableDirectoryIsDrift: a file changed inside a directory that was then made
// unsearchable (chmod 000) cannot be checked: resume/plan, drift/status and ckptd plan must
// report a drift problem naming it, never "drifted: false".
func TestDriftUnreadableDirectoryIsDrift(t *testing.T) {
	dir := t.TempDir()
	src := sourceTree(t, dir, 8)
	db := filepath.Join(dir, "c.db")
	cmd := exec.Command(binPath, "--db", db)
	asNobody(t, cmd, dir)
	d := &noteDaemon{daemon: startDaemonCmd(t, cmd)}
	d.call("checkpoint/save", map[string]any{"workflowId": "wf", "step": 0, "state": 1, "sources": map[string]any{"root": src}}, nil)
	st := d.status(map[string]any{"workflowId": "wf"})
	require.False(t, st.Drifted)

	writeFile(t, filepath.Join(src, "pkg1", "f001.py"), "changed behind a closed door\n")
	require.NoError(t, os.Chmod(filepath.Join(src, "pkg1"), 0))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(src, "pkg1"), 0o755) })

	st = d.status(map[string]any{"workflowId": "wf"})
	assert.True(t, st.Drifted, "%+v", st)
	assert.Contains(t, st.Unreadable, "pkg1/")
	e := d.callErr("resume/plan", map[string]any{"workflowId": "wf"})
	assert.Equal(t, -32005, e.Code)
	assert.Contains(t, e.Message, "pkg1/")
	var data struct {
		Problems []struct{ Code string }
		Drift    protocol.DriftStatus
	}
	require.NoError(t, json.Unmarshal(e.Data, &data))
	require.Len(t, data.Problems, 1)
	assert.Equal(t, "drift", data.Problems[0].Code)
	assert.True(t, data.Drift.Drifted)
	require.NoError(t, d.stdin.Close())
	require.NoError(t, waitExit(d.cmd, 10*time.Second))

	// ckptd plan, the same
	plan := exec.Command(binPath, "plan", "wf", "--db", db)
	plan.Env = cliEnv(t, nil)
	asNobody(t, plan)
	var out bytes.Buffer
	plan.Stdout, plan.Stderr = &out, &out
	err := plan.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out.String())
	assert.Equal(t, exitProblem, ee.ExitCode(), out.String())
	assert.Contains(t, out.String(), "drift")
	assert.Contains(t, out.String(), "pkg1/")
}
