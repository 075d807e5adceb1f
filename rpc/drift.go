package rpc

// Source drift: the sources param of checkpoint/save and workflow/configure (a drift.Spec,
// fingerprinted with every save and stored with the checkpoint), drift/status, drift/watch,
// drift/unwatch and the drift/changed notifications. What they do is package engine's
// (engine.Save, engine.DriftStatus, engine.Watch); here are their params, errors and the
// forwarding of drift/changed.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

const (
	defaultDebounceMs = 50
	maxDebounceMs     = 60000
	// maxQueuedBatches bounds the drift/changed notifications waiting for a slow client; more
	// collapse into one rescan notification.
	maxQueuedBatches = 256
)

// --- sources params ------------------------------------------------------------------------

// parseSources decodes and validates a sources param (field names it in errors). The root must
// be an existing directory; a relative root is taken relative to ckptd's working directory and
// returned absolute (engine.CheckSources).
func parseSources(field string, raw json.RawMessage) (drift.Spec, *jsonrpc2.Error) {
	if jsonKind(raw) != '{' {
		return drift.Spec{}, invalidParams(field, "must be an object {root, include?, exclude?, gitignore?}")
	}
	var spec drift.Spec
	if perr := checkParamKeys(raw, &spec, field+"."); perr != nil {
		return drift.Spec{}, perr
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return drift.Spec{}, invalidParams(field+"."+te.Field, fmt.Sprintf("expected %s, got JSON %s", goTypeName(te.Type.String()), te.Value))
		}
		return drift.Spec{}, invalidParams(field, err.Error())
	}
	spec, err := engine.CheckSources(field, spec)
	if err != nil {
		return drift.Spec{}, engineError(err)
	}
	return spec, nil
}

// saveSources is checkpoint/save's sources param for engine.Save: nil when absent (the
// workflow's configured sources, if any, are fingerprinted).
func saveSources(raw json.RawMessage) (*drift.Spec, *jsonrpc2.Error) {
	if jsonKind(raw) == 0 {
		return nil, nil
	}
	spec, perr := parseSources("sources", raw)
	if perr != nil {
		return nil, perr
	}
	return &spec, nil
}

// engineError maps an engine error onto the protocol's error codes (store errors as storeError).
func engineError(err error) *jsonrpc2.Error {
	var se *engine.SourcesError
	var ue *engine.UnavailableError
	var tm *engine.TooManyWatchesError
	switch {
	case errors.As(err, &se):
		return invalidParams(se.Field, se.Reason)
	case errors.As(err, &ue) && ue.Limit != nil:
		return rpcError(protocol.CodeUnavailable, ue.Msg, map[string]any{"reason": ue.Err.Error(), "limit": ue.Limit.Limit, "value": ue.Limit.Value})
	case errors.As(err, &ue):
		return rpcError(protocol.CodeUnavailable, ue.Msg, map[string]string{"reason": ue.Err.Error()})
	case errors.As(err, &tm):
		return rpcError(protocol.CodeTooLarge, err.Error(), map[string]any{"limit": tm.Limit, "size": tm.Active + 1, "what": "drift watches"})
	case errors.Is(err, engine.ErrWatchesClosed):
		return rpcError(protocol.CodeShuttingDown, err.Error(), nil)
	}
	return storeError(err)
}

// configureSources validates workflow/configure's sources param: the spec to store (root made
// absolute), or remove=true for an explicit null.
func configureSources(raw json.RawMessage) (spec json.RawMessage, remove bool, perr *jsonrpc2.Error) {
	if len(raw) == 0 {
		return nil, false, nil
	}
	if jsonKind(raw) == 0 { // null
		return nil, true, nil
	}
	sp, perr := parseSources("sources", raw)
	if perr != nil {
		return nil, false, perr
	}
	b, err := json.Marshal(sp)
	if err != nil {
		return nil, false, rpcError(protocol.CodeInternal, "internal error: "+err.Error(), nil)
	}
	return b, false, nil
}

// --- drift/status --------------------------------------------------------------------------

// driftTarget resolves the checkpoint named by p and loads its manifest.
func (s *Server) driftTarget(ctx context.Context, p protocol.DriftTargetParams) (store.ManifestRef, *drift.Manifest, *jsonrpc2.Error) {
	var ref store.ManifestRef
	var err error
	field, value := "checkpointId", p.CheckpointID
	switch {
	case p.CheckpointID != "" && p.WorkflowID != "":
		return ref, nil, invalidParams("checkpointId", "give either checkpointId or workflowId, not both")
	case p.CheckpointID != "":
		if perr := requireID("checkpointId", p.CheckpointID, maxCheckpointIDBytes); perr != nil {
			return ref, nil, perr
		}
		ref, err = s.store.CheckpointManifestRef(ctx, p.CheckpointID)
	case p.WorkflowID != "":
		if perr := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); perr != nil {
			return ref, nil, perr
		}
		field, value = "workflowId", p.WorkflowID
		ref, err = s.store.LatestManifestRef(ctx, p.WorkflowID, p.Namespace)
	default:
		return ref, nil, invalidParams("checkpointId", "required (or workflowId)")
	}
	if err != nil {
		return ref, nil, storeErrorWith(err, field, value)
	}
	if !ref.HasManifest {
		what := "checkpoint " + quote(ref.CheckpointID)
		if field == "workflowId" {
			what += " (the latest of workflow " + quote(ref.WorkflowID) + ")"
		}
		return ref, nil, invalidParams(field, "no sources recorded for "+what+
			": save it with sources, or set them with workflow/configure")
	}
	base, err := s.engine.Manifest(ctx, ref)
	if err != nil {
		var ce *store.CorruptError
		if errors.As(err, &ce) {
			s.reportCorrupt(ref.WorkflowID, ce)
		}
		return ref, nil, storeErrorWith(err, field, value)
	}
	return ref, base, nil
}

func (s *Server) driftStatus(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.DriftStatusParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := engine.CheckLimits(p.Limits); err != nil {
		return reply{}, engineError(err)
	}
	root, err := engine.CheckSourcesRoot("sourcesRoot", p.SourcesRoot)
	if err != nil {
		return reply{}, engineError(err)
	}
	ref, base, perr := s.driftTarget(ctx, p.DriftTargetParams)
	if perr != nil {
		return reply{}, perr
	}
	st, err := s.engine.DriftStatusAt(ctx, ref, base, p.Limits, root)
	if err != nil {
		return reply{}, engineError(err)
	}
	return reply{result: st}, nil
}

// --- drift/watch ---------------------------------------------------------------------------

// driftWatch is the transport of one drift/watch (engine.Watch): the goroutine that forwards its
// batches as drift/changed notifications once the drift/watch reply is out.
type driftWatch struct {
	id    string
	s     *Server
	ref   store.ManifestRef
	first bool // the watcher's first (initial scan) batch is still to come; watcher goroutine only

	mu    sync.Mutex
	queue []protocol.DriftChangedEvent
	wake  chan struct{}

	ready     chan struct{} // closed once the drift/watch reply was sent
	stop      chan struct{}
	done      chan struct{} // closed when the forwarding goroutine has exited
	readyOnce sync.Once
	stopOnce  sync.Once
}

func newDriftWatch(s *Server, id string, ref store.ManifestRef) *driftWatch {
	dw := &driftWatch{id: id, s: s, ref: ref, first: true, wake: make(chan struct{}, 1),
		ready: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go dw.forward()
	return dw
}

// Batch is the watcher's callback (engine.WatchSink): it queues and never blocks.
func (dw *driftWatch) Batch(b drift.Batch) {
	if dw.first {
		dw.first = false
		if b.Rescan && len(b.Changes) == 0 && !b.Drifted && b.Reason == "initial scan" {
			return // "nothing drifted when the watch started": the reply said enough
		}
	}
	ev := protocol.DriftChangedEvent{WatchID: dw.id, CheckpointID: dw.ref.CheckpointID, Changes: b.Changes,
		Drifted: b.Drifted, Rescan: b.Rescan, Reason: b.Reason, Stopped: b.Stopped}
	if ev.Changes == nil {
		ev.Changes = []drift.Change{}
	}
	dw.mu.Lock()
	if len(dw.queue) >= maxQueuedBatches {
		dw.queue = append(dw.queue[:0], protocol.DriftChangedEvent{WatchID: dw.id, CheckpointID: dw.ref.CheckpointID,
			Changes: []drift.Change{}, Drifted: b.Drifted, Rescan: true,
			Reason: "notifications dropped: the client is not reading them; call drift/status for the current state"})
	} else {
		dw.queue = append(dw.queue, ev)
	}
	dw.mu.Unlock()
	select {
	case dw.wake <- struct{}{}:
	default:
	}
}

func (dw *driftWatch) forward() {
	defer close(dw.done)
	select {
	case <-dw.ready:
	case <-dw.stop:
		return
	}
	for {
		dw.mu.Lock()
		q := dw.queue
		dw.queue = nil
		dw.mu.Unlock()
		for _, ev := range q {
			select {
			case <-dw.stop:
				return
			default:
			}
			dw.s.notifyAlways(protocol.NotifyDriftChanged, ev)
		}
		select {
		case <-dw.wake:
		case <-dw.stop:
			return
		}
	}
}

// Stop stops forwarding (engine.WatchSink; the watcher is closed already): no notification for
// the watch is sent once Stop returns (unless the client does not read and wait expires).
func (dw *driftWatch) Stop(wait time.Duration) {
	dw.stopOnce.Do(func() { close(dw.stop) })
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-dw.done:
	case <-t.C:
		dw.s.log.Warn("drift watch: a notification is still being written", "watchId", dw.id)
	}
}

// notifyAlways sends a notification that needs no initialize opt-in (drift/changed: the client
// asked for it with drift/watch).
func (s *Server) notifyAlways(method string, params any) {
	s.mu.Lock()
	out := s.out
	s.mu.Unlock()
	if out == nil {
		return
	}
	if err := s.codec.Notify(out, method, params); err != nil {
		s.log.Debug("notification not sent", "method", method, "error", err)
	}
}

func (s *Server) driftWatch(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.DriftWatchParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	debounce := defaultDebounceMs
	if p.DebounceMs != nil {
		if *p.DebounceMs < 1 || *p.DebounceMs > maxDebounceMs {
			return reply{}, invalidParams("debounceMs", fmt.Sprintf("must be between 1 and %d", maxDebounceMs))
		}
		debounce = *p.DebounceMs
	}
	if err := engine.CheckLimits(p.Limits); err != nil {
		return reply{}, engineError(err)
	}
	ref, base, perr := s.driftTarget(ctx, p.DriftTargetParams)
	if perr != nil {
		return reply{}, perr
	}
	var dw *driftWatch
	w, err := s.engine.Watch(ctx, ref, base, p.Limits, time.Duration(debounce)*time.Millisecond, func(id string) engine.WatchSink {
		dw = newDriftWatch(s, id, ref)
		return dw
	})
	if err != nil {
		return reply{}, engineError(err)
	}
	s.log.Debug("drift watch started", "watchId", w.ID, "checkpointId", ref.CheckpointID, "root", w.Root)
	return reply{
		result: protocol.DriftWatchResult{WatchID: w.ID, CheckpointID: ref.CheckpointID, Root: w.Root},
		after:  func() { dw.readyOnce.Do(func() { close(dw.ready) }) },
	}, nil
}

func (s *Server) driftUnwatch(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.DriftUnwatchParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if p.WatchID == "" {
		return reply{}, invalidParams("watchId", "required")
	}
	if !s.engine.Unwatch(p.WatchID, 5*time.Second) {
		return reply{}, rpcError(protocol.CodeNotFound, "no drift watch "+quote(p.WatchID)+" (unknown, or already unwatched)", map[string]string{"watchId": p.WatchID})
	}
	return reply{result: struct{}{}}, nil
}
