// Package engine holds ckptd's use cases, written once and called by both the JSON-RPC server
// (package rpc) and the command line (cmd/ckptd): save a checkpoint with a fingerprint of its
// sources, plan a resume (gather -> drift -> decide), answer a checkpoint's drift status, and
// keep the drift watches. It composes the store (its contract: any backend), drift and resume
// packages, knows nothing of JSON-RPC, and answers in the protocol's shapes (package protocol;
// wire.go renders store nouns) where both callers print the same thing. It is also where
// source manifests cross between drift and the store (manifests.go): the store keeps them as
// opaque records, drift encodes and decodes them.
//
// Manifests are immutable. Two in-memory caches make repeated work incremental: the newest
// manifest seen per (workflow, root), from saves and checks, is the base of the next save's
// scan and the Last of the next check (only files whose stat data changed are re-hashed);
// the last few stored manifests decoded are kept by checkpoint (manifests.go). Both are accelerators only: any manifest
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

// Checkpoints is what the engine reads and queues of checkpoints; every store.Backend
// implements it.
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
	// StateBase returns a checkpoint's state as the base of a wire delta (engine/delta.go).
	StateBase(ctx context.Context, checkpointID string) (store.DeltaBase, error)
}

// Manifests is what the engine reads of source fingerprints: the manifests the store records
// (store.Manifests, decoded here) and the sources configured for a workflow. Every
// store.Backend implements it.
type Manifests interface {
	store.Manifests
	// WorkflowSources returns the sources spec configured for a workflow (JSON), or nil.
	WorkflowSources(ctx context.Context, workflowID string) (json.RawMessage, error)
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
	store     Store
	log       *slog.Logger
	drift     driftState    // manifest cache and drift watches (engine/cache.go, engine/watch.go)
	manifests manifestCache // stored manifests decoded (engine/manifests.go)
	noSources noSources     // workflows known to have no configured sources (engine/nosources.go)
}

// New makes an Engine over st; log may be nil.
func New(st Store, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Engine{store: st, log: log}
}

// Manifest returns the manifest recorded with ref's checkpoint: store.ErrNotFound if none, a
// *store.CorruptError if it is damaged. Shared: do not modify it.
func (e *Engine) Manifest(ctx context.Context, ref store.ManifestRef) (*drift.Manifest, error) {
	return e.manifests.load(ctx, e.store, ref)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
