package main

// Shared plumbing of the inspection / maintenance subcommands (ls, show, plan, prune, rm, verify,
// export, import, stats): opening the database, flag and argument parsing, table and JSON output.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/ckptd/ckptd/store"
)

// exitStatus makes a command exit with that status once it has reported what it found.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// exitNoSources is ckptd drift's exit status when the checkpoint has no sources recorded:
// nothing to compare (neither "no drift", 0, nor "drifted", 1).
const exitNoSources = 3

// cliMaxStateBytes is the state size limit of CLI commands: generous, so that states saved by a
// sidecar with a larger --max-state-size still decode (and are not reported as corrupt).
const cliMaxStateBytes = 4 << 30

// registerDBFlags registers the shared flags of a command that opens the database. Logs default
// to "error": these commands report what they find themselves.
func registerDBFlags(fs *flag.FlagSet, g *globalFlags) {
	g.register(fs)
	g.logLevel = "error"
	if f := fs.Lookup("log-level"); f != nil {
		f.DefValue = "error"
	}
}

// withStore opens the database named by g, runs f and closes it. Without create, a database
// file that does not exist is an error instead of being created empty.
func withStore(ctx context.Context, e *env, g *globalFlags, create bool, f func(store.Backend) error) (err error) {
	if err := g.validate(); err != nil {
		return err
	}
	log, err := g.logger(e)
	if err != nil {
		return err
	}
	path, err := g.dbPath(e)
	if err != nil {
		return err
	}
	if !create && !isURL(path) {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no database at %s (use --db PATH)", path)
		}
	}
	st, err := openBackend(ctx, store.Options{
		Path:          path,
		Durability:    g.durability,
		MaxStateBytes: cliMaxStateBytes,
		Logger:        log,
		// A command must not spend its exit compressing a running daemon's fresh saves, nor its
		// start reading the whole file (the daemon checks it; ckptd verify is the check).
		NoCompactor: true,
		NoOpenCheck: true,
		AfterBite:   biteHook(e),
	}, create)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := st.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", displayDB(path), cerr)
		}
	}()
	return f(st)
}

// newFlagSet returns the flag set of a subcommand. Help asked for (-h, --help) prints the usage
// and flags to stdout (exit 0); a flag error prints the error, then the usage, to stderr (exit 2).
func newFlagSet(e *env, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("ckptd "+name, flag.ContinueOnError)
	errs := &flagErrors{w: e.stderr}
	fs.SetOutput(errs)
	fs.Usage = func() {
		// The flag package calls Usage for -h/--help, and after writing a parse error: only
		// then has something been written to the error stream.
		w := e.stdout
		if errs.wrote {
			w = e.stderr
		}
		fmt.Fprint(w, usage)
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(errs)
	}
	return fs
}

// flagErrors is a flag set's error stream; it remembers that an error was written.
type flagErrors struct {
	w     io.Writer
	wrote bool
}

func (f *flagErrors) Write(p []byte) (int, error) {
	f.wrote = true
	return f.w.Write(p)
}

// parseArgs parses flags that may come before, between or after positional arguments
// ("ckptd ls wf-1 --json") and returns the positional ones. "--" ends flag parsing.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// newTable returns an aligned-column writer; call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// fmtBytes renders a size for people: "812 B", "1.5 KiB", "100.0 MiB".
func fmtBytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// fmtTime renders a time in tables: UTC, to the second.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// timestamp is the protocol's time format (microseconds, UTC), used in JSON output.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return orDash(h)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// isTerminal reports whether w is a terminal (an *os.File on a tty).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminalFile(f)
}

// parseAge reads an age like "7d", "36h", "90m", "45s", "1d12h" (units s, m, h, d = 24h, w = 7d;
// integer amounts), or any Go duration ("1.5h").
func parseAge(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not an age (e.g. 7d, 36h, 90m, 45s, 1d12h)", s)
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, bad
	}
	if d, err := time.ParseDuration(t); err == nil {
		if d <= 0 {
			return 0, fmt.Errorf("%q: must be positive", s)
		}
		return d, nil
	}
	units := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}
	var total time.Duration
	for t != "" {
		i := 0
		for i < len(t) && unicode.IsDigit(rune(t[i])) {
			i++
		}
		if i == 0 || i == len(t) {
			return 0, bad
		}
		n, err := strconv.ParseInt(t[:i], 10, 64)
		u, ok := units[t[i]]
		if err != nil || !ok || n > int64(1<<62)/int64(u) {
			return 0, bad
		}
		total += time.Duration(n) * u
		t = t[i+1:]
	}
	if total <= 0 {
		return 0, fmt.Errorf("%q: must be positive", s)
	}
	return total, nil
}
