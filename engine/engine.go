// Package engine holds ckptd's use cases, written once and called by both the JSON-RPC server
// (package rpc) and the command line (cmd/ckptd): save a checkpoint with a fingerprint of its
// sources, plan a resume (gather -> drift -> decide), answer a checkpoint's drift status, and
// keep the drift watches. It composes the store, drift and resume packages, knows nothing of
// JSON-RPC, and answers in the protocol's shapes (package protocol; wire.go renders store
// nouns) where both callers print the same thing.
//
// Manifests are immutable. Two in-memory caches make repeated work incremental: the newest
// manifest seen per (workflow, root), from saves and checks, is the base of the next save's
// scan and the Last of the next check (only files whose stat data changed are re-hashed);
// decoded stored manifests are cached by the store. Both are accelerators only: any manifest
// of the tree gives the same answers, so a second process on the same database (an editor
// tool, a ckptd command) answers drift questions from the stored manifest alone.
package engine

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"time"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
)

// Checkpoints is what the engine reads and queues of checkpoints; *store.Store implements it.
type Checkpoints interface {
	// Load returns a checkpoint by id, verified (*store.CorruptError if it is not intact).
	Load(ctx context.Context, checkpointID string) (store.Checkpoint, error)
	// LoadLatest returns the newest intact checkpoint of a workflow and namespace, naming the
	// corrupt newer ones it skipped.
	LoadLatest(ctx context.Context, workflowID, namespace string) (store.LoadResult, error)
	// IsCompleted reports whether the workflow was marked completed.
	IsCompleted(ctx context.Context, workflowID string) (bool, error)
	// Enqueue queues a save in arrival order; Wait on the result for its outcome.
	Enqueue(req store.SaveRequest) *store.Pending
}

// Manifests is what the engine reads of source fingerprints; *store.Store implements it.
type Manifests interface {
	// WorkflowSources returns the sources spec configured for a workflow (JSON), or nil.
	WorkflowSources(ctx context.Context, workflowID string) (json.RawMessage, error)
	// CheckpointManifestRef names a checkpoint and whether a manifest was recorded with it.
	CheckpointManifestRef(ctx context.Context, checkpointID string) (store.ManifestRef, error)
	// Manifest returns the manifest recorded with ref's checkpoint (shared: not to be modified).
	Manifest(ctx context.Context, ref store.ManifestRef) (*drift.Manifest, error)
	// LatestWorkflowManifest returns the manifest of the workflow's newest checkpoint recorded
	// for root, or nil.
	LatestWorkflowManifest(ctx context.Context, workflowID, root string) (*drift.Manifest, error)
}

// Store is everything the engine needs of the storage.
type Store interface {
	Checkpoints
	Manifests
	Saga // validation checkpoints and the compensation log (engine/saga.go)
}

// Engine runs the use cases over one store. It keeps the newest-manifest cache and the drift
// watches of its process; it is safe for concurrent use.
type Engine struct {
	store Store
	log   *slog.Logger
	drift driftState // manifest cache and drift watches (engine/cache.go, engine/watch.go)
}

// New makes an Engine over st; log may be nil.
func New(st Store, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Engine{store: st, log: log}
}

// Manifest returns the manifest recorded with ref's checkpoint: store.ErrNotFound if none, a
// *store.CorruptError if it does not decode. Shared: do not modify it.
func (e *Engine) Manifest(ctx context.Context, ref store.ManifestRef) (*drift.Manifest, error) {
	return e.store.Manifest(ctx, ref)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
