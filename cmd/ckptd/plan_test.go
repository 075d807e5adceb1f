package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func TestCLIPlan(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	cliGolden(t, "plan", db.dir, cliRun(t, nil, "plan", "wf-alpha", "--db", db.path))
	cliGolden(t, "plan-namespace", db.dir, cliRun(t, nil, "plan", "wf-alpha", "--namespace", "sub", "--db", db.path))
	cliGolden(t, "plan-checkpoint", db.dir, cliRun(t, nil, "plan", "wf-alpha", "--checkpoint", "a-2", "--db", db.path))
	cliGolden(t, "plan-problems", db.dir, cliRun(t, nil, "plan", "wf-beta", "--workflow-hash", "h2", "--db", db.path))
	cliGolden(t, "plan-problems-json", db.dir, cliRun(t, nil, "plan", "wf-beta", "--workflow-hash", "h2", "--json", "--db", db.path))
	cliGolden(t, "plan-completed", db.dir, cliRun(t, nil, "plan", "wf-done", "--db", db.path))
	cliGolden(t, "plan-no-checkpoints", db.dir, cliRun(t, nil, "plan", "nope", "--db", db.path))
	cliGolden(t, "plan-wrong-workflow", db.dir, cliRun(t, nil, "plan", "wf-alpha", "--checkpoint", "b-1", "--db", db.path))
}

func TestCLIPlanCorrupt(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	db.corruptState("a-3")
	// the latest is corrupt: the plan falls back to a-2 and lists the corruption as a problem
	cliGolden(t, "plan-corrupt-latest", db.dir, cliRun(t, nil, "plan", "wf-alpha", "--db", db.path))
	// every checkpoint of wf-beta corrupt: no intact checkpoint
	db.corruptState("b-1")
	db.corruptState("b-2")
	cliGolden(t, "plan-all-corrupt", db.dir, cliRun(t, nil, "plan", "wf-beta", "--db", db.path))
}

// TestCLIPlanMatchesRPC: ckptd plan --json and the resume/plan RPC agree (same glue, same rules).
func TestCLIPlanMatchesRPC(t *testing.T) {
	t.Parallel()
	db := standardFixture(t)
	db.corruptState("a-3")
	cases := []struct {
		wf, hash, checkpoint string
	}{{"wf-alpha", "", ""}, {"wf-alpha", "other", ""}, {"wf-beta", "h2", ""}, {"wf-beta", "h1", "b-1"}, {"wf-done", "", ""}}
	type outcome struct {
		StartStep int64
		Retry     bool
		Reason    string
		Codes     []string
	}
	var cli []outcome
	for _, c := range cases {
		args := []string{"plan", c.wf, "--json", "--db", db.path}
		if c.hash != "" {
			args = append(args, "--workflow-hash", c.hash)
		}
		if c.checkpoint != "" {
			args = append(args, "--checkpoint", c.checkpoint)
		}
		res := cliRun(t, nil, args...)
		var r planReport
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &r), res.stderr)
		assert.Equal(t, r.OK, res.code == 0)
		o := outcome{StartStep: r.Plan.StartStep, Retry: r.Plan.Retry, Reason: r.Plan.Reason}
		for _, p := range append(r.Problems, r.Warnings...) {
			o.Codes = append(o.Codes, p.Code)
		}
		cli = append(cli, o)
	}
	d := startDaemon(t, db.path, "--keep-last", "0")
	for i, c := range cases {
		var r struct {
			StartStep int64
			Retry     bool
			Reason    string
			Warnings  []struct{ Code string }
		}
		d.call("resume/plan", map[string]any{"workflowId": c.wf, "workflowHash": c.hash, "checkpointId": c.checkpoint, "force": true}, nil, &r)
		o := outcome{StartStep: r.StartStep, Retry: r.Retry, Reason: r.Reason}
		for _, w := range r.Warnings {
			o.Codes = append(o.Codes, w.Code)
		}
		assert.Equal(t, o, cli[i], "case %+v", c)
	}
}

// TestCLIPlanNewerFormat: a checkpoint written by a newer format is a schema_version problem.
func TestCLIPlanNewerFormat(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, nil)
	db.save(store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-1", State: []byte(`{}`), StateType: store.StateJSON})
	db.close()
	db.exec(`UPDATE checkpoints SET format_version = 99`)
	res := cliRun(t, nil, "plan", "wf", "--db", db.path)
	assert.Equal(t, exitProblem, res.code)
	assert.Contains(t, res.stdout, "schema_version")
	_ = context.Background
}
