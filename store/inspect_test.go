package store

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInspect(t *testing.T) {
	s := openTest(t)
	state := []byte(`{"s": 1}`)
	mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "a", State: state, StateType: StateJSON, PendingTasks: []byte(`[1]`)})
	mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "b", State: state, StateType: StateJSON})
	mustSave(t, s, SaveRequest{WorkflowID: "wf", CheckpointID: "n"})
	_, err := s.PutWrites(context.Background(), "wf", "", "a", []Write{{TaskID: "t", Channel: "c", Value: []byte(`1`)}})
	require.NoError(t, err)

	in, err := s.Inspect(context.Background(), "a")
	require.NoError(t, err)
	assert.Empty(t, in.Corrupt)
	assert.Equal(t, state, in.State)
	assert.Equal(t, "raw", in.Encoding)
	assert.Equal(t, 1, in.SharedWith)
	assert.Len(t, in.PendingWrites, 1)

	in, err = s.Inspect(context.Background(), "n")
	require.NoError(t, err)
	assert.Equal(t, StateNone, in.StateType)
	assert.Empty(t, in.Encoding)

	_, err = s.Inspect(context.Background(), "nope")
	assert.ErrorIs(t, err, ErrNotFound)

	path := s.Path()
	require.NoError(t, s.Close())
	db := rawDB(t, path)
	_, err = db.Exec(`UPDATE states SET data = CAST('{"s": 2}' AS BLOB)`)
	require.NoError(t, err)
	s2, err := Open(context.Background(), Options{Path: path})
	require.NoError(t, err)
	defer s2.Close()
	in, err = s2.Inspect(context.Background(), "a")
	require.NoError(t, err, "a corrupt checkpoint is still inspected")
	assert.Equal(t, "state SHA-256 mismatch", in.Corrupt)
	assert.Nil(t, in.State)
	assert.Equal(t, "wf", in.WorkflowID)
	assert.Equal(t, `[1]`, string(in.PendingTasks))
	assert.Len(t, in.PendingWrites, 1)

	sums, err := s2.Summaries(context.Background(), []string{"a", "nope", "n"})
	require.NoError(t, err)
	assert.Len(t, sums, 2)
	assert.EqualValues(t, 1, sums["a"].Seq)
}

func TestWorkflowAndUsage(t *testing.T) {
	s := openTest(t)
	mustSave(t, s, SaveRequest{WorkflowID: "w1", CheckpointID: "a", State: []byte(`{"x":1}`), StateType: StateJSON})
	mustSave(t, s, SaveRequest{WorkflowID: "w1", CheckpointID: "b", State: []byte(`{"x":1}`), StateType: StateJSON})
	mustSave(t, s, SaveRequest{WorkflowID: "w2", CheckpointID: "c", State: []byte(`{"y":22}`), StateType: StateJSON})
	_, err := s.Complete(context.Background(), "w2", true)
	require.NoError(t, err)
	_, err = s.Configure(context.Background(), "w3", &Retention{KeepLast: 1}) // a workflow without checkpoints

	require.NoError(t, err)
	w, err := s.Workflow(context.Background(), "w1")
	require.NoError(t, err)
	assert.Equal(t, 2, w.Count)
	assert.True(t, w.Resumable)
	assert.Equal(t, "b", w.Latest.CheckpointID)
	w, err = s.Workflow(context.Background(), "w3")
	require.NoError(t, err)
	assert.Equal(t, 0, w.Count)
	assert.Nil(t, w.Latest)
	_, err = s.Workflow(context.Background(), "nope")
	assert.ErrorIs(t, err, ErrNotFound)

	u, err := s.Usage(context.Background())
	require.NoError(t, err)
	assert.EqualValues(t, 7+7+8, u.StateBytes)
	assert.EqualValues(t, 7+7+8, u.CheckpointStored)
	assert.Equal(t, 1, u.ResumableWorkflow)
	assert.Equal(t, 1, u.CompletedWorkflow)
	assert.Positive(t, u.PageSize)
	assert.Positive(t, u.PageCount)
}
