package engine

import (
	"context"
	"time"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// The scans of a save's sources, of a drift check and of a watch are bounded by the
// drift.Limits of the sources (sources.limits, else the drift defaults), checked while files are
// hashed, and end as soon as their context is cancelled.

// Save stores a checkpoint with a fingerprint of its sources: sources (checked with
// CheckSources), or when nil the sources configured for its workflow. It fingerprints them
// before the save is queued, queues the save, calls queued (if not nil: the caller may let its
// next mutation go ahead; saves of a workflow stay ordered and each one's incremental scan
// builds on the previous one's), and waits for the commit.
//
// The returned SourcesInfo describes the fingerprint recorded (nil when none was, or when the
// save repeated an earlier identical one: the first save's fingerprint stands). Configured
// sources that cannot be fingerprinted never refuse the save: it is stored without, and
// SourcesInfo.Error says why. A ctx cancelled before the save is queued returns ctx's error and
// stores nothing; once queued, the save is committed and waited for whatever happens to ctx.
// Errors: *SourcesError and *UnavailableError for given sources, and the store's errors.
func (e *Engine) Save(ctx context.Context, req store.SaveRequest, sources *drift.Spec, queued func()) (store.SaveResult, *protocol.SourcesInfo, error) {
	info, err := e.fingerprint(ctx, &req, sources)
	if err != nil {
		return store.SaveResult{}, nil, err
	}
	if err := ctx.Err(); err != nil { // cancelled during the scan: nothing is queued
		return store.SaveResult{}, nil, err
	}
	pending := e.store.Enqueue(req)
	if queued != nil {
		queued()
	}
	// Queued: committed whatever happens to the request or the client from here on.
	res, err := pending.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return res, nil, err
	}
	if res.Existing {
		info = nil // an idempotent repeat: the first save's fingerprint stands
	}
	if res.ConfiguredSources != nil { // configured by another process while we assumed none
		e.noSources.forget(req.WorkflowID)
		info = &protocol.SourcesInfo{Error: "the workflow's sources were configured (by another process) while this save was " +
			"queued: it is stored without a source fingerprint; the next save has one"}
		if sp, err := parseSources("sources", res.ConfiguredSources); err == nil {
			info.Root = sp.Root
		}
		e.log.Warn("sources configured while a save was queued; saved without a fingerprint", "workflowId", req.WorkflowID)
	}
	return res, info, nil
}

// fingerprint fingerprints the sources of a save (spec, else the sources configured for its
// workflow) and sets req.Manifest.
func (e *Engine) fingerprint(ctx context.Context, req *store.SaveRequest, spec *drift.Spec) (*protocol.SourcesInfo, error) {
	configured := spec == nil
	if configured {
		if e.noSources.has(req.WorkflowID) {
			req.AssumeNoSources = true // checked in the save's transaction
			return nil, nil
		}
		gen := e.noSources.generation()
		cfg, err := e.store.WorkflowSources(ctx, req.WorkflowID)
		if err != nil {
			return nil, err
		}
		if cfg == nil {
			e.noSources.add(req.WorkflowID, gen)
			req.AssumeNoSources = true // this read's snapshot may be older than the save's
			return nil, nil
		}
		sp, err := parseSources("sources", cfg)
		if err != nil {
			// The configured tree is gone (or the config is bad): never refuse the agent's save.
			e.log.Warn("configured sources cannot be fingerprinted; saving without", "workflowId", req.WorkflowID, "error", err.Error())
			return &protocol.SourcesInfo{Root: sp.Root, Error: err.Error()}, nil
		}
		spec = &sp
	}
	t0 := time.Now()
	key := lastKey{req.WorkflowID, spec.Root}
	prev, prevEnc := e.drift.lastFor(key)
	if prev == nil {
		var err error
		if prev, err = e.manifests.latest(ctx, e.store, req.WorkflowID, spec.Root); err != nil {
			if ctx.Err() != nil { // cancelled: no scan, nothing queued
				return nil, ctx.Err()
			}
			e.log.Warn("cannot read the previous source manifest; scanning from scratch", "workflowId", req.WorkflowID, "error", err)
			prev = nil
		}
	}
	opt := drift.ScanOptions{Logger: e.log}
	var m *drift.Manifest
	var err error
	if prev != nil {
		_, m, err = drift.Check(ctx, *spec, prev, drift.CheckOptions{ScanOptions: opt})
	} else {
		m, err = drift.Scan(ctx, *spec, nil, opt)
	}
	if err != nil {
		ferr := fingerprintError("sources", "sources.limits", spec.Root, err)
		if configured { // never refuse the agent's save for its configured sources
			e.log.Warn("configured sources cannot be fingerprinted; saving without", "workflowId", req.WorkflowID, "error", ferr.Error())
			return &protocol.SourcesInfo{Root: spec.Root, Error: ferr.Error()}, nil
		}
		return nil, ferr
	}
	enc, err := drift.EncodeManifest(m, prevEnc)
	if err != nil {
		return nil, err
	}
	e.drift.remember(key, m, enc)
	req.Manifest = ManifestRecord(enc)
	return &protocol.SourcesInfo{Root: spec.Root, Files: enc.Files(), ElapsedMs: ms(time.Since(t0)), Warnings: m.Warnings}, nil
}
