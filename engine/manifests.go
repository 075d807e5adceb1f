package engine

// Source manifests between drift and the store: drift puts a manifest in storage form
// (drift.EncodeManifest) and reads it back (drift.DecodeStored); the store keeps that form as an
// opaque record (store.ManifestRecord) and never decodes it.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
)

// ManifestRecord is em as the store keeps it (sharing its bytes).
func ManifestRecord(em *drift.EncodedManifest) *store.ManifestRecord {
	r := &store.ManifestRecord{Root: em.Root(), Files: em.Files(), Header: em.Header,
		Chunks: make([]store.ManifestChunk, len(em.Chunks))}
	for i, c := range em.Chunks {
		r.Chunks[i] = store.ManifestChunk(c)
	}
	return r
}

// DecodeManifest decodes a stored record, checking every content address. Damage is a
// *store.CorruptError naming ref's checkpoint.
func DecodeManifest(ref store.ManifestRef, rec store.ManifestRecord) (*drift.Manifest, error) {
	m, err := decodeRecord(rec)
	if err != nil {
		return nil, &store.CorruptError{CheckpointID: ref.CheckpointID, WorkflowID: ref.WorkflowID, Reason: err.Error()}
	}
	return m, nil
}

func decodeRecord(rec store.ManifestRecord) (*drift.Manifest, error) {
	chunks := make([]drift.StoredChunk, len(rec.Chunks))
	for i, c := range rec.Chunks {
		chunks[i] = drift.StoredChunk(c)
	}
	return drift.DecodeStored(rec.Header, chunks)
}

// ExportManifests decodes the manifests of exported checkpoints (store.Archive.Export), for an
// archive: each is called with a checkpoint and its manifest (nil without one).
func ExportManifests(each func(store.Checkpoint, *drift.Manifest) error) func(store.Checkpoint) error {
	return func(cp store.Checkpoint) error {
		if cp.Manifest == nil {
			return each(cp, nil)
		}
		m, err := decodeRecord(*cp.Manifest)
		if err != nil {
			return &store.CorruptError{CheckpointID: cp.CheckpointID, WorkflowID: cp.WorkflowID, Reason: err.Error()}
		}
		return each(cp, m)
	}
}

// Sourced is a checkpoint with the drift manifest recorded for it (nil without one), as an
// archive carries it.
type Sourced struct {
	store.Checkpoint
	Sources *drift.Manifest
}

// ImportManifests turns sourced checkpoints into what store.Archive.Import takes: each manifest
// checked (a manifest from outside must be sound: store.InvalidError on field "manifest") and put
// in storage form, consecutive manifests of a tree sharing their unchanged entries' encodings.
func ImportManifests(cps iter.Seq2[Sourced, error]) iter.Seq2[store.Checkpoint, error] {
	return func(yield func(store.Checkpoint, error) bool) {
		var prev *drift.EncodedManifest
		for sc, err := range cps {
			cp := sc.Checkpoint
			if err == nil && sc.Sources != nil {
				if err = sc.Sources.Validate(); err == nil {
					var em *drift.EncodedManifest
					if em, err = drift.EncodeManifest(sc.Sources, prev); err == nil {
						cp.Manifest, prev = ManifestRecord(em), em
					}
				}
				if err != nil {
					err = fmt.Errorf("checkpoint %q: %w", cp.CheckpointID, store.Invalid("manifest", "%v", err))
				}
			}
			if !yield(cp, err) || err != nil {
				return
			}
		}
	}
}

// manifestCache keeps the last few stored manifests decoded, by checkpoint key (keys are never
// reused and manifests never change, so entries cannot go stale). Safe for concurrent use. The
// manifests it returns are shared: do not modify them.
type manifestCache struct {
	mu    sync.Mutex
	order []int64 // most recently used last
	byKey map[int64]*drift.Manifest
}

const manifestCacheSize = 4

// load returns the manifest recorded with ref's checkpoint: store.ErrNotFound if none, a
// *store.CorruptError if it is damaged.
func (c *manifestCache) load(ctx context.Context, st store.Manifests, ref store.ManifestRef) (*drift.Manifest, error) {
	if m := c.get(ref.Key); m != nil {
		return m, nil
	}
	rec, err := st.Manifest(ctx, ref)
	if err != nil {
		return nil, err
	}
	m, err := DecodeManifest(ref, rec)
	if err != nil {
		return nil, err
	}
	c.put(ref.Key, m)
	return m, nil
}

// latest returns the manifest of workflowID's most recent checkpoint (any namespace) recorded
// for root, or nil: the base of an incremental fingerprint.
func (c *manifestCache) latest(ctx context.Context, st store.Manifests, workflowID, root string) (*drift.Manifest, error) {
	ref, err := st.LatestSourcesRef(ctx, workflowID, root)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m, err := c.load(ctx, st, ref)
	if errors.Is(err, store.ErrNotFound) { // deleted meanwhile
		return nil, nil
	}
	return m, err
}

func (c *manifestCache) get(key int64) *drift.Manifest {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byKey[key]
	if m != nil {
		if i := slices.Index(c.order, key); i >= 0 {
			c.order = append(slices.Delete(c.order, i, i+1), key)
		}
	}
	return m
}

func (c *manifestCache) put(key int64, m *drift.Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok {
		return
	}
	if c.byKey == nil {
		c.byKey = map[int64]*drift.Manifest{}
	}
	c.byKey[key] = m
	c.order = append(c.order, key)
	for len(c.order) > manifestCacheSize {
		delete(c.byKey, c.order[0])
		c.order = c.order[1:]
	}
}
