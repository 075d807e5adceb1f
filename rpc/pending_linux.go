//go:build linux

package rpc

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// unreadBytes returns how many bytes wait to be read from in (FIONREAD, alias TIOCINQ), or -1 when that cannot
// be known.
func unreadBytes(in any) int {
	sc, ok := in.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	if err := rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil {
			n = v
		}
	}); err != nil {
		return -1
	}
	return n
}
