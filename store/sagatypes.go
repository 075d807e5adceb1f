package store

// Nouns of validation checkpoints and the compensation log (store/saga.go stores them). The
// rules that give them meaning (classification, rollback scope and order) are package saga's;
// the store keeps the rows and answers the queries those rules need.

import (
	"bytes"
	"encoding/json"
	"math"
	"time"
)

// Limits of a registered compensation (and of a validation's message and details).
const (
	MaxCompensationActionBytes = 1 << 20
	MaxCompensationTextBytes   = 64 << 10
)

// Validation is the validation saved with a checkpoint: its status as classified when it was
// saved, the confidence and the thresholds it was classified against.
type Validation struct {
	Status     string  // passed | warning | failed
	Confidence float64 // in [0, 1]
	Min        float64 // the thresholds in force at the save
	Warning    float64
	Message    string
	Details    json.RawMessage // any JSON, as sent; nil: none
}

// ValidationStatusValid reports whether s is a stored validation status.
func ValidationStatusValid(s string) bool { return s == "passed" || s == "warning" || s == "failed" }

// validationRecord is Validation's stored form (checkpoints.validation).
type validationRecord struct {
	Confidence float64         `json:"confidence"`
	Min        float64         `json:"min"`
	Warning    float64         `json:"warning"`
	Message    string          `json:"message,omitempty"`
	Details    json.RawMessage `json:"details,omitempty"`
}

// EncodeValidation checks v and returns its stored record (deterministic: part of the save's
// idempotency digest; DecodeValidation reads it back).
func EncodeValidation(v *Validation) ([]byte, error) {
	if !ValidationStatusValid(v.Status) {
		return nil, Invalid("validation.status", "%q is not one of passed, warning, failed", v.Status)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"validation.confidence", v.Confidence}, {"validation.min", v.Min}, {"validation.warning", v.Warning}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > 1 {
			return nil, Invalid(f.name, "not a number in [0, 1]")
		}
	}
	rec := validationRecord{Confidence: v.Confidence, Min: v.Min, Warning: v.Warning, Message: v.Message}
	if d := v.Details; len(d) > 0 && string(d) != "null" {
		var buf bytes.Buffer
		if err := json.Compact(&buf, d); err != nil {
			return nil, Invalid("validation.details", "not valid JSON: %v", err)
		}
		rec.Details = json.RawMessage(buf.Bytes())
	}
	return json.Marshal(rec)
}

// DecodeValidation reads a stored validation record; one that does not decode is corruption.
func DecodeValidation(checkpointID, status string, raw []byte) (*Validation, error) {
	var rec validationRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, &CorruptError{CheckpointID: checkpointID, Reason: "stored validation does not decode: " + err.Error()}
	}
	return &Validation{Status: status, Confidence: rec.Confidence, Min: rec.Min, Warning: rec.Warning,
		Message: rec.Message, Details: rec.Details}, nil
}

// ValidationRef is a checkpoint that carries a validation: what a rollback recommendation
// chooses among.
type ValidationRef struct {
	CheckpointID string
	Seq          int64
	Status       string
}

// SagaConfig is a workflow's validation and compensation config as stored: the JSON objects
// workflow/configure was given (package saga decodes them); nil when not configured.
type SagaConfig struct {
	Validation   json.RawMessage
	Compensation json.RawMessage
}

// CompensationRequest registers how to undo one side effect of a workflow.
type CompensationRequest struct {
	WorkflowID   string
	Namespace    string
	CheckpointID string // optional: the checkpoint it goes with (not checked)
	StepName     string
	TaskID       string
	Action       json.RawMessage // opaque JSON; the client runs it
	Description  string
}

// Compensation statuses (package saga's CompStatus values).
const (
	CompensationPending = "pending"
	CompensationDone    = "done"
	CompensationFailed  = "failed"
)

// Compensation is a registered compensation.
type Compensation struct {
	CompensationID string
	WorkflowID     string
	Namespace      string
	// Seq is its registration order within the workflow (1, 2, ...).
	Seq int64
	// AfterSeq is the workflow's newest checkpoint seq when it was registered (0: none yet): it
	// was registered after every checkpoint with seq <= AfterSeq.
	AfterSeq     int64
	CheckpointID string
	StepName     string
	TaskID       string
	Action       json.RawMessage
	Description  string
	Status       string // pending | done | failed
	Error        string // the last failure a rollback reported
	RollbackID   string // the rollback that ran it last
	CreatedAt    time.Time
	DoneAt       time.Time // zero: not run
}

// Rollback is a rollback of a workflow and namespace, unfinished (CompletedAt zero) or done.
type Rollback struct {
	RollbackID     string
	WorkflowID     string
	Namespace      string
	ToCheckpointID string // "" for a full rollback
	ToSeq          int64  // the target checkpoint's seq (0: full)
	// MaxSeq is the newest compensation seq of the workflow when the rollback was begun: it
	// covers nothing registered later.
	MaxSeq      int64
	CreatedAt   time.Time
	CompletedAt time.Time
}

// Full reports whether the rollback undoes everything (no target checkpoint).
func (r Rollback) Full() bool { return r.ToCheckpointID == "" }

// CheckCompensation reports what makes req unstorable, naming the field (the checks every
// backend makes before it stores a compensation; a backend adds its own, e.g. NUL in text).
func CheckCompensation(req CompensationRequest) error {
	switch {
	case req.WorkflowID == "":
		return Invalid("workflowId", "required")
	case len(req.WorkflowID) > MaxWorkflowIDBytes:
		return Invalid("workflowId", "longer than %d bytes", MaxWorkflowIDBytes)
	case len(req.Action) == 0 || string(req.Action) == "null":
		return Invalid("action", "required (the JSON the client runs to undo the side effect)")
	case !json.Valid(req.Action):
		return Invalid("action", "not valid JSON")
	case len(req.Action) > MaxCompensationActionBytes:
		return &TooLargeError{Limit: MaxCompensationActionBytes, Size: int64(len(req.Action))}
	case len(req.Description) > MaxCompensationTextBytes:
		return Invalid("description", "longer than %d bytes", MaxCompensationTextBytes)
	}
	return nil
}
