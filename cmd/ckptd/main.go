// Command ckptd is the checkpoint sidecar: with no subcommand (or "serve") it speaks JSON-RPC
// on stdin/stdout; other subcommands inspect and maintain a checkpoint database from the shell.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes shared by every subcommand.
const (
	exitOK      = 0
	exitProblem = 1
	exitUsage   = 2
)

// usageError marks a command-line mistake (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env carries the process's streams so commands stay testable.
type env struct {
	stdin  io.ReadCloser
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

func commands() []command {
	return []command{
		{"serve", "run the stdio JSON-RPC sidecar (the default)", runServe},
		{"ls", "list workflows, or one workflow's checkpoints", runLs},
		{"threads", "list LangGraph threads, or one thread's checkpoints", runThreads},
		{"show", "show one checkpoint (and verify it); --state prints its state", runShow},
		{"plan", "show what resume/plan answers for a workflow, with every problem", runPlan},
		{"rollback", "show a workflow's rollback and its progress (never runs an action)", runRollback},
		{"drift", "show which source files changed since a workflow's checkpoint", runDrift},
		{"prune", "delete old checkpoints (--keep-last, --older-than)", runPrune},
		{"rm", "delete checkpoints, a whole workflow or a LangGraph thread", runRm},
		{"verify", "check every checkpoint's SHA-256 and the database's integrity", runVerify},
		{"export", "write a workflow to a portable archive", runExport},
		{"import", "read a workflow from an archive", runImport},
		{"stats", "database size, counts and largest workflows", runStats},
		{"version", "print the version, commit and Go version (also: ckptd --version)", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(run(ctx, e, os.Args[1:]))
}

// run dispatches to a subcommand and maps its error to an exit code.
func run(ctx context.Context, e *env, args []string) int {
	name, rest := "serve", args
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, rest = args[0], args[1:]
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		name, rest = "version", nil
	}
	if name == "help" {
		printUsage(e.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, e, rest)
		var ue usageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, errHelp):
			return exitOK
		case errors.As(err, &ue):
			fmt.Fprintf(e.stderr, "ckptd %s: %s\n", name, ue.msg)
			return exitUsage
		case errors.Is(err, errProblemFound):
			return exitProblem
		default:
			fmt.Fprintf(e.stderr, "ckptd %s: %v\n", name, err)
			return exitProblem
		}
	}
	fmt.Fprintf(e.stderr, "ckptd: unknown command %q\n\n", name)
	printUsage(e.stderr)
	return exitUsage
}

// errProblemFound is returned by commands that already reported a problem (exit 1).
var errProblemFound = errors.New("problem found")

// errHelp is returned when --help was asked for and printed.
var errHelp = errors.New("help requested")

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: ckptd [command] [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'ckptd COMMAND --help' for a command's flags.")
}
