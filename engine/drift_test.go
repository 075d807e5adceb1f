package engine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

func changes(paths ...string) []protocol.DriftFileChange {
	out := []protocol.DriftFileChange{}
	for _, p := range paths {
		out = append(out, protocol.DriftFileChange{Path: p})
	}
	return out
}

func TestDriftProblem(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		drifted                bool
		changed, added, delete []protocol.DriftFileChange
		want                   string
	}{
		{"not drifted", false, changes("a"), nil, nil, ""},
		{"one of each", true, changes("a"), changes("b"), changes("c"),
			"sources under /src changed since checkpoint c-1 was saved: 1 changed, 1 added, 1 deleted: a (changed), b (added), c (deleted)"},
		{"five named", true, changes("a", "b", "c", "d", "e"), nil, nil,
			"sources under /src changed since checkpoint c-1 was saved: 5 changed, 0 added, 0 deleted: a (changed), b (changed), c (changed), d (changed), e (changed)"},
		{"more than five", true, changes("a", "b", "c", "d"), changes("e", "f"), changes("g"),
			"sources under /src changed since checkpoint c-1 was saved: 4 changed, 2 added, 1 deleted: " +
				"a (changed), b (changed), c (changed), d (changed), e (added) and 2 more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := protocol.DriftStatus{CheckpointID: "c-1", Root: "/src", Drifted: tc.drifted,
				Changed: tc.changed, Added: tc.added, Deleted: tc.delete}
			assert.Equal(t, tc.want, driftProblem(st))
		})
	}
}

func TestNewDriftStatus(t *testing.T) {
	base := &drift.Manifest{Entries: []drift.Entry{
		{Path: "a", Type: drift.TypeFile, Size: 1, Mode: 0o644, Hash: drift.Digest{1}},
		{Path: "l", Type: drift.TypeSymlink, Mode: 0o777, Target: "x"},
	}}
	cur := &drift.Manifest{Entries: []drift.Entry{
		{Path: "a", Type: drift.TypeFile, Size: 2, Mode: 0o755, Hash: drift.Digest{2}},
		{Path: "n", Type: drift.TypeFile, Size: 3, Mode: 0o600, Hash: drift.Digest{3}},
	}}
	st := newDriftStatus(store.ManifestRef{CheckpointID: "c", WorkflowID: "w", Namespace: "ns"}, "/r", drift.Diff(base, cur))
	assert.True(t, st.Drifted)
	assert.Equal(t, []protocol.DriftFileChange{{Path: "a", OldSize: 1, NewSize: 2, OldHash: "01", NewHash: "02", OldType: "file", NewType: "file", OldMode: "0644", NewMode: "0755"}}, st.Changed)
	assert.Equal(t, []protocol.DriftFileChange{{Path: "n", NewSize: 3, NewHash: "03", NewType: "file", NewMode: "0600"}}, st.Added)
	assert.Equal(t, []protocol.DriftFileChange{{Path: "l", OldType: "symlink", OldMode: "0777"}}, st.Deleted)
	assert.Equal(t, 2, st.FilesChecked)
	b, err := json.Marshal(st)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), `{"checkpointId":"c","workflowId":"w","namespace":"ns","root":"/r","drifted":true,`), string(b))
	empty, err := json.Marshal(newDriftStatus(store.ManifestRef{}, "/r", drift.Diff(base, base)))
	require.NoError(t, err)
	assert.Contains(t, string(empty), `"changed":[],"added":[],"deleted":[]`)
}

// TestCheckDriftRootGone: a root that no longer exists is every file deleted, with a warning,
// and no current manifest; a last manifest of another root is not used.
func TestCheckDriftRootGone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644))
	spec, err := CheckSources("sources", drift.Spec{Root: dir})
	require.NoError(t, err)
	base, err := drift.Scan(ctx, spec, nil, drift.ScanOptions{})
	require.NoError(t, err)

	rep, cur, err := checkDrift(ctx, base, &drift.Manifest{Spec: drift.Spec{Root: "/elsewhere"}}, nil, nil)
	require.NoError(t, err)
	assert.False(t, rep.Drifted)
	require.NotNil(t, cur)

	require.NoError(t, os.RemoveAll(dir))
	rep, cur, err = checkDrift(ctx, base, nil, nil, nil)
	require.NoError(t, err)
	assert.Nil(t, cur)
	assert.True(t, rep.Drifted)
	require.Len(t, rep.Deleted, 1)
	assert.Equal(t, "a.txt", rep.Deleted[0].Path)
	require.Len(t, rep.Warnings, 1)
	assert.Contains(t, rep.Warnings[0], "no longer exists")
}
