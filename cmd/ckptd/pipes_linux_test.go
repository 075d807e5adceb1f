package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The daemon enlarges its stdin and stdout pipes so that a 100 KB frame crosses in one write.
func TestServeGrowsPipes(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "p.db"))
	d.call("stats", nil, nil, nil) // served: the pipes were set up before the first read
	f, ok := d.stdin.(*os.File)
	require.True(t, ok)
	const fGetPipeSz = 1032 // F_GETPIPE_SZ
	size, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), fGetPipeSz, 0)
	require.Zero(t, errno)
	if int(size) < pipeSize {
		max, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
		require.NoError(t, err)
		t.Skipf("pipe is %d bytes; this kernel allows at most %s", size, max)
	}
	require.Equal(t, pipeSize, int(size))
}
