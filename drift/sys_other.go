//go:build !linux

package drift

// Portable back end (macOS, BSDs, Windows): the os package instead of raw syscalls. It is
// slower and records neither inode nor ctime, so the racy rule relies on mtime alone and a
// wide clock margin. ckptd's supported platform is Linux.

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

type dirHandle struct {
	path string
}

func dirCheck(path string, follow bool) (*dirHandle, error) {
	var fi fs.FileInfo
	var err error
	if follow {
		fi, err = os.Stat(path)
	} else {
		fi, err = os.Lstat(path)
	}
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, syscall.ELOOP
	}
	if !fi.IsDir() {
		return nil, syscall.ENOTDIR
	}
	return &dirHandle{path: path}, nil
}

func openRoot(path string) (*dirHandle, error)    { return dirCheck(path, true) }
func openDir(path string) (*dirHandle, error)     { return dirCheck(path, false) }
func openDirPath(path string) (*dirHandle, error) { return dirCheck(path, false) }
func (d *dirHandle) close()                       {}
func (d *dirHandle) stat() (fileStat, error)      { return statPath(d.path, true) }
func (d *dirHandle) lstat(name string) (fileStat, error) {
	return lstatPath(d.path + "/" + name)
}
func (d *dirHandle) lstatBuf(name string, _ *[]byte) (fileStat, error) { return d.lstat(name) }
func (d *dirHandle) readlink(name string) (string, error)              { return os.Readlink(d.path + "/" + name) }

func (d *dirHandle) openFile(name string) (*fileHandle, error) {
	p := d.path + "/" + name
	st, err := lstatPath(p)
	if err != nil {
		return nil, err
	}
	if !st.isReg() {
		return nil, errNotRegular
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	return &fileHandle{f: f}, nil
}

type fileHandle struct{ f *os.File }

func (f *fileHandle) stat() (fileStat, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return fileStat{}, err
	}
	return statOf(fi), nil
}
func (f *fileHandle) Read(p []byte) (int, error) { return f.f.Read(p) }
func (f *fileHandle) close()                     { _ = f.f.Close() }

const (
	dtUnknown = 0
	dtDir     = 4
	dtReg     = 8
	dtLnk     = 10
)

func (d *dirHandle) readDir(_ []byte, fn func(name string, typ uint8) bool) error {
	f, err := os.Open(d.path)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(256)
		for _, e := range ents {
			var typ uint8 = dtUnknown
			switch t := e.Type(); {
			case t.IsDir():
				typ = dtDir
			case t.IsRegular():
				typ = dtReg
			case t&fs.ModeSymlink != 0:
				typ = dtLnk
			case t&fs.ModeType != 0:
				continue
			}
			if !fn(e.Name(), typ) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// POSIX st_mode type bits.
const (
	sIFMT  = 0o170000
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
)

func statOf(fi fs.FileInfo) fileStat {
	m := uint32(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	switch {
	case fi.IsDir():
		m |= sIFDIR
	case fi.Mode().IsRegular():
		m |= sIFREG
	case fi.Mode()&fs.ModeSymlink != 0:
		m |= sIFLNK
	}
	return fileStat{mode: m, size: fi.Size(), mtime: fi.ModTime().UnixNano(), blocks: -1}
}

func statPath(p string, follow bool) (fileStat, error) {
	var fi fs.FileInfo
	var err error
	if follow {
		fi, err = os.Stat(p)
	} else {
		fi, err = os.Lstat(p)
	}
	if err != nil {
		return fileStat{}, err
	}
	return statOf(fi), nil
}

func lstatPath(p string) (fileStat, error) { return statPath(p, false) }

// coarseNow: without knowing the file system's time stamp granularity (FAT: 2 s), stay
// well clear of it.
func coarseNow() int64 { return time.Now().Add(-2 * time.Second).UnixNano() }

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }

func isNoData(error) bool { return false }

func isNotDirOrLink(err error) bool {
	return errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP)
}

func pseudoFSName(string) string      { return "" }
func (d *dirHandle) pseudoFS() string { return "" }

// errNoSeekData: no SEEK_DATA here; sparse files are read like any other.
var errNoSeekData = errors.New("SEEK_DATA not supported")

func (f *fileHandle) seekData(int64) (int64, error)           { return 0, errNoSeekData }
func (f *fileHandle) seekHole(int64) (int64, error)           { return 0, errNoSeekData }
func (f *fileHandle) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

func isResource(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM)
}

func resourceHint(err error) string {
	switch {
	case errors.Is(err, syscall.EMFILE):
		return " (this process has reached its limit of open files: raise ulimit -n)"
	case errors.Is(err, syscall.ENFILE):
		return " (the system-wide limit of open files is reached)"
	}
	return ""
}

func inotifyInitHint(err error) string { return resourceHint(err) }
