package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/resume"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// fakeCheckpoints answers gather from a map: ids present in corrupt fail verification.
type fakeCheckpoints struct {
	byID      map[string]store.Checkpoint
	latest    store.LoadResult
	latestErr error
	completed bool
	doneErr   error
}

func (f *fakeCheckpoints) Load(_ context.Context, id string) (store.Checkpoint, error) {
	cp, ok := f.byID[id]
	switch {
	case !ok:
		return store.Checkpoint{}, fmt.Errorf("checkpoint %q: %w", id, store.ErrNotFound)
	case cp.SHA256 == "bad":
		return store.Checkpoint{}, &store.CorruptError{CheckpointID: id, Reason: "state sha256 mismatch"}
	}
	return cp, nil
}

func (f *fakeCheckpoints) LoadLatest(context.Context, string, string) (store.LoadResult, error) {
	return f.latest, f.latestErr
}

func (f *fakeCheckpoints) IsCompleted(context.Context, string) (bool, error) {
	return f.completed, f.doneErr
}

func (f *fakeCheckpoints) Enqueue(store.SaveRequest) *store.Pending { panic("gather never saves") }

func (f *fakeCheckpoints) StateBase(ctx context.Context, id string) (store.DeltaBase, error) {
	cp, err := f.Load(ctx, id)
	return store.DeltaBase{Value: cp.State}, err
}

func ckpt(id, wf, phase string, step int64) store.Checkpoint {
	return store.Checkpoint{Summary: store.Summary{CheckpointID: id, WorkflowID: wf, Phase: store.Phase(phase), Step: step,
		WorkflowHash: "h1", FormatVersion: store.FormatVersion}}
}

func TestGather(t *testing.T) {
	failed := ckpt("c-f", "wf", "failed", 4)
	failed.Error = &store.StepError{Message: "boom", Retryable: true}
	bad := ckpt("c-bad", "wf", "completed", 5)
	bad.SHA256 = "bad"
	src := &fakeCheckpoints{byID: map[string]store.Checkpoint{
		"c-1": ckpt("c-1", "wf", "completed", 1), "c-other": ckpt("c-other", "other", "completed", 1),
		"c-f": failed, "c-bad": bad,
	}}
	for _, tc := range []struct {
		name      string
		req       ResumeRequest
		latest    store.LoadResult
		latestErr error
		completed bool
		doneErr   error

		wantErr    error  // errors.Is
		wantWrong  bool   // a *WrongWorkflowError
		checkpoint string // the checkpoint planned from ("" none)
		corrupt    []string
		input      *resume.Checkpoint
	}{
		{name: "latest intact", req: ResumeRequest{WorkflowID: "wf", WorkflowHash: "h2"},
			latest: store.LoadResult{Checkpoint: ckpt("c-2", "wf", "before_step", 2)}, checkpoint: "c-2",
			input: &resume.Checkpoint{ID: "c-2", Phase: "before_step", Step: 2, WorkflowHash: "h1", FormatVersion: store.FormatVersion}},
		{name: "latest after skipping corrupt ones", req: ResumeRequest{WorkflowID: "wf"},
			latest: store.LoadResult{Checkpoint: ckpt("c-2", "wf", "completed", 2),
				RecoveredFrom: []store.Recovery{{CheckpointID: "c-4", Reason: "r4"}, {CheckpointID: "c-3", Reason: "r3"}}},
			checkpoint: "c-2", corrupt: []string{"c-4", "c-3"}},
		{name: "every checkpoint corrupt", req: ResumeRequest{WorkflowID: "wf"},
			latestErr: &store.CorruptError{CheckpointID: "c-9", Reason: "r9"}, corrupt: []string{"c-9"}},
		{name: "no checkpoints", req: ResumeRequest{WorkflowID: "wf"}, latestErr: store.ErrNotFound, wantErr: store.ErrNotFound},
		{name: "requested", req: ResumeRequest{WorkflowID: "wf", CheckpointID: "c-1"}, checkpoint: "c-1", completed: true},
		{name: "requested failed step", req: ResumeRequest{WorkflowID: "wf", CheckpointID: "c-f"}, checkpoint: "c-f",
			input: &resume.Checkpoint{ID: "c-f", Phase: "failed", Step: 4, ErrorMessage: "boom", Retryable: true, WorkflowHash: "h1", FormatVersion: store.FormatVersion}},
		{name: "requested corrupt", req: ResumeRequest{WorkflowID: "wf", CheckpointID: "c-bad"}, corrupt: []string{"c-bad"}},
		{name: "requested of another workflow", req: ResumeRequest{WorkflowID: "wf", CheckpointID: "c-other"}, wantWrong: true},
		{name: "requested unknown", req: ResumeRequest{WorkflowID: "wf", CheckpointID: "nope"}, wantErr: store.ErrNotFound},
		{name: "completion unreadable", req: ResumeRequest{WorkflowID: "wf", CheckpointID: "c-1"}, doneErr: store.ErrUnavailable, wantErr: store.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src.latest, src.latestErr, src.completed, src.doneErr = tc.latest, tc.latestErr, tc.completed, tc.doneErr
			g, err := gather(context.Background(), src, tc.req)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
				return
			}
			var ww *WrongWorkflowError
			if tc.wantWrong {
				require.ErrorAs(t, err, &ww)
				assert.Equal(t, WrongWorkflowError{CheckpointID: "c-other", WorkflowID: "other", Requested: "wf"}, *ww)
				return
			}
			require.NoError(t, err)
			var corrupt []string
			for _, c := range g.Input.Corrupt {
				corrupt = append(corrupt, c.CheckpointID)
			}
			assert.Equal(t, tc.corrupt, corrupt)
			assert.Equal(t, tc.req.WorkflowHash, g.Input.CallerHash)
			assert.Equal(t, store.FormatVersion, g.Input.MaxFormatVersion)
			assert.Equal(t, tc.completed, g.Input.Completed)
			if tc.checkpoint == "" {
				assert.Nil(t, g.Checkpoint)
				assert.Nil(t, g.Input.Checkpoint)
				return
			}
			require.NotNil(t, g.Checkpoint)
			assert.Equal(t, tc.checkpoint, g.Checkpoint.CheckpointID)
			require.NotNil(t, g.Input.Checkpoint)
			assert.Equal(t, tc.checkpoint, g.Input.Checkpoint.ID)
			if tc.input != nil {
				assert.Equal(t, tc.input, g.Input.Checkpoint)
			}
		})
	}
}

func TestResumePlanBlocked(t *testing.T) {
	problem := []resume.Problem{{Code: resume.CodeDrift}}
	cp := &store.LoadResult{}
	for _, tc := range []struct {
		name    string
		plan    ResumePlan
		force   bool
		blocked bool
	}{
		{"no problems", ResumePlan{Checkpoint: cp}, false, false},
		{"warnings only", ResumePlan{Checkpoint: cp, Warnings: problem}, false, false},
		{"a problem", ResumePlan{Checkpoint: cp, Problems: problem}, false, true},
		{"a problem, forced", ResumePlan{Checkpoint: cp, Problems: problem}, true, false},
		{"nothing to force a resume from", ResumePlan{Problems: problem}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.blocked, tc.plan.Blocked(tc.force))
		})
	}
}

func openStore(t *testing.T) store.Backend {
	t.Helper()
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "ckptd.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}

// TestSaveAndPlanResume runs the use cases over a real database and source tree: a save
// fingerprints its sources (given, then configured), an idempotent repeat reports none, and a
// resume plan of the checkpoint reports drift as a problem, or as a warning on request.
func TestSaveAndPlanResume(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	e := New(st, nil)
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n"), 0o644))
	spec, err := CheckSources("sources", drift.Spec{Root: src})
	require.NoError(t, err)

	queued := false
	req := store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-1", Phase: store.PhaseCompleted, Step: 0, StateType: store.StateNone}
	res, info, err := e.Save(ctx, req, &spec, func() { queued = true })
	require.NoError(t, err)
	assert.True(t, queued)
	assert.Equal(t, "c-1", res.CheckpointID)
	require.NotNil(t, info)
	assert.Equal(t, src, info.Root)
	assert.Equal(t, 1, info.Files)
	assert.Empty(t, info.Error)

	res, info, err = e.Save(ctx, req, &spec, nil)
	require.NoError(t, err)
	assert.True(t, res.Existing)
	assert.Nil(t, info, "an idempotent repeat: the first save's fingerprint stands")

	// without sources and none configured: no fingerprint
	_, info, err = e.Save(ctx, store.SaveRequest{WorkflowID: "wf2", StateType: store.StateNone}, nil, nil)
	require.NoError(t, err)
	assert.Nil(t, info)

	rp, err := e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf"})
	require.NoError(t, err)
	assert.False(t, rp.Blocked(false))
	require.NotNil(t, rp.Drift)
	assert.False(t, rp.Drift.Drifted)
	assert.Equal(t, resume.Plan{StartStep: 1, Reason: "step 0 completed; start at step 1"}, rp.Plan)

	require.NoError(t, os.WriteFile(filepath.Join(src, "main.go"), []byte("package main // changed\n"), 0o644))
	rp, err = e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf"})
	require.NoError(t, err)
	assert.True(t, rp.Blocked(false))
	require.Len(t, rp.Problems, 1)
	assert.Equal(t, resume.CodeDrift, rp.Problems[0].Code)
	assert.Contains(t, rp.Problems[0].Message, "main.go (changed)")
	require.NotNil(t, rp.Drift)
	assert.True(t, rp.Drift.Drifted)

	rp, err = e.PlanResume(ctx, ResumeRequest{WorkflowID: "wf", DriftAsWarning: true})
	require.NoError(t, err)
	assert.False(t, rp.Blocked(false))
	require.Len(t, rp.Warnings, 1)
	assert.Equal(t, resume.CodeDrift, rp.Warnings[0].Code)

	// a second engine on the same database (ckptd plan) answers the same from the stored manifest
	rp2, err := New(st, nil).PlanResume(ctx, ResumeRequest{WorkflowID: "wf", DriftAsWarning: true})
	require.NoError(t, err)
	assert.Equal(t, rp.Warnings, rp2.Warnings)

	// configured sources are fingerprinted by saves without their own; when they cannot be,
	// the save is stored without a fingerprint and says why
	cfg := fmt.Appendf(nil, `{"root": %q}`, src)
	require.NoError(t, st.SetWorkflowSources(ctx, "wf", cfg))
	_, info, err = e.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-2", Step: 1, StateType: store.StateNone}, nil, nil)
	require.NoError(t, err)
	require.NotNil(t, info)
	assert.Equal(t, 1, info.Files)
	require.NoError(t, os.RemoveAll(src))
	_, info, err = e.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-3", Step: 2, StateType: store.StateNone}, nil, nil)
	require.NoError(t, err)
	require.NotNil(t, info)
	assert.Equal(t, `invalid params: sources.root: directory "`+src+`" does not exist`, info.Error)
	ref, err := st.CheckpointManifestRef(ctx, "c-3")
	require.NoError(t, err)
	assert.False(t, ref.HasManifest)

	// given sources that are gone refuse the save
	_, _, err = e.Save(ctx, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-4", StateType: store.StateNone}, &spec, nil)
	var se *SourcesError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "sources.root", se.Field)
	_, err = st.Load(ctx, "c-4")
	assert.True(t, errors.Is(err, store.ErrNotFound), "nothing stored: %v", err)
}
