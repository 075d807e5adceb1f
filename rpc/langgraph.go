package rpc

// Handlers of the LangGraph channel storage family (docs/protocol.md, "LangGraph channel
// storage"): lg/* and thread/*. Byte strings travel as segments {offset, length} of the frame's
// single attachment.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// langGraphMethods are registered in New's method table, with the claims (rpc/claims.go).
func (s *Server) langGraphMethods() map[string]method {
	m := map[string]method{
		protocol.MethodLGPut:            {kindMutation, s.lgPut},
		protocol.MethodLGPutWrites:      {kindMutation, s.lgPutWrites},
		protocol.MethodLGGet:            {kindRead, s.lgGet},
		protocol.MethodLGList:           {kindRead, s.lgList},
		protocol.MethodLGChannelHistory: {kindRead, s.lgChannelHistory},
		protocol.MethodLGDeleteForRuns:  {kindMutation, s.lgDeleteForRuns},
		protocol.MethodThreadDelete:     {kindMutation, s.threadDelete},
		protocol.MethodThreadCopy:       {kindMutation, s.threadCopy},
		protocol.MethodThreadPrune:      {kindMutation, s.threadPrune},
		protocol.MethodLGPutValue:       {kindMutation, s.lgPutValue},
		protocol.MethodLGConfigure:      {kindMutation, s.lgConfigure},
	}
	for name, cm := range s.claimMethods() {
		m[name] = cm
	}
	return m
}

// ---------------------------------------------------------------------------------------------
// Segments

// segment returns the bytes a request segment names.
func segment(field string, seg protocol.LGSegmentIn, c *call) ([]byte, *jsonrpc2.Error) {
	if seg.ValueID != nil {
		return nil, invalidParams(field+".valueId", "not taken here")
	}
	if seg.Type == "" {
		return nil, invalidParams(field+".type", "required")
	}
	return segmentBytes(field, seg.Offset, seg.Length, c)
}

// stagedOrSegment returns the bytes a request segment names, or the id of the value stored
// ahead by lg/putValue it names instead (valueId, then without type, offset and length).
func stagedOrSegment(field string, seg protocol.LGSegmentIn, c *call) ([]byte, int64, *jsonrpc2.Error) {
	if seg.ValueID == nil {
		b, err := segment(field, seg, c)
		return b, 0, err
	}
	switch {
	case *seg.ValueID < 1:
		return nil, 0, invalidParams(field+".valueId", "must be a valueId from lg/putValue")
	case seg.Type != "" || seg.Offset != nil || seg.Length != nil:
		return nil, 0, invalidParams(field+".valueId", "a staged value takes no type, offset or length: give either valueId or a segment")
	}
	return nil, *seg.ValueID, nil
}

// segmentBytes returns the bytes [offset, offset+length) of the request's attachment; field
// prefixes the names in errors ("": the params' own offset and length).
func segmentBytes(field string, offset, length *int64, c *call) ([]byte, *jsonrpc2.Error) {
	seg := protocol.LGSegmentIn{Offset: offset, Length: length}
	if field != "" {
		field += "."
	}
	if seg.Offset == nil && seg.Length == nil {
		return nil, invalidParams(field+"length", "required (with offset)")
	}
	var off, n int64
	if seg.Offset != nil {
		off = *seg.Offset
	}
	if seg.Length != nil {
		n = *seg.Length
	}
	switch {
	case off < 0:
		return nil, invalidParams(field+"offset", "must be >= 0")
	case n < 0:
		return nil, invalidParams(field+"length", "must be >= 0")
	case n == 0:
		return []byte{}, nil
	case !c.hasAttachment:
		return nil, invalidParams(field+"length", fmt.Sprintf("%d bytes, but the frame has no Ckptd-Attachment-Length attachment", n))
	case off > int64(len(c.attachment)) || n > int64(len(c.attachment))-off:
		return nil, invalidParams(field+"length", fmt.Sprintf("segment [%d, %d) lies outside the %d-byte attachment", off, off+n, len(c.attachment)))
	}
	return c.attachment[off : off+n : off+n], nil
}

// packer builds a response attachment, storing each distinct byte string once.
type packer struct {
	buf  []byte
	seen map[string]protocol.LGSegment // blob key -> segment
}

func newPacker() *packer { return &packer{seen: map[string]protocol.LGSegment{}} }

// reserve sizes the attachment for ts up front (an upper bound: shared blobs counted each time).
func (p *packer) reserve(ts ...store.LGTuple) {
	n := 0
	for _, t := range ts {
		n += len(t.Checkpoint)
		for _, b := range t.Blobs {
			n += len(b.Data)
		}
		for _, w := range t.Writes {
			n += len(w.Data)
		}
	}
	if n > 64<<20 {
		n = 64 << 20
	}
	p.buf = make([]byte, 0, n)
}

func (p *packer) add(typ string, b []byte) protocol.LGSegment {
	seg := protocol.LGSegment{Type: typ, Offset: len(p.buf), Length: len(b)}
	p.buf = append(p.buf, b...)
	return seg
}

func (p *packer) blob(thread, ns string, b store.LGBlob) protocol.LGSegment {
	key := thread + "\x00" + ns + "\x00" + b.Channel + "\x00" + b.Version + "\x00" + strconv.Itoa(b.Variant)
	if seg, ok := p.seen[key]; ok {
		return seg
	}
	seg := p.add(b.Type, b.Data)
	p.seen[key] = seg
	return seg
}

func (p *packer) write(w store.LGWrite) protocol.LGWriteOut {
	return protocol.LGWriteOut{TaskID: w.TaskID, TaskPath: w.TaskPath, Idx: w.Idx, Channel: w.Channel, LGSegment: p.add(w.Type, w.Data)}
}

func (p *packer) tuple(t store.LGTuple) protocol.LGTuple {
	out := protocol.LGTuple{
		ThreadID:        t.ThreadID,
		Namespace:       t.Namespace,
		CheckpointID:    t.CheckpointID,
		CreatedAt:       engine.Timestamp(t.CreatedAt),
		Checkpoint:      p.add(t.Type, t.Checkpoint),
		ChannelVersions: t.ChannelVersions,
		Metadata:        t.Metadata,
		Blobs:           make([]protocol.LGBlobOut, 0, len(t.Blobs)),
		Writes:          make([]protocol.LGWriteOut, 0, len(t.Writes)),
	}
	if t.ParentID != "" {
		pid := t.ParentID
		out.ParentID = &pid
	}
	if len(out.Metadata) == 0 {
		out.Metadata = json.RawMessage("{}")
	}
	for _, b := range t.Blobs {
		out.Blobs = append(out.Blobs, protocol.LGBlobOut{Channel: b.Channel, Version: json.RawMessage(b.Version), LGSegment: p.blob(t.ThreadID, t.Namespace, b)})
	}
	for _, w := range t.Writes {
		out.Writes = append(out.Writes, p.write(w))
	}
	return out
}

func (p *packer) reply(result any) reply {
	att := p.buf
	if att == nil {
		att = []byte{}
	}
	return reply{result: result, attachment: att, hasAttachment: true}
}

// valueDelta checks lg/put's blobs[i].delta (its members' presence and form; what depends on
// the base is store.ResolveLGDeltas').
func valueDelta(field string, b protocol.LGBlobIn, staged int64) (*store.LGDelta, *jsonrpc2.Error) {
	d := b.Delta
	field += ".delta"
	switch {
	case staged != 0:
		return nil, invalidParams(field, "a staged value (valueId) cannot be a delta: give the middle bytes as a segment")
	case b.Type == store.LGEmptyType:
		return nil, invalidParams(field, "an empty value cannot be a delta")
	case len(d.BaseVersion) == 0:
		return nil, invalidParams(field+".baseVersion", "required (the channel version the delta was computed against)")
	}
	base, err := store.CanonicalVersion(d.BaseVersion)
	if err != nil {
		return nil, invalidParams(field+".baseVersion", err.Error())
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{field + ".keepPrefix", d.KeepPrefix}, {field + ".keepSuffix", d.KeepSuffix}} {
		if f.v == nil {
			return nil, invalidParams(f.name, "required")
		}
		if *f.v < 0 {
			return nil, invalidParams(f.name, fmt.Sprintf("%d is negative", *f.v))
		}
	}
	if d.SHA256 == nil {
		return nil, invalidParams(field+".sha256", "required")
	}
	out := &store.LGDelta{BaseVersion: base, KeepPrefix: *d.KeepPrefix, KeepSuffix: *d.KeepSuffix, SHA256: *d.SHA256}
	for i, c := range d.Copies {
		if len(c) != 3 || c[0] < 0 || c[1] < 0 || c[2] < 0 {
			return nil, invalidParams(fmt.Sprintf("%s.copies[%d]", field, i), "[at, from, length] must be integers >= 0")
		}
		out.Copies = append(out.Copies, store.LGCopy{At: c[0], From: c[1], Length: c[2]})
	}
	return out, nil
}

// threadParam validates a required thread id: any string of valid UTF-8 up to
// store.MaxLGThreadIDBytes, "" included (LangGraph's savers take any thread_id).
func threadParam(field string, v *string) (string, *jsonrpc2.Error) {
	switch {
	case v == nil:
		return "", invalidParams(field, "required (a string; \"\" is a thread id too)")
	case len(*v) > store.MaxLGThreadIDBytes:
		return "", invalidParams(field, fmt.Sprintf("longer than %d bytes", store.MaxLGThreadIDBytes))
	case !utf8.ValidString(*v):
		return "", invalidParams(field, "not valid UTF-8")
	}
	return *v, nil
}

// lgRetention turns a retention param into a thread's retention: fields not given are 0 (off).
func lgRetention(r *protocol.Retention) (*store.Retention, *jsonrpc2.Error) {
	if r == nil {
		return nil, nil
	}
	var out store.Retention
	if r.KeepLast != nil {
		out.KeepLast = *r.KeepLast
	}
	if r.MaxAgeSeconds != nil {
		out.MaxAgeSeconds = *r.MaxAgeSeconds
	}
	if r.KeepFirst != nil {
		out.KeepFirst = *r.KeepFirst
	}
	if r.IdleTTLSeconds != nil {
		out.IdleTTLSeconds = *r.IdleTTLSeconds
	}
	if err := out.Validate(); err != nil {
		return nil, storeError(err)
	}
	return &out, nil
}

// ---------------------------------------------------------------------------------------------
// Handlers

func (s *Server) lgPut(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGPutParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	thread, perr := threadParam("threadId", p.ThreadID)
	if perr != nil {
		return reply{}, perr
	}
	if err := requireID("checkpointId", p.CheckpointID, maxCheckpointIDBytes); err != nil {
		return reply{}, err
	}
	if p.Checkpoint == nil {
		return reply{}, invalidParams("checkpoint", "required ({type, offset, length} or {valueId})")
	}
	cp, cpStaged, perr := stagedOrSegment("checkpoint", *p.Checkpoint, c)
	if perr != nil {
		return reply{}, perr
	}
	if jsonKind(p.ChannelVersions) != '{' {
		return reply{}, invalidParams("channelVersions", "required: a JSON object (channel -> version), {} when empty")
	}
	if _, err := optionalJSON("metadata", p.Metadata, '{'); err != nil {
		return reply{}, err
	}
	token, perr := fencingToken(p.FencingToken)
	if perr != nil {
		return reply{}, perr
	}
	ret, perr := lgRetention(p.Retention)
	if perr != nil {
		return reply{}, perr
	}
	req := store.LGPutRequest{FencingToken: token, Retention: ret,
		ThreadID: thread, Namespace: p.Namespace, CheckpointID: p.CheckpointID, ParentID: p.ParentID,
		Type: p.Checkpoint.Type, Checkpoint: cp, CheckpointStaged: cpStaged, ChannelVersions: p.ChannelVersions, Metadata: p.Metadata,
		Blobs: make([]store.LGBlob, 0, len(p.Blobs)),
	}
	for i, b := range p.Blobs {
		field := fmt.Sprintf("blobs[%d]", i)
		if b.Channel == "" {
			return reply{}, invalidParams(field+".channel", "required")
		}
		ver, err := store.CanonicalVersion(b.Version)
		if err != nil {
			return reply{}, invalidParams(field+".version", err.Error())
		}
		data, staged, perr := stagedOrSegment(field, b.LGSegmentIn, c)
		if perr != nil {
			return reply{}, perr
		}
		blob := store.LGBlob{Channel: b.Channel, Version: ver, Type: b.Type, Data: data, Staged: staged}
		if b.Delta != nil {
			if blob.Delta, perr = valueDelta(field, b, staged); perr != nil {
				return reply{}, perr
			}
		}
		req.Blobs = append(req.Blobs, blob)
	}
	req.MaxValueBytes = s.opts.MaxStateBytes
	pending, n := s.store.LGPut(req)
	c.release()
	if err := pending.Wait(ctx); err != nil {
		s.metrics.failures.Add(1)
		return reply{}, storeError(err)
	}
	s.metrics.bytesIn.Add(int64(len(c.attachment)))
	return reply{result: protocol.LGPutResult{ThreadID: thread, Namespace: p.Namespace, CheckpointID: p.CheckpointID, BlobsStored: *n}}, nil
}

func (s *Server) lgPutWrites(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGPutWritesParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	thread, perr := threadParam("threadId", p.ThreadID)
	if perr != nil {
		return reply{}, perr
	}
	if err := requireID("checkpointId", p.CheckpointID, maxCheckpointIDBytes); err != nil {
		return reply{}, err
	}
	if p.TaskID == "" {
		return reply{}, invalidParams("taskId", "required")
	}
	if p.Writes == nil {
		return reply{}, invalidParams("writes", "required (an array of {channel, idx?, type, offset, length} or {channel, idx?, valueId})")
	}
	token, perr := fencingToken(p.FencingToken)
	if perr != nil {
		return reply{}, perr
	}
	ws := make([]store.LGWrite, 0, len(p.Writes))
	for i, w := range p.Writes {
		field := fmt.Sprintf("writes[%d]", i)
		if w.Channel == "" {
			return reply{}, invalidParams(field+".channel", "required")
		}
		data, staged, perr := stagedOrSegment(field, w.LGSegmentIn, c)
		if perr != nil {
			return reply{}, perr
		}
		lw := store.LGWrite{TaskID: p.TaskID, TaskPath: p.TaskPath, Idx: int64(i), Channel: w.Channel, Type: w.Type, Data: data, Staged: staged}
		if w.Idx != nil {
			lw.Idx = *w.Idx
		}
		ws = append(ws, lw)
	}
	pending, n := s.store.LGPutWritesFenced(thread, p.Namespace, p.CheckpointID, ws, token)
	c.release()
	if err := pending.Wait(ctx); err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.WritesPutResult{Stored: *n}}, nil
}

// lgPutValue stores one value ahead of the lg/put or lg/putWrites that names it by valueId, so
// that no request has to carry several large values.
func (s *Server) lgPutValue(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGPutValueParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	thread, perr := threadParam("threadId", p.ThreadID)
	if perr != nil {
		return reply{}, perr
	}
	if p.Type == "" {
		return reply{}, invalidParams("type", "required")
	}
	data, perr := segmentBytes("", p.Offset, p.Length, c)
	if perr != nil {
		return reply{}, perr
	}
	id, err := s.store.LGStageValue(ctx, thread, p.Type, data)
	c.release()
	if err != nil {
		s.metrics.failures.Add(1)
		return reply{}, storeError(err)
	}
	s.metrics.bytesIn.Add(int64(len(c.attachment)))
	return reply{result: protocol.LGPutValueResult{ValueID: id}}, nil
}

// lgConfigure sets or reads the retention of a thread (threadId) or of every thread without its
// own (no threadId).
func (s *Server) lgConfigure(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGConfigureParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if p.ThreadID != nil {
		if _, perr := threadParam("threadId", p.ThreadID); perr != nil {
			return reply{}, perr
		}
	}
	ret, perr := lgRetention(p.Retention)
	if perr != nil {
		return reply{}, perr
	}
	if ret != nil && p.Inherit {
		return reply{}, invalidParams("inherit", "give retention or inherit, not both")
	}
	info, err := s.store.LGConfigure(ctx, p.ThreadID, ret, p.Inherit)
	if err != nil {
		return reply{}, storeError(err)
	}
	r := info.Retention
	return reply{result: protocol.LGConfigureResult{ThreadID: p.ThreadID, Source: info.Source, Retention: protocol.EffectiveRetention{
		KeepLast: r.KeepLast, MaxAgeSeconds: r.MaxAgeSeconds, KeepFirst: r.KeepFirst, IdleTTLSeconds: r.IdleTTLSeconds}}}, nil
}

func (s *Server) lgReadError(err error, thread string) *jsonrpc2.Error {
	var ce *store.CorruptError
	if errors.As(err, &ce) {
		s.reportCorrupt(thread, ce)
	}
	s.metrics.failures.Add(1)
	return storeError(err)
}

func (s *Server) lgGet(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGGetParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	thread, perr := threadParam("threadId", p.ThreadID)
	if perr != nil {
		return reply{}, perr
	}
	t, err := s.store.LGGet(ctx, thread, p.Namespace, p.CheckpointID)
	if err != nil {
		return reply{}, s.lgReadError(err, thread)
	}
	s.metrics.loads.Add(1)
	pk := newPacker()
	var res protocol.LGGetResult
	if t != nil {
		pk.reserve(*t)
		tu := pk.tuple(*t)
		res.Tuple = &tu
	}
	s.metrics.bytesOut.Add(int64(len(pk.buf)))
	return pk.reply(res), nil
}

func (s *Server) lgList(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGListParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	f := store.LGListFilter{Namespace: p.Namespace, CheckpointID: p.CheckpointID, Before: p.Before,
		Metadata: p.Metadata, MetadataMatch: p.MetadataMatch, Cursor: p.Cursor}
	if p.ThreadID != nil {
		thread, perr := threadParam("threadId", p.ThreadID)
		if perr != nil {
			return reply{}, perr
		}
		f.ThreadID, f.ThreadGiven = thread, true
	}
	if p.Limit != nil {
		if *p.Limit < 1 || *p.Limit > store.LGMaxListLimit {
			return reply{}, invalidParams("limit", fmt.Sprintf("must be between 1 and %d", store.LGMaxListLimit))
		}
		f.Limit = *p.Limit
	}
	res, err := s.store.LGList(ctx, f)
	if err != nil {
		return reply{}, s.lgReadError(err, f.ThreadID)
	}
	pk := newPacker()
	pk.reserve(res.Tuples...)
	out := protocol.LGListResult{Tuples: make([]protocol.LGTuple, 0, len(res.Tuples)), Cursor: res.Cursor}
	for _, t := range res.Tuples {
		out.Tuples = append(out.Tuples, pk.tuple(t))
	}
	s.metrics.bytesOut.Add(int64(len(pk.buf)))
	return pk.reply(out), nil
}

func (s *Server) lgChannelHistory(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGChannelHistoryParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	thread, perr := threadParam("threadId", p.ThreadID)
	if perr != nil {
		return reply{}, perr
	}
	if p.Channels == nil {
		return reply{}, invalidParams("channels", "required (an array of channel names)")
	}
	res, err := s.store.LGChannelHistory(ctx, thread, p.Namespace, p.CheckpointID, p.Channels)
	if err != nil {
		return reply{}, s.lgReadError(err, thread)
	}
	pk := newPacker()
	out := protocol.LGChannelHistoryResult{Channels: map[string]protocol.LGChannelHistory{}, Visited: res.Visited}
	for _, ch := range p.Channels {
		h := res.Channels[ch]
		if h == nil {
			continue
		}
		o := protocol.LGChannelHistory{Writes: make([]protocol.LGWriteOut, 0, len(h.Writes))}
		for _, w := range h.Writes {
			o.Writes = append(o.Writes, pk.write(w))
		}
		if h.Seed != nil {
			o.Seed = &protocol.LGSeed{Version: json.RawMessage(h.Seed.Version), LGSegment: pk.blob(thread, p.Namespace, *h.Seed)}
		}
		out.Channels[ch] = o
	}
	return pk.reply(out), nil
}

func (s *Server) lgDeleteForRuns(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGDeleteForRunsParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if p.RunIDs == nil {
		return reply{}, invalidParams("runIds", "required (an array of run ids)")
	}
	n, err := s.store.LGDeleteForRuns(ctx, p.RunIDs)
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.DeleteResult{Deleted: n}}, nil
}

func (s *Server) threadDelete(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.ThreadDeleteParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	thread, perr := threadParam("threadId", p.ThreadID)
	if perr != nil {
		return reply{}, perr
	}
	n, err := s.store.LGDeleteThread(ctx, thread)
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.DeleteResult{Deleted: n}}, nil
}

func (s *Server) threadCopy(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.ThreadCopyParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	src, perr := threadParam("sourceThreadId", p.SourceThreadID)
	if perr != nil {
		return reply{}, perr
	}
	dst, perr := threadParam("targetThreadId", p.TargetThreadID)
	if perr != nil {
		return reply{}, perr
	}
	n, err := s.store.LGCopyThread(ctx, src, dst)
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.ThreadCopyResult{Copied: n}}, nil
}

func (s *Server) threadPrune(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.ThreadPruneParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if p.ThreadIDs == nil {
		return reply{}, invalidParams("threadIds", "required (an array of thread ids)")
	}
	for i := range p.ThreadIDs {
		if _, perr := threadParam(fmt.Sprintf("threadIds[%d]", i), &p.ThreadIDs[i]); perr != nil {
			return reply{}, perr
		}
	}
	switch p.Strategy {
	case "":
		p.Strategy = "keep_latest"
	case "keep_latest", "delete":
	default:
		return reply{}, invalidParams("strategy", fmt.Sprintf("%q is not one of %s", p.Strategy, strings.Join([]string{"keep_latest", "delete"}, ", ")))
	}
	n, err := s.store.LGPrune(ctx, p.ThreadIDs, p.Strategy)
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.DeleteResult{Deleted: n}}, nil
}
