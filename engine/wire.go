package engine

// Store nouns in the protocol's shapes: what the RPC answers and the commands' --json print.

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// SummaryOf renders a store summary in the protocol's shape (also used by the CLI's --json).
func SummaryOf(sm store.Summary) protocol.Summary {
	out := protocol.Summary{
		CheckpointID:       sm.CheckpointID,
		WorkflowID:         sm.WorkflowID,
		Namespace:          sm.Namespace,
		Seq:                sm.Seq,
		Phase:              string(sm.Phase),
		Step:               sm.Step,
		StepName:           sm.StepName,
		WorkflowHash:       sm.WorkflowHash,
		Metadata:           sm.Metadata,
		CreatedAt:          Timestamp(sm.CreatedAt),
		StateType:          string(sm.StateType),
		SizeBytes:          sm.SizeBytes,
		StoredBytes:        sm.StoredBytes,
		SHA256:             sm.SHA256,
		CompletedTaskCount: sm.CompletedTaskCount,
		PendingTaskCount:   sm.PendingTaskCount,
	}
	if sm.ParentID != "" {
		p := sm.ParentID
		out.ParentID = &p
	}
	if sm.Error != nil {
		out.Error = &protocol.StepError{Message: sm.Error.Message, Retryable: sm.Error.Retryable}
	}
	if len(out.Metadata) == 0 {
		out.Metadata = json.RawMessage("{}")
	}
	out.Validation = ValidationInfoOf(sm.Validation)
	return out
}

// ValidationInfoOf renders a checkpoint's stored validation (nil: none).
func ValidationInfoOf(v *store.Validation) *protocol.ValidationInfo {
	if v == nil {
		return nil
	}
	return &protocol.ValidationInfo{Status: v.Status, Confidence: v.Confidence,
		Thresholds: protocol.ValidationThresholds{Min: v.Min, Warning: v.Warning}, Message: v.Message, Details: v.Details}
}

// WorkflowInfoOf renders a store workflow in the protocol's shape (workflow/list, CLI --json).
func WorkflowInfoOf(w store.WorkflowInfo) protocol.WorkflowInfo {
	out := protocol.WorkflowInfo{
		WorkflowID:  w.WorkflowID,
		Count:       w.Count,
		Resumable:   w.Resumable,
		Completed:   w.Completed,
		UpdatedAt:   Timestamp(w.UpdatedAt),
		StoredBytes: w.StoredBytes,
	}
	if w.Latest != nil {
		sm := SummaryOf(*w.Latest)
		out.Latest = &sm
	}
	return out
}

// PendingWritesOf renders stored pending writes in the protocol's shape (checkpoint/load).
func PendingWritesOf(ws []store.Write) []protocol.PendingWrite {
	out := make([]protocol.PendingWrite, 0, len(ws))
	for _, w := range ws {
		pw := protocol.PendingWrite{TaskID: w.TaskID, TaskPath: w.TaskPath, Idx: w.Idx, Channel: w.Channel, Type: w.Type}
		if w.IsBytes {
			enc := base64.StdEncoding.EncodeToString(w.Value)
			pw.ValueBase64 = &enc
		} else {
			pw.Value = w.Value
			if len(pw.Value) == 0 {
				pw.Value = json.RawMessage("null")
			}
		}
		out = append(out, pw)
	}
	return out
}

// RecoveredOf renders the corrupt checkpoints a latest-load skipped (recoveredFrom).
func RecoveredOf(rs []store.Recovery) []protocol.Recovered {
	var out []protocol.Recovered
	for _, r := range rs {
		out = append(out, protocol.Recovered{CheckpointID: r.CheckpointID, Reason: r.Reason})
	}
	return out
}

// Timestamp is the protocol's time format: UTC, microseconds ("" for the zero time).
func Timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}
