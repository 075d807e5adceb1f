package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// startProfiles starts the profiles a benchmark asks for with CKPTD_PPROF_DIR=dir: CPU, block
// and mutex profiles of the serving daemon, written to dir/{cpu,block,mutex,heap}.pprof when it
// stops. For measurements only (scripts/bench.sh, bench/probe); unset, it does nothing.
func startProfiles(log *slog.Logger, dir string) (stop func()) {
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Warn("profiles: cannot create the directory", "dir", dir, "error", err)
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		log.Warn("profiles: cannot create the CPU profile", "error", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Warn("profiles: cannot start the CPU profile", "error", err)
		_ = f.Close()
		return func() {}
	}
	runtime.SetBlockProfileRate(1000) // a sample per µs blocked
	runtime.SetMutexProfileFraction(10)
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		for _, name := range []string{"block", "mutex", "heap"} {
			if err := writeProfile(dir, name); err != nil {
				log.Warn("profiles: cannot write a profile", "profile", name, "error", err)
			}
		}
	}
}

func writeProfile(dir, name string) error {
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}
