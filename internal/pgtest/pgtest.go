// Package pgtest starts throwaway PostgreSQL clusters for tests: initdb into a temporary
// directory, a server that listens only on a Unix socket in that directory, run as a non-root
// user (initdb refuses root), and removed when the test binary ends.
//
// The server binaries come from Debian's postgresql package (or $CKPTD_PG_BIN). Where they are
// missing, tests skip with one line saying how to enable them; under CI=true a missing server
// is a failure instead.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Superuser is the cluster's superuser (trust authentication over the socket).
const Superuser = "ckptd"

// Cluster is a running throwaway cluster.
type Cluster struct {
	Dir    string // owns data/, the socket and log
	binDir string
	cred   *syscall.Credential // nil: run as ourselves
	dbs    atomic.Int64
}

// Options tune Start.
type Options struct {
	// Settings are extra server settings (-c name=value), e.g. "fsync": "off" for speed where
	// durability is not under test. Defaults keep PostgreSQL's own (fsync on).
	Settings map[string]string
}

// ErrNoServer says the PostgreSQL server binaries were not found.
var ErrNoServer = errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's postgresql package or set CKPTD_PG_BIN")

// BinDir finds the directory holding initdb and pg_ctl: $CKPTD_PG_BIN, the PATH, then the
// newest /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if d := os.Getenv("CKPTD_PG_BIN"); d != "" {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
		return "", fmt.Errorf("CKPTD_PG_BIN=%s has no initdb and pg_ctl: %w", d, ErrNoServer)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if d := filepath.Dir(p); isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", ErrNoServer
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start creates and starts a cluster in a new temporary directory.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ckptd-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, binDir: bin}
	if os.Geteuid() == 0 {
		cred, err := nonRoot()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		c.cred = cred
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := c.run(ctx, "initdb", "-D", c.data(), "-U", Superuser, "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	serverOpts := []string{"-k", dir, "-c", "listen_addresses=", "-c", "max_connections=200"}
	keys := make([]string, 0, len(opts.Settings))
	for k := range opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		serverOpts = append(serverOpts, "-c", k+"="+opts.Settings[k])
	}
	if err := c.run(ctx, "pg_ctl", "-D", c.data(), "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60",
		"-o", strings.Join(serverOpts, " "), "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%w\nserver log:\n%s", err, log)
	}
	return c, nil
}

// nonRoot picks the user the cluster runs as when we are root: postgres (Debian's package
// makes it), else nobody.
func nonRoot() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil && uid != 0 {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New("running as root and no non-root user (postgres, nobody) to run PostgreSQL as")
}

func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// URL is a connection URL for database db (user Superuser, over the cluster's socket).
func (c *Cluster) URL(db string) string {
	q := url.Values{"host": {c.Dir}}
	return (&url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + db, RawQuery: q.Encode()}).String()
}

// CreateDatabase makes a new, empty database and returns its URL.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	if name == "" {
		name = fmt.Sprintf("t%d_%d", os.Getpid(), c.dbs.Add(1))
	}
	if err := c.run(ctx, "createdb", "-h", c.Dir, "-U", Superuser, name); err != nil {
		return "", err
	}
	return c.URL(name), nil
}

// Stop stops the server at once and removes the directory.
func (c *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.run(ctx, "pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop")
	if rmErr := os.RemoveAll(c.Dir); err == nil {
		err = rmErr
	}
	return err
}

// The shared cluster of a test binary: started by the first test that asks, stopped by Main.
var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Main runs the tests of a package that uses Database and stops the shared cluster after
// them: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the shared cluster if a test started one: for a TestMain that cannot use
// Main (it has its own setup), after m.Run.
func StopShared() {
	if shared.c != nil {
		if err := shared.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stopping the cluster:", err)
		}
		shared.c = nil
	}
}

// Database returns the URL of a new, empty database in the test binary's shared cluster
// (started on first use, stopped by Main). Without PostgreSQL it skips the test, or fails it
// under CI=true.
func Database(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.c, shared.err = Start(ctx, Options{})
	})
	if shared.err != nil {
		Unavailable(t, shared.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := shared.c.CreateDatabase(ctx, "")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

// Unavailable ends a test that needs PostgreSQL when it cannot be had: a failure under
// CI=true, otherwise a skip saying how to enable it.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("PostgreSQL is required under CI=true: %v", err)
	}
	if errors.Is(err, ErrNoServer) {
		t.Skip("PostgreSQL tests skipped: install Debian's postgresql package (or set CKPTD_PG_BIN) to run them")
	}
	t.Skipf("PostgreSQL tests skipped: could not start a throwaway cluster: %v", err)
}
