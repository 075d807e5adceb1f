package rpc

// Handlers of the LangGraph channel storage family (docs/protocol.md, "LangGraph channel
// storage"): lg/* and thread/*. Byte strings travel as segments {offset, length} of the frame's
// single attachment.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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
	if seg.Type == "" {
		return nil, invalidParams(field+".type", "required")
	}
	if seg.Offset == nil && seg.Length == nil {
		return nil, invalidParams(field+".length", "required (with offset)")
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
		return nil, invalidParams(field+".offset", "must be >= 0")
	case n < 0:
		return nil, invalidParams(field+".length", "must be >= 0")
	case n == 0:
		return []byte{}, nil
	case !c.hasAttachment:
		return nil, invalidParams(field+".length", fmt.Sprintf("%d bytes, but the frame has no Ckptd-Attachment-Length attachment", n))
	case off > int64(len(c.attachment)) || n > int64(len(c.attachment))-off:
		return nil, invalidParams(field+".length", fmt.Sprintf("segment [%d, %d) lies outside the %d-byte attachment", off, off+n, len(c.attachment)))
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
	key := thread + "\x00" + ns + "\x00" + b.Channel + "\x00" + b.Version
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

func requireThread(field, v string) *jsonrpc2.Error {
	return requireID(field, v, maxWorkflowIDBytes)
}

// ---------------------------------------------------------------------------------------------
// Handlers

func (s *Server) lgPut(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGPutParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireThread("threadId", p.ThreadID); err != nil {
		return reply{}, err
	}
	if err := requireID("checkpointId", p.CheckpointID, maxCheckpointIDBytes); err != nil {
		return reply{}, err
	}
	if p.Checkpoint == nil {
		return reply{}, invalidParams("checkpoint", "required ({type, offset, length})")
	}
	cp, perr := segment("checkpoint", *p.Checkpoint, c)
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
	req := store.LGPutRequest{FencingToken: token,
		ThreadID: p.ThreadID, Namespace: p.Namespace, CheckpointID: p.CheckpointID, ParentID: p.ParentID,
		Type: p.Checkpoint.Type, Checkpoint: cp, ChannelVersions: p.ChannelVersions, Metadata: p.Metadata,
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
		data, perr := segment(field, b.LGSegmentIn, c)
		if perr != nil {
			return reply{}, perr
		}
		req.Blobs = append(req.Blobs, store.LGBlob{Channel: b.Channel, Version: ver, Type: b.Type, Data: data})
	}
	pending, n := s.store.LGPut(req)
	c.release()
	if err := pending.Wait(ctx); err != nil {
		s.metrics.failures.Add(1)
		return reply{}, storeError(err)
	}
	s.metrics.bytesIn.Add(int64(len(c.attachment)))
	return reply{result: protocol.LGPutResult{ThreadID: p.ThreadID, Namespace: p.Namespace, CheckpointID: p.CheckpointID, BlobsStored: *n}}, nil
}

func (s *Server) lgPutWrites(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.LGPutWritesParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireThread("threadId", p.ThreadID); err != nil {
		return reply{}, err
	}
	if err := requireID("checkpointId", p.CheckpointID, maxCheckpointIDBytes); err != nil {
		return reply{}, err
	}
	if p.TaskID == "" {
		return reply{}, invalidParams("taskId", "required")
	}
	if p.Writes == nil {
		return reply{}, invalidParams("writes", "required (an array of {channel, idx?, type, offset, length})")
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
		data, perr := segment(field, w.LGSegmentIn, c)
		if perr != nil {
			return reply{}, perr
		}
		lw := store.LGWrite{TaskID: p.TaskID, TaskPath: p.TaskPath, Idx: int64(i), Channel: w.Channel, Type: w.Type, Data: data}
		if w.Idx != nil {
			lw.Idx = *w.Idx
		}
		ws = append(ws, lw)
	}
	pending, n := s.store.LGPutWritesFenced(p.ThreadID, p.Namespace, p.CheckpointID, ws, token)
	c.release()
	if err := pending.Wait(ctx); err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.WritesPutResult{Stored: *n}}, nil
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
	if err := requireThread("threadId", p.ThreadID); err != nil {
		return reply{}, err
	}
	t, err := s.store.LGGet(ctx, p.ThreadID, p.Namespace, p.CheckpointID)
	if err != nil {
		return reply{}, s.lgReadError(err, p.ThreadID)
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
	f := store.LGListFilter{ThreadID: p.ThreadID, Namespace: p.Namespace, CheckpointID: p.CheckpointID, Before: p.Before,
		Metadata: p.Metadata, Cursor: p.Cursor}
	if p.Limit != nil {
		if *p.Limit < 1 || *p.Limit > store.LGMaxListLimit {
			return reply{}, invalidParams("limit", fmt.Sprintf("must be between 1 and %d", store.LGMaxListLimit))
		}
		f.Limit = *p.Limit
	}
	res, err := s.store.LGList(ctx, f)
	if err != nil {
		return reply{}, s.lgReadError(err, p.ThreadID)
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
	if err := requireThread("threadId", p.ThreadID); err != nil {
		return reply{}, err
	}
	if p.Channels == nil {
		return reply{}, invalidParams("channels", "required (an array of channel names)")
	}
	res, err := s.store.LGChannelHistory(ctx, p.ThreadID, p.Namespace, p.CheckpointID, p.Channels)
	if err != nil {
		return reply{}, s.lgReadError(err, p.ThreadID)
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
			o.Seed = &protocol.LGSeed{Version: json.RawMessage(h.Seed.Version), LGSegment: pk.blob(p.ThreadID, p.Namespace, *h.Seed)}
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
	if err := requireThread("threadId", p.ThreadID); err != nil {
		return reply{}, err
	}
	n, err := s.store.LGDeleteThread(ctx, p.ThreadID)
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
	if err := requireThread("sourceThreadId", p.SourceThreadID); err != nil {
		return reply{}, err
	}
	if err := requireThread("targetThreadId", p.TargetThreadID); err != nil {
		return reply{}, err
	}
	n, err := s.store.LGCopyThread(ctx, p.SourceThreadID, p.TargetThreadID)
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
