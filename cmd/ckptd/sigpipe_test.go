package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
)

// saveFrame is one checkpoint/save request of workflow "w".
func saveFrame(i int) []byte {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":"w","step":%d,"state":{"i":%d}}}`, i+1, i, i)
	return framing.AppendFrame(nil, []byte(body), nil, false)
}

// saveAcked sends save i and returns the checkpoint id of its reply.
func saveAcked(t *testing.T, stdin io.Writer, r *framing.Reader, i int) string {
	t.Helper()
	_, err := stdin.Write(saveFrame(i))
	require.NoError(t, err)
	f, err := r.Next()
	require.NoError(t, err)
	var m struct {
		Result struct{ CheckpointID string } `json:"result"`
	}
	require.NoError(t, json.Unmarshal(f.Body, &m), "%s", f.Body)
	require.NotEmpty(t, m.Result.CheckpointID, "%s", f.Body)
	return m.Result.CheckpointID
}

// assertOnDisk opens db read-only and checks every acknowledged checkpoint is there, intact.
func assertOnDisk(t *testing.T, db string, acked []string) {
	t.Helper()
	conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	require.NoError(t, err)
	defer conn.Close()
	for _, id := range acked {
		var n int
		require.NoError(t, conn.QueryRow(`SELECT count(*) FROM checkpoints WHERE checkpoint_id = ?`, id).Scan(&n))
		assert.Equal(t, 1, n, "acknowledged checkpoint %s", id)
	}
	var integrity string
	require.NoError(t, conn.QueryRow(`PRAGMA integrity_check`).Scan(&integrity))
	assert.Equal(t, "ok", integrity)
}

// requireCleanExit waits for cmd and fails if it was killed by a signal or exited non-zero.
func requireCleanExit(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	err := waitExit(cmd, 20*time.Second)
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.False(t, ws.Signaled(), "ckptd was killed by %v", ws.Signal())
	require.NoError(t, err, "ckptd must exit cleanly")
}

// TestClientDiesDaemonExitsCleanly: when the client dies, the daemon's stdout and stderr pipes
// lose their reader. Writing a reply or a log line then must not kill the daemon with SIGPIPE
// (exit -13, losing the compaction and WAL checkpoint of a clean exit): it sees EPIPE, stops,
// commits what it acknowledged and exits on its own.
func TestClientDiesDaemonExitsCleanly(t *testing.T) {
	db := filepath.Join(t.TempDir(), "c.db")
	cmd := exec.Command(binPath, "--db", db, "--keep-last", "0", "--log-level", "debug")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := framing.NewReader(stdout, framing.Limits{})
	var acked []string
	for i := 0; i < 5; i++ {
		acked = append(acked, saveAcked(t, stdin, r, i))
	}
	// The client dies: nobody reads stdout or stderr any more, then its end of stdin closes.
	require.NoError(t, stdout.Close())
	require.NoError(t, stderr.Close())
	for i := 5; i < 40; i++ { // replies (and debug log lines) now go to closed pipes
		if _, err := stdin.Write(saveFrame(i)); err != nil {
			break // the daemon stopped reading: fine
		}
	}
	_ = stdin.Close()
	requireCleanExit(t, cmd)
	assertOnDisk(t, db, acked)
}

// TestStderrGoneDaemonKeepsServing: logs go to stderr, and a client may close its end of stderr
// (or start the daemon with fd 2 closed) while it keeps talking on stdin/stdout. Log lines that
// cannot be written are dropped; the daemon neither dies nor hangs, every save is acknowledged
// and on disk, and it exits 0.
func TestStderrGoneDaemonKeepsServing(t *testing.T) {
	tests := []struct {
		name        string
		cmd         func(db string) *exec.Cmd
		closeStderr bool // close the read end of a stderr pipe as soon as the daemon runs
	}{
		{"stderr pipe closed by the client", func(db string) *exec.Cmd {
			return exec.Command(binPath, "--db", db, "--keep-last", "0", "--log-level", "debug")
		}, true},
		{"started with fd 2 closed", func(db string) *exec.Cmd {
			// The shell closes fd 2 before exec: a file the daemon opens next must not become fd 2
			// and receive log lines (the Go runtime puts /dev/null there).
			return exec.Command("sh", "-c", `exec "$0" --db "$1" --keep-last 0 --log-level debug 2>&-`, binPath, db)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "c.db")
			cmd := tt.cmd(db)
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var stderr io.Closer
			if tt.closeStderr {
				stderr, err = cmd.StderrPipe()
				require.NoError(t, err)
			}
			require.NoError(t, cmd.Start())
			if stderr != nil {
				require.NoError(t, stderr.Close()) // the first log lines already meet EPIPE
			}
			r := framing.NewReader(stdout, framing.Limits{})
			var acked []string
			for i := 0; i < 30; i++ {
				acked = append(acked, saveAcked(t, stdin, r, i))
			}
			require.NoError(t, stdin.Close())
			_, _ = io.Copy(io.Discard, stdout)
			requireCleanExit(t, cmd)
			assertOnDisk(t, db, acked)
		})
	}
}
