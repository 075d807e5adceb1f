//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ttyWarning = "stdin is a terminal"

// TestServeStdinWarning: serve warns when stdin is a terminal (a person typed `ckptd`), and
// only then: /dev/null (a character device, but no terminal) and a pipe get no warning.
func TestServeStdinWarning(t *testing.T) {
	run := func(t *testing.T, stdin *os.File) string {
		t.Helper()
		cmd := exec.Command(binPath, "--db", filepath.Join(t.TempDir(), "s.db"))
		cmd.Env = cliEnv(t, nil)
		var stderr bytes.Buffer
		cmd.Stdin, cmd.Stderr = stdin, &stderr
		require.NoError(t, cmd.Start())
		require.NoError(t, waitExit(cmd, 20*time.Second), stderr.String())
		return stderr.String()
	}

	t.Run("dev null", func(t *testing.T) {
		null, err := os.Open(os.DevNull)
		require.NoError(t, err)
		defer null.Close()
		assert.NotContains(t, run(t, null), ttyWarning)
	})
	t.Run("pipe", func(t *testing.T) {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		require.NoError(t, w.Close())
		defer r.Close()
		assert.NotContains(t, run(t, r), ttyWarning)
	})
	t.Run("terminal", func(t *testing.T) {
		master, slave := openPTY(t)
		defer master.Close()
		cmd := exec.Command(binPath, "--db", filepath.Join(t.TempDir(), "s.db"))
		cmd.Env = cliEnv(t, nil)
		var stderr syncWriter
		var buf bytes.Buffer
		stderr.w = &buf
		cmd.Stdin, cmd.Stderr = slave, &stderr
		require.NoError(t, cmd.Start())
		require.NoError(t, slave.Close())
		deadline := time.Now().Add(20 * time.Second)
		for {
			stderr.mu.Lock()
			got := buf.String()
			stderr.mu.Unlock()
			if bytes.Contains([]byte(got), []byte(ttyWarning)) {
				break
			}
			require.True(t, time.Now().Before(deadline), "no warning for a terminal stdin; stderr:\n%s", got)
			time.Sleep(20 * time.Millisecond)
		}
		_, err := master.Write([]byte{4}) // Ctrl-D: end of input
		require.NoError(t, err)
		require.NoError(t, waitExit(cmd, 20*time.Second))
	})
}
