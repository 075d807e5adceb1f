package rpc

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// TestSaveParamsBounded: every checkpoint/save param is bounded and checked, attachment or not.
func TestSaveParamsBounded(t *testing.T) {
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "b.db")})
	require.NoError(t, err)
	defer st.Close()
	srv := New(st, Options{MaxStateBytes: 1 << 20})
	big := func(n int) string { return strings.Repeat("m", n) }
	cases := []struct {
		name   string
		params string
		field  string // "" : accepted
	}{
		{"empty checkpointId", `{"workflowId":"w","checkpointId":""}`, "checkpointId"},
		{"bogus stateType without attachment", `{"workflowId":"w","stateType":"bogus"}`, "stateType"},
		{"bogus stateType with inline state", `{"workflowId":"w","state":{},"stateType":"bogus"}`, "stateType"},
		{"metadata over 1 MiB", `{"workflowId":"w","metadata":{"m":"` + big(1<<20) + `"}}`, "metadata"},
		{"metadata of 1000 KiB", `{"workflowId":"w","metadata":{"m":"` + big(1000<<10) + `"}}`, ""},
		{"namespace over 512 bytes", `{"workflowId":"w","namespace":"` + big(513) + `"}`, "namespace"},
		{"parentId over 256 bytes", `{"workflowId":"w","parentId":"` + big(257) + `"}`, "parentId"},
		{"stepName over 1 KiB", `{"workflowId":"w","stepName":"` + big(1025) + `"}`, "stepName"},
		{"workflowHash over 1 KiB", `{"workflowId":"w","workflowHash":"` + big(1025) + `"}`, "workflowHash"},
		{"error message over 64 KiB", `{"workflowId":"w","phase":"failed","error":{"message":"` + big(64<<10+1) + `","retryable":true}}`, "error.message"},
		{"stateBase64 not a string", `{"workflowId":"w","stateBase64":5}`, "stateBase64"},
		{"stateBase64 with escapes", `{"workflowId":"w","stateBase64":"aGk\u003d"}`, ""},
		{"stateBase64 invalid", `{"workflowId":"w","stateBase64":"!!"}`, "stateBase64"},
		{"state null is a JSON state", `{"workflowId":"w","state":null}`, ""},
		{"state and stateBase64", `{"workflowId":"w","state":1,"stateBase64":"aGk="}`, "state"},
		{"bad phase", `{"workflowId":"w","phase":"done"}`, "phase"},
		{"negative step", `{"workflowId":"w","step":-1}`, "step"},
		{"metadata not an object", `{"workflowId":"w","metadata":[1]}`, "metadata"},
		{"pendingTasks not an array", `{"workflowId":"w","pendingTasks":{}}`, "pendingTasks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &call{req: &Request{Method: protocol.MethodSave}, params: json.RawMessage(tc.params), release: func() {}}
			_, rerr := srv.safeRun(context.Background(), srv.methods[protocol.MethodSave], c)
			if tc.field == "" {
				require.Nil(t, rerr, "%+v", rerr)
				return
			}
			require.NotNil(t, rerr)
			assert.Equal(t, int64(protocol.CodeInvalidParams), rerr.Code, rerr.Message)
			var data struct{ Field string }
			require.NoError(t, json.Unmarshal(*rerr.Data, &data))
			assert.Equal(t, tc.field, data.Field, rerr.Message)
		})
	}
	// Every field within its bound is stored.
	c := &call{req: &Request{Method: protocol.MethodSave}, params: json.RawMessage(`{"workflowId":"w","namespace":"ns","checkpointId":"all",
		"parentId":"p","phase":"failed","step":3,"stepName":"s","error":{"message":"boom","retryable":true},"workflowHash":"h",
		"metadata":{"m":1},"completedTasks":[1],"pendingTasks":[2],"state":{"x":1}}`), release: func() {}}
	_, rerr := srv.safeRun(context.Background(), srv.methods[protocol.MethodSave], c)
	require.Nil(t, rerr)
	all, err := st.Load(context.Background(), "all")
	require.NoError(t, err)
	assert.Equal(t, "ns", all.Namespace)
	assert.Equal(t, "p", all.ParentID)
	assert.Equal(t, store.Phase("failed"), all.Phase)
	assert.EqualValues(t, 3, all.Step)
	assert.Equal(t, "s", all.StepName)
	assert.Equal(t, &store.StepError{Message: "boom", Retryable: true}, all.Error)
	assert.Equal(t, "h", all.WorkflowHash)
	assert.JSONEq(t, `{"m":1}`, string(all.Metadata))
	assert.JSONEq(t, `[1]`, string(all.CompletedTasks))
	assert.JSONEq(t, `[2]`, string(all.PendingTasks))
	assert.Equal(t, `{"x":1}`, string(all.State))

	// The state as sent, byte for byte, from inline JSON and from base64.
	c = &call{req: &Request{Method: protocol.MethodSave}, params: json.RawMessage(`{"workflowId":"w","checkpointId":"x","state": [1, "<&>" ] }`), release: func() {}}
	_, rerr = srv.safeRun(context.Background(), srv.methods[protocol.MethodSave], c)
	require.Nil(t, rerr)
	cp, err := st.Load(context.Background(), "x")
	require.NoError(t, err)
	assert.Equal(t, `[1, "<&>" ]`, string(cp.State))
	c = &call{req: &Request{Method: protocol.MethodSave}, params: json.RawMessage(`{"workflowId":"w","checkpointId":"y","stateBase64":"aGk\/"}`), release: func() {}}
	_, rerr = srv.safeRun(context.Background(), srv.methods[protocol.MethodSave], c)
	require.Nil(t, rerr)
	cp, err = st.Load(context.Background(), "y")
	require.NoError(t, err)
	assert.Equal(t, []byte("hi?"), cp.State)
}
