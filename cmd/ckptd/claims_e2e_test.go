package main

import (
	"encoding/json"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/protocol"
)

// e2eBackend is a database the end-to-end tests that run on every backend open: db makes a new,
// empty database and returns how to start a ckptd process serving it (as a worker's host
// would: a secret the database needs is never on the command line). A backend's own file adds
// itself in an init.
type e2eBackend struct {
	name string
	db   func(t *testing.T) (start func(t *testing.T) *daemon)
}

var e2eBackends = []e2eBackend{
	{"sqlite", func(t *testing.T) func(t *testing.T) *daemon {
		path := filepath.Join(t.TempDir(), "ckptd.db")
		return func(t *testing.T) *daemon { return startDaemon(t, path) }
	}},
}

// claimedData decodes a -32008 error.
func claimedData(t *testing.T, e *rpcErr) protocol.ClaimedData {
	t.Helper()
	require.NotNil(t, e)
	require.Equal(t, protocol.CodeClaimed, e.Code, "%s", e.Message)
	var d protocol.ClaimedData
	require.NoError(t, json.Unmarshal(e.Data, &d))
	return d
}

// TestEndToEndHandOver: two ckptd processes on one database hand a workflow over. Worker A
// claims it, saves steps 0-2 and is SIGKILLed; worker B's claim is refused (-32008, naming A)
// until A's lease runs out, then succeeds under a higher fencing token, and B resumes at step
// 3. A's late save with its old token (made by a third process, as a paused or partitioned A
// would) is refused with -32008 and nothing of it is stored; nor are its pending writes, or a
// completion.
func TestEndToEndHandOver(t *testing.T) {
	for _, be := range e2eBackends {
		t.Run(be.name, func(t *testing.T) { testHandOver(t, be.db(t)) })
	}
}

func testHandOver(t *testing.T, start func(t *testing.T) *daemon) {
	const wf = "wf-handover"
	const leaseA = 3 // seconds
	a := start(t)
	var ca protocol.ClaimResult
	a.call(protocol.MethodClaim, map[string]any{"workflowId": wf, "owner": "worker-a", "leaseSeconds": leaseA}, nil, &ca)
	require.Equal(t, int64(1), ca.FencingToken)
	expA, err := time.Parse(time.RFC3339Nano, ca.ExpiresAt)
	require.NoError(t, err)
	var savedA []string
	for step := 0; step <= 2; step++ {
		var res protocol.SaveResult
		a.call(protocol.MethodSave, map[string]any{"workflowId": wf, "step": step, "phase": "completed",
			"state": map[string]any{"done": step}, "fencingToken": ca.FencingToken}, nil, &res)
		savedA = append(savedA, res.CheckpointID)
	}
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()

	b := start(t)
	var listed protocol.WorkflowListResult
	b.call(protocol.MethodWorkflowList, map[string]any{"claimable": true}, nil, &listed)
	require.Empty(t, listed.Workflows, "A's live claim: nothing to pick up")
	// B asks until the lease runs out; every refusal names A and the end of its lease.
	refusals := 0
	var cb protocol.ClaimResult
	for {
		id := b.send(protocol.MethodClaim, map[string]any{"workflowId": wf, "owner": "worker-b", "leaseSeconds": 30}, nil)
		m := b.response()
		require.Equal(t, id, mustAtoi(t, m.ID))
		if m.Error == nil {
			require.NoError(t, json.Unmarshal(m.Result, &cb))
			break
		}
		d := claimedData(t, m.Error)
		require.Equal(t, "worker-a", *d.Owner)
		require.Equal(t, ca.ExpiresAt, *d.ExpiresAt)
		refusals++
		require.Less(t, time.Now(), expA.Add(20*time.Second), "the lease never ran out")
		time.Sleep(200 * time.Millisecond)
	}
	require.Positive(t, refusals, "B's first claim must be refused while A's lease runs")
	// the database's clock decided: on the test's host the lease had run out when B got it
	require.False(t, time.Now().Before(expA), "claimed at %s, before A's lease ended at %s", time.Now(), expA)
	require.Equal(t, "worker-b", cb.Owner)
	require.Greater(t, cb.FencingToken, ca.FencingToken)

	var plan protocol.ResumePlanResult
	b.call(protocol.MethodResumePlan, map[string]any{"workflowId": wf}, nil, &plan)
	require.Equal(t, int64(3), plan.StartStep, plan.Reason)
	require.Equal(t, savedA[2], plan.CheckpointID)
	var s3 protocol.SaveResult
	b.call(protocol.MethodSave, map[string]any{"workflowId": wf, "step": 3, "phase": "completed",
		"state": map[string]any{"done": 3}, "fencingToken": cb.FencingToken}, nil, &s3)

	// A, late: another process with A's token (what a paused A would send on waking up)
	late := start(t)
	d := claimedData(t, late.callErr(protocol.MethodSave, map[string]any{"workflowId": wf, "checkpointId": "late-a",
		"step": 3, "phase": "completed", "state": map[string]any{"by": "a, late"}, "fencingToken": ca.FencingToken}, nil))
	require.Equal(t, "worker-b", *d.Owner)
	require.Contains(t, d.Reason, "stale")
	claimedData(t, late.callErr(protocol.MethodWritesPut, map[string]any{"workflowId": wf, "checkpointId": savedA[2],
		"taskId": "late", "writes": []any{map[string]any{"channel": "c", "value": 1}}, "fencingToken": ca.FencingToken}, nil))
	claimedData(t, late.callErr(protocol.MethodComplete, map[string]any{"workflowId": wf, "fencingToken": ca.FencingToken}, nil))
	claimedData(t, late.callErr(protocol.MethodRenew, map[string]any{"workflowId": wf, "fencingToken": ca.FencingToken, "leaseSeconds": 30}, nil))
	claimedData(t, late.callErr(protocol.MethodSave, map[string]any{"workflowId": wf, "step": 3, "state": 1}, nil)) // nor without a token

	// nothing of A's late writes is stored
	e := late.callErr(protocol.MethodLoad, map[string]any{"checkpointId": "late-a"}, nil)
	require.Equal(t, protocol.CodeNotFound, e.Code)
	var list protocol.ListResult
	late.call(protocol.MethodList, map[string]any{"workflowId": wf}, nil, &list)
	require.Len(t, list.Checkpoints, 4)
	require.Equal(t, s3.CheckpointID, list.Checkpoints[0].CheckpointID)
	for i, sm := range list.Checkpoints {
		require.Equal(t, int64(3-i), sm.Step)
	}
	var loaded protocol.LoadResult
	late.call(protocol.MethodLoad, map[string]any{"checkpointId": savedA[2]}, nil, &loaded)
	require.Empty(t, loaded.PendingWrites)
	var latest struct {
		State json.RawMessage `json:"state"`
	}
	late.call(protocol.MethodLoad, map[string]any{"workflowId": wf}, nil, &latest)
	require.JSONEq(t, `{"done":3}`, string(latest.State))

	// B finishes and releases; the workflow is free, the token kept for the next claim
	b.call(protocol.MethodComplete, map[string]any{"workflowId": wf, "preserve": true, "fencingToken": cb.FencingToken}, nil, nil)
	var rel protocol.ReleaseResult
	b.call(protocol.MethodRelease, map[string]any{"workflowId": wf, "fencingToken": cb.FencingToken}, nil, &rel)
	require.True(t, rel.Released)
	var again protocol.ClaimResult
	late.call(protocol.MethodClaim, map[string]any{"workflowId": wf, "owner": "worker-c", "leaseSeconds": 5}, nil, &again)
	require.Equal(t, cb.FencingToken+1, again.FencingToken)
}

func mustAtoi(t *testing.T, raw json.RawMessage) int {
	t.Helper()
	var n int
	require.NoError(t, json.Unmarshal(raw, &n))
	return n
}

// TestEndToEndClaimableAfterKill: a worker that dies leaves its workflow on workflow/list
// {claimable} once its lease runs out, oldest first, and never before.
func TestEndToEndClaimableAfterKill(t *testing.T) {
	for _, be := range e2eBackends {
		t.Run(be.name, func(t *testing.T) {
			start := be.db(t)
			a := start(t)
			for _, wf := range []string{"old", "dead", "new"} {
				a.call(protocol.MethodSave, map[string]any{"workflowId": wf, "state": 1}, nil, nil)
				time.Sleep(2 * time.Millisecond)
			}
			var c protocol.ClaimResult
			a.call(protocol.MethodClaim, map[string]any{"workflowId": "dead", "owner": "a", "leaseSeconds": 1}, nil, &c)
			a.call(protocol.MethodClaim, map[string]any{"workflowId": "new", "owner": "a", "leaseSeconds": 600}, nil, nil)
			require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
			_ = a.cmd.Wait()
			b := start(t)
			ids := func() []string {
				var l protocol.WorkflowListResult
				b.call(protocol.MethodWorkflowList, map[string]any{"claimable": true}, nil, &l)
				out := []string{}
				for _, w := range l.Workflows {
					out = append(out, w.WorkflowID)
				}
				return out
			}
			exp, err := time.Parse(time.RFC3339Nano, c.ExpiresAt)
			require.NoError(t, err)
			if time.Now().Before(exp.Add(-200 * time.Millisecond)) {
				require.Equal(t, []string{"old"}, ids())
			}
			time.Sleep(time.Until(exp) + 50*time.Millisecond)
			require.Equal(t, []string{"old", "dead"}, ids())
		})
	}
}
