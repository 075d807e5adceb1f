package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// exportTo exports wf from db into dir/name and returns the archive's path.
func exportTo(t *testing.T, db *cliDB, wf, name string, extra ...string) string {
	t.Helper()
	out := filepath.Join(db.dir, name)
	res := cliRun(t, nil, append([]string{"export", wf, "-o", out, "--db", db.path}, extra...)...)
	require.Equal(t, exitOK, res.code, res.stderr)
	return out
}

// archivedCheckpoints exports wf from the database at dbPath and reads the archive back.
func archivedCheckpoints(t *testing.T, dbPath, wf string) []engine.Sourced {
	t.Helper()
	out := filepath.Join(t.TempDir(), "x.ckpt")
	res := cliRun(t, nil, "export", wf, "-o", out, "--db", dbPath)
	require.Equal(t, exitOK, res.code, res.stderr)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	_, cps, err := readTestArchive(b)
	require.NoError(t, err)
	return cps
}

func TestCLIExportImport(t *testing.T) {
	t.Parallel()
	src := standardFixture(t)
	for _, comp := range []string{"zstd", "none"} {
		t.Run(comp, func(t *testing.T) {
			archive := filepath.Join(src.dir, "alpha-"+comp+".ckpt")
			res := cliRun(t, nil, "export", "wf-alpha", "-o", archive, "--compression", comp, "--db", src.path)
			cliGolden(t, "export-"+comp, src.dir, res)
			info, err := os.Stat(archive)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

			dst := t.TempDir()
			dstDB := filepath.Join(dst, "sub", "target.db")
			res = cliRun(t, nil, "import", archive, "--db", dstDB)
			cliGolden(t, "import-"+comp, src.dir, res)
			// every field, task list, pending write and state byte is the same on both sides
			assert.Equal(t, archivedCheckpoints(t, src.path, "wf-alpha"), archivedCheckpoints(t, dstDB, "wf-alpha"))
			srcList := cliRun(t, nil, "ls", "wf-alpha", "--json", "--db", src.path)
			dstList := cliRun(t, nil, "ls", "wf-alpha", "--json", "--db", dstDB)
			assert.Equal(t, srcList.stdout, dstList.stdout)
			srcShow := cliRun(t, nil, "show", "a-3", "--json", "--db", src.path)
			dstShow := cliRun(t, nil, "show", "a-3", "--json", "--db", dstDB)
			assert.Equal(t, srcShow.stdout, dstShow.stdout)
			// importing again changes nothing
			res = cliRun(t, nil, "import", archive, "--db", dstDB)
			cliGolden(t, "import-again-"+comp, src.dir, res)
			res = cliRun(t, nil, "verify", "--quiet", "--db", dstDB)
			assert.Equal(t, exitOK, res.code, res.stdout)
		})
	}
}

// TestCLIImportSameContentDigest: an imported checkpoint saved again with identical content is an
// idempotent repeat for the sidecar (the import computed the same digest as a save).
func TestCLIImportSameContentDigest(t *testing.T) {
	t.Parallel()
	src := standardFixture(t)
	archive := exportTo(t, src, "wf-alpha", "a.ckpt")
	dstDB := filepath.Join(t.TempDir(), "t.db")
	require.Equal(t, exitOK, cliRun(t, nil, "import", archive, "--db", dstDB).code)
	d := startDaemon(t, dstDB)
	var r map[string]any
	d.call("checkpoint/save", map[string]any{"workflowId": "wf-alpha", "checkpointId": "a-2", "parentId": "a-1",
		"phase": "completed", "step": 0, "stepName": "fetch", "workflowHash": "h-alpha", "completedTasks": []string{"fetch"},
		"metadata": map[string]any{"source": "loop", "attempt": 1}, "stateAttachment": true, "stateType": "json"},
		[]byte(`{"messages":[{"role":"user","content":"hello <world> & all"}]}`), &r)
	assert.EqualValues(t, 2, r["seq"])
	assert.Equal(t, "2026-01-02T03:05:00.000000Z", r["createdAt"])
	// and the sidecar resumes the imported workflow where the source would
	var plan map[string]any
	d.call("resume/plan", map[string]any{"workflowId": "wf-alpha"}, nil, &plan)
	assert.Equal(t, "a-3", plan["checkpointId"])
	assert.EqualValues(t, 1, plan["startStep"])
}

func TestCLIImportCompletedWorkflow(t *testing.T) {
	t.Parallel()
	src := standardFixture(t)
	archive := exportTo(t, src, "wf-done", "done.ckpt")
	dstDB := filepath.Join(t.TempDir(), "t.db")
	require.Equal(t, exitOK, cliRun(t, nil, "import", archive, "--db", dstDB).code)
	res := cliRun(t, nil, "ls", "--db", dstDB)
	assert.Contains(t, res.stdout, "no (completed)")
}

// TestCLIImportIncremental: an archive of a longer history of the same workflow imports only
// the new checkpoints, with their original seqs.
func TestCLIImportIncremental(t *testing.T) {
	t.Parallel()
	src := newCLIDB(t, nil)
	for i := 1; i <= 3; i++ {
		src.save(store.SaveRequest{WorkflowID: "wf", CheckpointID: fmt.Sprintf("c-%d", i), Step: int64(i),
			State: []byte(fmt.Sprintf(`{"i":%d}`, i)), StateType: store.StateJSON})
	}
	src.close()
	first := exportTo(t, src, "wf", "first.ckpt")
	dstDB := filepath.Join(t.TempDir(), "t.db")
	require.Equal(t, exitOK, cliRun(t, nil, "import", first, "--db", dstDB).code)

	st, err := sqlite.Open(t.Context(), store.Options{Path: src.path, Now: newCLIClock(cliStart.Add(time.Hour)).Now})
	require.NoError(t, err)
	for i := 4; i <= 5; i++ {
		_, err := st.Save(t.Context(), store.SaveRequest{WorkflowID: "wf", CheckpointID: fmt.Sprintf("c-%d", i),
			Step: int64(i), State: []byte(fmt.Sprintf(`{"i":%d}`, i)), StateType: store.StateJSON})
		require.NoError(t, err)
	}
	require.NoError(t, st.Close())
	second := exportTo(t, src, "wf", "second.ckpt")
	cliGolden(t, "import-incremental", src.dir, cliRun(t, nil, "import", second, "--db", dstDB))
}

// TestCLIImportRenumbers: the target already has other checkpoints of the workflow at those
// seqs: the imported ones follow them, in their original order.
func TestCLIImportRenumbers(t *testing.T) {
	t.Parallel()
	src := standardFixture(t)
	archive := exportTo(t, src, "wf-alpha", "a.ckpt")
	dst := newCLIDB(t, nil)
	for i := 1; i <= 2; i++ {
		dst.save(store.SaveRequest{WorkflowID: "wf-alpha", CheckpointID: fmt.Sprintf("x-%d", i), Step: 7,
			State: []byte(`{"x":1}`), StateType: store.StateJSON})
	}
	dst.close()
	cliGolden(t, "import-renumbered", src.dir, cliRun(t, nil, "import", archive, "--db", dst.path))
	assert.Equal(t, []string{"a-3", "s-1", "a-2", "a-1", "x-2", "x-1"}, cliIDs(t, dst, "wf-alpha"))
	cliGolden(t, "import-renumbered-again", src.dir, cliRun(t, nil, "import", archive, "--db", dst.path))
}

// TestCLIImportConflict: a checkpoint id present with other content refuses the whole import.
func TestCLIImportConflict(t *testing.T) {
	t.Parallel()
	src := standardFixture(t)
	archive := exportTo(t, src, "wf-alpha", "a.ckpt")
	dst := newCLIDB(t, nil)
	dst.save(store.SaveRequest{WorkflowID: "wf-alpha", CheckpointID: "a-3", State: []byte(`{"other":1}`), StateType: store.StateJSON})
	dst.save(store.SaveRequest{WorkflowID: "wf-zeta", CheckpointID: "z-1", State: []byte(`{"z":1}`), StateType: store.StateJSON})
	dst.close()
	cliGolden(t, "import-conflict", src.dir, cliRun(t, nil, "import", archive, "--db", dst.path))
	assert.Equal(t, []string{"a-3"}, cliIDs(t, dst, "wf-alpha"), "nothing was imported")

	// the same id in another workflow
	dst2 := newCLIDB(t, nil)
	dst2.save(store.SaveRequest{WorkflowID: "wf-other", CheckpointID: "a-1", State: []byte(`{}`), StateType: store.StateJSON})
	dst2.close()
	res := cliRun(t, nil, "import", archive, "--db", dst2.path)
	assert.Equal(t, exitProblem, res.code)
	assert.Contains(t, res.stderr, `checkpoint "a-1" already exists in workflow "wf-other"`)
	assert.Contains(t, res.stderr, "nothing was imported")
	res = cliRun(t, nil, "ls", "wf-alpha", "--db", dst2.path)
	assert.Equal(t, exitProblem, res.code, "wf-alpha must not exist")
}

// TestCLIImportDamaged: a damaged archive is refused and nothing is written (the target
// database is not even created).
func TestCLIImportDamaged(t *testing.T) {
	t.Parallel()
	src := standardFixture(t)
	archive := exportTo(t, src, "wf-alpha", "a.ckpt")
	good, err := os.ReadFile(archive)
	require.NoError(t, err)
	write := func(name string, b []byte) string {
		p := filepath.Join(src.dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	flip := func(i int) []byte { b := append([]byte(nil), good...); b[i] ^= 0x20; return b }
	cases := map[string][]byte{
		"flip-header":     flip(15),
		"flip-body":       flip(len(good) / 2),
		"flip-digest":     flip(len(good) - 1),
		"truncated":       good[:len(good)*2/3],
		"truncated-1":     good[:len(good)-1],
		"appended":        append(append([]byte(nil), good...), '\n'),
		"not-an-archive":  []byte("hello, this is a text file and not a checkpoint archive at all\n"),
		"empty":           {},
		"trailer-missing": good[:len(good)-archiveTrailerLen],
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			p := write(name+".ckpt", b)
			dstDB := filepath.Join(t.TempDir(), "t.db")
			res := cliRun(t, nil, "import", p, "--db", dstDB)
			// the decoder's own detail depends on where the flipped byte lands in this run's
			// archive (its timestamps vary): the golden keeps everything but that detail
			cliGolden(t, "import-damaged-"+name, src.dir, res, `\(first problem: [^)]*\)`, "(first problem: DETAIL)")
			assert.Equal(t, exitProblem, res.code)
			assert.Contains(t, res.stderr, "nothing was imported")
			assert.NoFileExists(t, dstDB)
		})
	}
	// into an existing database: untouched
	dst := newCLIDB(t, nil)
	dst.save(store.SaveRequest{WorkflowID: "wf-zeta", CheckpointID: "z-1", State: []byte(`{}`), StateType: store.StateJSON})
	dst.close()
	res := cliRun(t, nil, "import", write("x.ckpt", flip(len(good)-40)), "--db", dst.path)
	assert.Equal(t, exitProblem, res.code)
	res = cliRun(t, nil, "ls", "--json", "--db", dst.path)
	assert.NotContains(t, res.stdout, "wf-alpha")
}

func TestCLIImportStdin(t *testing.T) {
	t.Parallel()
	src := standardFixture(t)
	res := cliRun(t, nil, "export", "wf-beta", "-o", "-", "--db", src.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Equal(t, "exported workflow wf-beta to -: 2 checkpoints, 12 B of state\n", res.stderr)
	assert.Equal(t, archiveMagic, res.stdout[:len(archiveMagic)])
	dstDB := filepath.Join(t.TempDir(), "t.db")
	res = cliRunIn(t, []byte(res.stdout), nil, "import", "-", "--db", dstDB)
	cliGolden(t, "import-stdin", "", res)
	res = cliRun(t, nil, "show", "b-2", "--state", "--db", dstDB)
	assert.Equal(t, []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0x02}, []byte(res.stdout))
}

func TestCLIImportDryRun(t *testing.T) {
	t.Parallel()
	src := standardFixture(t)
	archive := exportTo(t, src, "wf-alpha", "a.ckpt")
	dst := newCLIDB(t, nil)
	dst.save(store.SaveRequest{WorkflowID: "wf-alpha", CheckpointID: "a-1", Phase: store.PhaseBeforeStep, Step: 0,
		StepName: "fetch", State: []byte(`{"messages":[{"role":"user","content":"hello <world> & all"}]}`),
		StateType: store.StateJSON, WorkflowHash: "h-alpha"})
	dst.close()
	cliGolden(t, "import-dry-run", src.dir, cliRun(t, nil, "import", "--dry-run", archive, "--db", dst.path))
	assert.Equal(t, []string{"a-1"}, cliIDs(t, dst, "wf-alpha"))
	res := cliRun(t, nil, "import", "--dry-run", "--json", archive, "--db", dst.path)
	var rep importReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep))
	assert.True(t, rep.DryRun)
	assert.Equal(t, 3, rep.Imported)
	assert.Equal(t, 1, rep.Skipped)
	// a dry run does not create a database
	missing := filepath.Join(t.TempDir(), "none.db")
	res = cliRun(t, nil, "import", "--dry-run", archive, "--db", missing)
	assert.Equal(t, exitProblem, res.code)
	assert.NoFileExists(t, missing)
}

func TestCLIExportErrors(t *testing.T) {
	t.Parallel()
	src := standardFixture(t)
	src.corruptState("a-2")
	out := filepath.Join(src.dir, "a.ckpt")
	cliGolden(t, "export-corrupt", src.dir, cliRun(t, nil, "export", "wf-alpha", "-o", out, "--db", src.path))
	assert.NoFileExists(t, out)
	entries, err := os.ReadDir(src.dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), ".ckptd-export-", "temporary file left behind")
	}
	cliGolden(t, "export-unknown", src.dir, cliRun(t, nil, "export", "nope", "-o", out, "--db", src.path))
	cliGolden(t, "export-usage", src.dir, cliRun(t, nil, "export", "wf-alpha", "--db", src.path))
	cliGolden(t, "export-usage-compression", src.dir, cliRun(t, nil, "export", "wf-alpha", "-o", out, "--compression", "lz4", "--db", src.path))
	res := cliRunTTY(t, "stdout", "export", "wf-beta", "-o", "-", "--db", src.path)
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "not writing a binary archive to a terminal")
}

// TestCLIExportImportSources: the source manifests recorded with checkpoints travel in the
// archive, so `ckptd drift` answers the same on the imported copy as on the original.
func TestCLIExportImportSources(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, nil)
	src := filepath.Join(db.dir, "src")
	writeFile(t, filepath.Join(src, "agent.py"), "def fetch():\n    return 'v1'\n")
	writeFile(t, filepath.Join(src, "lib", "util.py"), "def util():\n    pass\n")
	scan := func(prev *drift.Manifest) *drift.Manifest {
		m, err := drift.Scan(t.Context(), drift.Spec{Root: src, Gitignore: true}, prev, drift.ScanOptions{})
		require.NoError(t, err)
		return m
	}
	m1 := scan(nil)
	enc1, err := drift.EncodeManifest(m1, nil)
	require.NoError(t, err)
	db.save(store.SaveRequest{WorkflowID: "wf-src", CheckpointID: "c-1", State: []byte(`{}`), StateType: store.StateJSON, Manifest: engine.ManifestRecord(enc1)})
	db.save(store.SaveRequest{WorkflowID: "wf-src", CheckpointID: "c-2", State: []byte(`{}`), StateType: store.StateJSON})
	writeFile(t, filepath.Join(src, "lib", "new.py"), "new\n")
	enc3, err := drift.EncodeManifest(scan(m1), enc1)
	require.NoError(t, err)
	db.save(store.SaveRequest{WorkflowID: "wf-src", CheckpointID: "c-3", State: []byte(`{}`), StateType: store.StateJSON, Manifest: engine.ManifestRecord(enc3)})
	db.close()

	archive := filepath.Join(db.dir, "src.ckpt")
	res := cliRun(t, nil, "export", "wf-src", "-o", archive, "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Contains(t, res.stdout, "3 checkpoints (2 with sources)")
	dstDB := filepath.Join(t.TempDir(), "dst.db")
	res = cliRun(t, nil, "import", archive, "--db", dstDB)
	require.Equal(t, exitOK, res.code, res.stderr)

	b, err := os.ReadFile(archive)
	require.NoError(t, err)
	_, cps, err := readTestArchive(b)
	require.NoError(t, err)
	require.Len(t, cps, 3)
	assert.NotNil(t, cps[0].Sources)
	assert.Nil(t, cps[1].Sources)
	assert.NotNil(t, cps[2].Sources)

	same := func(args ...string) {
		t.Helper()
		want := cliRun(t, nil, append(args, "--db", db.path)...)
		got := cliRun(t, nil, append(args, "--db", dstDB)...)
		assert.Equal(t, want.code, got.code, "%v", args)
		assert.Equal(t, want.stdout, got.stdout, "%v", args)
	}
	res = cliRun(t, nil, "drift", "wf-src", "--db", dstDB)
	assert.Equal(t, exitOK, res.code, res.stdout) // the latest checkpoint's sources are unchanged
	same("drift", "wf-src")
	same("drift", "wf-src", "--checkpoint", "c-1")
	writeFile(t, filepath.Join(src, "agent.py"), "def fetch():\n    return 'v2'\n")
	res = cliRun(t, nil, "drift", "wf-src", "--db", dstDB)
	assert.Equal(t, exitProblem, res.code, res.stdout)
	assert.Contains(t, res.stdout, "agent.py")
	same("drift", "wf-src")
	same("drift", "wf-src", "--checkpoint", "c-1")
	res = cliRun(t, nil, "drift", "wf-src", "--checkpoint", "c-2", "--db", dstDB)
	assert.Equal(t, exitNoSources, res.code)
	assert.Contains(t, res.stdout, "c-2")
	assert.Contains(t, res.stdout, "none recorded")
}

// TestCLIImportSourcesRoot: with --sources-root, checkpoints whose sources moved (another
// machine, another checkout) are checked for drift against the sources at their new place.
func TestCLIImportSourcesRoot(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, nil)
	src := filepath.Join(db.dir, "old", "agent")
	files := map[string]string{"agent.py": "def fetch():\n    return 'v1'\n", "lib/util.py": "def util():\n    pass\n"}
	for p, c := range files {
		writeFile(t, filepath.Join(src, p), c)
	}
	m, err := drift.Scan(t.Context(), drift.Spec{Root: src, Gitignore: true}, nil, drift.ScanOptions{})
	require.NoError(t, err)
	enc, err := drift.EncodeManifest(m, nil)
	require.NoError(t, err)
	db.save(store.SaveRequest{WorkflowID: "wf-src", CheckpointID: "c-1", State: []byte(`{}`), StateType: store.StateJSON, Manifest: engine.ManifestRecord(enc)})
	require.NoError(t, db.st.SetWorkflowSources(t.Context(), "wf-src", []byte(`{"root":`+strconv.Quote(src)+`,"gitignore":true}`)))
	db.close()
	archive := filepath.Join(db.dir, "src.ckpt")
	res := cliRun(t, nil, "export", "wf-src", "-o", archive, "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)

	// the sources now live elsewhere, one of them edited
	moved := filepath.Join(t.TempDir(), "srv", "agent")
	for p, c := range files {
		writeFile(t, filepath.Join(moved, p), c)
	}
	dstDB := filepath.Join(t.TempDir(), "dst.db")
	res = cliRun(t, nil, "import", archive, "--sources-root", filepath.Dir(src)+"="+filepath.Dir(moved), "--db", dstDB)
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Contains(t, res.stdout, "1 source manifest moved to the new sources root")
	res = cliRun(t, nil, "drift", "wf-src", "--json", "--db", dstDB)
	assert.Equal(t, exitOK, res.code, res.stdout)
	assert.Contains(t, res.stdout, strconv.Quote(moved))
	writeFile(t, filepath.Join(moved, "agent.py"), "def fetch():\n    return 'v2'\n")
	res = cliRun(t, nil, "drift", "wf-src", "--db", dstDB)
	assert.Equal(t, exitProblem, res.code, res.stdout)
	assert.Contains(t, res.stdout, "agent.py")
	assert.NotContains(t, res.stdout, "util.py")

	// importing again skips the checkpoint, so no manifest is moved
	res = cliRun(t, nil, "import", archive, "--sources-root", filepath.Dir(src)+"="+filepath.Dir(moved), "--db", dstDB)
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Contains(t, res.stdout, "0 imported, 1 skipped")
	assert.NotContains(t, res.stdout, "moved")

	// the workflow's configured sources moved too
	st, err := sqlite.Open(t.Context(), store.Options{Path: dstDB, NoCompactor: true})
	require.NoError(t, err)
	cfg, err := st.WorkflowSources(t.Context(), "wf-src")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	assert.JSONEq(t, `{"root":`+strconv.Quote(moved)+`,"gitignore":true}`, string(cfg))

	// a flag that matches no manifest refuses the import, as does a relative OLD
	res = cliRun(t, nil, "import", archive, "--sources-root", "/nowhere=/x", "--db", filepath.Join(t.TempDir(), "x.db"))
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "--sources-root: no source manifest in "+archive+" has its root at or below /nowhere (theirs: "+src+")")
	res = cliRun(t, nil, "import", archive, "--sources-root", "relative=/x", "--db", filepath.Join(t.TempDir(), "x.db"))
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, `--sources-root: OLD "relative" is not an absolute path`)
}

// TestCLIExportImportThread: a LangGraph thread moves between databases with 'export --thread'
// and 'import', byte for byte, and importing it twice changes nothing.
func TestCLIExportImportThread(t *testing.T) {
	t.Parallel()
	src := lgFixture(t)
	archive := filepath.Join(src.dir, "support-42.ckpt")
	cliGolden(t, "export-thread", src.dir, cliRun(t, nil, "export", "--thread", "support-42", "-o", archive, "--db", src.path))
	dstDB := filepath.Join(t.TempDir(), "dst.db")
	cliGolden(t, "import-thread", src.dir, cliRun(t, nil, "import", archive, "--db", dstDB))
	for _, args := range [][]string{
		{"threads", "support-42", "--json"},
		{"threads", "support-42", "--checkpoint", "latest", "--values", "--json"},
		{"threads", "support-42", "--checkpoint", "1f0a-0001", "--values", "--json"},
		{"threads", "support-42", "--checkpoint", "1f0a-0003", "--namespace", "tools:7d1e", "--values", "--json"},
	} {
		want := cliRun(t, nil, append(args, "--db", src.path)...)
		got := cliRun(t, nil, append(args, "--db", dstDB)...)
		require.Equal(t, exitOK, got.code, got.stderr)
		assert.Equal(t, want.stdout, got.stdout, "%v", args)
	}
	res := cliRun(t, nil, "threads", "--db", dstDB)
	assert.NotContains(t, res.stdout, "triage-7", "only the exported thread")
	cliGolden(t, "import-thread-again", src.dir, cliRun(t, nil, "import", archive, "--json", "--db", dstDB))
	res = cliRun(t, nil, "verify", "--quiet", "--db", dstDB)
	assert.Equal(t, exitOK, res.code, res.stdout)

	// a dry run writes nothing; --sources-root makes no sense for a thread
	dry := newCLIDB(t, nil)
	dry.close()
	res = cliRun(t, nil, "import", "--dry-run", archive, "--db", dry.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	assert.Contains(t, res.stdout, "dry run: would import LangGraph thread support-42 (new here)")
	assert.Contains(t, res.stdout, "dry run: nothing was written")
	res = cliRun(t, nil, "threads", "--db", dry.path)
	assert.Equal(t, "no LangGraph threads\n", res.stderr)
	res = cliRun(t, nil, "import", archive, "--sources-root", "/a=/b", "--db", dry.path)
	assert.Equal(t, exitUsage, res.code)
	assert.Contains(t, res.stderr, "holds LangGraph thread support-42, which records no sources")

	// different content under the same keys refuses the whole import
	conflict := newCLIDB(t, nil)
	p, _ := conflict.st.LGPut(store.LGPutRequest{ThreadID: "support-42", CheckpointID: "1f0a-0001", Type: "json",
		Checkpoint: []byte(`{"v":4,"other":true}`), ChannelVersions: json.RawMessage(`{}`)})
	require.NoError(t, p.Wait(t.Context()))
	conflict.close()
	res = cliRun(t, nil, "import", archive, "--db", conflict.path)
	assert.Equal(t, exitProblem, res.code)
	assert.Contains(t, res.stderr, `checkpoint "1f0a-0001" (namespace "") is already here with different content`)
	assert.Contains(t, res.stderr, "nothing was imported")

	// usage
	res = cliRun(t, nil, "export", "wf", "--thread", "t", "-o", "x", "--db", src.path)
	assert.Equal(t, exitUsage, res.code)
	res = cliRun(t, nil, "export", "--thread", "nope", "-o", filepath.Join(t.TempDir(), "x"), "--db", src.path)
	assert.Equal(t, exitProblem, res.code)
	assert.Contains(t, res.stderr, `LangGraph thread "nope": not found`)
}

// TestCLIExportImportChunked: a workflow whose states are stored as chunks is exported as a
// version 3 archive that carries each chunk once (far smaller than its states), imports back
// byte for byte into another database, and stores there as compactly; a workflow of small
// states is still a version 1 archive, which older readers read.
func TestCLIExportImportChunked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "src.db")
	d := startDaemon(t, db, "--keep-last", "0")
	w := testgen.NewWorkload(8, 200<<10)
	var logical int64
	for i := 0; i < 20; i++ {
		st := w.State()
		logical += int64(len(st))
		d.saveState("wf-big", i, st)
		w.Advance()
	}
	d.saveState("wf-small", 0, []byte(`{"small":true}`))
	d.shutdownWait()

	version := func(path string) uint16 {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return binary.BigEndian.Uint16(b[len(archiveMagic):])
	}
	for _, comp := range []string{"none", "zstd"} {
		big := filepath.Join(dir, "big-"+comp+".ckpt")
		res := cliRun(t, nil, "export", "wf-big", "-o", big, "--compression", comp, "--db", db)
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Equal(t, uint16(archiveChunkVersion), version(big))
		info, err := os.Stat(big)
		require.NoError(t, err)
		assert.Less(t, info.Size(), logical/8, "%s: each chunk once (%d bytes for %d of states)", comp, info.Size(), logical)

		dst := filepath.Join(t.TempDir(), "dst.db")
		res = cliRun(t, nil, "import", big, "--db", dst)
		require.Equal(t, exitOK, res.code, res.stderr)
		assert.Equal(t, archivedCheckpoints(t, db, "wf-big"), archivedCheckpoints(t, dst, "wf-big"))
		res = cliRun(t, nil, "verify", "--quiet", "--db", dst)
		require.Equal(t, exitOK, res.code, res.stdout)
		var src, got struct {
			Workflows []lsWorkflowJSON `json:"workflows"`
		}
		require.NoError(t, json.Unmarshal([]byte(cliRun(t, nil, "ls", "--json", "--db", db).stdout), &src))
		require.NoError(t, json.Unmarshal([]byte(cliRun(t, nil, "ls", "--json", "--db", dst).stdout), &got))
		var srcBig protocol.Footprint
		for _, w := range src.Workflows {
			if w.WorkflowID == "wf-big" {
				srcBig = w.Footprint
			}
		}
		require.Len(t, got.Workflows, 1)
		assert.Equal(t, srcBig.LogicalBytes, got.Workflows[0].Footprint.LogicalBytes)
		assert.InDelta(t, srcBig.StoredBytes, got.Workflows[0].Footprint.StoredBytes, float64(srcBig.StoredBytes)/20,
			"stored as compactly after the import")
	}
	small := filepath.Join(dir, "small.ckpt")
	res := cliRun(t, nil, "export", "wf-small", "-o", small, "--db", db)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Equal(t, uint16(archiveVersion), version(small), "no chunked state: version 1, for older readers")
}
