package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCLIStats(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	// file sizes depend on SQLite's page layout: normalised
	sizes := []string{`(?m)^file( +).*$`, "file${1}(sizes)"}
	cliGolden(t, "stats", db.dir, cliRun(t, nil, "stats", "--db", db.path), sizes...)
	cliGolden(t, "stats-top1", db.dir, cliRun(t, nil, "stats", "--top", "1", "--db", db.path), sizes...)
	res := cliRun(t, nil, "stats", "--json", "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	var out statsReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	assert.Equal(t, db.path, out.DB.Path)
	assert.Equal(t, 3, out.DB.Workflows)
	assert.Equal(t, 7, out.DB.Checkpoints)
	assert.Equal(t, 6, out.DB.States) // a-1 and a-2 share theirs
	assert.Positive(t, out.DB.SizeBytes)
	assert.Equal(t, 2, out.ResumableWorkflows)
	assert.Equal(t, 1, out.CompletedWorkflows)
	assert.EqualValues(t, 62+62+14+10218+6+6+13, out.StateBytes)
	require.Len(t, out.LargestWorkflows, 3)
	assert.Equal(t, "wf-alpha", out.LargestWorkflows[0].WorkflowID)
}

// TestCLIStatsLangGraph: LangGraph threads are summed in a row of their own.
func TestCLIStatsLangGraph(t *testing.T) {
	t.Parallel()
	db := lgFixture(t)
	sizes := []string{`(?m)^file( +).*$`, "file${1}(sizes)"}
	cliGolden(t, "stats-langgraph", db.dir, cliRun(t, nil, "stats", "--db", db.path), sizes...)
	res := cliRun(t, nil, "stats", "--json", "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	var out statsReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	assert.Equal(t, statsLangGraph{Threads: 3, Checkpoints: 4, Writes: 3, LogicalBytes: 258 + 24 + 4 + 1, StoredBytes: 258 + 24 + 4 + 1}, out.LangGraph)
}
