//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	return m, s
}

// cliRunTTY runs the binary with stdout or stderr (which) on a terminal; what the terminal
// showed comes back in that field, with the terminal's \r\n turned back into \n.
func cliRunTTY(t *testing.T, which string, args ...string) cliResult {
	t.Helper()
	master, slave := openPTY(t)
	defer master.Close()
	cmd := exec.Command(binPath, args...)
	cmd.Env = cliEnv(t, nil)
	var other bytes.Buffer
	if which == "stdout" {
		cmd.Stdout, cmd.Stderr = slave, &other
	} else {
		cmd.Stdout, cmd.Stderr = &other, slave
	}
	require.NoError(t, cmd.Start())
	slave.Close()
	var tty bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&tty, master); close(done) }() // ends with EIO once the child is gone
	err := cmd.Wait()
	<-done
	res := cliResult{args: args}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	shown := strings.ReplaceAll(tty.String(), "\r\n", "\n")
	if which == "stdout" {
		res.stdout, res.stderr = shown, other.String()
	} else {
		res.stdout, res.stderr = other.String(), shown
	}
	return res
}
