package rpc

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/protocol"
)

// TestClaimMethods: claim, renew and release over the wire; a refusal is -32008 with data
// {workflowId, owner, expiresAt, reason}; every write method takes the claim's fencingToken.
func TestClaimMethods(t *testing.T) {
	c := newLGConn(t)
	var a protocol.ClaimResult
	c.ok(protocol.MethodClaim, map[string]any{"workflowId": "wf", "owner": "worker-a", "leaseSeconds": 60}, nil, &a)
	require.Equal(t, "wf", a.WorkflowID)
	require.Equal(t, "worker-a", a.Owner)
	require.Equal(t, int64(1), a.FencingToken)
	exp, err := time.Parse(time.RFC3339Nano, a.ExpiresAt)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Minute), exp, 30*time.Second)

	claimed := func(r lgReply) protocol.ClaimedData {
		t.Helper()
		require.NotNil(t, r.Error, "want -32008, got %s", r.Result)
		require.Equal(t, protocol.CodeClaimed, r.Error.Code, r.Error.Message)
		var d protocol.ClaimedData
		require.NoError(t, json.Unmarshal(r.Error.Data, &d))
		require.Equal(t, "wf", d.WorkflowID)
		require.NotEmpty(t, d.Reason)
		return d
	}
	d := claimed(c.call(protocol.MethodClaim, map[string]any{"workflowId": "wf", "owner": "worker-b", "leaseSeconds": 60}, nil))
	require.Equal(t, "worker-a", *d.Owner)
	require.Equal(t, a.ExpiresAt, *d.ExpiresAt)

	// writes: without the token refused, with it accepted
	save := map[string]any{"workflowId": "wf", "checkpointId": "c1", "state": map[string]any{"n": 1}}
	claimed(c.call(protocol.MethodSave, save, nil))
	save["fencingToken"] = 2
	claimed(c.call(protocol.MethodSave, save, nil))
	save["fencingToken"] = 1
	c.ok(protocol.MethodSave, save, nil, nil)
	writes := map[string]any{"workflowId": "wf", "checkpointId": "c1", "taskId": "t", "writes": []any{map[string]any{"channel": "c", "value": 1}}}
	claimed(c.call(protocol.MethodWritesPut, writes, nil))
	writes["fencingToken"] = 1
	c.ok(protocol.MethodWritesPut, writes, nil, nil)
	lgPut := map[string]any{"threadId": "wf", "checkpointId": "lg-1", "checkpoint": map[string]any{"type": "json", "offset": 0, "length": 2},
		"channelVersions": map[string]any{}}
	claimed(c.call(protocol.MethodLGPut, lgPut, []byte("{}")))
	lgPut["fencingToken"] = 1
	c.ok(protocol.MethodLGPut, lgPut, []byte("{}"), nil)
	lgWrites := map[string]any{"threadId": "wf", "checkpointId": "lg-1", "taskId": "t",
		"writes": []any{map[string]any{"channel": "c", "type": "json", "offset": 0, "length": 1}}}
	claimed(c.call(protocol.MethodLGPutWrites, lgWrites, []byte("1")))
	lgWrites["fencingToken"] = 1
	c.ok(protocol.MethodLGPutWrites, lgWrites, []byte("1"), nil)
	var wl protocol.WorkflowListResult
	c.ok(protocol.MethodWorkflowList, map[string]any{"claimable": true}, nil, &wl)
	require.Empty(t, wl.Workflows, "claimed: not claimable")
	complete := map[string]any{"workflowId": "wf", "preserve": true}
	claimed(c.call(protocol.MethodComplete, complete, nil))

	var r protocol.ClaimResult
	c.ok(protocol.MethodRenew, map[string]any{"workflowId": "wf", "fencingToken": 1, "leaseSeconds": 120}, nil, &r)
	require.Equal(t, int64(1), r.FencingToken)
	require.Greater(t, r.ExpiresAt, a.ExpiresAt)
	claimed(c.call(protocol.MethodRenew, map[string]any{"workflowId": "wf", "fencingToken": 5, "leaseSeconds": 120}, nil))
	var rel protocol.ReleaseResult
	c.ok(protocol.MethodRelease, map[string]any{"workflowId": "wf", "fencingToken": 1}, nil, &rel)
	require.Equal(t, protocol.ReleaseResult{WorkflowID: "wf", FencingToken: 1, Released: true}, rel)
	c.ok(protocol.MethodRelease, map[string]any{"workflowId": "wf", "fencingToken": 1}, nil, &rel)
	require.False(t, rel.Released)
	d = claimed(c.call(protocol.MethodRenew, map[string]any{"workflowId": "wf", "fencingToken": 1, "leaseSeconds": 120}, nil))
	require.Nil(t, d.Owner, "released: nobody holds it")
	require.Nil(t, d.ExpiresAt)
	c.ok(protocol.MethodWorkflowList, map[string]any{"claimable": true}, nil, &wl)
	require.Len(t, wl.Workflows, 1)
	require.Equal(t, "wf", wl.Workflows[0].WorkflowID)
	c.ok(protocol.MethodComplete, complete, nil, nil)

	c.ok(protocol.MethodClaim, map[string]any{"workflowId": "wf", "owner": "worker-b", "leaseSeconds": 1}, nil, &r)
	require.Equal(t, int64(2), r.FencingToken, "the token never goes back")
}

// TestClaimParams: bad params are -32602 naming the field.
func TestClaimParams(t *testing.T) {
	c := newLGConn(t)
	for _, tc := range []struct {
		method string
		params map[string]any
		field  string
	}{
		{protocol.MethodClaim, map[string]any{"owner": "a", "leaseSeconds": 1}, "workflowId"},
		{protocol.MethodClaim, map[string]any{"workflowId": "w", "leaseSeconds": 1}, "owner"},
		{protocol.MethodClaim, map[string]any{"workflowId": "w", "owner": "a"}, "leaseSeconds"},
		{protocol.MethodClaim, map[string]any{"workflowId": "w", "owner": "a", "leaseSeconds": 0}, "leaseSeconds"},
		{protocol.MethodClaim, map[string]any{"workflowId": "w", "owner": "a", "leaseSeconds": 86401}, "leaseSeconds"},
		{protocol.MethodClaim, map[string]any{"workflowId": "w", "owner": "a", "leaseSeconds": 1.5}, "leaseSeconds"},
		{protocol.MethodRenew, map[string]any{"workflowId": "w", "leaseSeconds": 1}, "fencingToken"},
		{protocol.MethodRenew, map[string]any{"workflowId": "w", "fencingToken": 0, "leaseSeconds": 1}, "fencingToken"},
		{protocol.MethodRenew, map[string]any{"workflowId": "w", "fencingToken": 1}, "leaseSeconds"},
		{protocol.MethodRelease, map[string]any{"workflowId": "w"}, "fencingToken"},
		{protocol.MethodRelease, map[string]any{"workflowId": "w", "fencingToken": "1"}, "fencingToken"},
		{protocol.MethodSave, map[string]any{"workflowId": "w", "fencingToken": -1}, "fencingToken"},
		{protocol.MethodWritesPut, map[string]any{"workflowId": "w", "checkpointId": "c", "taskId": "t", "writes": []any{}, "fencingToken": 0}, "fencingToken"},
		{protocol.MethodComplete, map[string]any{"workflowId": "w", "fencingToken": 0}, "fencingToken"},
		{protocol.MethodResumePlan, map[string]any{"workflowId": "w", "sourcesRoot": "/no/such/dir"}, "sourcesRoot"},
		{protocol.MethodDriftStatus, map[string]any{"workflowId": "w", "sourcesRoot": "/no/such/dir"}, "sourcesRoot"},
	} {
		r := c.call(tc.method, tc.params, nil)
		require.NotNil(t, r.Error, "%s %v accepted", tc.method, tc.params)
		require.Equal(t, protocol.CodeInvalidParams, r.Error.Code, "%s %v: %s", tc.method, tc.params, r.Error.Message)
		var data struct{ Field string }
		require.NoError(t, json.Unmarshal(r.Error.Data, &data))
		require.Equal(t, tc.field, data.Field, "%s %v: %s", tc.method, tc.params, r.Error.Message)
	}
}
