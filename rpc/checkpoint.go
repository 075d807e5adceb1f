package rpc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/jsonvalid"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk/delta"
)

const (
	maxWorkflowIDBytes   = 512
	maxCheckpointIDBytes = 256
	maxListLimit         = 10000
	defaultListLimit     = 100
)

func requireID(field, v string, max int) *jsonrpc2.Error {
	switch {
	case v == "":
		return invalidParams(field, "required")
	case len(v) > max:
		return invalidParams(field, fmt.Sprintf("longer than %d bytes", max))
	case !utf8.ValidString(v):
		return invalidParams(field, "not valid UTF-8")
	}
	return nil
}

// jsonKind returns the first byte of a JSON value (or 0 for absent/null).
func jsonKind(raw json.RawMessage) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0
	}
	return raw[0]
}

// optionalJSON checks an optional JSON param has the wanted shape ('[' array, '{' object).
func optionalJSON(field string, raw json.RawMessage, want byte) (json.RawMessage, *jsonrpc2.Error) {
	switch jsonKind(raw) {
	case 0:
		return nil, nil
	case want:
		return raw, nil
	}
	if want == '[' {
		return nil, invalidParams(field, "must be an array")
	}
	return nil, invalidParams(field, "must be an object")
}

// Bounds of checkpoint/save's params besides the state (docs/protocol.md, "Limits"): every field
// is bounded so that no request can make the daemon hold more than a small multiple of its
// frame.
const (
	maxNamespaceBytes    = 512
	maxStepNameBytes     = 1 << 10
	maxWorkflowHashBytes = 1 << 10
	maxErrorMessageBytes = 64 << 10
	maxMetadataBytes     = 1 << 20
	maxTasksBytes        = 16 << 20
)

// skipJSON records that a param was present without decoding or copying it: the handler takes
// the raw bytes from the params (topMembers) instead, so a large state is not copied.
type skipJSON struct{ present bool }

func (s *skipJSON) UnmarshalJSON([]byte) error { s.present = true; return nil }

// maxLen refuses a string or raw JSON param longer than max bytes.
func maxLen(field string, n, max int) *jsonrpc2.Error {
	if n > max {
		return invalidParams(field, fmt.Sprintf("%d bytes, longer than the %d allowed", n, max))
	}
	return nil
}

// saveRequest validates checkpoint/save params and the frame's attachment; validation is the
// save's validation param (rpc/compensation.go), if any.
func (s *Server) saveRequest(ctx context.Context, c *call) (req store.SaveRequest, validation *engine.ValidationInput, perr *jsonrpc2.Error) {
	req, perr = s.saveParams(ctx, c, &validation)
	return req, validation, perr
}

// stateDelta checks checkpoint/save's stateDelta param (its members' presence and form; what
// depends on the base is engine.ApplyStateDelta's).
func stateDelta(d *protocol.StateDelta, attachment bool) (engine.StateDelta, *jsonrpc2.Error) {
	if !attachment {
		return engine.StateDelta{}, invalidParams("stateDelta", "requires stateAttachment: true (the attachment holds the middle bytes)")
	}
	if d.BaseCheckpointID == nil {
		return engine.StateDelta{}, invalidParams("stateDelta.baseCheckpointId", "required")
	}
	if err := requireID("stateDelta.baseCheckpointId", *d.BaseCheckpointID, maxCheckpointIDBytes); err != nil {
		return engine.StateDelta{}, err
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"stateDelta.keepPrefix", d.KeepPrefix}, {"stateDelta.keepSuffix", d.KeepSuffix}} {
		if f.v == nil {
			return engine.StateDelta{}, invalidParams(f.name, "required")
		}
		if *f.v < 0 {
			return engine.StateDelta{}, invalidParams(f.name, fmt.Sprintf("%d is negative", *f.v))
		}
	}
	if d.SHA256 == nil {
		return engine.StateDelta{}, invalidParams("stateDelta.sha256", "required")
	}
	return engine.StateDelta{BaseCheckpointID: *d.BaseCheckpointID, KeepPrefix: *d.KeepPrefix, KeepSuffix: *d.KeepSuffix,
		SHA256: *d.SHA256}, nil
}

// applyDelta rebuilds the state of a save sent as a delta, mapping the engine's errors to the
// protocol's: a missing base -32001 naming it, a bad delta -32602 naming its field, a rebuilt
// state over --max-state-size -32004.
func (s *Server) applyDelta(ctx context.Context, d engine.StateDelta, middle []byte) (*engine.RebuiltState, *jsonrpc2.Error) {
	state, err := s.engine.ApplyStateDelta(ctx, d, middle, s.opts.MaxStateBytes)
	if err == nil {
		return state, nil
	}
	var de *delta.Error
	var tl *store.TooLargeError
	var ce *store.CorruptError
	switch {
	case errors.As(err, &de):
		return nil, invalidParams(de.Path(), de.Reason)
	case errors.As(err, &tl):
		return nil, rpcError(protocol.CodeTooLarge, fmt.Sprintf("state too large: %d bytes rebuilt from stateDelta, limit %d (--max-state-size)",
			tl.Size, tl.Limit), map[string]int64{"limit": tl.Limit, "size": tl.Size})
	case errors.As(err, &ce):
		s.reportCorrupt(ce.WorkflowID, ce)
	}
	return nil, storeErrorWith(err, "checkpointId", d.BaseCheckpointID)
}

func (s *Server) saveParams(ctx context.Context, c *call, validation **engine.ValidationInput) (store.SaveRequest, *jsonrpc2.Error) {
	// state and stateBase64 are not decoded into the struct (that would copy a state of up to
	// --max-state-size): the raw values are sub-slices of the frame body.
	var p struct {
		protocol.SaveParams
		State       skipJSON `json:"state"`
		StateBase64 skipJSON `json:"stateBase64"`
	}
	if err := decodeParams(c.params, &p); err != nil {
		return store.SaveRequest{}, err
	}
	raw := topMembers(c.params, "state", "stateBase64", "checkpointId")
	if p.WorkflowID == nil {
		return store.SaveRequest{}, invalidParams("workflowId", "required")
	}
	c.sources = p.Sources
	if err := requireID("workflowId", *p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return store.SaveRequest{}, err
	}
	token, perr := fencingToken(p.FencingToken)
	if perr != nil {
		return store.SaveRequest{}, perr
	}
	var verr *jsonrpc2.Error
	if *validation, verr = validationInput(p.Validation); verr != nil {
		return store.SaveRequest{}, verr
	}
	req := store.SaveRequest{
		FencingToken: token,
		WorkflowID:   *p.WorkflowID,
		Namespace:    p.Namespace,
		CheckpointID: p.CheckpointID,
		ParentID:     p.ParentID,
		Phase:        store.Phase(p.Phase),
		StepName:     p.StepName,
		WorkflowHash: p.WorkflowHash,
	}
	if p.CheckpointID != "" || bytes.Equal(raw["checkpointId"], []byte(`""`)) {
		if err := requireID("checkpointId", p.CheckpointID, maxCheckpointIDBytes); err != nil {
			if p.CheckpointID == "" {
				return req, invalidParams("checkpointId", "must not be empty (leave it out to get a new id)")
			}
			return req, err
		}
	}
	for _, b := range []struct {
		field  string
		n, max int
	}{
		{"namespace", len(p.Namespace), maxNamespaceBytes},
		{"parentId", len(p.ParentID), maxCheckpointIDBytes},
		{"stepName", len(p.StepName), maxStepNameBytes},
		{"workflowHash", len(p.WorkflowHash), maxWorkflowHashBytes},
		{"metadata", len(p.Metadata), maxMetadataBytes},
		{"completedTasks", len(p.CompletedTasks), maxTasksBytes},
		{"pendingTasks", len(p.PendingTasks), maxTasksBytes},
	} {
		if err := maxLen(b.field, b.n, b.max); err != nil {
			return req, err
		}
	}
	if p.Error != nil {
		if err := maxLen("error.message", len(p.Error.Message), maxErrorMessageBytes); err != nil {
			return req, err
		}
	}
	if req.Phase == "" {
		req.Phase = store.PhaseCompleted
	}
	if !req.Phase.Valid() {
		return req, invalidParams("phase", fmt.Sprintf("%q is not one of before_step, completed, failed, interrupted", p.Phase))
	}
	if p.Step != nil {
		if *p.Step < 0 {
			return req, invalidParams("step", "must be >= 0")
		}
		req.Step = *p.Step
	}
	if p.Error != nil {
		req.Error = &store.StepError{Message: p.Error.Message, Retryable: p.Error.Retryable}
	}
	var err *jsonrpc2.Error
	if req.CompletedTasks, err = optionalJSON("completedTasks", p.CompletedTasks, '['); err != nil {
		return req, err
	}
	if req.PendingTasks, err = optionalJSON("pendingTasks", p.PendingTasks, '['); err != nil {
		return req, err
	}
	if req.Metadata, err = optionalJSON("metadata", p.Metadata, '{'); err != nil {
		return req, err
	}
	switch p.StateType {
	case "", "json", "bytes":
	default:
		return req, invalidParams("stateType", fmt.Sprintf("%q is not json or bytes", p.StateType))
	}
	var stateRaw json.RawMessage
	if p.State.present {
		stateRaw = raw["state"]
	}
	var stateB64 []byte // the JSON string, quotes included
	if b := raw["stateBase64"]; p.StateBase64.present && jsonKind(b) != 0 {
		if b[0] != '"' {
			return req, invalidParams("stateBase64", "expected string, got JSON "+jsonTypeName(b))
		}
		stateB64 = b
	}
	sources := 0
	if stateRaw != nil {
		sources++
	}
	if stateB64 != nil {
		sources++
	}
	if p.StateAttachment {
		sources++
	}
	if sources > 1 {
		return req, invalidParams("state", "give only one of state, stateBase64, stateAttachment")
	}
	if c.hasAttachment && !p.StateAttachment {
		return req, invalidParams("stateAttachment", "the frame carries an attachment but stateAttachment is not true")
	}
	var d engine.StateDelta
	if p.StateDelta != nil {
		var perr *jsonrpc2.Error
		if d, perr = stateDelta(p.StateDelta, p.StateAttachment); perr != nil {
			return req, perr
		}
	}
	switch {
	case p.StateAttachment:
		if !c.hasAttachment {
			return req, invalidParams("stateAttachment", "true, but the frame has no Ckptd-Attachment-Length attachment")
		}
		req.State = c.attachment
		var rebuilt *engine.RebuiltState
		// verify checks a rebuilt state's SHA-256 (nil: not a delta). Like the JSON check, it runs
		// concurrently with the save of a large state (req.Check: the store waits for it before
		// the commit, and stores nothing if it fails), else before the save is queued.
		var verify func() error
		if p.StateDelta != nil {
			var perr *jsonrpc2.Error
			if rebuilt, perr = s.applyDelta(ctx, d, c.attachment); perr != nil {
				return req, perr
			}
			req.State, req.Marks = rebuilt.State, rebuilt.Marks
			req.StateSHA256, _ = hex.DecodeString(d.SHA256) // what the rebuilt state is checked against
			c.delta = true
			verify = func() error {
				var de *delta.Error
				if err := rebuilt.Verify(); errors.As(err, &de) {
					return &store.InvalidError{Field: de.Path(), Reason: de.Reason}
				} else if err != nil {
					return err
				}
				return nil
			}
		}
		// checkNow runs check before the save is queued, or leaves it to the store (req.Check)
		// for a large state.
		checkNow := func(check func() error) *jsonrpc2.Error {
			if len(req.State) >= concurrentCheckMin {
				req.Check = check
				return nil
			}
			return storeError(check())
		}
		switch p.StateType {
		case "", "json":
			req.StateType = store.StateJSON
			// jsonValid, not json.Valid: encoding/json accepts invalid UTF-8 inside strings,
			// and a json state must be UTF-8 JSON text (like a frame body). A large state is
			// checked by the store while it hashes and writes it (nothing is stored if it fails):
			// at ~650 MB/s validation would otherwise add 0.15 ms to a 100 KB save.
			// A state rebuilt from a delta is parsed only around its change (its base's marks).
			state := req.State
			valid := jsonValid
			if rebuilt != nil {
				valid = func([]byte) bool { return rebuilt.ValidJSON() }
			} else if len(state) >= concurrentCheckMin { // marked, for the deltas to come
				marks := &store.ValueMarks{}
				req.Marks = marks
				valid = func(b []byte) bool {
					ok, m := jsonvalid.ValidMarked(b)
					marks.JSON = m
					return ok
				}
			}
			check := func() error {
				if verify != nil { // a delta's SHA-256 first, as its other checks came first
					if err := verify(); err != nil {
						return err
					}
				}
				if !valid(state) {
					return &store.InvalidError{Field: "stateType", Reason: "is json but the attachment is not valid UTF-8 JSON"}
				}
				return nil
			}
			if perr := checkNow(check); perr != nil {
				return req, perr
			}
		case "bytes":
			req.StateType = store.StateBytes
			if verify != nil {
				if perr := checkNow(verify); perr != nil {
					return req, perr
				}
			}
		}
	case stateRaw != nil:
		req.State, req.StateType = stateRaw, store.StateJSON
	case stateB64 != nil:
		b, perr := decodeBase64String(stateB64)
		if perr != nil {
			return req, perr
		}
		req.State, req.StateType = b, store.StateBytes
	default:
		req.StateType = store.StateNone
	}
	if int64(len(req.State)) > s.opts.MaxStateBytes {
		return req, rpcError(protocol.CodeTooLarge, fmt.Sprintf("state too large: %d bytes, limit %d (--max-state-size)", len(req.State), s.opts.MaxStateBytes),
			map[string]int64{"limit": s.opts.MaxStateBytes, "size": int64(len(req.State))})
	}
	return req, nil
}

// decodeBase64String decodes the JSON string raw (quotes included) holding standard base64 into
// one new buffer: straight from the frame's bytes, without the intermediate Go string.
func decodeBase64String(raw []byte) ([]byte, *jsonrpc2.Error) {
	enc := raw[1 : len(raw)-1]
	if bytes.IndexByte(enc, '\\') >= 0 { // escaped characters (never needed in base64): decode the string first
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return nil, invalidParams("stateBase64", "expected string: "+err.Error())
		}
		enc = []byte(str)
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Decode(out, enc)
	if err != nil {
		return nil, invalidParams("stateBase64", "not valid standard base64: "+err.Error())
	}
	return out[:n], nil
}

// jsonTypeName names the JSON type of a raw value, for errors.
func jsonTypeName(raw []byte) string {
	switch jsonKind(raw) {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

// concurrentCheckMin is the smallest JSON attachment validated concurrently with the write
// (store.SaveRequest.Check) rather than before it.
const concurrentCheckMin = 32 << 10

func (s *Server) save(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	start := time.Now()
	req, validation, perr := s.saveRequest(ctx, c)
	if perr != nil {
		s.metrics.failures.Add(1)
		return reply{}, perr
	}
	// The sources (if any) are fingerprinted before the save is queued: the next mutation
	// waits, so saves of a workflow keep their order and each one's incremental scan builds on
	// the previous one. Once queued in order, the next mutation may go ahead (c.release).
	sources, perr := saveSources(c.sources)
	if perr != nil {
		s.metrics.failures.Add(1)
		return reply{}, perr
	}
	saved, err := s.engine.SaveStep(ctx, req, sources, validation, c.release)
	if err != nil {
		s.metrics.failures.Add(1)
		if errors.Is(err, store.ErrConflict) {
			return reply{}, rpcError(protocol.CodeConflict, err.Error(), map[string]string{"checkpointId": req.CheckpointID})
		}
		return reply{}, sagaError(err)
	}
	res := saved.Result
	s.metrics.saves.Add(1)
	if c.delta {
		s.metrics.deltas.Add(1)
		s.metrics.bytesIn.Add(int64(len(c.attachment))) // what came through the pipe
	} else {
		s.metrics.bytesIn.Add(int64(len(req.State)))
	}
	if res.Deduplicated {
		s.metrics.dedup.Add(1)
	}
	s.metrics.save.observe(time.Since(start))
	if !res.Existing {
		s.notify(protocol.NotifySaved, protocol.SavedEvent{
			CheckpointID: res.CheckpointID, WorkflowID: req.WorkflowID, Namespace: req.Namespace,
			Seq: res.Seq, Phase: string(req.Phase), Step: req.Step,
		})
	}
	return reply{result: protocol.SaveResult{
		CheckpointID: res.CheckpointID,
		Seq:          res.Seq,
		CreatedAt:    engine.Timestamp(res.CreatedAt),
		SizeBytes:    res.SizeBytes,
		StoredBytes:  res.StoredBytes,
		SHA256:       res.SHA256,
		Deduplicated: res.Deduplicated,
		Sources:      saved.Sources,
		Validation:   saved.Validation,
	}}, nil
}

// stateReply puts a state into a reply: as the frame attachment, inline JSON, or base64.
func stateReply(r *reply, typ store.StateType, state []byte, attach bool) (b64 *string, attached bool) {
	if typ == store.StateNone || typ == "" {
		r.rawFields = append(r.rawFields, rawField{"state", nil})
		return nil, false
	}
	if attach {
		r.attachment, r.hasAttachment = state, true
		if state == nil {
			r.attachment = []byte{}
		}
		return nil, true
	}
	if typ == store.StateJSON {
		r.rawFields = append(r.rawFields, rawField{"state", state})
		return nil, false
	}
	enc := base64.StdEncoding.EncodeToString(state)
	return &enc, false
}

func orEmptyArray(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("[]")
	}
	return raw
}

func (s *Server) reportCorrupt(workflowID string, ce *store.CorruptError) {
	s.metrics.integrity.Add(1)
	s.log.Error("corrupt checkpoint", "workflow", workflowID, "checkpoint", ce.CheckpointID, "reason", ce.Reason)
	s.notify(protocol.NotifyCorrupted, protocol.CorruptedEvent{CheckpointID: ce.CheckpointID, WorkflowID: workflowID, Reason: ce.Reason})
}

func (s *Server) load(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	start := time.Now()
	var p protocol.LoadParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	var (
		lr  store.LoadResult
		err error
	)
	switch {
	case p.CheckpointID != "" && p.WorkflowID != "":
		return reply{}, invalidParams("checkpointId", "give either checkpointId or workflowId, not both")
	case p.CheckpointID != "":
		lr.Checkpoint, err = s.store.Load(ctx, p.CheckpointID)
	case p.WorkflowID != "":
		lr, err = s.store.LoadLatest(ctx, p.WorkflowID, p.Namespace)
	default:
		return reply{}, invalidParams("checkpointId", "required (or workflowId)")
	}
	if err != nil {
		var ce *store.CorruptError
		if errors.As(err, &ce) {
			wf := p.WorkflowID
			if wf == "" { // loaded by checkpointId: the store read the workflow if it could
				wf = ce.WorkflowID
			}
			s.reportCorrupt(wf, ce)
		}
		s.metrics.failures.Add(1)
		if p.CheckpointID != "" {
			return reply{}, storeErrorWith(err, "checkpointId", p.CheckpointID)
		}
		return reply{}, storeErrorWith(err, "workflowId", p.WorkflowID)
	}
	for _, r := range lr.RecoveredFrom {
		s.reportCorrupt(lr.WorkflowID, &store.CorruptError{CheckpointID: r.CheckpointID, Reason: r.Reason})
	}
	var r reply
	res := protocol.LoadResult{
		Summary:        engine.SummaryOf(lr.Summary),
		CompletedTasks: orEmptyArray(lr.CompletedTasks),
		PendingTasks:   orEmptyArray(lr.PendingTasks),
		PendingWrites:  engine.PendingWritesOf(lr.PendingWrites),
		RecoveredFrom:  engine.RecoveredOf(lr.RecoveredFrom),
	}
	res.StateBase64, res.StateAttachment = stateReply(&r, lr.StateType, lr.State, p.Attachment)
	r.result = res
	s.metrics.loads.Add(1)
	s.metrics.bytesOut.Add(int64(len(lr.State)))
	s.metrics.load.observe(time.Since(start))
	return r, nil
}

func (s *Server) list(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.ListParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	f := store.ListFilter{WorkflowID: p.WorkflowID, Namespace: p.Namespace, Phase: store.Phase(p.Phase), Metadata: p.Metadata, Before: p.Before, Limit: defaultListLimit,
		Validation: p.Validation}
	if p.Phase != "" && !f.Phase.Valid() {
		return reply{}, invalidParams("phase", fmt.Sprintf("%q is not one of before_step, completed, failed, interrupted", p.Phase))
	}
	if p.Validation != "" && !store.ValidationStatusValid(p.Validation) {
		return reply{}, invalidParams("validation", fmt.Sprintf("%q is not one of passed, warning, failed", p.Validation))
	}
	if p.Limit != nil {
		if *p.Limit < 1 || *p.Limit > maxListLimit {
			return reply{}, invalidParams("limit", fmt.Sprintf("must be between 1 and %d", maxListLimit))
		}
		f.Limit = *p.Limit
	}
	sums, err := s.store.List(ctx, f)
	if err != nil {
		return reply{}, storeError(err)
	}
	out := protocol.ListResult{Checkpoints: make([]protocol.Summary, 0, len(sums))}
	for _, sm := range sums {
		out.Checkpoints = append(out.Checkpoints, engine.SummaryOf(sm))
	}
	return reply{result: out}, nil
}

func (s *Server) delete(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.DeleteParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	var (
		n   int
		err error
	)
	switch {
	case p.CheckpointID != "" && p.WorkflowID != "":
		return reply{}, invalidParams("checkpointId", "give either checkpointId or workflowId, not both")
	case p.CheckpointID != "":
		n, err = s.store.Delete(ctx, p.CheckpointID)
	case p.WorkflowID != "":
		n, err = s.store.DeleteWorkflow(ctx, p.WorkflowID)
	default:
		return reply{}, invalidParams("checkpointId", "required (or workflowId)")
	}
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.DeleteResult{Deleted: n}}, nil
}

func (s *Server) prune(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.PruneParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	req := store.PruneRequest{WorkflowID: p.WorkflowID, DryRun: p.DryRun, OmitIDs: true} // the ids go out as checkpoint/pruned, bite by bite
	if p.KeepLast == nil && p.OlderThanSeconds == nil {
		return reply{}, invalidParams("keepLast", "give keepLast and/or olderThanSeconds")
	}
	if p.KeepLast != nil {
		if *p.KeepLast < 1 {
			return reply{}, invalidParams("keepLast", "must be >= 1 (the newest checkpoint is always kept)")
		}
		req.KeepLast = *p.KeepLast
	}
	if p.OlderThanSeconds != nil {
		if *p.OlderThanSeconds < 1 {
			return reply{}, invalidParams("olderThanSeconds", "must be >= 1")
		}
		req.OlderThanSeconds = *p.OlderThanSeconds
	}
	// The prune runs in bites and never deletes a checkpoint for being newer than it expected:
	// the mutations that arrive after it may commit between its bites instead of waiting for
	// the whole prune (docs/protocol.md, "Ordering of pipelined requests").
	c.release()
	res, err := s.store.Prune(ctx, req)
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.PruneResult{Deleted: res.Deleted, FreedBytes: res.FreedBytes, DryRun: p.DryRun}}, nil
}
