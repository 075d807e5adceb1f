//go:build unix

package sqlite

import "golang.org/x/sys/unix"

// freeBytes is the space an unprivileged process may still use on dir's file system; ok false
// when it cannot be told.
func freeBytes(dir string) (free uint64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true //nolint:unconvert // field types differ by OS
}
