//go:build !linux

package main

import (
	"io"
	"log/slog"
)

// growPipes is Linux-only (F_SETPIPE_SZ); elsewhere pipes keep their size.
func growPipes(*slog.Logger, ...io.Closer) {}
