//go:build linux && (amd64 || arm64)

package drift

import (
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lstatBuf is lstat without the allocation unix.Fstatat makes for the C string: the name
// is NUL-terminated in the caller's scratch buffer. Check does one per file.
func (d *dirHandle) lstatBuf(name string, buf *[]byte) (fileStat, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return fileStat{}, unix.EINVAL
	}
	b := append((*buf)[:0], name...)
	b = append(b, 0)
	*buf = b
	var st unix.Stat_t
	for {
		_, _, e := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(d.fd), uintptr(unsafe.Pointer(&b[0])),
			uintptr(unsafe.Pointer(&st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
		switch e {
		case 0:
			return fillStat(&st), nil
		case unix.EINTR:
			continue
		default:
			return fileStat{}, e
		}
	}
}
