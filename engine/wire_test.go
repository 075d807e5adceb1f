package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

func TestTimestamp(t *testing.T) {
	for _, tc := range []struct {
		in   time.Time
		want string
	}{
		{time.Time{}, ""},
		{time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC), "2026-01-02T03:04:05.678901Z"},
		{time.Date(2026, 1, 2, 4, 4, 5, 0, time.FixedZone("CET", 3600)), "2026-01-02T03:04:05.000000Z"},
	} {
		assert.Equal(t, tc.want, Timestamp(tc.in))
	}
}

func TestSummaryOf(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		in   store.Summary
		want string // JSON
	}{
		{"defaults", store.Summary{CheckpointID: "c", WorkflowID: "w", Phase: store.PhaseCompleted, StateType: store.StateNone},
			`{"checkpointId":"c","workflowId":"w","namespace":"","seq":0,"parentId":null,"phase":"completed","step":0,"stepName":"",` +
				`"error":null,"workflowHash":"","metadata":{},"createdAt":"","stateType":"none","sizeBytes":0,"storedBytes":0,"sha256":"",` +
				`"completedTaskCount":0,"pendingTaskCount":0}`},
		{"everything", store.Summary{CheckpointID: "c", WorkflowID: "w", Namespace: "ns", Seq: 3, ParentID: "p", Phase: store.PhaseFailed,
			Step: 2, StepName: "fetch", Error: &store.StepError{Message: "boom", Retryable: true}, WorkflowHash: "h",
			Metadata: json.RawMessage(`{"k":1}`), CreatedAt: created, StateType: store.StateJSON, SizeBytes: 10, StoredBytes: 8,
			SHA256: "ab", CompletedTaskCount: 1, PendingTaskCount: 2, FormatVersion: 1},
			`{"checkpointId":"c","workflowId":"w","namespace":"ns","seq":3,"parentId":"p","phase":"failed","step":2,"stepName":"fetch",` +
				`"error":{"message":"boom","retryable":true},"workflowHash":"h","metadata":{"k":1},"createdAt":"2026-01-02T03:04:05.000000Z",` +
				`"stateType":"json","sizeBytes":10,"storedBytes":8,"sha256":"ab","completedTaskCount":1,"pendingTaskCount":2}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(SummaryOf(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(b))
		})
	}

	latest := store.Summary{CheckpointID: "c"}
	wi := WorkflowInfoOf(store.WorkflowInfo{WorkflowID: "w", Count: 2, Latest: &latest, Resumable: true, UpdatedAt: created, StoredBytes: 5})
	assert.Equal(t, "2026-01-02T03:04:05.000000Z", wi.UpdatedAt)
	require.NotNil(t, wi.Latest)
	assert.Equal(t, "c", wi.Latest.CheckpointID)
	assert.Nil(t, WorkflowInfoOf(store.WorkflowInfo{WorkflowID: "w"}).Latest)
}

func TestPendingWritesOf(t *testing.T) {
	b64 := "AAE="
	for _, tc := range []struct {
		name string
		in   store.Write
		want protocol.PendingWrite
	}{
		{"json", store.Write{TaskID: "t", TaskPath: "p", Idx: 1, Channel: "ch", Type: "json", Value: []byte(`{"a":1}`)},
			protocol.PendingWrite{TaskID: "t", TaskPath: "p", Idx: 1, Channel: "ch", Type: "json", Value: json.RawMessage(`{"a":1}`)}},
		{"empty json is null", store.Write{TaskID: "t", Channel: "ch"},
			protocol.PendingWrite{TaskID: "t", Channel: "ch", Value: json.RawMessage("null")}},
		{"bytes", store.Write{TaskID: "t", Channel: "ch", Value: []byte{0, 1}, IsBytes: true},
			protocol.PendingWrite{TaskID: "t", Channel: "ch", ValueBase64: &b64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, []protocol.PendingWrite{tc.want}, PendingWritesOf([]store.Write{tc.in}))
		})
	}
	assert.Equal(t, []protocol.PendingWrite{}, PendingWritesOf(nil), "an empty list, never null")
}

func TestRecoveredOf(t *testing.T) {
	assert.Nil(t, RecoveredOf(nil), "absent (omitempty) when nothing was skipped")
	assert.Equal(t, []protocol.Recovered{{CheckpointID: "c", Reason: "r"}}, RecoveredOf([]store.Recovery{{CheckpointID: "c", Reason: "r"}}))
}
