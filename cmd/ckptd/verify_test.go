package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"

	"github.com/ckptd/ckptd/engine"
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
	assert.Equal(t, "ok: 7 checkpoints, 6 states (625 B stored), SQLite integrity ok\n", res.stdout)
}

// TestCLIVerifyLangGraph: LangGraph checkpoints, channel values and pending writes are verified
// from the database too, and each damaged row is named.
func TestCLIVerifyLangGraph(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, nil)
	ctx := context.Background()
	for i, id := range []string{"c1", "c2"} {
		p, _ := db.st.LGPut(store.LGPutRequest{ThreadID: "thread-1", CheckpointID: id, Type: "json", Checkpoint: []byte(`{"v":1}`),
			ChannelVersions: json.RawMessage(fmt.Sprintf(`{"messages":"%d","big":"%d"}`, i+1, i+1)),
			Blobs: []store.LGBlob{{Channel: "messages", Version: fmt.Sprintf(`"%d"`, i+1), Type: "json", Data: []byte(fmt.Sprintf(`["m%d"]`, i))},
				{Channel: "big", Version: fmt.Sprintf(`"%d"`, i+1), Type: "json", Data: cliState(20 << 10)}}})
		require.NoError(t, p.Wait(ctx))
		w, _ := db.st.LGPutWrites("thread-1", "", id, []store.LGWrite{{TaskID: "task", Idx: 0, Channel: "messages", Type: "json", Data: []byte(`"w"`)}})
		require.NoError(t, w.Wait(ctx))
	}
	db.close()
	cliGolden(t, "verify-langgraph-ok", db.dir, cliRun(t, nil, "verify", "--quiet", "--db", db.path))

	db.exec(`UPDATE lg_blobs SET data = CAST('["mX"]' AS BLOB) WHERE channel = 'messages' AND version = '"2"'`)
	db.exec(`UPDATE lg_blobs SET data = substr(data, 1, length(data) - 5) WHERE channel = 'big' AND version = '"1"'`)
	db.exec(`UPDATE lg_writes SET data = CAST('"x"' AS BLOB) WHERE checkpoint_id = 'c1'`)
	db.exec(`UPDATE lg_checkpoints SET data = CAST('{"v":2}' AS BLOB) WHERE checkpoint_id = 'c2'`)
	cliGolden(t, "verify-langgraph-corrupt", db.dir, cliRun(t, nil, "verify", "--quiet", "--db", db.path))
	res := cliRun(t, nil, "verify", "--json", "--quiet", "--db", db.path)
	assert.Equal(t, exitProblem, res.code)
	var rep verifyReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep))
	assert.False(t, rep.OK)
	assert.Empty(t, rep.Corrupt)
	assert.Equal(t, 2, rep.LangGraph.Checkpoints)
	assert.Equal(t, 4, rep.LangGraph.Values)
	assert.Equal(t, 2, rep.LangGraph.Writes)
	var got []string
	for _, c := range rep.LangGraph.Corrupt {
		got = append(got, c.what())
	}
	assert.Equal(t, []string{"lg checkpoint c2", `lg value big@"1"`, `lg value messages@"2"`, "lg write c1/task/0"}, got)
}

// TestCLIVerifySourceManifests: the drift manifests recorded with checkpoints are verified, and
// a damaged one is named by the checkpoints it breaks.
func TestCLIVerifySourceManifests(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, nil)
	src := filepath.Join(db.dir, "src")
	writeFile(t, filepath.Join(src, "agent.py"), "def fetch():\n    return 'v1'\n")
	writeFile(t, filepath.Join(src, "lib", "util.py"), "def util():\n    pass\n")
	m, err := drift.Scan(t.Context(), drift.Spec{Root: src, Gitignore: true}, nil, drift.ScanOptions{})
	require.NoError(t, err)
	enc, err := drift.EncodeManifest(m, nil)
	require.NoError(t, err)
	db.save(store.SaveRequest{WorkflowID: "wf-src", CheckpointID: "c-1", Step: 0, State: []byte(`{}`), StateType: store.StateJSON, Manifest: engine.ManifestRecord(enc)})
	db.save(store.SaveRequest{WorkflowID: "wf-src", CheckpointID: "c-2", Step: 1, State: []byte(`{}`), StateType: store.StateJSON, Manifest: engine.ManifestRecord(enc)})
	db.close()
	res := cliRun(t, nil, "verify", "--quiet", "--db", db.path)
	assert.Equal(t, exitOK, res.code, res.stdout)
	assert.Equal(t, "ok: 2 checkpoints, 1 state (2 B stored), 2 source manifests (2 file entries), SQLite integrity ok\n", res.stdout)

	db.exec(fmt.Sprintf(`UPDATE drift_entries SET data = data || X'00' WHERE key = X'%x'`, drift.EntryKey(m.Entries[0])))
	res = cliRun(t, nil, "verify", "--quiet", "--db", db.path)
	assert.Equal(t, exitProblem, res.code, res.stdout)
	assert.Contains(t, res.stdout, "2 problems (0 corrupt checkpoints, 2 corrupt source manifests, 0 database integrity errors)")
	res = cliRun(t, nil, "verify", "--json", "--quiet", "--db", db.path)
	assert.Equal(t, exitProblem, res.code)
	var rep verifyReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep))
	assert.False(t, rep.OK)
	assert.Empty(t, rep.Corrupt)
	assert.Equal(t, 2, rep.Sources.Manifests)
	require.Len(t, rep.Sources.Corrupt, 2)
	for i, id := range []string{"c-1", "c-2"} {
		c := rep.Sources.Corrupt[i]
		assert.Equal(t, id, c.CheckpointID)
		assert.Equal(t, "wf-src", c.WorkflowID)
		assert.EqualValues(t, i+1, c.Seq)
		assert.Contains(t, c.Reason, "source manifest: file entry")
		assert.Contains(t, c.Reason, "BLAKE3 mismatch")
	}
}

// TestCLIVerifyPacks: the chunks of a large state lie in packs; verify finds a pack no chunk lies
// in (an orphan, never collected), and a pack gone: its chunks have no bytes and the checkpoint
// listing them is corrupt.
func TestCLIVerifyPacks(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, nil)
	saved := db.save(store.SaveRequest{WorkflowID: "w", State: testgen.New(4).Bytes(150 << 10), StateType: store.StateBytes})
	db.close()
	res := cliRun(t, nil, "verify", "--quiet", "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stdout+res.stderr)
	var packs int
	raw, err := sql.Open("sqlite", "file:"+db.path+"?mode=ro")
	require.NoError(t, err)
	require.NoError(t, raw.QueryRow(`SELECT count(*) FROM packs`).Scan(&packs))
	require.NoError(t, raw.Close())
	require.Positive(t, packs, "the state's chunks are in packs")

	db.exec(`INSERT INTO packs(data) VALUES (randomblob(3000))`)
	res = cliRun(t, nil, "verify", "--quiet", "--db", db.path)
	assert.Equal(t, exitProblem, res.code, res.stdout+res.stderr)
	assert.Contains(t, res.stdout, "1 packs hold no stored chunk (orphans)")

	db.exec(`DELETE FROM packs WHERE id = (SELECT max(id) FROM packs)`)
	db.exec(`DELETE FROM packs WHERE id = (SELECT min(id) FROM packs)`)
	res = cliRun(t, nil, "verify", "--json", "--quiet", "--db", db.path)
	assert.Equal(t, exitProblem, res.code)
	var rep verifyReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep))
	require.Len(t, rep.Corrupt, 1, res.stdout)
	assert.Equal(t, saved.CheckpointID, rep.Corrupt[0].CheckpointID)
	assert.Contains(t, rep.Corrupt[0].Reason, "missing")
	assert.Contains(t, strings.Join(rep.Database, "\n"), "is missing")
}
