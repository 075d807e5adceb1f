//go:build linux

package drift

import (
	"errors"
	"io"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The Linux back end uses raw openat/fstatat/getdents64 so a walk costs one syscall per
// entry and path resolution happens relative to an open directory descriptor.

// dirHandle is an open directory.
type dirHandle struct {
	fd       int
	path     string // absolute path, for messages and the portable back end
	pathOnly bool   // an O_PATH descriptor: no getdents, no openat of files
}

const openDirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC

func retry[T any](f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if !errors.Is(err, unix.EINTR) {
			return v, err
		}
	}
}

// openRoot opens the root directory, following a symlink if the root itself is one.
func openRoot(path string) (*dirHandle, error) {
	fd, err := retry(func() (int, error) { return unix.Open(path, openDirFlags, 0) })
	if err != nil {
		return nil, err
	}
	return &dirHandle{fd: fd, path: path}, nil
}

// openDir opens a directory below the root without following a symlink.
func openDir(path string) (*dirHandle, error) {
	fd, err := retry(func() (int, error) { return unix.Open(path, openDirFlags|unix.O_NOFOLLOW, 0) })
	if err != nil {
		return nil, err
	}
	return &dirHandle{fd: fd, path: path}, nil
}

// openDirPath opens a directory below the root as an O_PATH handle: enough to fstat it and
// fstatat its entries, cheaper than a full open. readDir reopens it for reading.
func openDirPath(path string) (*dirHandle, error) {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	})
	if err != nil {
		return nil, err
	}
	return &dirHandle{fd: fd, path: path, pathOnly: true}, nil
}

func (d *dirHandle) close() { _ = unix.Close(d.fd) }

func fillStat(st *unix.Stat_t) fileStat {
	return fileStat{
		mode:  st.Mode,
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
		ino:   st.Ino,
	}
}

func (d *dirHandle) stat() (fileStat, error) {
	var st unix.Stat_t
	_, err := retry(func() (int, error) { return 0, unix.Fstat(d.fd, &st) })
	if err != nil {
		return fileStat{}, err
	}
	return fillStat(&st), nil
}

// lstat stats name inside d without following a symlink.
func (d *dirHandle) lstat(name string) (fileStat, error) {
	var st unix.Stat_t
	_, err := retry(func() (int, error) { return 0, unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	if err != nil {
		return fileStat{}, err
	}
	return fillStat(&st), nil
}

func (d *dirHandle) readlink(name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := retry(func() (int, error) { return unix.Readlinkat(d.fd, name, buf) })
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// openFile opens a regular file inside d for reading; O_NONBLOCK keeps a FIFO swapped in
// behind our back from blocking the open, O_NOFOLLOW refuses a symlink.
func (d *dirHandle) openFile(name string) (*fileHandle, error) {
	fd, err := retry(func() (int, error) {
		return unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	})
	if err != nil {
		return nil, err
	}
	return &fileHandle{fd: fd}, nil
}

type fileHandle struct{ fd int }

func (f *fileHandle) stat() (fileStat, error) {
	var st unix.Stat_t
	_, err := retry(func() (int, error) { return 0, unix.Fstat(f.fd, &st) })
	if err != nil {
		return fileStat{}, err
	}
	return fillStat(&st), nil
}

func (f *fileHandle) Read(p []byte) (int, error) {
	n, err := retry(func() (int, error) { return unix.Read(f.fd, p) })
	if n < 0 {
		n = 0
	}
	if n == 0 && err == nil && len(p) > 0 {
		return 0, io.EOF
	}
	return n, err
}

func (f *fileHandle) close() { _ = unix.Close(f.fd) }

// Directory entry types as reported by getdents (d_type).
const (
	dtUnknown = unix.DT_UNKNOWN
	dtDir     = unix.DT_DIR
	dtReg     = unix.DT_REG
	dtLnk     = unix.DT_LNK
)

// readDir calls fn for every entry of d except "." and "..". buf is scratch space.
func (d *dirHandle) readDir(buf []byte, fn func(name string, typ uint8)) error {
	fd := d.fd
	if d.pathOnly {
		var err error
		fd, err = retry(func() (int, error) { return unix.Openat(d.fd, ".", openDirFlags, 0) })
		if err != nil {
			return err
		}
		defer unix.Close(fd)
	} else if _, err := unix.Seek(fd, 0, 0); err != nil {
		return err
	}
	for {
		n, err := retry(func() (int, error) { return unix.Getdents(fd, buf) })
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		b := buf[:n]
		for len(b) > 0 {
			// struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
			if len(b) < 19 {
				return errors.New("short dirent")
			}
			reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
			if reclen < 19 || reclen > len(b) {
				return errors.New("bad dirent length")
			}
			typ := b[18]
			nameb := b[19:reclen]
			for i, c := range nameb {
				if c == 0 {
					nameb = nameb[:i]
					break
				}
			}
			b = b[reclen:]
			if len(nameb) == 1 && nameb[0] == '.' || len(nameb) == 2 && nameb[0] == '.' && nameb[1] == '.' {
				continue
			}
			fn(string(nameb), typ)
		}
	}
}

// Mode bits of st_mode.
const (
	sIFMT  = unix.S_IFMT
	sIFDIR = unix.S_IFDIR
	sIFREG = unix.S_IFREG
	sIFLNK = unix.S_IFLNK
)

// coarseNow returns a lower bound, in the file system's clock, for the time stamp the kernel
// would give a file modified now: the coarse real-time clock (what inode time stamps are
// taken from) minus its resolution.
func coarseNow() int64 {
	var ts, res unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
		return 0
	}
	if err := unix.ClockGetres(unix.CLOCK_REALTIME_COARSE, &res); err != nil {
		res = unix.Timespec{Nsec: 10_000_000}
	}
	return ts.Nano() - res.Nano()
}

func isNotExist(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
}

func isNoSpace(err error) bool { return errors.Is(err, unix.ENOSPC) }

// isNotDirOrLink reports an open of a path that is no longer a plain directory.
func isNotDirOrLink(err error) bool {
	return errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}

// lstatPath stats an absolute path without following a final symlink.
func lstatPath(path string) (fileStat, error) {
	var st unix.Stat_t
	_, err := retry(func() (int, error) { return 0, unix.Lstat(path, &st) })
	if err != nil {
		return fileStat{}, err
	}
	return fillStat(&st), nil
}
