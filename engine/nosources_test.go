package engine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// TestSaveRemembersNoSources: a workflow without configured sources is remembered as such, so
// that its saves read no configuration; configuring sources here is seen by the next save, and
// configuring them from another process by the save that finds them (stored without a
// fingerprint, saying so) and every save after it.
func TestSaveRemembersNoSources(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	open := func() *sqlite.Store {
		st, err := sqlite.Open(ctx, store.Options{Path: path})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	st, other := open(), open() // other: a second process on the same database
	e := New(st, nil)
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.py"), []byte("print(1)\n"), 0o644))
	spec, _ := json.Marshal(map[string]any{"root": root})

	save := func(wf string) (store.SaveResult, bool, string) {
		t.Helper()
		res, info, err := e.Save(ctx, store.SaveRequest{WorkflowID: wf, State: []byte(`{}`), StateType: store.StateJSON}, nil, nil)
		require.NoError(t, err)
		ref, err := st.CheckpointManifestRef(ctx, res.CheckpointID)
		require.NoError(t, err)
		msg := ""
		if info != nil {
			msg = info.Error
			if info.Error == "" {
				assert.Equal(t, root, info.Root)
				assert.Equal(t, 1, info.Files)
			}
		}
		return res, ref.HasManifest, msg
	}

	_, fp, msg := save("wf")
	assert.False(t, fp)
	assert.Empty(t, msg)
	assert.True(t, e.noSources.has("wf"), "remembered: no sources")

	// configured here: forgotten at once, the next save has its fingerprint
	require.NoError(t, st.SetWorkflowSources(ctx, "wf", spec))
	e.SourcesConfigured("wf")
	_, fp, msg = save("wf")
	assert.True(t, fp)
	assert.Empty(t, msg)
	assert.False(t, e.noSources.has("wf"))

	// configured by another process: the save that finds them says so, the next one has them
	_, _, _ = save("wf2")
	require.True(t, e.noSources.has("wf2"))
	require.NoError(t, other.SetWorkflowSources(ctx, "wf2", spec))
	_, fp, msg = save("wf2")
	assert.False(t, fp)
	assert.Contains(t, msg, "configured (by another process) while this save was queued")
	_, fp, msg = save("wf2")
	assert.True(t, fp)
	assert.Empty(t, msg)

	// a stale answer never comes back: a read begun before a forget is not remembered
	gen := e.noSources.generation()
	e.SourcesConfigured("wf3")
	e.noSources.add("wf3", gen)
	assert.False(t, e.noSources.has("wf3"))
}
