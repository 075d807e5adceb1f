package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// pruneFixture: wf-p with 5 checkpoints p-1..p-5 and wf-q with 3, one day apart, the newest
// ending now (real time: --older-than compares with the clock of the ckptd process).
func pruneFixture(t *testing.T) *cliDB {
	now := time.Now()
	at := now.Add(-8 * 24 * time.Hour)
	clock := func() time.Time { at = at.Add(24 * time.Hour); return at }
	db := newCLIDB(t, clock)
	for i := 1; i <= 5; i++ {
		db.save(store.SaveRequest{WorkflowID: "wf-p", CheckpointID: fmt.Sprintf("p-%d", i), Step: int64(i),
			State: []byte(fmt.Sprintf(`{"p":%d}`, i)), StateType: store.StateJSON})
	}
	at = now.Add(-4 * 24 * time.Hour)
	for i := 1; i <= 3; i++ {
		db.save(store.SaveRequest{WorkflowID: "wf-q", CheckpointID: fmt.Sprintf("q-%d", i), Step: int64(i),
			State: []byte(fmt.Sprintf(`{"q":%d}`, i)), StateType: store.StateJSON})
	}
	db.close()
	return db
}

func cliIDs(t *testing.T, db *cliDB, wf string) []string {
	t.Helper()
	res := cliRun(t, nil, "ls", wf, "--json", "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	var out struct {
		Checkpoints []struct{ CheckpointID string }
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	var ids []string
	for _, c := range out.Checkpoints {
		ids = append(ids, c.CheckpointID)
	}
	return ids
}

func TestCLIPrune(t *testing.T) {
	t.Parallel()
	db := pruneFixture(t)
	// p-1..p-5 were saved 7..3 days ago, q-1..q-3 3..1 days ago
	cliGolden(t, "prune-dry-run", db.dir, cliRun(t, nil, "prune", "--keep-last", "2", "--dry-run", "--db", db.path),
		`freeing [0-9.]+ [KMG]?i?B`, "freeing N")
	assert.Len(t, cliIDs(t, db, "wf-p"), 5, "a dry run deletes nothing")
	cliGolden(t, "prune-older-than", db.dir, cliRun(t, nil, "prune", "--older-than", "4d12h", "--workflow", "wf-p", "--db", db.path),
		`freeing [0-9.]+ [KMG]?i?B`, "freeing N")
	assert.Equal(t, []string{"p-5", "p-4"}, cliIDs(t, db, "wf-p"))
	assert.Len(t, cliIDs(t, db, "wf-q"), 3)
	res := cliRun(t, nil, "prune", "--keep-last", "1", "--json", "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	var out struct {
		Deleted       int
		DryRun        bool
		CheckpointIDs map[string][]string
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	assert.Equal(t, 3, out.Deleted)
	assert.Equal(t, map[string][]string{"wf-p": {"p-4"}, "wf-q": {"q-1", "q-2"}}, out.CheckpointIDs)
	cliGolden(t, "prune-nothing", db.dir, cliRun(t, nil, "prune", "--keep-last", "1", "--db", db.path))
	// the newest checkpoint is never pruned
	assert.Equal(t, []string{"p-5"}, cliIDs(t, db, "wf-p"))
}

func TestCLIPruneUsage(t *testing.T) {
	t.Parallel()
	db := pruneFixture(t)
	cliGolden(t, "prune-usage-no-policy", db.dir, cliRun(t, nil, "prune", "--db", db.path))
	cliGolden(t, "prune-usage-bad-age", db.dir, cliRun(t, nil, "prune", "--older-than", "7 days", "--db", db.path))
	cliGolden(t, "prune-usage-keep-zero", db.dir, cliRun(t, nil, "prune", "--keep-last", "0", "--db", db.path))
	cliGolden(t, "prune-unknown-workflow", db.dir, cliRun(t, nil, "prune", "--keep-last", "1", "--workflow", "nope", "--db", db.path))
}

func TestCLIParseAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"7d": 7 * 24 * time.Hour, "36h": 36 * time.Hour, "90m": 90 * time.Minute, "45s": 45 * time.Second,
		"1d12h": 36 * time.Hour, "2w": 14 * 24 * time.Hour, "1.5h": 90 * time.Minute, "1h30m": 90 * time.Minute,
	} {
		got, err := parseAge(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "d", "7", "7x", "-1d", "0d", "0s", "1d-2h", "7 days", "99999999999999999999d"} {
		_, err := parseAge(in)
		assert.Error(t, err, in)
	}
}

// TestCLIPruneProgressOnTerminal (#22): a prune that takes several transactions shows its
// progress on a terminal (stderr), and clears the line before the report.
func TestCLIPruneProgressOnTerminal(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, nil)
	var ps []*storePending
	for w := 0; w < 100; w++ {
		for i := 0; i < 40; i++ {
			ps = append(ps, &storePending{p: db.st.Enqueue(store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%03d", w),
				State: []byte(fmt.Sprintf(`{"i":%d}`, i)), StateType: store.StateJSON})})
		}
	}
	for _, p := range ps {
		p.wait(t)
	}
	db.close()
	res := cliRunTTY(t, "stderr", "prune", "--keep-last", "1", "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stderr, "pruning: deleted ")
	require.Contains(t, res.stderr, "/100 workflows (")
	require.True(t, strings.HasSuffix(res.stderr, "\r\x1b[K"), "the progress line is cleared: %q", res.stderr)
	require.Contains(t, res.stdout, "deleted 3900 checkpoints from 100 workflows")
	require.Contains(t, res.stdout, "... and 50 more workflows (--json lists every checkpoint id)")

	// not on a terminal: no progress
	res = cliRun(t, nil, "prune", "--keep-last", "1", "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Empty(t, res.stderr)
}
