package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func TestCLILs(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	cliGolden(t, "ls", db.dir, cliRun(t, nil, "ls", "--db", db.path))
	cliGolden(t, "ls-resumable", db.dir, cliRun(t, nil, "ls", "--resumable", "--db", db.path))
	cliGolden(t, "ls-json", db.dir, cliRun(t, nil, "ls", "--db", db.path, "--json"))
	cliGolden(t, "ls-workflow", db.dir, cliRun(t, nil, "ls", "wf-alpha", "--db", db.path))
	cliGolden(t, "ls-workflow-namespace-json", db.dir, cliRun(t, nil, "ls", "wf-alpha", "--namespace", "sub", "--json", "--db", db.path))
	cliGolden(t, "ls-unknown", db.dir, cliRun(t, nil, "ls", "nope", "--db", db.path))
	cliGolden(t, "ls-usage", db.dir, cliRun(t, nil, "ls", "a", "b", "--db", db.path))
}

// TestCLILsPaging: more checkpoints than one store page, and --limit.
func TestCLILsPaging(t *testing.T) {
	t.Parallel()
	if testing.Short() || raceEnabled {
		t.Skip("10k saves: slow under -short and -race (nothing concurrent to check here)")
	}
	db := newCLIDB(t, nil)
	const n = 10050
	for i := 0; i < n; i += 1000 {
		var ps []*storePending
		for j := i; j < min(i+1000, n); j++ {
			ps = append(ps, db.enqueue(j))
		}
		for _, p := range ps {
			p.wait(t)
		}
	}
	db.close()
	res := cliRun(t, nil, "ls", "big", "--json", "--db", db.path)
	require.Equal(t, 0, res.code, res.stderr)
	var out struct{ Checkpoints []struct{ Seq int64 } }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Len(t, out.Checkpoints, n)
	assert.EqualValues(t, n, out.Checkpoints[0].Seq)
	assert.EqualValues(t, 1, out.Checkpoints[n-1].Seq)
	res = cliRun(t, nil, "ls", "big", "--json", "--limit", "3", "--db", db.path)
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Len(t, out.Checkpoints, 3)
	assert.EqualValues(t, n-2, out.Checkpoints[2].Seq)
}

func TestCLILsEmpty(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, nil)
	db.close()
	cliGolden(t, "ls-empty", db.dir, cliRun(t, nil, "ls", "--db", db.path))
}

// TestCLILsFirstHour (#19 point 7): RESUMABLE agrees with ckptd plan (never "yes" for a
// completed workflow or one whose failure is not retryable), a corrupt latest checkpoint is
// marked, and a database of LangGraph threads only says so and points to ckptd threads.
func TestCLILsFirstHour(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	db.corruptState("a-3")
	res := cliRun(t, nil, "ls", "--db", db.path)
	cliGolden(t, "ls-corrupt-latest", db.dir, res)
	for _, line := range strings.Split(res.stdout, "\n") {
		if strings.HasPrefix(line, "wf-done") || strings.HasPrefix(line, "wf-beta") || strings.HasPrefix(line, "wf-alpha") {
			assert.NotContains(t, line, " yes ", "plan blocks it: %s", line)
		}
	}
	for _, wf := range []string{"wf-alpha", "wf-beta", "wf-done"} {
		assert.Equal(t, exitProblem, cliRun(t, nil, "plan", wf, "--db", db.path).code, "%s: ls and plan agree", wf)
	}
	cliGolden(t, "ls-corrupt-latest-resumable", db.dir, cliRun(t, nil, "ls", "--resumable", "--db", db.path))

	lg := lgFixture(t)
	cliGolden(t, "ls-threads-only", lg.dir, cliRun(t, nil, "ls", "--db", lg.path))
}

// TestCLILsNewest (#22): without --limit, ls shows the newest 50 workflows and says how many
// more there are and how to see them; --limit N and --all show N or every one; --json carries
// the cursor of workflow/list.
func TestCLILsNewest(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	cliGolden(t, "ls-limit", db.dir, cliRun(t, nil, "ls", "--limit", "2", "--db", db.path))
	cliGolden(t, "ls-usage-all", db.dir, cliRun(t, nil, "ls", "--all", "--limit", "2", "--db", db.path))
	cliGolden(t, "ls-usage-limit", db.dir, cliRun(t, nil, "ls", "--limit", "0", "--db", db.path))

	big := newCLIDB(t, nil)
	for i := 0; i < 57; i++ {
		big.save(store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%02d", i)})
	}
	big.close()
	res := cliRun(t, nil, "ls", "--db", big.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 1+50)
	assert.True(t, strings.HasPrefix(lines[1], "wf-56 "), lines[1])
	assert.Equal(t, "... 7 more workflows (showing the newest 50): --limit N shows the newest N, --all every one\n", res.stderr)
	res = cliRun(t, nil, "ls", "--all", "--db", big.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Len(t, strings.Split(strings.TrimSpace(res.stdout), "\n"), 1+57)
	require.Empty(t, res.stderr)
	res = cliRun(t, nil, "ls", "--limit", "56", "--resumable", "--json", "--db", big.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	var out struct {
		Workflows []struct{ WorkflowID string }
		Cursor    string
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Len(t, out.Workflows, 56)
	require.NotEmpty(t, out.Cursor)
	assert.Equal(t, "wf-01", out.Workflows[55].WorkflowID, "newest first: wf-00 is the one more")
	assert.Contains(t, res.stderr, "1 more workflow (")
}
