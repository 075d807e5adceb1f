package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCLIShow(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	cliGolden(t, "show", db.dir, cliRun(t, nil, "show", "a-3", "--db", db.path))
	cliGolden(t, "show-shared-metadata", db.dir, cliRun(t, nil, "show", "a-2", "--db", db.path))
	cliGolden(t, "show-failed", db.dir, cliRun(t, nil, "show", "b-2", "--db", db.path))
	cliGolden(t, "show-json", db.dir, cliRun(t, nil, "show", "a-3", "--json", "--db", db.path))
	cliGolden(t, "show-not-found", db.dir, cliRun(t, nil, "show", "nope", "--db", db.path))
	cliGolden(t, "show-usage", db.dir, cliRun(t, nil, "show", "--db", db.path))
}

func TestCLIShowCorrupt(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	db.corruptState("a-3")
	cliGolden(t, "show-corrupt", db.dir, cliRun(t, nil, "show", "a-3", "--db", db.path))
	res := cliRun(t, nil, "show", "a-3", "--json", "--db", db.path)
	assert.Equal(t, exitProblem, res.code)
	var out struct {
		Integrity struct {
			OK     bool
			Reason string
		}
		PendingTaskCount int
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	assert.False(t, out.Integrity.OK)
	assert.Contains(t, out.Integrity.Reason, "does not decode")
	assert.Equal(t, 2, out.PendingTaskCount)
	cliGolden(t, "show-corrupt-state", db.dir, cliRun(t, nil, "show", "a-3", "--state", "--db", db.path))
}

func TestCLIShowState(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	// JSON: pretty-printed on stdout
	cliGolden(t, "show-state-json", db.dir, cliRun(t, nil, "show", "a-1", "--state", "--db", db.path))
	// JSON to a file: byte-for-byte as saved
	out := filepath.Join(db.dir, "state.json")
	cliGolden(t, "show-state-json-file", db.dir, cliRun(t, nil, "show", "a-2", "--state", "-o", out, "--db", db.path))
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, `{"messages":[{"role":"user","content":"hello <world> & all"}]}`, string(b))
	// bytes to a pipe: raw
	res := cliRun(t, nil, "show", "b-2", "--state", "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Equal(t, []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0x02}, []byte(res.stdout))
	// bytes to a file
	bin := filepath.Join(db.dir, "state.bin")
	res = cliRun(t, nil, "show", "b-2", "--state", "-o", bin, "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	b, err = os.ReadFile(bin)
	require.NoError(t, err)
	assert.Equal(t, []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0x02}, b)
	// usage mistakes
	cliGolden(t, "show-o-without-state", db.dir, cliRun(t, nil, "show", "b-2", "-o", bin, "--db", db.path))
}

// TestCLIShowStateTerminal: a bytes state is not written to a terminal.
func TestCLIShowStateTerminal(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	res := cliRunTTY(t, "stdout", "show", "b-2", "--state", "--db", db.path)
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "not writing it to a terminal; use -o FILE or redirect stdout")
	assert.Empty(t, res.stdout)
	// a JSON state is fine on a terminal
	res = cliRunTTY(t, "stdout", "show", "a-1", "--state", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stderr)
	assert.Contains(t, res.stdout, `"role": "user"`)
}

// TestCLIShowLangGraphCheckpoint (#19 point 7): show with the id of a LangGraph checkpoint says
// what it is and which ckptd threads command shows it (with its namespace when not the root).
func TestCLIShowLangGraphCheckpoint(t *testing.T) {
	t.Parallel()
	db := lgFixture(t)
	res := cliRun(t, nil, "show", "1f0a-0002", "--db", db.path)
	cliGolden(t, "show-lg-checkpoint", db.dir, res)
	assert.Equal(t, exitProblem, res.code)
	assert.Contains(t, res.stderr, "ckptd threads support-42 --checkpoint 1f0a-0002")
	res = cliRun(t, nil, "show", "1f0a-0003", "--db", db.path)
	cliGolden(t, "show-lg-checkpoint-namespace", db.dir, res)
	assert.Contains(t, res.stderr, "ckptd threads support-42 --checkpoint 1f0a-0003 --namespace tools:7d1e")
	// the command it names works
	res = cliRun(t, nil, "threads", "support-42", "--checkpoint", "1f0a-0003", "--namespace", "tools:7d1e", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stderr)
	cliGolden(t, "show-lg-unknown", db.dir, cliRun(t, nil, "show", "nope", "--db", db.path))
}
