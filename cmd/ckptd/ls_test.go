package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
