package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCLIRm(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	cliGolden(t, "rm", db.dir, cliRun(t, nil, "rm", "a-1", "nope", "s-1", "--db", db.path))
	assert.Equal(t, []string{"a-3", "a-2"}, cliIDs(t, db, "wf-alpha"))
	// the state a-1 shared with a-2 is still there
	res := cliRun(t, nil, "show", "a-2", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stdout)
	cliGolden(t, "rm-workflow", db.dir, cliRun(t, nil, "rm", "--workflow", "wf-beta", "--db", db.path))
	cliGolden(t, "rm-workflow-unknown", db.dir, cliRun(t, nil, "rm", "--workflow", "wf-beta", "--db", db.path))
	cliGolden(t, "rm-usage", db.dir, cliRun(t, nil, "rm", "--db", db.path))
	cliGolden(t, "rm-usage-both", db.dir, cliRun(t, nil, "rm", "a-2", "--workflow", "wf-alpha", "--db", db.path))
	res = cliRun(t, nil, "ls", "--db", db.path)
	assert.NotContains(t, res.stdout, "wf-beta")
}

// TestCLIRmThread: rm --thread deletes a LangGraph thread in every namespace, values and writes
// included, and leaves other threads alone.
func TestCLIRmThread(t *testing.T) {
	t.Parallel()
	db := lgFixture(t)
	cliGolden(t, "rm-thread", db.dir, cliRun(t, nil, "rm", "--thread", "support-42", "--db", db.path))
	cliGolden(t, "rm-thread-unknown", db.dir, cliRun(t, nil, "rm", "--thread", "support-42", "--db", db.path))
	cliGolden(t, "rm-usage-thread", db.dir, cliRun(t, nil, "rm", "--thread", "x", "--workflow", "y", "--db", db.path))
	res := cliRun(t, nil, "threads", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stderr)
	assert.NotContains(t, res.stdout, "support-42")
	assert.Contains(t, res.stdout, "triage-7")
	// a thread with only pending writes can be removed too
	res = cliRun(t, nil, "rm", "--thread", "orphan-writes", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stderr)
	assert.Equal(t, "deleted LangGraph thread orphan-writes (0 checkpoints)\n", res.stdout)
	res = cliRun(t, nil, "threads", "orphan-writes", "--db", db.path)
	assert.Equal(t, exitProblem, res.code)
	res = cliRun(t, nil, "verify", "--quiet", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stdout)
}
