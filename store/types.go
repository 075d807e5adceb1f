package store

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// Durability modes.
const (
	DurabilityFull   = "full"
	DurabilityNormal = "normal"
)

// Defaults for zero Options fields.
const (
	DefaultMaxStateBytes     = 64 << 20
	DefaultCompressThreshold = 4096
	DefaultKeepLast          = 10
	DefaultBlobCacheBytes    = 16 << 20
)

// FormatVersion is the checkpoint format version this build writes (Summary.FormatVersion).
const FormatVersion = 1

// Limits of identifiers.
const (
	MaxWorkflowIDBytes   = 512
	MaxCheckpointIDBytes = 256
)

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10000
)

// Options configure a backend. Every backend takes them; what a field means for storage is
// described backend-neutrally.
type Options struct {
	// Path names the database: a SQLite file path (parent directories are created 0700, the
	// file 0600).
	Path string
	// Durability is "full" (default: an acknowledged save survives power loss) or "normal"
	// (it survives a crash of ckptd; power loss may lose the last saves).
	Durability       string
	DefaultRetention Retention // used by workflows without their own; zero value = keep everything (pass KeepLast: DefaultKeepLast for the CLI default)
	// LGDefaultRetention is the retention of LangGraph threads without their own and without the
	// database's (lg/configure); zero value = keep everything (the default).
	LGDefaultRetention Retention
	// SweepInterval is how often the daemon deletes what idle TTLs expired (workflows, LangGraph
	// threads) and staged values no put took; default one minute.
	SweepInterval     time.Duration
	MaxStateBytes     int64 // default 64 MiB
	CompressThreshold int   // zstd above this many bytes (default 4096; < 0: never)
	CompressInline    bool  // compress on the save path instead of deferring it to a background compactor
	// NoCompactor leaves states saved raw by others (a running daemon) alone: no background
	// compactor, no compression at Close. For short-lived tools; their own saves compress inline.
	NoCompactor bool
	// NoOpenCheck skips the integrity check a backend runs when it opens a database (SQLite:
	// PRAGMA quick_check, which reads the whole file): for short-lived tools (the ckptd
	// commands), whose cost would otherwise grow with the database. Damage a statement meets
	// still stops writes.
	NoOpenCheck bool
	// BlobCacheBytes sizes the in-memory cache of LangGraph channel values: 0 means
	// DefaultBlobCacheBytes, < 0 none.
	BlobCacheBytes int64
	// ChunkCacheBytes sizes the in-memory cache of the decoded chunks of chunked values that
	// loads verified (ChunkCache): 0 means DefaultChunkCacheBytes, < 0 none.
	ChunkCacheBytes int64
	// BiteBudget bounds the write transactions of long maintenance (store/bites.go): each does
	// BiteUnits units of work, then more only while it has held its transaction for less than
	// this. 0: DefaultBiteBudget.
	BiteBudget time.Duration
	// AfterBite, if set, is called after every committed bite with the number committed so far
	// by this backend (a test hook: ckptd's CKPTD_TEST_HOLD_AFTER_BITES). It runs on the
	// maintenance's goroutine, outside any transaction.
	AfterBite func(n int)
	// StateCacheBytes sizes the in-memory cache of each workflow's last state (StateCache), the
	// base of the next save's chunking and of wire deltas: 0 means DefaultStateCacheBytes, < 0
	// none.
	StateCacheBytes int64
	Logger          *slog.Logger
	Now             func() time.Time // default time.Now
}

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
	// Manifest, if set, is the source fingerprint recorded with the checkpoint, in storage form
	// (drift.EncodeManifest; see ManifestRecord). It is not part of the idempotency digest.
	Manifest *ManifestRecord
	// Validation, if set, is the step's validation as classified (store/sagatypes.go); it is
	// part of the idempotency digest.
	Validation *Validation
	// Check, if set, is one more validation of the request (rpc: that a JSON state is UTF-8 JSON
	// text) that runs concurrently with hashing and writing instead of before them. If it fails
	// the save fails with its error (an *InvalidError for bad input) and nothing is stored.
	Check func() error
	// Marks, if set, are what a wire delta's check learned about State (engine.RebuiltState),
	// kept with the cached state for the next delta against it; filled in by Check where it
	// validates JSON. Not part of the idempotency digest.
	Marks *ValueMarks
	// FencingToken is the token of the writer's claim on the workflow (Claims), 0 for none:
	// checked by CheckFence in the save's transaction. Not part of the idempotency digest.
	FencingToken int64
	// AssumeNoSources says the caller fingerprinted nothing because, as far as it knows, the
	// workflow has no sources configured (the engine remembers that instead of reading the
	// workflow's configuration before every save). The save's transaction checks it: if the
	// workflow has sources configured after all (another process configured them meanwhile),
	// the save is stored as it is, without a fingerprint, and SaveResult.ConfiguredSources holds
	// them. Such a save carries no Manifest. Not part of the idempotency digest.
	AssumeNoSources bool
	// StateSHA256, if set (32 bytes), is State's SHA-256 as the caller computed it already (the
	// daemon, rebuilding a wire delta, checked it): a chunked state is not hashed again. It is
	// trusted: a wrong value stores a state that never verifies.
	StateSHA256 []byte
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
	// ConfiguredSources are the sources configured for the workflow when the request assumed
	// none (SaveRequest.AssumeNoSources) but its transaction found some; nil otherwise.
	ConfiguredSources json.RawMessage
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
	// Manifest is the source manifest recorded with the checkpoint, in storage form, if any.
	// Only Export fills it and Import stores it; loads leave it nil (Manifests.Manifest reads it).
	Manifest *ManifestRecord
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
	// OmitIDs leaves PruneResult.IDs nil: only the counts are kept, so that a prune of millions
	// of checkpoints stays small (the ids still go to SetOnPruned's callback, bite by bite).
	OmitIDs bool
	// Progress, if set, is called after every committed bite with the totals so far.
	Progress func(PruneProgress)
}

// PruneResult reports what a prune removed (or would remove), summed over its bites.
type PruneResult struct {
	Deleted    int
	FreedBytes int64
	IDs        map[string][]string // workflowId -> deleted checkpoint ids (nil with OmitIDs)
}

// PruneProgress is how far a prune has got.
type PruneProgress struct {
	Deleted    int
	FreedBytes int64
	// Workflows is the number of workflows gone through, of Total (the workflows there were
	// when the prune began; 1 for a prune of one workflow).
	Workflows, Total int
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

// RetentionItem is one checkpoint as retention sees it.
type RetentionItem struct {
	Seq       int64
	ID        string
	CreatedAt time.Time
}

// DBStats describes the checkpoint family of the database as a whole.
type DBStats struct {
	Path              string // the database: its file path (SQLite)
	SizeBytes         int64  // of the database as stored (SQLite: the main file)
	Workflows         int
	Checkpoints       int
	States            int
	StatesStoredBytes int64
}

// Usage is what DBStats does not say about the checkpoints' space.
type Usage struct {
	StateBytes        int64 // sum of every checkpoint's state size as sent (before dedup and compression)
	CheckpointStored  int64 // sum of every checkpoint's stored size (a shared state counts once per checkpoint)
	ResumableWorkflow int
	CompletedWorkflow int
}

// Health is what a backend alone knows about itself: figures and settings of its own, in a
// stable order (About names the backend). Callers show them; they never read a backend's
// storage themselves.
type Health struct {
	// Figures are sizes and counters in the backend's terms, e.g. SQLite's "walBytes" (the
	// write-ahead log) and "freeBytes" (pages on the free list, reclaimable).
	Figures []Figure
	// Settings are the settings in force that the durability and space promises rest on, as
	// the database reports them (SQLite: the PRAGMAs of the connection saves commit through).
	// Nil when they cannot be read.
	Settings []Setting
}

// Figure is one of Health's figures.
type Figure struct {
	Name  string
	Value int64
}

// Setting is one of Health's settings.
type Setting struct {
	Name, Value string
}

// Figure returns the figure called name, 0 when the backend has none.
func (h Health) Figure(name string) int64 {
	for _, f := range h.Figures {
		if f.Name == name {
			return f.Value
		}
	}
	return 0
}

// SettingsMap returns Settings as a map (nil without settings).
func (h Health) SettingsMap() map[string]string {
	if h.Settings == nil {
		return nil
	}
	m := make(map[string]string, len(h.Settings))
	for _, s := range h.Settings {
		m[s.Name] = s.Value
	}
	return m
}

// Condition says whether a backend still accepts writes. The zero value is a healthy backend.
// Once a backend stops writing (Reason set) it stays so until it is closed: every write fails
// with an *UnavailableError carrying Reason and Detail, while reads keep working where the
// storage still answers them.
type Condition struct {
	// Reason is "" while writes are accepted, else one of the Reason constants (ReasonDamaged,
	// ReasonRemoved, ReasonReplaced, ReasonDiskFull, ReasonReadOnly).
	Reason string
	// Detail says what was seen and what to do about it, for people.
	Detail string
	// Since is when the backend stopped writing.
	Since time.Time
}

// Writable reports whether writes are accepted.
func (c Condition) Writable() bool { return c.Reason == "" }

// Err is the error a refused write gets: nil while writes are accepted.
func (c Condition) Err() error {
	if c.Writable() {
		return nil
	}
	return &UnavailableError{Reason: c.Reason, Detail: c.Detail}
}

// Failed reports a condition in which data already acknowledged may be lost or unreadable (the
// database is damaged, or its file is gone or replaced): a process exiting in it should say so
// with its exit status. A disk that was full at open, or a read-only open, is not a failure:
// nothing was lost.
func (c Condition) Failed() bool {
	return !c.Writable() && c.Reason != ReasonDiskFull && c.Reason != ReasonReadOnly
}

// About names a backend and its database for people.
type About struct {
	Name     string // "SQLite"
	Location string // the database: its file path (SQLite)
	// Integrity is what IntegrityCheck runs, for progress messages ("PRAGMA integrity_check").
	Integrity string
}

// CompactionStats says how far deferred compression has got in this process.
type CompactionStats struct {
	PendingStates int   `json:"pendingStates"`
	PendingBytes  int64 `json:"pendingBytes"`
	Compacted     int64 `json:"compacted"`
	SavedBytes    int64 `json:"savedBytes"`
}

// BlobCacheStats describes the in-memory cache of LangGraph channel values.
type BlobCacheStats struct {
	Entries  int
	Bytes    int64
	MaxBytes int64
	Hits     uint64
	Misses   uint64
}

// Inspection is a checkpoint as a debugging tool sees it, intact or not.
type Inspection struct {
	// Checkpoint holds every stored field. State is set only when the checkpoint verifies.
	Checkpoint
	// Corrupt is why verification failed; empty when the checkpoint is intact.
	Corrupt string
	// Encoding is how the state is stored: "raw", "raw (compression pending)", "zstd",
	// "chunked zstd", or "" without state (or when its blob is missing).
	Encoding string
	// SharedWith counts the other checkpoints that refer to the same stored state bytes.
	SharedWith int
}

// WorkflowRecord is a workflow's own row: what Export reports and Import recreates.
type WorkflowRecord struct {
	WorkflowID  string
	Retention   *Retention      // nil: none configured (the server default applies)
	Config      json.RawMessage // nil: none
	CreatedAt   time.Time
	UpdatedAt   time.Time
	CompletedAt time.Time // zero: not completed
}

// Import outcomes.
const (
	ImportAdded   = "imported" // written with its original seq
	ImportSkipped = "skipped"  // already present with identical content: left untouched
)

// ImportedCheckpoint is what happened to one imported checkpoint.
type ImportedCheckpoint struct {
	CheckpointID string
	Status       string // ImportAdded or ImportSkipped
	OriginalSeq  int64  // seq in the source
	Seq          int64  // seq in this database (differs when renumbered, or when skipped after an earlier renumbering)
}

// ImportResult reports an Import.
type ImportResult struct {
	WorkflowID      string
	CreatedWorkflow bool // the workflow did not exist here before
	Checkpoints     []ImportedCheckpoint
	Imported        int
	Skipped         int
	Renumbered      int // imported with a new seq because the original was not after every existing one
	DryRun          bool
}

// ImportOptions tune Import and LGImport.
type ImportOptions struct {
	DryRun bool // do everything, report, then roll back
}

// --- source manifests (see manifests.go) ---------------------------------------------------

// ManifestKeyLen is the length of a chunk id and of an entry key.
const ManifestKeyLen = 16

// ManifestRecord is a source manifest in storage form.
type ManifestRecord struct {
	Root   string // the absolute sources root (LatestSourcesRef finds manifests by it)
	Files  int    // number of entries
	Header []byte
	Chunks []ManifestChunk
}

// ManifestChunk is one chunk of a ManifestRecord.
type ManifestChunk struct {
	ID      []byte   // ManifestKeyLen bytes
	Keys    []byte   // the entries' keys, ManifestKeyLen bytes each, concatenated
	Entries [][]byte // the entries' bytes: Entries[i] is named by Keys[i*ManifestKeyLen:]
}

// Validate checks the shape a backend relies on: ids and keys of ManifestKeyLen bytes, one
// entry per key, Files entries in all.
func (r *ManifestRecord) Validate() error {
	n := 0
	for i, c := range r.Chunks {
		if len(c.ID) != ManifestKeyLen || len(c.Keys) != len(c.Entries)*ManifestKeyLen {
			return fmt.Errorf("chunk %d: id of %d bytes, %d key bytes for %d entries", i, len(c.ID), len(c.Keys), len(c.Entries))
		}
		n += len(c.Entries)
	}
	if n != r.Files {
		return fmt.Errorf("%d entries, %d files", n, r.Files)
	}
	return nil
}

// ChunkIDs are the ids of r's chunks, concatenated: what a backend records per checkpoint.
func (r *ManifestRecord) ChunkIDs() []byte {
	ids := make([]byte, 0, len(r.Chunks)*ManifestKeyLen)
	for _, c := range r.Chunks {
		ids = append(ids, c.ID...)
	}
	return ids
}

// ManifestRef is a checkpoint as the drift methods need it: who it is, and whether (and for
// which root) a manifest was recorded with it.
type ManifestRef struct {
	Key          int64 // the backend's id of the checkpoint: stable for its lifetime, never reused
	CheckpointID string
	WorkflowID   string
	Namespace    string
	Seq          int64
	Phase        Phase
	Step         int64
	StepName     string
	HasManifest  bool
	Root         string // HasManifest: the absolute sources root
	Files        int    // HasManifest: entries recorded
}

// ManifestProblem is a checkpoint whose recorded source manifest cannot be read back whole.
type ManifestProblem struct {
	CheckpointID string
	WorkflowID   string
	Seq          int64
	Reason       string
}

// ManifestCounts are the manifest rows VerifyManifests checked.
type ManifestCounts struct {
	Manifests int // checkpoints with a manifest
	Entries   int // distinct file entries stored for them
}

// ManifestScan receives the stored manifest rows of Manifests.ScanManifests, from one snapshot:
// every distinct entry, then every distinct chunk, then each checkpoint's manifest (by workflow,
// then seq). A callback's error stops the scan and is returned.
type ManifestScan struct {
	Entry    func(key, data []byte) error
	Chunk    func(id, keys []byte) error
	Manifest func(m StoredManifest) error
}

// StoredManifest is one checkpoint's manifest row.
type StoredManifest struct {
	CheckpointID string
	WorkflowID   string
	Seq          int64
	Header       []byte
	ChunkIDs     []byte // concatenated
}

// ManifestChecker checks the content of stored manifest rows (drift.StoredChecker): the store
// knows only that they are byte strings named by content addresses.
type ManifestChecker interface {
	CheckEntry(key, data []byte) error // the entry's bytes against its key, and that it decodes
	CheckChunk(id, keys []byte) error  // a chunk's key list against its id
	CheckHeader(header []byte) error   // that a manifest header decodes
}
