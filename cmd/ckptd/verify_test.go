package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCLIVerify(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	cliGolden(t, "verify-ok", db.dir, cliRun(t, nil, "verify", "--db", db.path))
	cliGolden(t, "verify-quiet", db.dir, cliRun(t, nil, "verify", "--quiet", "--db", db.path))
}

func TestCLIVerifyCorrupt(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	db.corruptState("a-1") // shared by a-1 and a-2: both reported
	db.corruptState("b-2")
	cliGolden(t, "verify-corrupt", db.dir, cliRun(t, nil, "verify", "--db", db.path))
	res := cliRun(t, nil, "verify", "--json", "--quiet", "--db", db.path)
	assert.Equal(t, exitProblem, res.code)
	var rep verifyReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep))
	assert.False(t, rep.OK)
	var ids []string
	for _, c := range rep.Corrupt {
		ids = append(ids, c.CheckpointID)
	}
	assert.ElementsMatch(t, []string{"a-1", "a-2", "b-2"}, ids)
	assert.Empty(t, rep.Database)
}

// TestCLIVerifyDatabaseDamage: damage SQLite's structure (an index that disagrees with its
// table) so that PRAGMA integrity_check reports it.
func TestCLIVerifyDatabaseDamage(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	db.exec(`PRAGMA writable_schema = ON;
		UPDATE sqlite_schema SET sql = replace(sql, 'ON checkpoints(phase, id)', 'ON checkpoints(step, id)')
		WHERE name = 'checkpoints_phase_id';`)
	res := cliRun(t, nil, "verify", "--quiet", "--db", db.path)
	assert.Equal(t, exitProblem, res.code, res.stdout+res.stderr)
	assert.Contains(t, res.stdout, "(database)")
	assert.Contains(t, res.stdout, "integrity_check")
}

// TestCLIVerifyProgressTerminal: on a terminal the progress is a bar redrawn in place.
func TestCLIVerifyProgressTerminal(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	res := cliRunTTY(t, "stderr", "verify", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stderr)
	assert.Contains(t, res.stderr, "\r\x1b[K")
	assert.Contains(t, res.stderr, "checked 6 states")
	assert.Contains(t, res.stderr, "checking SQLite integrity (PRAGMA integrity_check): done in")
	assert.Equal(t, "ok: 7 checkpoints, 6 states (424 B stored), SQLite integrity ok\n", res.stdout)
}
