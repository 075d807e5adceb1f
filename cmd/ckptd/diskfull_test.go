package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
)

// tmpfsScript mounts a tmpfs of size $2 on $1 inside the new mount namespace, runs $PRE, then
// execs ckptd ($3...) there: same pid as the unshare process, so the test reaches the mount as
// /proc/PID/root/$1.
const tmpfsScript = `mount -t tmpfs -o size=$2 tmpfs "$1" || exit 97; eval "$PRE"; shift 2; exec "$@"`

// canMountTmpfs reports whether this machine lets an unprivileged user namespace mount a tmpfs.
func canMountTmpfs(t *testing.T) (bool, string) {
	if _, err := exec.LookPath("unshare"); err != nil {
		return false, "no unshare(1)"
	}
	out, err := exec.Command("unshare", "-rm", "sh", "-c", tmpfsScript, "sh", t.TempDir(), "64k", "true").CombinedOutput()
	if err != nil {
		return false, "unshare -rm + mount tmpfs not permitted here: " + strings.TrimSpace(string(out)) + " " + err.Error()
	}
	return true, ""
}

// startDaemonOnTmpfs runs ckptd with its database on a fresh tmpfs of size bytes; it returns the
// daemon and the directory as the test process sees it.
func startDaemonOnTmpfs(t *testing.T, size, pre string, args ...string) (*daemon, string) {
	mnt := t.TempDir()
	cmd := exec.Command("unshare", append([]string{"-rm", "sh", "-c", tmpfsScript, "sh", mnt, size,
		binPath, "--db", filepath.Join(mnt, "c.db")}, args...)...)
	cmd.Env = append(os.Environ(), "PRE="+pre)
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
		if cmd.ProcessState == nil { // not waited for by the test
			if err := waitExit(cmd, 20*time.Second); err != nil {
				t.Errorf("ckptd exit: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("ckptd stderr:\n%s", stderr.String())
		}
	})
	// the daemon answers once the database is open, on the tmpfs
	d.call("initialize", map[string]any{"clientName": "diskfull"}, nil, nil)
	return d, filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "root", mnt)
}

// fill writes a file in dir until the file system is full and returns its path.
func fill(t *testing.T, dir string) string {
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 16<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "filling: %v", err)
			return path
		}
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// TestDiskFull runs ckptd on a 4 MiB tmpfs, fills it, and checks that a save then fails with
// -32006 storage unavailable (not -32603, not a crash), that the daemon keeps serving and every
// earlier checkpoint still loads, and that the next save after space returns succeeds.
func TestDiskFull(t *testing.T) {
	if ok, why := canMountTmpfs(t); !ok {
		t.Skip(why)
	}
	d, dir := startDaemonOnTmpfs(t, "4m", "", "--keep-last", "0")
	var before []string
	var states [][]byte
	for i := 0; i < 5; i++ {
		st := randomBytes(2000)
		var r struct{ CheckpointID string }
		d.call("checkpoint/save", map[string]any{"workflowId": "w", "step": i, "stateAttachment": true, "stateType": "bytes"}, st, &r)
		before = append(before, r.CheckpointID)
		states = append(states, st)
	}
	filler := fill(t, dir)

	// Incompressible and larger than the WAL so far: the WAL must grow, and cannot.
	big := randomBytes(1 << 20)
	for i := 0; i < 3; i++ { // and again: a failed save leaves nothing half-done behind
		e := d.callErr("checkpoint/save", map[string]any{"workflowId": "w", "step": 10 + i, "stateAttachment": true, "stateType": "bytes"}, big)
		require.Equal(t, -32006, e.Code, "disk full must be storage unavailable: %s", e.Message)
		var data struct{ Reason string }
		require.NoError(t, json.Unmarshal(e.Data, &data), "data: %s", e.Data)
		assert.NotEmpty(t, data.Reason)
		assert.Contains(t, strings.ToLower(e.Message), "full", e.Message)
	}
	// still serving: reads work, every acknowledged checkpoint loads
	for i, id := range before {
		m := d.call("checkpoint/load", map[string]any{"checkpointId": id, "attachment": true}, nil, nil)
		require.Equal(t, states[i], m.Attachment)
	}
	var list struct {
		Checkpoints []struct{ CheckpointID string }
	}
	d.call("checkpoint/list", map[string]any{"workflowId": "w"}, nil, &list)
	require.Len(t, list.Checkpoints, len(before), "a failed save left a checkpoint behind")
	var st map[string]any
	d.call("stats", nil, nil, &st)

	// space returns: the next save succeeds and loads back
	require.NoError(t, os.Remove(filler))
	var r struct {
		CheckpointID string
		Seq          int
	}
	d.call("checkpoint/save", map[string]any{"workflowId": "w", "step": 20, "stateAttachment": true, "stateType": "bytes"}, big, &r)
	assert.Equal(t, len(before)+1, r.Seq, "failed saves must not use up seq numbers")
	m := d.call("checkpoint/load", map[string]any{"workflowId": "w", "attachment": true}, nil, nil)
	assert.Equal(t, sha(big), sha(m.Attachment))
	d.call("shutdown", nil, nil, nil)
	require.NoError(t, waitExit(d.cmd, 20*time.Second), "stderr:\n%s", d.stderrText())
}

// TestDiskFullAtStartup: a first start on a full disk fails with a clear error, and once there is
// space again the next start initialises the database (the empty file the failed start left
// behind is not refused as "an empty file").
func TestDiskFullAtStartup(t *testing.T) {
	if ok, why := canMountTmpfs(t); !ok {
		t.Skip(why)
	}
	pre := `dd if=/dev/zero of="$1/filler" bs=64k 2>/dev/null
"$3" --db "$1/c.db" </dev/null >&2; echo "first start: exit $?" >&2
rm "$1/filler"`
	d, _ := startDaemonOnTmpfs(t, "1m", pre)
	stderr := d.stderrText()
	require.Contains(t, stderr, "first start: exit 1")
	require.Contains(t, stderr, "database or disk is full")
	st := randomBytes(3000)
	var r struct{ CheckpointID string }
	d.call("checkpoint/save", map[string]any{"workflowId": "w", "stateAttachment": true, "stateType": "bytes"}, st, &r)
	m := d.call("checkpoint/load", map[string]any{"checkpointId": r.CheckpointID, "attachment": true}, nil, nil)
	require.Equal(t, st, m.Attachment)
	d.call("shutdown", nil, nil, nil)
	require.NoError(t, waitExit(d.cmd, 20*time.Second))
}

// stderrText is what the daemon logged so far (read under the writer's lock).
func (d *daemon) stderrText() string {
	if sw, ok := d.cmd.Stderr.(*syncWriter); ok {
		sw.mu.Lock()
		defer sw.mu.Unlock()
	}
	return d.stderr.String()
}

// TestDiskFullAtRestart (#20): a database saved to, cleanly stopped, and the disk then filled:
// the next start used to refuse ("disk I/O error (4874)": SQLite could not size its WAL index).
// It now starts read-only: every checkpoint loads, writes answer -32006 with reason "disk full",
// stats and the log say the disk is full, and the exit status is 0 (nothing was lost).
func TestDiskFullAtRestart(t *testing.T) {
	if ok, why := canMountTmpfs(t); !ok {
		t.Skip(why)
	}
	var frames []byte
	states := map[string][]byte{}
	for i := 0; i < 5; i++ {
		id := "c-" + strconv.Itoa(i)
		states[id] = randomBytes(3000)
		body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i+1) + `,"method":"checkpoint/save","params":{"workflowId":"w","checkpointId":"` +
			id + `","step":` + strconv.Itoa(i) + `,"stateAttachment":true,"stateType":"bytes"}}`
		frames = framing.AppendFrame(frames, []byte(body), states[id], true)
	}
	framesFile := filepath.Join(t.TempDir(), "saves.frames")
	require.NoError(t, os.WriteFile(framesFile, frames, 0o600))
	// first run: the saves, then a clean exit at EOF; then fill the disk; then the restart
	pre := `"$3" --db "$1/c.db" --keep-last 0 <"$FRAMES" >/dev/null 2>&1 || echo "first run: exit $?" >&2
ls "$1" >&2
dd if=/dev/zero of="$1/filler" bs=16k 2>/dev/null
true`
	t.Setenv("FRAMES", framesFile)
	d, _ := startDaemonOnTmpfs(t, "2m", pre, "--keep-last", "0")
	require.NotContains(t, d.stderrText(), "first run")
	for id, st := range states {
		m := d.call("checkpoint/load", map[string]any{"checkpointId": id, "attachment": true}, nil, nil)
		require.Equal(t, sha(st), sha(m.Attachment), id)
	}
	var list struct{ Checkpoints []map[string]any }
	d.call("checkpoint/list", map[string]any{"workflowId": "w"}, nil, &list)
	assert.Len(t, list.Checkpoints, len(states))
	checkWritesRefused(t, d, "disk full")
	assert.Contains(t, d.stderrText(), "disk full")
	d.call("shutdown", nil, nil, nil)
	require.NoError(t, waitExit(d.cmd, 20*time.Second), "a read-only start on a full disk lost nothing: exit 0; stderr:\n%s", d.stderrText())
}
