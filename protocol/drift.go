package protocol

// Source drift (docs/protocol.md, "Source drift"): the sources param of checkpoint/save and
// workflow/configure, drift/status, drift/watch, drift/unwatch and drift/changed.

import "github.com/ckptd/ckptd/drift"

// SourcesInfo describes the fingerprint recorded with a checkpoint (checkpoint/save result).
type SourcesInfo struct {
	Root      string   `json:"root"`
	Files     int      `json:"files"`
	ElapsedMs float64  `json:"elapsedMs"`
	Warnings  []string `json:"warnings,omitempty"`
	// Error: configured sources (workflow/configure) could not be fingerprinted; the checkpoint
	// was saved without a fingerprint.
	Error string `json:"error,omitempty"`
}

// DriftTargetParams name the checkpoint of drift/status and drift/watch: checkpointId, or the
// latest checkpoint of workflowId (+ namespace, default "").
type DriftTargetParams struct {
	CheckpointID string `json:"checkpointId"`
	WorkflowID   string `json:"workflowId"`
	Namespace    string `json:"namespace"`
	// Limits bound the check (default: the limits of the workflow's configured sources on the
	// same root, else the drift defaults).
	Limits *drift.Limits `json:"limits"`
}

// DriftStatusParams are drift/status's params.
type DriftStatusParams struct {
	DriftTargetParams
	// SourcesRoot compares the recorded sources with the same tree checked out at this
	// directory (another machine's checkout) instead of at the recorded root.
	SourcesRoot string `json:"sourcesRoot"`
}

// DriftWatchParams are drift/watch's params.
type DriftWatchParams struct {
	DriftTargetParams
	DebounceMs *int `json:"debounceMs"`
}

// DriftWatchResult answers drift/watch.
type DriftWatchResult struct {
	WatchID      string `json:"watchId"`
	CheckpointID string `json:"checkpointId"`
	Root         string `json:"root"`
}

// DriftUnwatchParams are drift/unwatch's params.
type DriftUnwatchParams struct {
	WatchID string `json:"watchId"`
}

// DriftFileChange is one path that differs from the checkpoint's fingerprint. old* fields are
// zero/absent for an added path, new* ones for a deleted path. Hashes are hex BLAKE3-256 of the
// content (absent for symlinks and unreadable files), modes are octal permission bits.
type DriftFileChange struct {
	Path    string `json:"path"`
	OldSize int64  `json:"oldSize"`
	NewSize int64  `json:"newSize"`
	OldHash string `json:"oldHash,omitempty"`
	NewHash string `json:"newHash,omitempty"`
	OldType string `json:"oldType,omitempty"` // file | symlink
	NewType string `json:"newType,omitempty"`
	OldMode string `json:"oldMode,omitempty"` // e.g. "0644"
	NewMode string `json:"newMode,omitempty"`
}

// DriftStatus answers drift/status and is resume/plan's drift field.
type DriftStatus struct {
	CheckpointID string            `json:"checkpointId"`
	WorkflowID   string            `json:"workflowId"`
	Namespace    string            `json:"namespace"`
	Root         string            `json:"root"`
	Drifted      bool              `json:"drifted"`
	Changed      []DriftFileChange `json:"changed"`
	Added        []DriftFileChange `json:"added"`
	Deleted      []DriftFileChange `json:"deleted"`
	FilesChecked int               `json:"filesChecked"`
	ElapsedMs    float64           `json:"elapsedMs"`
	FullScan     bool              `json:"fullScan,omitempty"`
	Reason       string            `json:"reason,omitempty"`
	Warnings     []string          `json:"warnings,omitempty"`
	// Unreadable: recorded paths that could not be checked now (a directory that cannot be
	// searched or listed: "dir/"); their content is unknown, so drifted is true.
	Unreadable []string `json:"unreadable,omitempty"`
	Watched    bool     `json:"watched,omitempty"` // answered from an active drift/watch
	// RecordedRoot is the root the sources were recorded at, when they were compared at another
	// (sourcesRoot): Root is then the tree compared.
	RecordedRoot string `json:"recordedRoot,omitempty"`
}

// DriftChangedEvent is the drift/changed notification.
type DriftChangedEvent struct {
	WatchID      string         `json:"watchId"`
	CheckpointID string         `json:"checkpointId"`
	Changes      []drift.Change `json:"changes"`
	Drifted      bool           `json:"drifted"`
	Rescan       bool           `json:"rescan,omitempty"`
	Reason       string         `json:"reason,omitempty"`
	// Stopped: the watch could not go on (file descriptors, memory or inotify ran out; the
	// reason says which) and sends nothing more; drift/status checks the disk instead.
	Stopped bool `json:"stopped,omitempty"`
}
