package rpc

// Source drift: the sources param of checkpoint/save and workflow/configure (a drift.Spec,
// fingerprinted with every save and stored with the checkpoint), drift/status, drift/watch,
// drift/unwatch and the drift/changed notifications, and the drift part of resume/plan.
//
// Manifests are immutable. Two in-memory caches make repeated work incremental: the newest
// manifest seen per (workflow, root), from saves and checks, is the base of the next save's
// scan and the Last of the next check (only files whose stat data changed are re-hashed);
// decoded stored manifests are cached by the store. Both are accelerators only: any manifest
// of the tree gives the same answers, so a second process on the same database (an editor
// tool) answers drift/status and drift/watch from the stored manifest alone.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
)

const (
	// maxDriftWatches bounds the watches of one ckptd process: each is an inotify instance, and
	// Linux allows 128 per user by default (fs.inotify.max_user_instances).
	maxDriftWatches = 16
	// maxLastManifests bounds the newest-manifest cache (entries per workflow and root; a
	// 10,000-file tree takes a few MB).
	maxLastManifests = 16
	// fingerprintTimeout bounds the scan of a save's sources (and a drift check).
	fingerprintTimeout = 2 * time.Minute
	// watchSetupTimeout bounds the initial scan of drift/watch.
	watchSetupTimeout = 2 * time.Minute
	defaultDebounceMs = 50
	maxDebounceMs     = 60000
	// maxQueuedBatches bounds the drift/changed notifications waiting for a slow client; more
	// collapse into one rescan notification.
	maxQueuedBatches = 256
	// driftProblemPaths is how many paths a resume/plan drift problem names.
	driftProblemPaths = 5
)

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
	Watched      bool              `json:"watched,omitempty"` // answered from an active drift/watch
}

// DriftChangedEvent is the drift/changed notification.
type DriftChangedEvent struct {
	WatchID      string         `json:"watchId"`
	CheckpointID string         `json:"checkpointId"`
	Changes      []drift.Change `json:"changes"`
	Drifted      bool           `json:"drifted"`
	Rescan       bool           `json:"rescan,omitempty"`
	Reason       string         `json:"reason,omitempty"`
}

// driftState is the Server's drift bookkeeping.
type driftState struct {
	mu      sync.Mutex
	last    map[lastKey]*lastManifest
	lastSeq uint64
	watches map[string]*driftWatch
	pending int // watches being set up, counted against maxDriftWatches
	closed  bool
	nextID  uint64
}

type lastKey struct{ workflowID, root string }

// lastManifest is the newest manifest seen of a tree, and the newest encoding saved of it.
type lastManifest struct {
	m    *drift.Manifest
	enc  *store.EncodedManifest
	used uint64
}

func (d *driftState) lastFor(k lastKey) (*drift.Manifest, *store.EncodedManifest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.last[k]
	if l == nil {
		return nil, nil
	}
	d.lastSeq++
	l.used = d.lastSeq
	return l.m, l.enc
}

// remember records m (and its encoding, if enc is not nil) as the newest manifest of k.
func (d *driftState) remember(k lastKey, m *drift.Manifest, enc *store.EncodedManifest) {
	if m == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		d.last = map[lastKey]*lastManifest{}
	}
	d.lastSeq++
	l := d.last[k]
	if l == nil {
		l = &lastManifest{}
		d.last[k] = l
	}
	l.m, l.used = m, d.lastSeq
	if enc != nil {
		l.enc = enc
	}
	for len(d.last) > maxLastManifests { // evict the least recently used
		var oldest lastKey
		first := true
		for key, v := range d.last {
			if first || v.used < d.last[oldest].used {
				oldest, first = key, false
			}
		}
		delete(d.last, oldest)
	}
}

// --- sources params ------------------------------------------------------------------------

var specFieldRe = regexp.MustCompile(`\b(include|exclude)\[\d+\]`)

// parseSources decodes and validates a sources param (field names it in errors). The root must
// be an existing directory; a relative root is taken relative to ckptd's working directory and
// returned absolute.
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
	if err := spec.Validate(); err != nil {
		return drift.Spec{}, specError(field, spec.Root, err)
	}
	if abs, err := filepath.Abs(spec.Root); err == nil {
		spec.Root = abs
	}
	return spec, nil
}

// specError maps a drift spec error to -32602 naming the sources field at fault.
func specError(field, root string, err error) *jsonrpc2.Error {
	msg := err.Error()
	switch {
	case errors.Is(err, drift.ErrRootNotFound):
		return invalidParams(field+".root", fmt.Sprintf("directory %s does not exist", quote(root)))
	case errors.Is(err, drift.ErrRootNotDir):
		return invalidParams(field+".root", fmt.Sprintf("%s is not a directory", quote(root)))
	case errors.Is(err, drift.ErrInvalidSpec):
		reason := strings.TrimPrefix(msg, drift.ErrInvalidSpec.Error()+": ")
		if m := specFieldRe.FindString(reason); m != "" {
			return invalidParams(field+"."+m, reason)
		}
		if strings.HasPrefix(reason, "root") {
			if strings.TrimSpace(root) == "" {
				return invalidParams(field+".root", "required")
			}
			return invalidParams(field+".root", reason)
		}
		return invalidParams(field, reason)
	}
	return invalidParams(field+".root", msg)
}

// fingerprintForSave fingerprints the sources of a save (its sources param, else the sources
// configured for its workflow) and sets req.Manifest. It runs before the save is queued, while
// the next mutation waits: saves of a workflow stay ordered and scan incrementally.
func (s *Server) fingerprintForSave(ctx context.Context, c *call, req *store.SaveRequest) (*SourcesInfo, *jsonrpc2.Error) {
	raw, configured := c.sources, false
	if jsonKind(raw) == 0 {
		cfg, err := s.store.WorkflowSources(ctx, req.WorkflowID)
		if err != nil {
			return nil, storeError(err)
		}
		if cfg == nil {
			return nil, nil
		}
		raw, configured = cfg, true
	}
	spec, perr := parseSources("sources", raw)
	if perr != nil {
		if !configured {
			return nil, perr
		}
		// The configured tree is gone (or the config is bad): never refuse the agent's save.
		s.log.Warn("configured sources cannot be fingerprinted; saving without", "workflowId", req.WorkflowID, "error", perr.Message)
		return &SourcesInfo{Root: spec.Root, Error: perr.Message}, nil
	}
	t0 := time.Now()
	key := lastKey{req.WorkflowID, spec.Root}
	prev, prevEnc := s.drift.lastFor(key)
	if prev == nil {
		var err error
		if prev, err = s.store.LatestWorkflowManifest(ctx, req.WorkflowID, spec.Root); err != nil {
			s.log.Warn("cannot read the previous source manifest; scanning from scratch", "workflowId", req.WorkflowID, "error", err)
			prev = nil
		}
	}
	sctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
	defer cancel()
	opt := drift.ScanOptions{Logger: s.log}
	var m *drift.Manifest
	var err error
	if prev != nil {
		_, m, err = drift.Check(sctx, spec, prev, drift.CheckOptions{ScanOptions: opt})
	} else {
		m, err = drift.Scan(sctx, spec, nil, opt)
	}
	if err != nil {
		perr := fingerprintError("sources", spec.Root, err)
		if configured { // never refuse the agent's save for its configured sources
			s.log.Warn("configured sources cannot be fingerprinted; saving without", "workflowId", req.WorkflowID, "error", perr.Message)
			return &SourcesInfo{Root: spec.Root, Error: perr.Message}, nil
		}
		return nil, perr
	}
	enc, err := store.EncodeManifest(m, prevEnc)
	if err != nil {
		return nil, rpcError(CodeInternal, "internal error: "+err.Error(), nil)
	}
	s.drift.remember(key, m, enc)
	req.Manifest = enc
	return &SourcesInfo{Root: spec.Root, Files: enc.Files(), ElapsedMs: ms(time.Since(t0)), Warnings: m.Warnings}, nil
}

// fingerprintError maps a scan/check failure.
func fingerprintError(field, root string, err error) *jsonrpc2.Error {
	switch {
	case errors.Is(err, drift.ErrRootNotFound), errors.Is(err, drift.ErrRootNotDir), errors.Is(err, drift.ErrInvalidSpec):
		return specError(field, root, err)
	case errors.Is(err, context.DeadlineExceeded):
		return rpcError(CodeUnavailable, fmt.Sprintf("fingerprinting %s took longer than %v", root, fingerprintTimeout),
			map[string]string{"reason": err.Error()})
	}
	return rpcError(CodeUnavailable, fmt.Sprintf("fingerprinting %s: %v", root, err), map[string]string{"reason": err.Error()})
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
		return nil, false, rpcError(CodeInternal, "internal error: "+err.Error(), nil)
	}
	return b, false, nil
}

// --- drift/status --------------------------------------------------------------------------

// driftTarget resolves the checkpoint named by p and loads its manifest.
func (s *Server) driftTarget(ctx context.Context, p DriftTargetParams) (store.ManifestRef, *drift.Manifest, *jsonrpc2.Error) {
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
	base, err := s.store.Manifest(ctx, ref)
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
	var p DriftTargetParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	ref, base, perr := s.driftTarget(ctx, p)
	if perr != nil {
		return reply{}, perr
	}
	st, err := s.checkpointDrift(ctx, ref, base)
	if err != nil {
		return reply{}, fingerprintError("sources", base.Spec.Root, err)
	}
	return reply{result: st}, nil
}

// checkpointDrift answers drift/status for a checkpoint: from an active watch on it if there is
// one, else by drift.Check against its manifest.
func (s *Server) checkpointDrift(ctx context.Context, ref store.ManifestRef, base *drift.Manifest) (DriftStatus, error) {
	if w := s.watchOn(ref.Rowid); w != nil {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rep, err := w.w.Status(wctx)
		cancel()
		if err == nil {
			st := NewDriftStatus(ref, base.Spec.Root, rep)
			st.Watched = true
			return st, nil
		}
		s.log.Debug("drift watch status failed; checking instead", "watchId", w.id, "error", err)
	}
	key := lastKey{ref.WorkflowID, base.Spec.Root}
	last, _ := s.drift.lastFor(key)
	cctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
	defer cancel()
	rep, cur, err := CheckDrift(cctx, base, last, s.log)
	if err != nil {
		return DriftStatus{}, err
	}
	s.drift.remember(key, cur, nil)
	return NewDriftStatus(ref, base.Spec.Root, rep), nil
}

// CheckDrift compares the tree with base, using last (optional) as a newer manifest of it so
// that files which drifted long ago are not re-hashed. A root that no longer exists (or is no
// longer a directory) is reported as every file deleted, with a warning; the returned
// manifest is then nil.
func CheckDrift(ctx context.Context, base, last *drift.Manifest, log *slog.Logger) (drift.Report, *drift.Manifest, error) {
	if last != nil && last.Spec.Root != base.Spec.Root {
		last = nil
	}
	rep, cur, err := drift.Check(ctx, base.Spec, base, drift.CheckOptions{ScanOptions: drift.ScanOptions{Logger: log}, Last: last})
	if errors.Is(err, drift.ErrRootNotFound) || errors.Is(err, drift.ErrRootNotDir) {
		t0 := time.Now()
		rep = drift.Diff(base, &drift.Manifest{})
		rep.Warnings = []string{fmt.Sprintf("source root %s no longer exists or is not a directory", base.Spec.Root)}
		rep.Elapsed = time.Since(t0)
		return rep, nil, nil
	}
	return rep, cur, err
}

// NewDriftStatus turns a drift report on ref's checkpoint into the protocol's shape.
func NewDriftStatus(ref store.ManifestRef, root string, rep drift.Report) DriftStatus {
	conv := func(fcs []drift.FileChange) []DriftFileChange {
		out := make([]DriftFileChange, 0, len(fcs))
		for _, fc := range fcs {
			d := DriftFileChange{Path: fc.Path, OldSize: fc.OldSize, NewSize: fc.NewSize}
			if len(fc.OldHash) > 0 {
				d.OldHash = fc.OldHash.String()
			}
			if len(fc.NewHash) > 0 {
				d.NewHash = fc.NewHash.String()
			}
			if fc.OldType != 0 {
				d.OldType, d.OldMode = fc.OldType.String(), fmt.Sprintf("%04o", fc.OldMode)
			}
			if fc.NewType != 0 {
				d.NewType, d.NewMode = fc.NewType.String(), fmt.Sprintf("%04o", fc.NewMode)
			}
			out = append(out, d)
		}
		return out
	}
	return DriftStatus{
		CheckpointID: ref.CheckpointID,
		WorkflowID:   ref.WorkflowID,
		Namespace:    ref.Namespace,
		Root:         root,
		Drifted:      rep.Drifted,
		Changed:      conv(rep.Changed),
		Added:        conv(rep.Added),
		Deleted:      conv(rep.Deleted),
		FilesChecked: rep.FilesChecked,
		ElapsedMs:    ms(rep.Elapsed),
		FullScan:     rep.FullScan,
		Reason:       rep.Reason,
		Warnings:     rep.Warnings,
	}
}

// DriftProblem is the message of resume/plan's drift problem ("" when st did not drift).
func DriftProblem(st DriftStatus) string {
	if !st.Drifted {
		return ""
	}
	var paths []string
	for _, l := range []struct {
		kind string
		fcs  []DriftFileChange
	}{{"changed", st.Changed}, {"added", st.Added}, {"deleted", st.Deleted}} {
		for _, fc := range l.fcs {
			paths = append(paths, fc.Path+" ("+l.kind+")")
		}
	}
	n := len(paths)
	more := ""
	if n > driftProblemPaths {
		more = fmt.Sprintf(" and %d more", n-driftProblemPaths)
		paths = paths[:driftProblemPaths]
	}
	return fmt.Sprintf("sources under %s changed since checkpoint %s was saved: %d changed, %d added, %d deleted: %s%s",
		st.Root, st.CheckpointID, len(st.Changed), len(st.Added), len(st.Deleted), strings.Join(paths, ", "), more)
}

// planDrift is resume/plan's drift check of the checkpoint it plans from: nil and "" when no
// sources were recorded with it; otherwise the status and, if it drifted (or could not be
// checked), the problem message.
func (s *Server) planDrift(ctx context.Context, checkpointID string) (*DriftStatus, string) {
	ref, err := s.store.CheckpointManifestRef(ctx, checkpointID)
	if err != nil || !ref.HasManifest {
		return nil, ""
	}
	base, err := s.store.Manifest(ctx, ref)
	if err != nil {
		return nil, "could not read the sources recorded with checkpoint " + checkpointID + ": " + err.Error()
	}
	st, err := s.checkpointDrift(ctx, ref, base)
	if err != nil {
		return nil, fmt.Sprintf("could not check the sources under %s for drift: %v", base.Spec.Root, err)
	}
	return &st, DriftProblem(st)
}

// --- drift/watch ---------------------------------------------------------------------------

// driftWatch is one drift/watch: a drift.Watcher and the goroutine that forwards its batches
// as drift/changed notifications once the drift/watch reply is out.
type driftWatch struct {
	id    string
	s     *Server
	ref   store.ManifestRef
	w     *drift.Watcher
	first bool // the watcher's first (initial scan) batch is still to come; watcher goroutine only

	mu    sync.Mutex
	queue []DriftChangedEvent
	wake  chan struct{}

	ready     chan struct{} // closed once the drift/watch reply was sent
	stop      chan struct{}
	done      chan struct{} // closed when the forwarding goroutine has exited
	readyOnce sync.Once
	stopOnce  sync.Once
}

// emit is the watcher's callback: it queues and never blocks.
func (dw *driftWatch) emit(b drift.Batch) {
	if dw.first {
		dw.first = false
		if b.Rescan && len(b.Changes) == 0 && !b.Drifted && b.Reason == "initial scan" {
			return // "nothing drifted when the watch started": the reply said enough
		}
	}
	ev := DriftChangedEvent{WatchID: dw.id, CheckpointID: dw.ref.CheckpointID, Changes: b.Changes,
		Drifted: b.Drifted, Rescan: b.Rescan, Reason: b.Reason}
	if ev.Changes == nil {
		ev.Changes = []drift.Change{}
	}
	dw.mu.Lock()
	if len(dw.queue) >= maxQueuedBatches {
		dw.queue = append(dw.queue[:0], DriftChangedEvent{WatchID: dw.id, CheckpointID: dw.ref.CheckpointID,
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
			dw.s.notifyAlways(NotifyDriftChanged, ev)
		}
		select {
		case <-dw.wake:
		case <-dw.stop:
			return
		}
	}
}

// close stops the watch: no notification for it is sent once close returns (unless the client
// does not read and wait expires).
func (dw *driftWatch) close(wait time.Duration) {
	dw.stopOnce.Do(func() {
		_ = dw.w.Close() // no emit after this
		close(dw.stop)
	})
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
	conn := s.conn
	s.mu.Unlock()
	if conn == nil {
		return
	}
	if err := conn.Notify(context.Background(), method, params); err != nil && !errors.Is(err, jsonrpc2.ErrClosed) {
		s.log.Debug("notification not sent", "method", method, "error", err)
	}
}

// watchOn returns an active watch on checkpoint rowid, if any.
func (s *Server) watchOn(rowid int64) *driftWatch {
	s.drift.mu.Lock()
	defer s.drift.mu.Unlock()
	for _, w := range s.drift.watches {
		if w.ref.Rowid == rowid {
			return w
		}
	}
	return nil
}

func (s *Server) driftWatch(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p DriftWatchParams
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
	ref, base, perr := s.driftTarget(ctx, p.DriftTargetParams)
	if perr != nil {
		return reply{}, perr
	}

	d := &s.drift
	d.mu.Lock()
	switch {
	case d.closed:
		d.mu.Unlock()
		return reply{}, rpcError(CodeShuttingDown, "shutting down: no new watches", nil)
	case len(d.watches)+d.pending >= maxDriftWatches:
		n := len(d.watches) + d.pending
		d.mu.Unlock()
		return reply{}, rpcError(CodeTooLarge, fmt.Sprintf("too many drift watches: %d active, at most %d per ckptd process (drift/unwatch one first)",
			n, maxDriftWatches), map[string]any{"limit": maxDriftWatches, "size": n + 1, "what": "drift watches"})
	}
	d.pending++
	d.nextID++
	id := "w-" + strconv.FormatUint(d.nextID, 10)
	d.mu.Unlock()
	unreserve := func() {
		d.mu.Lock()
		d.pending--
		d.mu.Unlock()
	}

	dw := &driftWatch{id: id, s: s, ref: ref, first: true, wake: make(chan struct{}, 1),
		ready: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	sctx, cancel := context.WithTimeout(context.Background(), watchSetupTimeout)
	w, err := drift.Watch(sctx, base.Spec, base, drift.WatchOptions{Debounce: time.Duration(debounce) * time.Millisecond, Logger: s.log}, dw.emit)
	cancel()
	if err != nil {
		unreserve()
		if errors.Is(err, drift.ErrRootNotFound) || errors.Is(err, drift.ErrRootNotDir) || errors.Is(err, drift.ErrInvalidSpec) {
			return reply{}, invalidParams("sources.root", fmt.Sprintf("the sources of checkpoint %s cannot be watched: %v", ref.CheckpointID, err))
		}
		hint := ""
		if strings.Contains(err.Error(), "too many open files") {
			hint = " (inotify instances per user: fs.inotify.max_user_instances)"
		}
		return reply{}, rpcError(CodeUnavailable, fmt.Sprintf("cannot watch %s: %v%s", base.Spec.Root, err, hint), map[string]string{"reason": err.Error()})
	}
	dw.w = w
	go dw.forward()

	d.mu.Lock()
	d.pending--
	if d.closed {
		d.mu.Unlock()
		dw.close(time.Second)
		return reply{}, rpcError(CodeShuttingDown, "shutting down: no new watches", nil)
	}
	if d.watches == nil {
		d.watches = map[string]*driftWatch{}
	}
	d.watches[id] = dw
	d.mu.Unlock()
	s.log.Debug("drift watch started", "watchId", id, "checkpointId", ref.CheckpointID, "root", base.Spec.Root)
	return reply{
		result: DriftWatchResult{WatchID: id, CheckpointID: ref.CheckpointID, Root: base.Spec.Root},
		after:  func() { dw.readyOnce.Do(func() { close(dw.ready) }) },
	}, nil
}

func (s *Server) driftUnwatch(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p DriftUnwatchParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if p.WatchID == "" {
		return reply{}, invalidParams("watchId", "required")
	}
	s.drift.mu.Lock()
	dw := s.drift.watches[p.WatchID]
	delete(s.drift.watches, p.WatchID)
	s.drift.mu.Unlock()
	if dw == nil {
		return reply{}, rpcError(CodeNotFound, "no drift watch "+quote(p.WatchID)+" (unknown, or already unwatched)", map[string]string{"watchId": p.WatchID})
	}
	dw.close(5 * time.Second)
	return reply{result: struct{}{}}, nil
}

// closeWatches ends every watch (the connection is closing) and refuses new ones.
func (s *Server) closeWatches() {
	s.drift.mu.Lock()
	s.drift.closed = true
	ws := s.drift.watches
	s.drift.watches = nil
	s.drift.mu.Unlock()
	for _, dw := range ws {
		dw.close(2 * time.Second)
	}
}
