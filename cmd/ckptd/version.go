package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are stamped by scripts/dist.sh (and the Python sdist's build hook):
//
//	go build -ldflags "-X main.version=0.1.0 -X main.commit=<git sha>" ./cmd/ckptd
//
// A plain `go build` reports version 0.1.0-dev and the commit Go recorded (vcs.revision), if any.
var (
	version = "0.1.0-dev"
	commit  = ""
)

// buildInfo is what `ckptd version` reports; initialize's serverVersion is Version.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// currentBuild describes this binary: the stamped commit, else the VCS revision the Go
// toolchain recorded (suffixed "-dirty" for a modified tree), else "unknown".
func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if b.Commit == "" {
		b.Commit = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			rev, dirty := "", false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if rev != "" {
				b.Commit = rev
				if dirty {
					b.Commit += "-dirty"
				}
			}
		}
	}
	return b
}

// String is the one line `ckptd version` prints.
func (b buildInfo) String() string {
	return fmt.Sprintf("ckptd %s (commit %s, %s, %s)", b.Version, b.Commit, b.GoVersion, b.Platform)
}

const versionUsage = `usage: ckptd version [--json]

Prints the version, the commit it was built from, the Go version that built it and the platform.
'ckptd --version' prints the same line.

example:
  ckptd version --json
`

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", versionUsage)
	asJSON := fs.Bool("json", false, "print a JSON object {version, commit, goVersion, platform}")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	b := currentBuild()
	if *asJSON {
		return printJSON(e.stdout, b)
	}
	_, err := fmt.Fprintln(e.stdout, b.String())
	return err
}
