// Command pgcluster runs one throwaway PostgreSQL cluster (internal/pgtest) for test suites that
// are not Go (the Python and TypeScript clients' LangGraph conformance suites on PostgreSQL):
//
//	pgcluster -env FILE
//
// starts the cluster, creates a database, writes CKPTD_TEST_PG_URL=<its URL> to FILE (a line a
// shell can source), and runs until SIGTERM, SIGINT or its stdin closes; then it stops the
// cluster and removes it. Suites give each test a fresh schema of that database with the URL's
// ckptd_schema parameter.
//
// Without PostgreSQL it writes nothing, says so in one line and exits 0 (the suites skip their
// PostgreSQL tests); under CI=true it exits 1 instead.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ckptd/ckptd/internal/pgtest"
)

func main() {
	envFile := flag.String("env", "", "write CKPTD_TEST_PG_URL=... to this `file` once the cluster is up")
	flag.Parse()
	if *envFile == "" {
		fmt.Fprintln(os.Stderr, "usage: pgcluster -env FILE")
		os.Exit(2)
	}
	os.Exit(run(*envFile))
}

func run(envFile string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c, err := pgtest.Start(ctx, pgtest.Options{})
	cancel()
	if err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "pgcluster: PostgreSQL is required under CI=true: %v\n", err)
			return 1
		}
		if errors.Is(err, pgtest.ErrNoServer) {
			fmt.Fprintln(os.Stderr, "pgcluster: PostgreSQL tests of the clients skipped: install Debian's postgresql package (or set CKPTD_PG_BIN) to run them")
		} else {
			fmt.Fprintf(os.Stderr, "pgcluster: PostgreSQL tests of the clients skipped: could not start a throwaway cluster: %v\n", err)
		}
		return 0
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgcluster: stopping the cluster:", err)
		}
	}()
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	u, err := c.CreateDatabase(ctx, "ckptd_tests")
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgcluster:", err)
		return 1
	}
	if err := os.WriteFile(envFile, []byte("CKPTD_TEST_PG_URL="+u+"\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "pgcluster:", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-sig:
	case <-eof:
	}
	return 0
}
