package main

import (
	"io"
	"log/slog"
	"os"
	"syscall"
)

// pipeSize is the capacity ckptd asks for on its stdin and stdout pipes. The default 64 KiB makes
// a 100 KB state cross in two halves, each waiting for the other side to wake up and drain it;
// with room for the whole frame the writer never blocks. 1 MiB is the unprivileged limit
// (/proc/sys/fs/pipe-max-size) on stock kernels.
const pipeSize = 1 << 20

const fSetPipeSz = 1031 // F_SETPIPE_SZ

// growPipes enlarges stdin and stdout when they are pipes. Failure only costs speed.
func growPipes(log *slog.Logger, files ...io.Closer) {
	for _, c := range files {
		f, ok := c.(*os.File)
		if !ok {
			continue
		}
		fi, err := f.Stat()
		if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			continue
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), fSetPipeSz, pipeSize); errno != 0 {
			log.Debug("could not enlarge pipe", "file", f.Name(), "error", errno)
		}
	}
}
