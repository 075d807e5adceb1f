package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ckptd/ckptd/rpc"
	"github.com/ckptd/ckptd/store"
)

// globalFlags are shared by every subcommand that opens the database.
type globalFlags struct {
	db         string
	logLevel   string
	durability string
}

func (g *globalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.db, "db", "", "checkpoint database: a SQLite file `path`, or a postgres:// URL (default $CKPTD_DB, else\n$XDG_STATE_HOME/ckptd/ckptd.db, else ~/.local/state/ckptd/ckptd.db)")
	fs.StringVar(&g.logLevel, "log-level", "info", "stderr log `level`: debug, info, warn, error")
	fs.StringVar(&g.durability, "durability", "full", "`full`: synchronous=FULL, an acknowledged save survives power loss / OS crash;\nnormal: synchronous=NORMAL, faster, survives a ckptd crash but the last saves may be lost on power loss")
}

// dbPath resolves --db, else $CKPTD_DB (a way to pass a URL with a password without putting
// it on the command line), else the default location.
func (g *globalFlags) dbPath(e *env) (string, error) {
	if g.db != "" {
		return g.db, nil
	}
	if v := e.getenv("CKPTD_DB"); v != "" {
		return v, nil
	}
	if x := e.getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "ckptd", "ckptd.db"), nil
	}
	home := e.getenv("HOME")
	if home == "" {
		return "", usageError{"no --db given and neither XDG_STATE_HOME nor HOME is set"}
	}
	return filepath.Join(home, ".local", "state", "ckptd", "ckptd.db"), nil
}

func (g *globalFlags) logger(e *env) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", g.logLevel)}
	}
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl})), nil
}

func (g *globalFlags) validate() error {
	switch g.durability {
	case "full", "normal":
		return nil
	}
	return usageError{fmt.Sprintf("--durability %q: want full or normal", g.durability)}
}

// parseSize reads "64MiB", "10MB", "1048576".
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive size (e.g. 64MiB)", s)
	}
	return n * mult, nil
}

// parseFlags parses args and maps flag errors to usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usageError{err.Error()}
	}
	return nil
}

const serveUsage = `usage: ckptd [serve] [flags]

Runs the checkpoint sidecar: JSON-RPC 2.0 on stdin/stdout (Content-Length framing,
see docs/protocol.md), logs on stderr. Exits 0 on stdin EOF, "shutdown", SIGTERM or SIGINT
once every acknowledged save is on disk (requests still running after 1 s are cancelled);
exits 1 when a frame declares a length too large to skip.

example:
  ckptd --db ./agent.db --durability full --keep-last 20
`

// serveGCPercent is the daemon's GC target unless GOGC is set.
const serveGCPercent = 400

func runServe(ctx context.Context, e *env, args []string) error {
	// A client that dies closes the read ends of our stdout and stderr. Go's default for a write
	// to a broken pipe on fd 1 or 2 is to die of SIGPIPE, losing the clean shutdown (WAL
	// checkpoint, the exit status that says whether everything acknowledged is on disk). Ignored,
	// the write fails with EPIPE instead: a reply that cannot be sent stops Serve, a log line that
	// cannot be written is dropped. Set before the first log line (opening the database logs).
	signal.Ignore(syscall.SIGPIPE)
	var g globalFlags
	fs := newFlagSet(e, "serve", serveUsage)
	g.register(fs)
	keepLast := fs.Int("keep-last", 10, "default retention: keep the newest `n` checkpoints per workflow and namespace (0 = unlimited)")
	lgKeepLast := fs.Int("lg-keep-last", 0, "LangGraph threads without a retention of their own: keep the newest `n` checkpoints per thread and namespace (0 = all)")
	lgIdleTTL := fs.String("lg-idle-ttl", "", "LangGraph threads without a retention of their own: delete a thread no put has touched for `age` (e.g. 30d; default: never)")
	sweep := fs.String("sweep-interval", "1m", "how often idle workflows and threads are deleted (`age`, e.g. 1m, 10s)")
	maxState := fs.String("max-state-size", "64MiB", "largest accepted state (`size`, e.g. 64MiB)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if err := g.validate(); err != nil {
		return err
	}
	if *keepLast < 0 {
		return usageError{"--keep-last must be >= 0"}
	}
	if *lgKeepLast < 0 {
		return usageError{"--lg-keep-last must be >= 0"}
	}
	sweepEvery, err := parseAge(*sweep)
	if err != nil {
		return usageError{"--sweep-interval: " + err.Error()}
	}
	if sweepEvery < 100*time.Millisecond {
		return usageError{"--sweep-interval: must be at least 100ms"}
	}
	lgRetention := store.Retention{KeepLast: *lgKeepLast}
	if *lgIdleTTL != "" {
		d, err := parseAge(*lgIdleTTL)
		if err != nil {
			return usageError{"--lg-idle-ttl: " + err.Error()}
		}
		if d < time.Second {
			return usageError{"--lg-idle-ttl: must be at least 1s"}
		}
		lgRetention.IdleTTLSeconds = int64(d / time.Second)
	}
	maxBytes, err := parseSize(*maxState)
	if err != nil {
		return usageError{"--max-state-size: " + err.Error()}
	}
	log, err := g.logger(e)
	if err != nil {
		return err
	}
	path, err := g.dbPath(e)
	if err != nil {
		return err
	}
	if e.getenv("GOGC") == "" {
		// The live heap is small (prepared statements, caches) while every request allocates
		// state-sized buffers, so the default GOGC=100 collects after every few large requests;
		// measured on 100 KB saves over stdio, 400 cuts p50 latency by ~15%. GOGC still wins.
		debug.SetGCPercent(serveGCPercent)
	}
	retention := store.Retention{KeepLast: *keepLast}
	st, err := openBackend(ctx, store.Options{
		Path:               path,
		Durability:         g.durability,
		DefaultRetention:   retention,
		LGDefaultRetention: lgRetention,
		SweepInterval:      sweepEvery,
		MaxStateBytes:      maxBytes,
		Logger:             log,
		AfterBite:          biteHook(e),
	}, true)
	if err != nil {
		if isURL(path) { // the backend names the database (without its password)
			return err
		}
		return fmt.Errorf("open %s: %w", path, err)
	}
	log.Info("serving", "db", displayDB(path), "durability", g.durability, "version", version)
	if f, ok := e.stdin.(*os.File); ok && isTerminalFile(f) { // a terminal, not just any character device (/dev/null)
		log.Warn("stdin is a terminal: ckptd serve is a sidecar that reads JSON-RPC frames (docs/protocol.md); press Ctrl-D to stop, or run 'ckptd help' for the inspection commands")
	}
	srv := rpc.New(st, rpc.Options{
		Version:          version,
		Durability:       g.durability,
		MaxStateBytes:    maxBytes,
		DefaultRetention: retention,
		Logger:           log,
		// The soft memory limit follows the bytes in flight unless the user set one.
		ManageMemory: e.getenv("GOMEMLIMIT") == "",
	})
	stdout, _ := e.stdout.(io.Closer)
	growPipes(log, e.stdin, stdout)
	stopProfiles := startProfiles(log, e.getenv("CKPTD_PPROF_DIR"))
	serveErr := srv.Serve(ctx, e.stdin, e.stdout)
	stopProfiles()
	if err := st.Close(); err != nil {
		return fmt.Errorf("close %s: %w", displayDB(path), err)
	}
	if c := st.Condition(); c.Failed() { // what was acknowledged may be lost: say so in the exit status
		return fmt.Errorf("stopped, database not written since %s: %s", c.Since.UTC().Format(time.RFC3339), c.Err())
	}
	if serveErr != nil {
		// Every acknowledged save is committed, but the connection was not ended by the
		// client: exit non-zero so that whoever supervises ckptd notices.
		log.Error("stopped: the connection could not go on", "error", serveErr)
		return serveErr
	}
	log.Info("stopped cleanly")
	return nil
}
