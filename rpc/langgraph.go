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

	"github.com/ckptd/ckptd/store"
)

// Method names of the LangGraph family (binding).
const (
	MethodLGPut            = "lg/put"
	MethodLGPutWrites      = "lg/putWrites"
	MethodLGGet            = "lg/get"
	MethodLGList           = "lg/list"
	MethodLGChannelHistory = "lg/channelHistory"
	MethodLGDeleteForRuns  = "lg/deleteForRuns"
	MethodThreadDelete     = "thread/delete"
	MethodThreadCopy       = "thread/copy"
	MethodThreadPrune      = "thread/prune"
)

// langGraphMethods are registered in New's method table.
func (s *Server) langGraphMethods() map[string]method {
	return map[string]method{
		MethodLGPut:            {kindMutation, s.lgPut},
		MethodLGPutWrites:      {kindMutation, s.lgPutWrites},
		MethodLGGet:            {kindRead, s.lgGet},
		MethodLGList:           {kindRead, s.lgList},
		MethodLGChannelHistory: {kindRead, s.lgChannelHistory},
		MethodLGDeleteForRuns:  {kindMutation, s.lgDeleteForRuns},
		MethodThreadDelete:     {kindMutation, s.threadDelete},
		MethodThreadCopy:       {kindMutation, s.threadCopy},
		MethodThreadPrune:      {kindMutation, s.threadPrune},
	}
}

// ---------------------------------------------------------------------------------------------
// Wire types

// LGSegmentIn is a typed byte string of a request: a segment of its attachment.
type LGSegmentIn struct {
	Type   string `json:"type"`
	Offset *int64 `json:"offset"`
	Length *int64 `json:"length"`
}

// LGBlobIn is one channel value of lg/put.
type LGBlobIn struct {
	Channel string          `json:"channel"`
	Version json.RawMessage `json:"version"`
	LGSegmentIn
}

// LGPutParams are lg/put's params.
type LGPutParams struct {
	ThreadID        string          `json:"threadId"`
	Namespace       string          `json:"namespace"`
	CheckpointID    string          `json:"checkpointId"`
	ParentID        string          `json:"parentId"`
	Checkpoint      *LGSegmentIn    `json:"checkpoint"`
	ChannelVersions json.RawMessage `json:"channelVersions"`
	Metadata        json.RawMessage `json:"metadata"`
	Blobs           []LGBlobIn      `json:"blobs"`
}

// LGPutResult answers lg/put.
type LGPutResult struct {
	ThreadID     string `json:"threadId"`
	Namespace    string `json:"namespace"`
	CheckpointID string `json:"checkpointId"`
	BlobsStored  int    `json:"blobsStored"`
}

// LGWriteIn is one write of lg/putWrites.
type LGWriteIn struct {
	Channel string `json:"channel"`
	Idx     *int64 `json:"idx"`
	LGSegmentIn
}

// LGPutWritesParams are lg/putWrites' params.
type LGPutWritesParams struct {
	ThreadID     string      `json:"threadId"`
	Namespace    string      `json:"namespace"`
	CheckpointID string      `json:"checkpointId"`
	TaskID       string      `json:"taskId"`
	TaskPath     string      `json:"taskPath"`
	Writes       []LGWriteIn `json:"writes"`
}

// LGSegment is a typed segment of a response attachment.
type LGSegment struct {
	Type   string `json:"type"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
}

// LGBlobOut is one channel value of a tuple.
type LGBlobOut struct {
	Channel string          `json:"channel"`
	Version json.RawMessage `json:"version"`
	LGSegment
}

// LGWriteOut is one pending write of a tuple or a channel history.
type LGWriteOut struct {
	TaskID   string `json:"taskId"`
	TaskPath string `json:"taskPath"`
	Idx      int64  `json:"idx"`
	Channel  string `json:"channel"`
	LGSegment
}

// LGTuple is the wire form of a LangGraph CheckpointTuple.
type LGTuple struct {
	ThreadID        string          `json:"threadId"`
	Namespace       string          `json:"namespace"`
	CheckpointID    string          `json:"checkpointId"`
	ParentID        *string         `json:"parentId"`
	CreatedAt       string          `json:"createdAt"`
	Checkpoint      LGSegment       `json:"checkpoint"`
	ChannelVersions json.RawMessage `json:"channelVersions"`
	Metadata        json.RawMessage `json:"metadata"`
	Blobs           []LGBlobOut     `json:"blobs"`
	Writes          []LGWriteOut    `json:"writes"`
}

// LGGetParams are lg/get's params.
type LGGetParams struct {
	ThreadID     string `json:"threadId"`
	Namespace    string `json:"namespace"`
	CheckpointID string `json:"checkpointId"`
}

// LGGetResult answers lg/get.
type LGGetResult struct {
	Tuple *LGTuple `json:"tuple"`
}

// LGListParams are lg/list's params.
type LGListParams struct {
	ThreadID     string                     `json:"threadId"`
	Namespace    *string                    `json:"namespace"`
	CheckpointID string                     `json:"checkpointId"`
	Before       string                     `json:"before"`
	Metadata     map[string]json.RawMessage `json:"metadata"`
	Limit        *int                       `json:"limit"`
	Cursor       string                     `json:"cursor"`
}

// LGListResult answers lg/list.
type LGListResult struct {
	Tuples []LGTuple `json:"tuples"`
	Cursor string    `json:"cursor,omitempty"`
}

// LGChannelHistoryParams are lg/channelHistory's params.
type LGChannelHistoryParams struct {
	ThreadID     string   `json:"threadId"`
	Namespace    string   `json:"namespace"`
	CheckpointID string   `json:"checkpointId"`
	Channels     []string `json:"channels"`
}

// LGSeed is the seed value of a channel history.
type LGSeed struct {
	Version json.RawMessage `json:"version"`
	LGSegment
}

// LGChannelHistory is one channel of lg/channelHistory.
type LGChannelHistory struct {
	Writes []LGWriteOut `json:"writes"`
	Seed   *LGSeed      `json:"seed,omitempty"`
}

// LGChannelHistoryResult answers lg/channelHistory.
type LGChannelHistoryResult struct {
	Channels map[string]LGChannelHistory `json:"channels"`
	Visited  []string                    `json:"visited"`
}

// LGDeleteForRunsParams are lg/deleteForRuns' params.
type LGDeleteForRunsParams struct {
	RunIDs []string `json:"runIds"`
}

// ThreadDeleteParams are thread/delete's params.
type ThreadDeleteParams struct {
	ThreadID string `json:"threadId"`
}

// ThreadCopyParams are thread/copy's params.
type ThreadCopyParams struct {
	SourceThreadID string `json:"sourceThreadId"`
	TargetThreadID string `json:"targetThreadId"`
}

// ThreadCopyResult answers thread/copy.
type ThreadCopyResult struct {
	Copied int `json:"copied"`
}

// ThreadPruneParams are thread/prune's params.
type ThreadPruneParams struct {
	ThreadIDs []string `json:"threadIds"`
	Strategy  string   `json:"strategy"`
}

// ---------------------------------------------------------------------------------------------
// Segments

// segment returns the bytes a request segment names.
func segment(field string, seg LGSegmentIn, c *call) ([]byte, *jsonrpc2.Error) {
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
	seen map[string]LGSegment // blob key -> segment
}

func newPacker() *packer { return &packer{seen: map[string]LGSegment{}} }

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

func (p *packer) add(typ string, b []byte) LGSegment {
	seg := LGSegment{Type: typ, Offset: len(p.buf), Length: len(b)}
	p.buf = append(p.buf, b...)
	return seg
}

func (p *packer) blob(thread, ns string, b store.LGBlob) LGSegment {
	key := thread + "\x00" + ns + "\x00" + b.Channel + "\x00" + b.Version
	if seg, ok := p.seen[key]; ok {
		return seg
	}
	seg := p.add(b.Type, b.Data)
	p.seen[key] = seg
	return seg
}

func (p *packer) write(w store.LGWrite) LGWriteOut {
	return LGWriteOut{TaskID: w.TaskID, TaskPath: w.TaskPath, Idx: w.Idx, Channel: w.Channel, LGSegment: p.add(w.Type, w.Data)}
}

func (p *packer) tuple(t store.LGTuple) LGTuple {
	out := LGTuple{
		ThreadID:        t.ThreadID,
		Namespace:       t.Namespace,
		CheckpointID:    t.CheckpointID,
		CreatedAt:       timestamp(t.CreatedAt),
		Checkpoint:      p.add(t.Type, t.Checkpoint),
		ChannelVersions: t.ChannelVersions,
		Metadata:        t.Metadata,
		Blobs:           make([]LGBlobOut, 0, len(t.Blobs)),
		Writes:          make([]LGWriteOut, 0, len(t.Writes)),
	}
	if t.ParentID != "" {
		pid := t.ParentID
		out.ParentID = &pid
	}
	if len(out.Metadata) == 0 {
		out.Metadata = json.RawMessage("{}")
	}
	for _, b := range t.Blobs {
		out.Blobs = append(out.Blobs, LGBlobOut{Channel: b.Channel, Version: json.RawMessage(b.Version), LGSegment: p.blob(t.ThreadID, t.Namespace, b)})
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
	var p LGPutParams
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
	req := store.LGPutRequest{
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
	return reply{result: LGPutResult{ThreadID: p.ThreadID, Namespace: p.Namespace, CheckpointID: p.CheckpointID, BlobsStored: *n}}, nil
}

func (s *Server) lgPutWrites(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p LGPutWritesParams
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
	pending, n := s.store.LGPutWrites(p.ThreadID, p.Namespace, p.CheckpointID, ws)
	c.release()
	if err := pending.Wait(ctx); err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: WritesPutResult{Stored: *n}}, nil
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
	var p LGGetParams
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
	var res LGGetResult
	if t != nil {
		pk.reserve(*t)
		tu := pk.tuple(*t)
		res.Tuple = &tu
	}
	s.metrics.bytesOut.Add(int64(len(pk.buf)))
	return pk.reply(res), nil
}

func (s *Server) lgList(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p LGListParams
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
	out := LGListResult{Tuples: make([]LGTuple, 0, len(res.Tuples)), Cursor: res.Cursor}
	for _, t := range res.Tuples {
		out.Tuples = append(out.Tuples, pk.tuple(t))
	}
	s.metrics.bytesOut.Add(int64(len(pk.buf)))
	return pk.reply(out), nil
}

func (s *Server) lgChannelHistory(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p LGChannelHistoryParams
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
	out := LGChannelHistoryResult{Channels: map[string]LGChannelHistory{}, Visited: res.Visited}
	for _, ch := range p.Channels {
		h := res.Channels[ch]
		if h == nil {
			continue
		}
		o := LGChannelHistory{Writes: make([]LGWriteOut, 0, len(h.Writes))}
		for _, w := range h.Writes {
			o.Writes = append(o.Writes, pk.write(w))
		}
		if h.Seed != nil {
			o.Seed = &LGSeed{Version: json.RawMessage(h.Seed.Version), LGSegment: pk.blob(p.ThreadID, p.Namespace, *h.Seed)}
		}
		out.Channels[ch] = o
	}
	return pk.reply(out), nil
}

func (s *Server) lgDeleteForRuns(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p LGDeleteForRunsParams
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
	return reply{result: DeleteResult{Deleted: n}}, nil
}

func (s *Server) threadDelete(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p ThreadDeleteParams
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
	return reply{result: DeleteResult{Deleted: n}}, nil
}

func (s *Server) threadCopy(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p ThreadCopyParams
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
	return reply{result: ThreadCopyResult{Copied: n}}, nil
}

func (s *Server) threadPrune(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p ThreadPruneParams
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
	return reply{result: DeleteResult{Deleted: n}}, nil
}
