package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
)

// copyTree copies the regular files of src into dst with their modes, new inodes and new
// times: the same tree checked out on another machine.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		rel, err := filepath.Rel(src, p)
		require.NoError(t, err)
		fi, err := d.Info()
		require.NoError(t, err)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), fi.Mode().Perm())
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return os.WriteFile(filepath.Join(dst, rel), b, fi.Mode().Perm())
	}))
}

// TestPlanResumeAtSourcesRoot: a checkpoint's sources recorded under one root are compared with
// the same tree checked out under another (sourcesRoot): an identical copy has not drifted, and
// a change to the copy is reported by its relative path, naming both roots; the recorded
// root's own tree is not looked at.
func TestPlanResumeAtSourcesRoot(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	e := New(st, nil)
	hostA := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(hostA, "pkg"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(hostA, "main.go"), []byte("package main\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(hostA, "pkg", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	spec, err := CheckSources("sources", drift.Spec{Root: hostA})
	require.NoError(t, err)
	_, _, err = e.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-1", StateType: store.StateNone}, &spec, nil)
	require.NoError(t, err)

	hostB := filepath.Join(t.TempDir(), "checkout")
	time.Sleep(10 * time.Millisecond) // other times than the recorded ones
	copyTree(t, hostA, hostB)
	require.NoError(t, os.RemoveAll(hostA)) // the recorded root is gone: only hostB counts

	root, err := CheckSourcesRoot("sourcesRoot", hostB)
	require.NoError(t, err)
	rp, err := e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf", SourcesRoot: root})
	require.NoError(t, err)
	require.False(t, rp.Blocked(false), "%+v", rp.Problems)
	require.NotNil(t, rp.Drift)
	assert.False(t, rp.Drift.Drifted)
	assert.Equal(t, hostB, rp.Drift.Root)
	assert.Equal(t, hostA, rp.Drift.RecordedRoot)
	assert.Equal(t, 2, rp.Drift.FilesChecked)

	// without sourcesRoot the recorded root is checked: gone, so everything was deleted
	rp, err = e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf"})
	require.NoError(t, err)
	require.True(t, rp.Blocked(false))
	assert.Len(t, rp.Drift.Deleted, 2)

	// a change in the other checkout is drift there, by its relative path
	require.NoError(t, os.WriteFile(filepath.Join(hostB, "pkg", "run.sh"), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(hostB, "main.go"), 0o600))
	for i := 0; i < 2; i++ { // the second check builds on the manifest the first took at hostB
		rp, err = e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf", SourcesRoot: root})
		require.NoError(t, err)
		require.True(t, rp.Blocked(false))
		require.Len(t, rp.Problems, 1)
		assert.Contains(t, rp.Problems[0].Message, "sources under "+hostB+" changed")
		assert.Contains(t, rp.Problems[0].Message, "pkg/run.sh (changed)")
		assert.Contains(t, rp.Problems[0].Message, "main.go (changed)")
		assert.Equal(t, hostA, rp.Drift.RecordedRoot)
	}

	// drift/status's use case answers the same
	ref, err := st.CheckpointManifestRef(ctx, "c-1")
	require.NoError(t, err)
	base, err := e.Manifest(ctx, ref)
	require.NoError(t, err)
	ds, err := New(st, nil).DriftStatusAt(ctx, ref, base, nil, root)
	require.NoError(t, err)
	assert.True(t, ds.Drifted)
	assert.Len(t, ds.Changed, 2)
	assert.True(t, ds.FullScan)
	assert.Equal(t, "compared at "+hostB+" (recorded at "+hostA+")", ds.Reason)
	assert.Equal(t, hostA, base.Spec.Root, "the shared manifest is left as it was")
}

func TestCheckSourcesRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	got, err := CheckSourcesRoot("sourcesRoot", "")
	require.NoError(t, err)
	assert.Equal(t, "", got)
	got, err = CheckSourcesRoot("sourcesRoot", dir+"/./")
	require.NoError(t, err)
	assert.Equal(t, dir, got)
	for _, bad := range []string{filepath.Join(dir, "missing"), file} {
		_, err := CheckSourcesRoot("sourcesRoot", bad)
		var se *SourcesError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "sourcesRoot", se.Field)
	}
}
