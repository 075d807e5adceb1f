package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// uuidV7 matches the ids the store makes (compensations, rollbacks) for the goldens.
var uuidV7 = []string{`[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}`, "$$UUID"}

// sagaFixture: wf-saga, whose steps register compensations before their side effects; the
// last step failed its validation, which recommends rolling back to c-3 (it warned, so it did
// not fail): compensations 3 and 4 are what that rollback runs.
//
//	c-1 plan     completed, passed 0.95
//	    comp 1 "write a.txt"
//	c-2 write    completed, no validation
//	    comp 2 "write b.txt"
//	c-3 write    completed, warning 0.8 "thin evidence"
//	    comp 3 "write c.txt", comp 4 "open ticket"
//	c-4 publish  completed, failed 0.2 {"checks": ["links"]}
func sagaFixture(t *testing.T) *cliDB {
	t.Helper()
	db := newCLIDB(t, nil)
	ctx := context.Background()
	v := func(status string, conf float64, msg, details string) *store.Validation {
		out := &store.Validation{Status: status, Confidence: conf, Min: 0.7, Warning: 0.85, Message: msg}
		if details != "" {
			out.Details = json.RawMessage(details)
		}
		return out
	}
	comp := func(step, desc, action string) {
		_, err := db.st.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: "wf-saga", StepName: step,
			Action: json.RawMessage(action), Description: desc})
		require.NoError(t, err)
	}
	db.save(store.SaveRequest{WorkflowID: "wf-saga", CheckpointID: "c-1", Step: 0, StepName: "plan", State: []byte(`{"n":1}`),
		Validation: v("passed", 0.95, "", "")})
	comp("write", "remove a.txt", `{"kind": "delete_file", "path": "a.txt"}`)
	db.save(store.SaveRequest{WorkflowID: "wf-saga", CheckpointID: "c-2", Step: 1, StepName: "write", State: []byte(`{"n":2}`)})
	comp("write", "remove b.txt", `{"kind": "delete_file", "path": "b.txt"}`)
	db.save(store.SaveRequest{WorkflowID: "wf-saga", CheckpointID: "c-3", Step: 2, StepName: "write", State: []byte(`{"n":3}`),
		Validation: v("warning", 0.8, "thin evidence", "")})
	comp("publish", "remove c.txt", `{"kind": "delete_file", "path": "c.txt"}`)
	comp("publish", "close the ticket", `{"kind": "http", "method": "DELETE", "url": "https://tickets.example/T-1"}`)
	db.save(store.SaveRequest{WorkflowID: "wf-saga", CheckpointID: "c-4", Step: 3, StepName: "publish", State: []byte(`{"n":4}`),
		Validation: v("failed", 0.2, "broken links", `{"checks": ["links"]}`)})
	return db
}

func TestCLIRollback(t *testing.T) {
	t.Parallel()
	db := sagaFixture(t)
	db.close()
	dir := db.dir
	cliGolden(t, "saga-ls", dir, cliRun(t, nil, "ls", "wf-saga", "--db", db.path))
	cliGolden(t, "saga-ls-failed", dir, cliRun(t, nil, "ls", "wf-saga", "--validation", "failed", "--db", db.path))
	cliGolden(t, "saga-show", dir, cliRun(t, nil, "show", "c-4", "--db", db.path))
	cliGolden(t, "saga-plan-rollback", dir, cliRun(t, nil, "plan", "wf-saga", "--rollback", "--db", db.path), uuidV7...)
	cliGolden(t, "saga-plan-rollback-to", dir, cliRun(t, nil, "plan", "wf-saga", "--rollback", "--to", "c-1", "--json", "--db", db.path), uuidV7...)
	cliGolden(t, "saga-plan-latest", dir, cliRun(t, nil, "plan", "wf-saga", "--db", db.path), uuidV7...)
	cliGolden(t, "saga-rollback-preview", dir, cliRun(t, nil, "rollback", "wf-saga", "--db", db.path), uuidV7...)
	cliGolden(t, "saga-rollback-full", dir, cliRun(t, nil, "rollback", "wf-saga", "--full", "--db", db.path), uuidV7...)
	for name, args := range map[string][]string{
		"saga-plan-to-without-rollback": {"plan", "wf-saga", "--to", "c-1"},
		"saga-plan-to-unknown":          {"plan", "wf-saga", "--rollback", "--to", "nope"},
		"saga-rollback-to-and-full":     {"rollback", "wf-saga", "--to", "c-1", "--full"},
		"saga-rollback-unknown":         {"rollback", "nope"},
		"saga-ls-bad-validation":        {"ls", "wf-saga", "--validation", "meh"},
	} {
		cliGolden(t, name, dir, cliRun(t, nil, append(args, "--db", db.path)...))
	}

	// a rollback begun by a client, 2 of its 3 actions done: ckptd rollback shows the progress
	st, err := sqlite.Open(context.Background(), store.Options{Path: db.path, Now: newCLIClock(cliStart.Add(time.Hour)).Now})
	require.NoError(t, err)
	ctx := context.Background()
	r, began, err := st.BeginRollback(ctx, "wf-saga", "", "c-3", 3)
	require.NoError(t, err)
	require.True(t, began)
	comps, err := st.Compensations(ctx, "wf-saga", "", 3, 0)
	require.NoError(t, err)
	require.Len(t, comps, 2)
	_, err = st.MarkCompensation(ctx, comps[1].CompensationID, r.RollbackID, store.CompensationDone, "")
	require.NoError(t, err)
	_, err = st.MarkCompensation(ctx, comps[0].CompensationID, r.RollbackID, store.CompensationFailed, "EACCES: permission denied")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	before := compensationStatuses(t, db.path)
	cliGolden(t, "saga-rollback-unfinished", dir, cliRun(t, nil, "rollback", "wf-saga", "--db", db.path), uuidV7...)
	cliGolden(t, "saga-rollback-unfinished-json", dir, cliRun(t, nil, "rollback", "wf-saga", "--json", "--db", db.path), uuidV7...)
	cliGolden(t, "saga-plan-rollback-unfinished", dir, cliRun(t, nil, "plan", "wf-saga", "--rollback", "--db", db.path), uuidV7...)
	cliGolden(t, "saga-rollback-other-target", dir, cliRun(t, nil, "rollback", "wf-saga", "--to", "c-1", "--db", db.path), uuidV7...)
	assert.Equal(t, before, compensationStatuses(t, db.path), "the commands run and mark nothing")
}

func compensationStatuses(t *testing.T, path string) map[string]string {
	t.Helper()
	st, err := sqlite.Open(context.Background(), store.Options{Path: path, NoCompactor: true})
	require.NoError(t, err)
	defer st.Close()
	cs, err := st.Compensations(context.Background(), "wf-saga", "", 0, 0)
	require.NoError(t, err)
	out := map[string]string{}
	for _, c := range cs {
		out[c.CompensationID] = c.Status
	}
	r, err := st.LatestRollback(context.Background(), "wf-saga", "")
	require.NoError(t, err)
	out["rollback"] = fmt.Sprint(r != nil && r.CompletedAt.IsZero())
	return out
}

// TestCLIPlanRollbackMatchesRPC: ckptd plan --rollback --json and resume/plan {rollback: true}
// agree on the start and the compensations to run first.
func TestCLIPlanRollbackMatchesRPC(t *testing.T) {
	t.Parallel()
	db := sagaFixture(t)
	db.close()
	res := cliRun(t, nil, "plan", "wf-saga", "--rollback", "--json", "--db", db.path)
	require.Equal(t, 0, res.code, res.stderr)
	var cli planReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &cli))
	d := startDaemon(t, db.path)
	var rpc struct {
		CheckpointID string
		StartStep    int64
		Rollback     struct {
			ToCheckpointID string
			Actions        []struct{ CompensationID, Status string }
		}
	}
	d.call("resume/plan", map[string]any{"workflowId": "wf-saga", "rollback": true}, nil, &rpc)
	assert.Equal(t, rpc.CheckpointID, cli.Checkpoint.CheckpointID)
	assert.Equal(t, "c-3", rpc.CheckpointID)
	assert.Equal(t, rpc.StartStep, cli.Plan.StartStep)
	require.NotNil(t, cli.Rollback)
	require.Len(t, rpc.Rollback.Actions, 2)
	require.Len(t, cli.Rollback.Actions, 2)
	for i, a := range rpc.Rollback.Actions {
		assert.Equal(t, a.CompensationID, cli.Rollback.Actions[i].CompensationID)
	}
}
