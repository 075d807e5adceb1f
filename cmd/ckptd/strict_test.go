package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEndToEndStrictParams: through the real binary, a misspelt param (a typo, a name in
// other case, a typo inside a nested object or the sources spec) is refused with -32602 naming
// it and the name meant, and nothing is stored: the workflow does not exist afterwards, in this
// daemon or in the next one on the same database.
func TestEndToEndStrictParams(t *testing.T) {
	db := filepath.Join(t.TempDir(), "strict.db")
	src := t.TempDir()
	d := startDaemon(t, db)
	d.call("initialize", map[string]any{"clientName": "strict-e2e"}, nil, nil)

	for _, tc := range []struct {
		name, method, params string
		att                  []byte
		field, reason        string
	}{
		{"typo of state", "checkpoint/save", `{"workflowId":"a","stat":{"x":1}}`, nil,
			"stat", `unknown param "stat" (did you mean "state"?)`},
		{"workflowid", "checkpoint/save", `{"workflowid":"a","state":{"x":1}}`, nil,
			"workflowid", `unknown param "workflowid" (did you mean "workflowId"?)`},
		{"typo behind a state attachment", "checkpoint/save", `{"workflowId":"a","stateAttachment":true,"stepname":"s"}`, []byte(`{"x":1}`),
			"stepname", `unknown param "stepname" (did you mean "stepName"?)`},
		{"nested error", "checkpoint/save", `{"workflowId":"a","phase":"failed","error":{"mesage":"boom"}}`, nil,
			"error.mesage", `unknown param "error.mesage" (did you mean "error.message"?)`},
		{"sources spec", "checkpoint/save", `{"workflowId":"a","state":1,"sources":{"root":` + quoteJSON(src) + `,"exlude":["x"]}}`, nil,
			"sources.exlude", `unknown param "sources.exlude" (did you mean "sources.exclude"?)`},
		{"retention", "workflow/configure", `{"workflowId":"a","retention":{"keep_last":1}}`, nil,
			"retention.keep_last", `unknown param "retention.keep_last" (did you mean "retention.keepLast"?)`},
		{"nothing close", "checkpoint/save", `{"workflowId":"a","frobnicate":true}`, nil,
			"frobnicate", `unknown param "frobnicate"`},
		{"a method without params", "stats", `{"verbose":true}`, nil,
			"verbose", `unknown param "verbose"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := d.callErr(tc.method, json.RawMessage(tc.params), tc.att)
			require.Equal(t, -32602, e.Code, e.Message)
			require.Equal(t, "invalid params: "+tc.reason, e.Message)
			var data struct{ Field, Reason string }
			require.NoError(t, json.Unmarshal(e.Data, &data))
			require.Equal(t, tc.field, data.Field)
			require.Equal(t, tc.reason, data.Reason)
		})
	}

	nothingStored := func(d *daemon) {
		t.Helper()
		var wl struct{ Workflows []json.RawMessage }
		d.call("workflow/list", map[string]any{}, nil, &wl)
		require.Empty(t, wl.Workflows)
		var cl struct{ Checkpoints []json.RawMessage }
		d.call("checkpoint/list", map[string]any{}, nil, &cl)
		require.Empty(t, cl.Checkpoints)
		e := d.callErr("checkpoint/load", map[string]any{"workflowId": "a"}, nil)
		require.Equal(t, -32001, e.Code, e.Message)
	}
	nothingStored(d)
	require.NoError(t, d.stdin.Close())
	require.NoError(t, waitExit(d.cmd, 10*time.Second))

	d = startDaemon(t, db)
	nothingStored(d)
	// the same save, spelt right, is stored
	var res struct{ CheckpointID string }
	d.call("checkpoint/save", json.RawMessage(`{"workflowId":"a","state":{"x":1}}`), nil, &res)
	require.NotEmpty(t, res.CheckpointID)
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
