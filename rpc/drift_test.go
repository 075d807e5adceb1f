package rpc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

func TestParseSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		raw, field, reason string
	}{
		{`{"root": "` + filepath.Join(dir, "nope") + `"}`, "sources.root", "does not exist"},
		{`{"root": "` + file + `"}`, "sources.root", "is not a directory"},
		{`{"root": ""}`, "sources.root", "required"},
		{`{}`, "sources.root", "required"},
		{`{"root": 1}`, "sources.root", "expected string"},
		{`{"root": "` + dir + `", "include": "x"}`, "sources.include", "expected array"},
		{`{"root": "` + dir + `", "include": ["a", ""]}`, "sources.include[1]", "empty"},
		{`{"root": "` + dir + `", "exclude": ["[x"]}`, "sources.exclude[0]", "not a valid glob"},
		{`{"root": "` + dir + `", "gitignore": "yes"}`, "sources.gitignore", "expected boolean"},
		{`[]`, "sources", "must be an object"},
		{`"x"`, "sources", "must be an object"},
	} {
		_, perr := parseSources("sources", json.RawMessage(tc.raw))
		require.NotNil(t, perr, tc.raw)
		assert.Equal(t, int64(protocol.CodeInvalidParams), perr.Code, tc.raw)
		var data struct{ Field, Reason string }
		require.NoError(t, json.Unmarshal(*perr.Data, &data))
		assert.Equal(t, tc.field, data.Field, tc.raw)
		assert.Contains(t, data.Reason, tc.reason, tc.raw)
		assert.Contains(t, perr.Message, tc.field)
	}

	// relative roots come back absolute; gitignore defaults to true
	wd, err := os.Getwd()
	require.NoError(t, err)
	spec, perr := parseSources("sources", json.RawMessage(`{"root": "."}`))
	require.Nil(t, perr)
	assert.Equal(t, wd, spec.Root)
	assert.True(t, spec.Gitignore)
	spec, perr = parseSources("sources", json.RawMessage(`{"root": "`+dir+`", "gitignore": false, "include": ["**/*.go"]}`))
	require.Nil(t, perr)
	assert.False(t, spec.Gitignore)
	assert.Equal(t, []string{"**/*.go"}, spec.Include)

	b, remove, perr := configureSources(json.RawMessage(`null`))
	assert.Nil(t, perr)
	assert.True(t, remove)
	assert.Nil(t, b)
	b, remove, perr = configureSources(nil)
	assert.Nil(t, perr)
	assert.False(t, remove)
	assert.Nil(t, b)
	b, _, perr = configureSources(json.RawMessage(`{"root": "` + dir + `"}`))
	assert.Nil(t, perr)
	assert.JSONEq(t, `{"root": "`+dir+`", "gitignore": true}`, string(b))
}

// TestDriftWatchQueue: the initial clean batch is not forwarded, batches queue without
// blocking the watcher, and a client that does not read gets one collapsed rescan.
func TestDriftWatchQueue(t *testing.T) {
	dw := &driftWatch{id: "w-1", ref: store.ManifestRef{CheckpointID: "c"}, first: true, wake: make(chan struct{}, 1)}
	dw.Batch(drift.Batch{Rescan: true, Reason: "initial scan"})
	assert.Empty(t, dw.queue)
	dw.Batch(drift.Batch{Changes: []drift.Change{{Path: "a", Kind: drift.KindChanged}}, Drifted: true})
	require.Len(t, dw.queue, 1)
	assert.Equal(t, protocol.DriftChangedEvent{WatchID: "w-1", CheckpointID: "c", Changes: []drift.Change{{Path: "a", Kind: drift.KindChanged}}, Drifted: true}, dw.queue[0])
	for range maxQueuedBatches + 10 {
		dw.Batch(drift.Batch{Changes: []drift.Change{{Path: "b", Kind: drift.KindAdded}}, Drifted: true})
	}
	assert.LessOrEqual(t, len(dw.queue), maxQueuedBatches)
	var collapsed *protocol.DriftChangedEvent
	for i := range dw.queue {
		if dw.queue[i].Rescan {
			collapsed = &dw.queue[i]
		}
	}
	require.NotNil(t, collapsed)
	assert.Contains(t, collapsed.Reason, "notifications dropped")
	assert.NotNil(t, collapsed.Changes)

	// a first batch that already shows drift is forwarded
	dw2 := &driftWatch{id: "w-2", first: true, wake: make(chan struct{}, 1)}
	dw2.Batch(drift.Batch{Rescan: true, Reason: "initial scan", Drifted: true, Changes: []drift.Change{{Path: "x", Kind: drift.KindDeleted}}})
	require.Len(t, dw2.queue, 1)
	assert.True(t, dw2.queue[0].Rescan)
}
