// Package protocol holds ckptd's wire types and nothing else: method names, error codes, and
// every params, result and notification struct of docs/protocol.md, with their exact JSON
// names. The handlers live in package rpc; commands and tests import this package, never the
// server, for the types.
package protocol

import (
	"encoding/json"
	"time"

	"github.com/ckptd/ckptd/resume"
)

// ProtocolVersion is the wire protocol version reported by initialize.
const ProtocolVersion = 1

// Method names (binding; see docs/protocol.md).
const (
	MethodInitialize   = "initialize"
	MethodShutdown     = "shutdown"
	MethodSave         = "checkpoint/save"
	MethodLoad         = "checkpoint/load"
	MethodList         = "checkpoint/list"
	MethodDelete       = "checkpoint/delete"
	MethodPrune        = "checkpoint/prune"
	MethodConfigure    = "workflow/configure"
	MethodComplete     = "workflow/complete"
	MethodWorkflowList = "workflow/list"
	MethodWritesPut    = "writes/put"
	MethodResumePlan   = "resume/plan"
	MethodStats        = "stats"
	MethodDriftStatus  = "drift/status"
	MethodDriftWatch   = "drift/watch"
	MethodDriftUnwatch = "drift/unwatch"
	// MethodCancelRequest is LSP's cancellation notification: params {id}.
	MethodCancelRequest = "$/cancelRequest"
	NotifySaved         = "checkpoint/saved"
	NotifyPruned        = "checkpoint/pruned"
	NotifyCorrupted     = "checkpoint/corrupted"
	NotifyDriftChanged  = "drift/changed" // per drift/watch, no initialize opt-in
)

// Error codes (binding).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	CodeNotFound       = -32001
	CodeCorrupt        = -32002
	CodeConflict       = -32003
	CodeTooLarge       = -32004
	CodeResumeInvalid  = -32005
	CodeUnavailable    = -32006
	CodeShuttingDown   = -32007
	CodeClaimed        = -32008 // the workflow's claim refuses the call (ClaimedData)
	// CodeRequestCancelled (LSP's RequestCancelled) answers a request cancelled by
	// $/cancelRequest before it committed anything.
	CodeRequestCancelled = -32800
)

// InitializeParams is the client's hello.
type InitializeParams struct {
	ClientName string   `json:"clientName"`
	Events     []string `json:"events"`
}

// Capabilities tells the client what this server offers.
type Capabilities struct {
	Attachments   bool     `json:"attachments"`
	StateTypes    []string `json:"stateTypes"`
	MaxStateBytes int64    `json:"maxStateBytes"`
	Durability    string   `json:"durability"`
	Events        []string `json:"events"`
	Drift         bool     `json:"drift"` // sources on save/configure, drift/status, drift/watch
	// LangGraph describes the lg/* methods (protocol/langgraph.go).
	LangGraph LGCapabilities `json:"langgraph"`
}

// InitializeResult answers initialize.
type InitializeResult struct {
	ServerName      string       `json:"serverName"`
	ServerVersion   string       `json:"serverVersion"`
	ProtocolVersion int          `json:"protocolVersion"`
	DBPath          string       `json:"dbPath"`
	Capabilities    Capabilities `json:"capabilities"`
}

// StepError is the error of a failed step.
type StepError struct {
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// SaveParams are checkpoint/save's params. State fields stay raw: the server never decodes a state.
type SaveParams struct {
	WorkflowID      *string         `json:"workflowId"`
	Namespace       string          `json:"namespace"`
	CheckpointID    string          `json:"checkpointId"`
	ParentID        string          `json:"parentId"`
	Phase           string          `json:"phase"`
	Step            *int64          `json:"step"`
	StepName        string          `json:"stepName"`
	Error           *StepError      `json:"error"`
	State           json.RawMessage `json:"state"`
	StateBase64     *string         `json:"stateBase64"`
	StateAttachment bool            `json:"stateAttachment"`
	StateType       string          `json:"stateType"`
	CompletedTasks  json.RawMessage `json:"completedTasks"`
	PendingTasks    json.RawMessage `json:"pendingTasks"`
	WorkflowHash    string          `json:"workflowHash"`
	Metadata        json.RawMessage `json:"metadata"`
	Sources         json.RawMessage `json:"sources"` // drift.Spec: fingerprinted with the checkpoint (engine.Save)
	// FencingToken is the token of the caller's claim on the workflow (workflow/claim).
	FencingToken *int64 `json:"fencingToken"`
	// Validation is the step's score of its result, classified against the workflow's rules.
	Validation *ValidationParams `json:"validation"`
	// StateDelta says the attachment holds only the middle of the state: the rest is kept from
	// the state of another checkpoint (docs/protocol.md, "Wire deltas").
	StateDelta *StateDelta `json:"stateDelta"`
}

// StateDelta is checkpoint/save's stateDelta: the state is the base checkpoint's state with
// its first keepPrefix and last keepSuffix bytes kept and the attachment in between; sha256 is
// the hex SHA-256 of the result.
type StateDelta struct {
	BaseCheckpointID *string `json:"baseCheckpointId"`
	KeepPrefix       *int64  `json:"keepPrefix"`
	KeepSuffix       *int64  `json:"keepSuffix"`
	SHA256           *string `json:"sha256"`
}

// SaveResult answers checkpoint/save.
type SaveResult struct {
	CheckpointID string `json:"checkpointId"`
	Seq          int64  `json:"seq"`
	CreatedAt    string `json:"createdAt"`
	SizeBytes    int64  `json:"sizeBytes"`
	StoredBytes  int64  `json:"storedBytes"`
	SHA256       string `json:"sha256"`
	Deduplicated bool   `json:"deduplicated"`
	// Sources describes the source fingerprint recorded with the checkpoint, if any.
	Sources *SourcesInfo `json:"sources,omitempty"`
	// Validation is the classification of the save's validation param, if it had one.
	Validation *ValidationResult `json:"validation,omitempty"`
}

// LoadParams are checkpoint/load's params.
type LoadParams struct {
	CheckpointID string `json:"checkpointId"`
	WorkflowID   string `json:"workflowId"`
	Namespace    string `json:"namespace"`
	Attachment   bool   `json:"attachment"`
}

// Summary describes a checkpoint without state or task lists.
type Summary struct {
	CheckpointID       string          `json:"checkpointId"`
	WorkflowID         string          `json:"workflowId"`
	Namespace          string          `json:"namespace"`
	Seq                int64           `json:"seq"`
	ParentID           *string         `json:"parentId"`
	Phase              string          `json:"phase"`
	Step               int64           `json:"step"`
	StepName           string          `json:"stepName"`
	Error              *StepError      `json:"error"`
	WorkflowHash       string          `json:"workflowHash"`
	Metadata           json.RawMessage `json:"metadata"`
	CreatedAt          string          `json:"createdAt"`
	StateType          string          `json:"stateType"`
	SizeBytes          int64           `json:"sizeBytes"`
	StoredBytes        int64           `json:"storedBytes"`
	SHA256             string          `json:"sha256"`
	CompletedTaskCount int             `json:"completedTaskCount"`
	PendingTaskCount   int             `json:"pendingTaskCount"`
	// Validation is the validation saved with the checkpoint, if any.
	Validation *ValidationInfo `json:"validation,omitempty"`
}

// PendingWrite is one stored write of a task.
type PendingWrite struct {
	TaskID      string          `json:"taskId"`
	TaskPath    string          `json:"taskPath,omitempty"`
	Idx         int64           `json:"idx"`
	Channel     string          `json:"channel"`
	Type        string          `json:"type,omitempty"`
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 *string         `json:"valueBase64,omitempty"`
}

// Recovered names a corrupt checkpoint skipped by a latest-load.
type Recovered struct {
	CheckpointID string `json:"checkpointId"`
	Reason       string `json:"reason"`
}

// LoadResult answers checkpoint/load. The state goes in State (json), StateBase64 (bytes) or the
// frame attachment (StateAttachment).
type LoadResult struct {
	Summary
	CompletedTasks  json.RawMessage `json:"completedTasks"`
	PendingTasks    json.RawMessage `json:"pendingTasks"`
	PendingWrites   []PendingWrite  `json:"pendingWrites"`
	StateBase64     *string         `json:"stateBase64,omitempty"`
	StateAttachment bool            `json:"stateAttachment,omitempty"`
	RecoveredFrom   []Recovered     `json:"recoveredFrom,omitempty"`
}

// ListParams are checkpoint/list's params.
type ListParams struct {
	WorkflowID string                     `json:"workflowId"`
	Namespace  *string                    `json:"namespace"`
	Phase      string                     `json:"phase"`
	Metadata   map[string]json.RawMessage `json:"metadata"`
	Before     string                     `json:"before"`
	Limit      *int                       `json:"limit"`
	Validation string                     `json:"validation"` // passed | warning | failed
}

// ListResult answers checkpoint/list.
type ListResult struct {
	Checkpoints []Summary `json:"checkpoints"`
}

// DeleteParams are checkpoint/delete's params.
type DeleteParams struct {
	CheckpointID string `json:"checkpointId"`
	WorkflowID   string `json:"workflowId"`
}

// DeleteResult answers checkpoint/delete.
type DeleteResult struct {
	Deleted int `json:"deleted"`
}

// PruneParams are checkpoint/prune's params.
type PruneParams struct {
	WorkflowID       string `json:"workflowId"`
	KeepLast         *int   `json:"keepLast"`
	OlderThanSeconds *int64 `json:"olderThanSeconds"`
	DryRun           bool   `json:"dryRun"`
}

// PruneResult answers checkpoint/prune.
type PruneResult struct {
	Deleted    int   `json:"deleted"`
	FreedBytes int64 `json:"freedBytes"`
	DryRun     bool  `json:"dryRun"`
}

// Retention is a workflow's pruning policy on the wire.
type Retention struct {
	KeepLast       *int   `json:"keepLast,omitempty"`
	MaxAgeSeconds  *int64 `json:"maxAgeSeconds,omitempty"`
	KeepFirst      *bool  `json:"keepFirst,omitempty"`
	IdleTTLSeconds *int64 `json:"idleTtlSeconds,omitempty"`
}

// ConfigureParams are workflow/configure's params.
type ConfigureParams struct {
	WorkflowID string          `json:"workflowId"`
	Retention  *Retention      `json:"retention"`
	Sources    json.RawMessage `json:"sources"` // drift.Spec fingerprinted by every save; null removes it
	// Validation replaces the workflow's validation rules ({}: the defaults).
	Validation *ValidationConfig `json:"validation"`
	// Compensation replaces the workflow's compensation rules.
	Compensation *CompensationConfig `json:"compensation"`
}

// EffectiveRetention is the policy in force, every field present.
type EffectiveRetention struct {
	KeepLast       int   `json:"keepLast"`
	MaxAgeSeconds  int64 `json:"maxAgeSeconds"`
	KeepFirst      bool  `json:"keepFirst"`
	IdleTTLSeconds int64 `json:"idleTtlSeconds"`
}

// ConfigureResult answers workflow/configure.
type ConfigureResult struct {
	WorkflowID string             `json:"workflowId"`
	Retention  EffectiveRetention `json:"retention"`
	Sources    json.RawMessage    `json:"sources,omitempty"` // the configured sources, if any
	// Validation is the validation config in force, once one was configured.
	Validation *EffectiveValidation `json:"validation,omitempty"`
	// Compensation is the compensation config, once one was configured.
	Compensation *CompensationConfig `json:"compensation,omitempty"`
}

// CompleteParams are workflow/complete's params.
type CompleteParams struct {
	WorkflowID   string `json:"workflowId"`
	Preserve     bool   `json:"preserve"`
	FencingToken *int64 `json:"fencingToken"`
}

// CompleteResult answers workflow/complete.
type CompleteResult struct {
	WorkflowID string `json:"workflowId"`
	Deleted    int    `json:"deleted"`
}

// WorkflowListParams are workflow/list's params.
type WorkflowListParams struct {
	ResumableOnly bool `json:"resumableOnly"`
	// Claimable lists only resumable workflows whose claim is free (never claimed, released, or
	// its lease ran out), oldest first: the work a worker may pick up.
	Claimable bool `json:"claimable"`
	// Limit is the page size: 1-10000, default 1000.
	Limit *int `json:"limit"`
	// Cursor continues a listing: the cursor of the previous page's result (opaque).
	Cursor string `json:"cursor"`
	// Order is "updated" (most recently updated first; the default) or "id" (by workflowId);
	// claimable lists are oldest first unless "id".
	Order string `json:"order"`
}

// WorkflowInfo is one workflow in workflow/list.
type WorkflowInfo struct {
	WorkflowID  string   `json:"workflowId"`
	Count       int      `json:"count"`
	Latest      *Summary `json:"latest"`
	Resumable   bool     `json:"resumable"`
	Completed   bool     `json:"completed"`
	UpdatedAt   string   `json:"updatedAt"`
	StoredBytes int64    `json:"storedBytes"`
}

// WorkflowListResult answers workflow/list.
type WorkflowListResult struct {
	Workflows []WorkflowInfo `json:"workflows"`
	// Cursor is present when more workflows follow: pass it as cursor for the next page.
	Cursor string `json:"cursor,omitempty"`
}

// WriteParam is one write in writes/put.
type WriteParam struct {
	Channel     *string         `json:"channel"`
	Value       json.RawMessage `json:"value"`
	ValueBase64 *string         `json:"valueBase64"`
	Type        string          `json:"type"`
	Idx         *int64          `json:"idx"`
}

// WritesPutParams are writes/put's params.
type WritesPutParams struct {
	WorkflowID   string       `json:"workflowId"`
	Namespace    string       `json:"namespace"`
	CheckpointID string       `json:"checkpointId"`
	TaskID       string       `json:"taskId"`
	TaskPath     string       `json:"taskPath"`
	Writes       []WriteParam `json:"writes"`
	FencingToken *int64       `json:"fencingToken"`
}

// WritesPutResult answers writes/put.
type WritesPutResult struct {
	Stored int `json:"stored"`
}

// ResumePlanParams are resume/plan's params.
type ResumePlanParams struct {
	WorkflowID     string `json:"workflowId"`
	Namespace      string `json:"namespace"`
	CheckpointID   string `json:"checkpointId"`
	WorkflowHash   string `json:"workflowHash"`
	Force          bool   `json:"force"`
	Attachment     bool   `json:"attachment"`
	DriftAsWarning bool   `json:"driftAsWarning"`
	// SourcesRoot compares the recorded sources with the same tree checked out at this
	// directory (another machine's checkout) instead of at the recorded root.
	SourcesRoot string `json:"sourcesRoot"`
	// Rollback plans from the newest checkpoint whose validation did not fail (or
	// ToCheckpointID) and lists the compensations to run first.
	Rollback       bool   `json:"rollback"`
	ToCheckpointID string `json:"toCheckpointId"`
}

// ResumePlanResult answers resume/plan.
type ResumePlanResult struct {
	CheckpointID    string           `json:"checkpointId"`
	WorkflowID      string           `json:"workflowId"`
	Namespace       string           `json:"namespace"`
	Phase           string           `json:"phase"`
	Step            int64            `json:"step"`
	StepName        string           `json:"stepName"`
	StartStep       int64            `json:"startStep"`
	Retry           bool             `json:"retry"`
	Reason          string           `json:"reason"`
	CompletedTasks  json.RawMessage  `json:"completedTasks"`
	PendingTasks    json.RawMessage  `json:"pendingTasks"`
	StateType       string           `json:"stateType"`
	StateBase64     *string          `json:"stateBase64,omitempty"`
	StateAttachment bool             `json:"stateAttachment,omitempty"`
	Warnings        []resume.Problem `json:"warnings"`
	RecoveredFrom   []Recovered      `json:"recoveredFrom,omitempty"`
	Drift           *DriftStatus     `json:"drift,omitempty"` // when sources were recorded with the checkpoint
	// Validation is the validation saved with the checkpoint, with its recommendation.
	Validation *ValidationResult `json:"validation,omitempty"`
	// Rollback lists the compensations to run before resuming: with rollback: true, or while
	// a rollback of the workflow and namespace is unfinished.
	Rollback *ResumeRollback `json:"rollback,omitempty"`
}

// LatencyStats summarises one operation's latency.
type LatencyStats struct {
	Count int64   `json:"count"`
	P50Ms float64 `json:"p50Ms"`
	P95Ms float64 `json:"p95Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
}

// Counters are the server's running totals since start.
type Counters struct {
	Saves             int64 `json:"saves"`
	Loads             int64 `json:"loads"`
	Failures          int64 `json:"failures"`
	IntegrityFailures int64 `json:"integrityFailures"`
	BytesIn           int64 `json:"bytesIn"`
	BytesOut          int64 `json:"bytesOut"`
	Deduplicated      int64 `json:"deduplicated"`
	Pruned            int64 `json:"pruned"`
	// DeltaSaves counts the saves sent as a wire delta (stateDelta); their BytesIn are the
	// middle bytes sent, not the state rebuilt.
	DeltaSaves int64 `json:"deltaSaves"`
}

// DBStats describes the database.
type DBStats struct {
	Path              string `json:"path"`
	SizeBytes         int64  `json:"sizeBytes"`
	WALBytes          int64  `json:"walBytes"` // the backend's "walBytes" figure (store.Health)
	Workflows         int    `json:"workflows"`
	Checkpoints       int    `json:"checkpoints"`
	States            int    `json:"states"`
	StatesStoredBytes int64  `json:"statesStoredBytes"`
	// Storage is the database's logical and stored bytes (store.Footprint), every value counted.
	Storage *StorageStats `json:"storage,omitempty"`
	// Pragmas are the backend's settings (store.Health): on SQLite the settings in force on the
	// connection saves commit through (sqlite.PragmaNames; docs/durability.md), e.g.
	// "synchronous": "2" for --durability full.
	Pragmas map[string]string `json:"pragmas,omitempty"`
	// Compaction is this process's deferred compression: states saved raw and not yet compressed,
	// and what the compactor has done since start.
	Compaction CompactionStats `json:"compaction"`
	// BlobCache is this process's in-memory cache of LangGraph channel values (lg/get, lg/list
	// serve cached values by their stored SHA-256 instead of re-reading them).
	BlobCache BlobCacheStats `json:"blobCache"`
	// ChunkCache is this process's cache of verified chunks: a load copies a chunk whose stored
	// bytes it already decoded and checked instead of decoding and hashing it again (the whole
	// value's SHA-256 is still checked). Same shape as BlobCache; Bytes counts a per-entry
	// overhead too.
	ChunkCache BlobCacheStats `json:"chunkCache"`
	// WritesStopped is present once the database stopped accepting writes (store.Condition):
	// every write then answers -32006 with data.reason = WritesStopped.Reason.
	WritesStopped *WritesStopped `json:"writesStopped,omitempty"`
}

// WritesStopped is DBStats.WritesStopped.
type WritesStopped struct {
	// Reason: "database damaged", "database file removed", "database file replaced" or
	// "disk full" (opened read-only).
	Reason string `json:"reason"`
	// Detail says what was seen and what to do.
	Detail string    `json:"detail"`
	Since  time.Time `json:"since"`
}

// BlobCacheStats is DBStats.BlobCache.
type BlobCacheStats struct {
	Entries  int    `json:"entries"`
	Bytes    int64  `json:"bytes"`
	MaxBytes int64  `json:"maxBytes"`
	Hits     uint64 `json:"hits"`
	Misses   uint64 `json:"misses"`
}

// CompactionStats is DBStats.Compaction.
type CompactionStats struct {
	PendingStates int   `json:"pendingStates"`
	PendingBytes  int64 `json:"pendingBytes"`
	Compacted     int64 `json:"compacted"`
	SavedBytes    int64 `json:"savedBytes"`
}

// StatsResult answers stats.
type StatsResult struct {
	UptimeSeconds float64                 `json:"uptimeSeconds"`
	Counters      Counters                `json:"counters"`
	Latency       map[string]LatencyStats `json:"latency"`
	DB            DBStats                 `json:"db"`
	// Workflow and Thread answer the params of the same names: that workflow's or thread's
	// logical and stored bytes.
	Workflow *Footprint `json:"workflow,omitempty"`
	Thread   *Footprint `json:"thread,omitempty"`
}

// StatsParams are stats' optional params: a workflow and a LangGraph thread whose footprint to
// report.
type StatsParams struct {
	WorkflowID *string `json:"workflowId"`
	ThreadID   *string `json:"threadId"`
}

// Footprint is what values take (store.Footprint): their bytes as saved, the bytes stored for
// them, and the ratio of the two (0 when nothing is stored).
type Footprint struct {
	WorkflowID   string  `json:"workflowId,omitempty"`
	ThreadID     string  `json:"threadId,omitempty"`
	LogicalBytes int64   `json:"logicalBytes"`
	StoredBytes  int64   `json:"storedBytes"`
	Ratio        float64 `json:"ratio"`
}

// StorageStats is the database's footprint as a whole, and how many chunks and runs it stores.
type StorageStats struct {
	LogicalBytes int64   `json:"logicalBytes"`
	StoredBytes  int64   `json:"storedBytes"`
	Ratio        float64 `json:"ratio"`
	Chunks       int64   `json:"chunks"`
	Runs         int64   `json:"runs"`
}

// SavedEvent is the checkpoint/saved notification.
type SavedEvent struct {
	CheckpointID string `json:"checkpointId"`
	WorkflowID   string `json:"workflowId"`
	Namespace    string `json:"namespace"`
	Seq          int64  `json:"seq"`
	Phase        string `json:"phase"`
	Step         int64  `json:"step"`
}

// PrunedEvent is the checkpoint/pruned notification.
type PrunedEvent struct {
	WorkflowID    string   `json:"workflowId"`
	CheckpointIDs []string `json:"checkpointIds"`
	Reason        string   `json:"reason"`
}

// CorruptedEvent is the checkpoint/corrupted notification.
type CorruptedEvent struct {
	CheckpointID string `json:"checkpointId"`
	WorkflowID   string `json:"workflowId"`
	Reason       string `json:"reason"`
}
