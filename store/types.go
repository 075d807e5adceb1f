package store

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/ckptd/ckptd/drift"
)

// Phase is where in a step a checkpoint was taken.
type Phase string

const (
	PhaseBeforeStep  Phase = "before_step"
	PhaseCompleted   Phase = "completed"
	PhaseFailed      Phase = "failed"
	PhaseInterrupted Phase = "interrupted"
)

// Valid reports whether p is one of the four phases.
func (p Phase) Valid() bool {
	switch p {
	case PhaseBeforeStep, PhaseCompleted, PhaseFailed, PhaseInterrupted:
		return true
	}
	return false
}

// StateType says how to read a checkpoint's state bytes.
type StateType string

const (
	StateJSON  StateType = "json"  // UTF-8 JSON text
	StateBytes StateType = "bytes" // opaque bytes
	StateNone  StateType = "none"  // no state saved
)

// StepError describes why a failed step failed.
type StepError struct {
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// SaveRequest is one checkpoint to store. JSON-valued fields are kept as raw bytes and
// never decoded by the store.
type SaveRequest struct {
	WorkflowID     string
	Namespace      string
	CheckpointID   string // empty: the store makes a UUIDv7
	ParentID       string
	Phase          Phase // empty means completed
	Step           int64
	StepName       string
	Error          *StepError
	State          []byte // exactly as the client sent it
	StateType      StateType
	CompletedTasks json.RawMessage // JSON array or nil
	PendingTasks   json.RawMessage // JSON array or nil
	WorkflowHash   string
	Metadata       json.RawMessage // JSON object or nil
	// Manifest, if set, is the source fingerprint recorded with the checkpoint (EncodeManifest;
	// store/manifests.go). It is not part of the idempotency digest.
	Manifest *EncodedManifest
	// Validation, if set, is the step's validation as classified (store/sagatypes.go); it is
	// part of the idempotency digest.
	Validation *Validation
	// Check, if set, is one more validation of the request (rpc: that a JSON state is UTF-8 JSON
	// text) that runs concurrently with hashing and writing instead of before them. If it fails
	// the save fails with its error (an *InvalidError for bad input) and nothing is stored.
	Check func() error
}

// SaveResult is what a committed save reports.
type SaveResult struct {
	CheckpointID string
	Seq          int64
	CreatedAt    time.Time
	SizeBytes    int64
	StoredBytes  int64
	SHA256       string // hex of State as sent
	Deduplicated bool   // the state bytes were already stored
	Existing     bool   // idempotent repeat of an earlier identical save
	Pruned       []string
}

// Summary describes a checkpoint without its state or task lists.
type Summary struct {
	CheckpointID       string
	WorkflowID         string
	Namespace          string
	Seq                int64
	ParentID           string
	Phase              Phase
	Step               int64
	StepName           string
	Error              *StepError
	WorkflowHash       string
	Metadata           json.RawMessage
	CreatedAt          time.Time
	StateType          StateType
	SizeBytes          int64
	StoredBytes        int64
	SHA256             string
	CompletedTaskCount int
	PendingTaskCount   int
	FormatVersion      int         // checkpoint format version written by the saving ckptd
	Validation         *Validation // nil: saved without one
}

// Write is one pending write of a task against a checkpoint (LangGraph putWrites).
type Write struct {
	TaskID   string
	TaskPath string
	Idx      int64
	Channel  string
	Type     string
	Value    []byte // raw JSON, or bytes when IsBytes
	IsBytes  bool
}

// Checkpoint is a loaded, verified checkpoint.
type Checkpoint struct {
	Summary
	State          []byte
	CompletedTasks json.RawMessage
	PendingTasks   json.RawMessage
	PendingWrites  []Write
	// Manifest is the drift manifest recorded with the checkpoint, if any. Only Export fills
	// it and Import stores it; loads leave it nil (Store.Manifest reads it).
	Manifest *drift.Manifest
}

// Recovery names a corrupt checkpoint skipped by a latest-load.
type Recovery struct {
	CheckpointID string
	Reason       string
}

// LoadResult is a checkpoint plus the corrupt newer ones that were skipped to reach it.
type LoadResult struct {
	Checkpoint
	RecoveredFrom []Recovery
}

// ListFilter selects checkpoints for List. Zero values mean "any".
type ListFilter struct {
	WorkflowID string
	Namespace  *string // nil: every namespace
	Phase      Phase
	Metadata   map[string]json.RawMessage // exact match on top-level keys
	Before     string                     // checkpointId cursor
	Limit      int
	Validation string // passed | warning | failed: only checkpoints saved with that status
}

// Retention is a workflow's automatic pruning policy. Zero fields are off (KeepLast 0: unlimited).
type Retention struct {
	KeepLast       int   `json:"keepLast"`
	MaxAgeSeconds  int64 `json:"maxAgeSeconds"`
	KeepFirst      bool  `json:"keepFirst"`
	IdleTTLSeconds int64 `json:"idleTtlSeconds"`
}

// PruneRequest is an explicit prune.
type PruneRequest struct {
	WorkflowID       string
	KeepLast         int
	OlderThanSeconds int64
	DryRun           bool
}

// PruneResult reports what a prune removed (or would remove).
type PruneResult struct {
	Deleted    int
	FreedBytes int64
	IDs        map[string][]string // workflowId -> deleted checkpoint ids
}

// WorkflowInfo summarises one workflow.
type WorkflowInfo struct {
	WorkflowID  string
	Count       int
	Latest      *Summary
	Resumable   bool
	Completed   bool
	UpdatedAt   time.Time
	StoredBytes int64
}

// DBStats describes the database as a whole.
type DBStats struct {
	Path              string
	SizeBytes         int64
	WALBytes          int64
	Workflows         int
	Checkpoints       int
	States            int
	StatesStoredBytes int64
}

// Errors the store returns; callers test them with errors.Is / errors.As.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrTooLarge    = errors.New("too large")
	ErrUnavailable = errors.New("storage unavailable")
	ErrClosed      = errors.New("store closed")
)

// CorruptError says a stored checkpoint failed verification.
type CorruptError struct {
	CheckpointID string
	WorkflowID   string // the checkpoint's workflow, when it could be read
	Reason       string
	// AlsoCorrupt: loading a workflow's latest checkpoint found every one corrupt; this one is
	// the newest, AlsoCorrupt the older ones, newest first.
	AlsoCorrupt []Recovery
}

func (e *CorruptError) Error() string {
	return "checkpoint " + e.CheckpointID + " is corrupt: " + e.Reason
}
