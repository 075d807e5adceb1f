//go:build linux

package drift

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
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
		mode:   st.Mode,
		size:   st.Size,
		mtime:  st.Mtim.Nano(),
		ctime:  st.Ctim.Nano(),
		ino:    st.Ino,
		dev:    st.Dev,
		blocks: st.Blocks,
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

// readDir calls fn for every entry of d except "." and "..", until fn returns false. buf is
// scratch space.
func (d *dirHandle) readDir(buf []byte, fn func(name string, typ uint8) bool) error {
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
			if !fn(string(nameb), typ) {
				return nil
			}
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

// isNoData reports SEEK_DATA's "no data past this offset".
func isNoData(err error) bool { return errors.Is(err, unix.ENXIO) }

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

// --- pseudo file systems, sparse files, resource errors ---------------------------------------

// fsNameOfMagic names the pseudo file systems ckptd never fingerprints ("" for any other):
// their files are generated on read (sizes lie, reads may never end) or are not files.
func fsNameOfMagic(magic int64) string {
	switch uint32(magic) {
	case unix.PROC_SUPER_MAGIC:
		return "proc"
	case unix.SYSFS_MAGIC:
		return "sysfs"
	case unix.DEVPTS_SUPER_MAGIC:
		return "devpts"
	case unix.CGROUP_SUPER_MAGIC:
		return "cgroup"
	case unix.CGROUP2_SUPER_MAGIC:
		return "cgroup2"
	case unix.DEBUGFS_MAGIC:
		return "debugfs"
	case unix.TRACEFS_MAGIC:
		return "tracefs"
	case unix.SECURITYFS_MAGIC:
		return "securityfs"
	case unix.PSTOREFS_MAGIC:
		return "pstore"
	case unix.BPF_FS_MAGIC:
		return "bpf"
	case unix.BINFMTFS_MAGIC:
		return "binfmt_misc"
	case unix.SELINUX_MAGIC:
		return "selinuxfs"
	case unix.SMACK_MAGIC:
		return "smackfs"
	case unix.EFIVARFS_MAGIC:
		return "efivarfs"
	case unix.NSFS_MAGIC:
		return "nsfs"
	case 0x62656570: // CONFIGFS_MAGIC
		return "configfs"
	case 0x65735543: // FUSE_CTL_SUPER_MAGIC
		return "fusectl"
	case 0x19800202: // MQUEUE_MAGIC
		return "mqueue"
	}
	return ""
}

// pseudoFSName returns the pseudo file system path is on, or "".
func pseudoFSName(path string) string {
	var sf unix.Statfs_t
	if _, err := retry(func() (int, error) { return 0, unix.Statfs(path, &sf) }); err != nil {
		return ""
	}
	return fsNameOfMagic(int64(sf.Type))
}

// pseudoFS returns the pseudo file system d is on, or "".
func (d *dirHandle) pseudoFS() string {
	var sf unix.Statfs_t
	if _, err := retry(func() (int, error) { return 0, unix.Fstatfs(d.fd, &sf) }); err != nil {
		return ""
	}
	return fsNameOfMagic(int64(sf.Type))
}

// seekData returns the offset of the first data at or after off (unix.ENXIO past the
// last data).
func (f *fileHandle) seekData(off int64) (int64, error) {
	return retry(func() (int64, error) { return unix.Seek(f.fd, off, unix.SEEK_DATA) })
}

// seekHole returns the offset of the first hole at or after off (the size at the end).
func (f *fileHandle) seekHole(off int64) (int64, error) {
	return retry(func() (int64, error) { return unix.Seek(f.fd, off, unix.SEEK_HOLE) })
}

// ReadAt is pread.
func (f *fileHandle) ReadAt(p []byte, off int64) (int, error) {
	n, err := retry(func() (int, error) { return unix.Pread(f.fd, p, off) })
	if n < 0 {
		n = 0
	}
	if n == 0 && err == nil && len(p) > 0 {
		return 0, io.EOF
	}
	return n, err
}

// isResource reports an error that says the process (or the system) ran out of something:
// it says nothing about the tree, and a scan that met it is not a fingerprint of the tree.
func isResource(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) ||
		errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ENOBUFS)
}

// resourceHint says which limit a resource error hit (" (...)"), or "".
func resourceHint(err error) string {
	switch {
	case errors.Is(err, unix.EMFILE):
		var rl unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
			return fmt.Sprintf(" (this process has reached its limit of open files, RLIMIT_NOFILE = %d: raise ulimit -n)", rl.Cur)
		}
		return " (this process has reached its limit of open files: raise ulimit -n)"
	case errors.Is(err, unix.ENFILE):
		return " (the system-wide limit of open files is reached: fs.file-max)"
	case errors.Is(err, unix.ENOMEM), errors.Is(err, unix.ENOBUFS):
		return " (out of kernel memory)"
	case errors.Is(err, unix.ENOSPC):
		return " (inotify watch limit, fs.inotify.max_user_watches)"
	}
	return ""
}

// inotifyInitHint explains a failed inotify_init1. EMFILE means either that this user has
// all the inotify instances it may have (fs.inotify.max_user_instances) or that this process
// has all the file descriptors it may have (RLIMIT_NOFILE): opening a file tells which.
func inotifyInitHint(err error) string {
	return inotifyInitHintProbe(err, func() error {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			_ = unix.Close(fd)
		}
		return err
	})
}

// inotifyInitHintProbe is inotifyInitHint with the probe that opens a file.
func inotifyInitHintProbe(err error, probe func() error) string {
	if !errors.Is(err, unix.EMFILE) {
		return resourceHint(err)
	}
	if perr := probe(); !errors.Is(perr, unix.EMFILE) {
		n := ""
		if b, rerr := os.ReadFile("/proc/sys/fs/inotify/max_user_instances"); rerr == nil {
			n = " = " + strings.TrimSpace(string(b))
		}
		return " (this user has all the inotify instances it may have: fs.inotify.max_user_instances" + n + ")"
	}
	return resourceHint(err)
}
