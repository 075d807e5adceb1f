// Package rpc is ckptd's JSON-RPC face: the server, the framing codec (codec.go) and one
// handler file per method family. The wire types it decodes and encodes are package
// protocol's. Handlers decode params, call the engine (use cases composed of store, drift and
// resume) or the store (plain reads and writes), and encode the reply; none of those packages
// knows JSON-RPC.
package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// Options configure a Server.
type Options struct {
	Version          string
	Durability       string
	MaxStateBytes    int64
	DefaultRetention store.Retention
	Logger           *slog.Logger

	// MaxInFlight and MaxInFlightBytes bound the requests, and their params plus attachment
	// bytes, read but not yet answered; at the bound the server stops reading its input (see
	// flow.go). 0: DefaultMaxInFlight, DefaultMaxInFlightBytes.
	MaxInFlight      int
	MaxInFlightBytes int64
	// ManageMemory lets the server move the Go runtime's soft memory limit with the bytes in
	// flight (a process-wide setting: for the daemon, not for a server embedded in tests).
	ManageMemory bool
	// StopGrace is how long requests already read may run once the server stops (shutdown,
	// end of input, ctx cancelled) before whatever has not committed is cancelled. 0:
	// DefaultStopGrace.
	StopGrace time.Duration
}

// DefaultStopGrace: see Options.StopGrace.
const DefaultStopGrace = time.Second

// stopHardLimit is how long, after the grace, Serve still waits for requests to end (a reply
// blocked on a client that no longer reads) before it returns anyway.
const stopHardLimit = 2 * time.Second

var (
	errRequestCancelled = errors.New("request cancelled by $/cancelRequest")
	errShuttingDown     = errors.New("shutting down")
)

// Server serves one client connection over a byte stream (stdin/stdout).
type Server struct {
	store   store.Backend
	opts    Options
	log     *slog.Logger
	codec   *Codec
	metrics *metrics
	methods map[string]method
	started time.Time

	mu           sync.Mutex
	out          io.Writer // the connection's output, once Serve runs
	in           any       // the connection's input, once Serve runs (inputIdle)
	events       map[string]bool
	feed         feedState // other processes' events (rpc/feed.go)
	closing      bool
	running      map[string][]*runningCall // by request id (idKey): what $/cancelRequest cancels
	inflight     sync.WaitGroup
	shutdownDone chan struct{}

	engine *engine.Engine // the use cases: saves with sources, resume plans, drift (package engine)

	order *orderer // per-workflow and per-thread ordering (rpc/order.go)
	flow  *flow    // backpressure and memory (rpc/flow.go)

	// base is the parent of every request's context; it is cancelled (cause errShuttingDown)
	// StopGrace after the server began to stop.
	base       context.Context
	cancelBase context.CancelCauseFunc
	stopping   chan struct{} // closed when the server begins to stop
	stopOnce   sync.Once

	workers workers // goroutines that run handlers (rpc/workers.go)
}

// kind says how a method is scheduled.
type kind int

const (
	kindRead     kind = iota // runs concurrently
	kindMutation             // runs after the previous mutation was queued, in arrival order
)

type method struct {
	kind kind
	run  func(ctx context.Context, c *call) (reply, *jsonrpc2.Error)
}

// cancelInside are the mutations whose handler honours its context up to the point where it
// queues its write, and goes on without it from there (checkpoint/save: its source scan is
// cancellable). Other mutations run on a context that is never cancelled once they started:
// cancellation reaches them only while they wait for their turn.
var cancelInside = map[string]bool{protocol.MethodSave: true}

// runningCall is a request that $/cancelRequest (or the stop) can cancel.
type runningCall struct {
	cancel context.CancelCauseFunc
}

// call is one request being served.
type call struct {
	req           *Request
	params        json.RawMessage
	attachment    []byte
	hasAttachment bool
	release       func()          // for mutations: lets the next mutation start
	sources       json.RawMessage // checkpoint/save's sources param (saveSources, rpc/drift.go)
	delta         bool            // checkpoint/save: the state was sent as a stateDelta
}

// reply is a handler's answer. rawFields are spliced into the marshalled result byte-for-byte
// (used for JSON states, which must not be re-encoded).
type reply struct {
	result        any
	rawFields     []rawField
	attachment    []byte
	hasAttachment bool
	after         func() // runs once the reply was sent (or could not be)
}

type rawField struct {
	name  string
	value json.RawMessage
}

// New makes a Server for st.
func New(st store.Backend, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.MaxStateBytes <= 0 {
		opts.MaxStateBytes = 64 << 20
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = DefaultStopGrace
	}
	s := &Server{
		store:        st,
		engine:       engine.New(st, opts.Logger),
		opts:         opts,
		log:          opts.Logger,
		started:      time.Now(),
		events:       map[string]bool{},
		shutdownDone: make(chan struct{}),
		running:      map[string][]*runningCall{},
		order:        newOrderer(),
		flow:         newFlow(opts.MaxInFlight, opts.MaxInFlightBytes, opts.ManageMemory),
		stopping:     make(chan struct{}),
	}
	s.base, s.cancelBase = context.WithCancelCause(context.Background())
	s.workers.tasks = make(chan func())
	s.codec = NewCodec(framing.Limits{
		MaxBody:       2*opts.MaxStateBytes + 1<<20,
		MaxAttachment: opts.MaxStateBytes,
	}, opts.Logger)
	s.codec.out.othersBusy = func() bool { return s.flow.active.Load() > 1 }
	s.methods = map[string]method{
		protocol.MethodInitialize:   {kindRead, s.initialize},
		protocol.MethodSave:         {kindMutation, s.save},
		protocol.MethodLoad:         {kindRead, s.load},
		protocol.MethodList:         {kindRead, s.list},
		protocol.MethodDelete:       {kindMutation, s.delete},
		protocol.MethodPrune:        {kindMutation, s.prune},
		protocol.MethodConfigure:    {kindMutation, s.configure},
		protocol.MethodComplete:     {kindMutation, s.complete},
		protocol.MethodWorkflowList: {kindRead, s.workflowList},
		protocol.MethodWritesPut:    {kindMutation, s.writesPut},
		protocol.MethodResumePlan:   {kindRead, s.resumePlan},
		protocol.MethodStats:        {kindRead, s.stats},
		protocol.MethodDriftStatus:  {kindRead, s.driftStatus},
		protocol.MethodDriftWatch:   {kindRead, s.driftWatch},
		protocol.MethodDriftUnwatch: {kindRead, s.driftUnwatch},
	}
	for name, m := range s.langGraphMethods() { // lg/*, thread/*: rpc/langgraph.go
		s.methods[name] = m
	}
	for name, m := range s.compensationMethods() { // compensation/*, rollback/*: rpc/compensation.go
		s.methods[name] = m
	}
	names := make([]string, 0, len(s.methods))
	for name := range s.methods {
		names = append(names, name)
	}
	s.metrics = newMetrics(names)
	st.SetOnPruned(s.onPruned)
	return s
}

// Serve answers requests read from in on out until the client closes its end, sends shutdown,
// or ctx is cancelled. Requests already read then get Options.StopGrace to finish; whatever has
// not committed by then is cancelled and answered -32007. Every acknowledged write is committed
// before Serve returns. It returns an error only when the input had to be abandoned (a frame
// declaring more bytes than can be skipped).
func (s *Server) Serve(ctx context.Context, in io.ReadCloser, out io.Writer) error {
	rwc := &stdio{in: in, out: out}
	s.mu.Lock()
	s.out = rwc
	s.in = in
	s.mu.Unlock()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		s.readLoop(bufio.NewReaderSize(rwc, readBufferSize))
	}()

	var cause string
	select {
	case <-s.codec.InputEnded():
		cause = "client closed stdin"
		if s.codec.Err() != nil {
			cause = "input abandoned"
		}
	case <-s.shutdownDone:
		cause = "shutdown requested"
	case <-ctx.Done():
		cause = "signal"
	}
	s.beginStop()
	hard := time.NewTimer(s.opts.StopGrace + stopHardLimit)
	defer hard.Stop()
	if cause == "shutdown requested" {
		rwc.drained(500 * time.Millisecond)
	}
	idle := make(chan struct{})
	go func() { s.inflight.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-hard.C:
		n, _ := s.flow.inFlight()
		s.log.Warn("stopping with requests unanswered (a reply the client does not read?)", "count", n)
	}
	s.engine.CloseWatches(2 * time.Second) // the connection is closing: end every drift watch
	s.log.Info("stopping", "reason", cause)
	_ = in.Close()
	if err := s.codec.Err(); err != nil {
		return err
	}
	return nil
}

// readBufferSize is the read loop's buffer: a few small requests, or the head of a large one.
const readBufferSize = 64 << 10

// readLoop reads requests until the input ends, handing each to handle. While the connection
// has no room for another request (backpressure, flow.go), nothing more is read.
//
// Leader/follower: a call that may start at once runs on the goroutine that read it, which is
// warm and already on a CPU, while the reading goes on in an idle worker; handing the call to a
// worker instead would put a goroutine wake-up (a thread wake-up when none is spinning) on every
// request's critical path. The goroutine that ran the call then becomes an idle worker.
//
// A quick read (inlineReads) with nothing else waiting to be read runs before the reading goes
// on, on the same goroutine: a client that waits for each answer has sent nothing more, and
// handing the reading over would cost a thread wake-up and a blocked read(2) on another thread
// per request (tens of µs of latency on a busy machine). A request that arrives meanwhile is
// read once the read is answered.
func (s *Server) readLoop(br *bufio.Reader) {
	for {
		s.flow.waitRoom(s.stopping)
		req, err := s.codec.Read(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, framing.ErrAbandoned) {
				s.log.Debug("stdin read failed", "error", err)
			}
			return
		}
		if run := s.handle(req); run != nil {
			if inlineRead(req) && br.Buffered() == 0 && s.inputIdle() {
				run()
				continue
			}
			s.workers.run(func() { s.readLoop(br) })
			run()
			return
		}
	}
}

// inlineReads are the reads that answer from the store in about the time of a request, which
// readLoop runs on the reading goroutine when no other request waits to be read: true for the
// reads of one checkpoint (or tuple), "list" for the listings, inline only while they are
// bounded (inlineList). While one runs nothing else is read, not even a cancellation: so none
// of them may wait for long. stats is not one of them: it reads settings on the writer's
// connection, which waits for the writer's statement in progress (a BEGIN IMMEDIATE behind
// another process's transaction, a bite of a deletion); nor initialize (once per connection,
// and its events may wait for PostgreSQL's LISTEN connection).
var inlineReads = map[string]string{
	protocol.MethodLoad: "true", protocol.MethodLGGet: "true",
	protocol.MethodList: "list", protocol.MethodWorkflowList: "list", protocol.MethodLGList: "list",
}

// inlineMaxRows bounds the page a listing run inline may ask for (checkpoint/list's default is
// 100, workflow/list's 1000; lg/list without a limit lists everything).
const inlineMaxRows = 1000

// inlineRead reports whether req is a quick read (inlineReads).
func inlineRead(req *Request) bool {
	switch inlineReads[req.Method] {
	case "true":
		return true
	case "list":
		return inlineList(req.Method, req.In.Params)
	}
	return false
}

// inlineList reports whether a listing's params ask for a bounded page without a metadata
// filter (which may read many rows for each it returns). Params that do not decode are answered
// by the handler with an error, at once.
func inlineList(method string, params json.RawMessage) bool {
	if !bytes.Contains(params, []byte(`"limit"`)) && !bytes.Contains(params, []byte(`"metadata"`)) {
		return method != protocol.MethodLGList // its default is no limit at all
	}
	var p struct {
		Limit    *int            `json:"limit"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return true
	}
	if m := bytes.TrimSpace(p.Metadata); len(m) > 0 && !bytes.Equal(m, []byte("null")) && !bytes.Equal(m, []byte("{}")) {
		return false
	}
	if p.Limit == nil {
		return method != protocol.MethodLGList
	}
	return *p.Limit <= inlineMaxRows
}

// inputIdle reports whether nothing waits to be read from the connection's input (false when
// that cannot be known).
func (s *Server) inputIdle() bool {
	s.mu.Lock()
	in := s.in
	s.mu.Unlock()
	return in != nil && unreadBytes(in) == 0
}

// beginStop refuses new requests and, after the grace, cancels whatever has not committed.
func (s *Server) beginStop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		close(s.stopping)
		time.AfterFunc(s.opts.StopGrace, func() { s.cancelBase(errShuttingDown) })
	})
}

// handle runs on the connection's read loop, so it only reads enough of the params to schedule
// the call. It answers what needs no handler itself, and returns the call to run when it may
// start at once (nothing earlier to wait for: see readLoop); a call that must wait for earlier
// ones is started on a worker when they are done.
func (s *Server) handle(req *Request) (run func()) {
	inc := req.In
	switch req.Method {
	case protocolErrorMethod:
		if inc.ProtocolError != nil {
			s.log.Warn("bad frame", "code", inc.ProtocolError.Code, "error", inc.ProtocolError.Message)
			s.respond(req, reply{}, inc.ProtocolError)
		}
		return nil
	case protocol.MethodShutdown:
		s.shutdown(req)
		return nil
	case protocol.MethodCancelRequest:
		s.cancelRequest(req, inc.Params)
		return nil
	}
	m, ok := s.methods[req.Method]
	if !ok {
		s.respond(req, reply{}, rpcError(protocol.CodeMethodNotFound, "method not found: "+req.Method, map[string]string{"method": req.Method}))
		return nil
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.respond(req, reply{}, rpcError(protocol.CodeShuttingDown, "shutting down: no new requests are accepted", nil))
		return nil
	}
	s.inflight.Add(1)
	s.mu.Unlock()

	c := &call{req: req, params: inc.Params, attachment: inc.Attachment, hasAttachment: inc.HasAttachment, release: func() {}}
	size := int64(len(inc.Params) + len(inc.Attachment))
	s.flow.acquire(size)
	deps, mine := s.order.enter(s.scopeOf(req.Method, inc.Params), m.kind == kindMutation)
	if mine != nil {
		c.release = mine.release
	}
	rctx, cancel := context.WithCancelCause(s.base)
	rc := &runningCall{cancel: cancel}
	key := idKey(inc.RawID)
	if !req.Notif {
		s.mu.Lock()
		s.running[key] = append(s.running[key], rc)
		s.mu.Unlock()
	}
	end := func() {
		cancel(nil)
		if !req.Notif {
			s.mu.Lock()
			s.running[key] = removeCall(s.running[key], rc)
			if len(s.running[key]) == 0 {
				delete(s.running, key)
			}
			s.mu.Unlock()
		}
		s.flow.release(size)
		s.inflight.Done()
	}
	pick := doneOf // a read waits for the earlier mutations of its keys to finish
	if m.kind == kindMutation {
		pick = queuedOf // a mutation, for them to be queued in the store
	}
	runCall := func() {
		defer end()
		if err := wait(rctx, deps, pick); err != nil {
			s.order.finish(mine, deps)
			s.respond(req, reply{}, cancelledError(rctx))
			return
		}
		start := time.Now()
		hctx := rctx
		if m.kind == kindMutation && !cancelInside[req.Method] {
			hctx = context.WithoutCancel(rctx)
		}
		r, err := s.safeRun(hctx, m, c)
		s.order.finish(mine, deps)
		if err != nil && rctx.Err() != nil {
			err = cancelledError(rctx)
		}
		s.respond(req, r, err)
		s.metrics.byMethod[req.Method].observe(time.Since(start))
	}
	if ready(deps, pick) {
		return runCall
	}
	// Wait on a small goroutine; a worker (with the stack SQLite grew) runs it when ready.
	go func() {
		_ = wait(rctx, deps, pick)
		s.workers.run(runCall)
	}()
	return nil
}

// cancelledError is the reply to a request cancelled before it committed anything.
func cancelledError(ctx context.Context) *jsonrpc2.Error {
	if errors.Is(context.Cause(ctx), errShuttingDown) {
		return rpcError(protocol.CodeShuttingDown, "shutting down: request cancelled before it completed", nil)
	}
	return rpcError(protocol.CodeRequestCancelled, "request cancelled", nil)
}

// cancelRequest handles LSP's $/cancelRequest {id}: the requests in flight with that id are
// cancelled; those that have not committed anything answer -32800. An unknown or finished id is
// ignored.
func (s *Server) cancelRequest(req *Request, params json.RawMessage) {
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	if perr := decodeParams(params, &p); perr != nil || !validID(p.ID) {
		if perr == nil {
			perr = invalidParams("id", "must be the id of a request: a string or an integer in [0, 2^53]")
		}
		s.log.Debug("$/cancelRequest ignored", "error", perr.Message)
		s.respond(req, reply{}, perr)
		return
	}
	s.mu.Lock()
	calls := s.running[idKey(p.ID)]
	for _, rc := range calls {
		rc.cancel(errRequestCancelled)
	}
	s.mu.Unlock()
	s.log.Debug("$/cancelRequest", "id", string(p.ID), "cancelled", len(calls))
	s.respond(req, reply{result: nil}, nil)
}

// idKey canonicalises a request id: the string value of a string id, or "#" and the digits of a
// number (validID allows no other spellings), so that $/cancelRequest finds it however it
// escapes the string.
func idKey(raw json.RawMessage) string {
	if len(raw) > 0 && raw[0] == '"' {
		var v string
		if json.Unmarshal(raw, &v) == nil {
			return "s" + v
		}
	}
	return "#" + string(raw)
}

func removeCall(calls []*runningCall, rc *runningCall) []*runningCall {
	for i, x := range calls {
		if x == rc {
			return append(calls[:i], calls[i+1:]...)
		}
	}
	return calls
}

// safeRun runs a handler and turns a panic into an internal error: client input must never
// take the daemon down.
func (s *Server) safeRun(ctx context.Context, m method, c *call) (r reply, err *jsonrpc2.Error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("handler panic", "method", c.req.Method, "panic", p)
			r, err = reply{}, rpcError(protocol.CodeInternal, "internal error (please report): handler panicked", nil)
		}
	}()
	return m.run(ctx, c)
}

func (s *Server) respond(req *Request, r reply, rerr *jsonrpc2.Error) {
	if r.after != nil {
		defer r.after()
	}
	if req.Notif {
		if rerr != nil && req.Method != protocolErrorMethod {
			s.log.Warn("notification failed", "method", req.Method, "error", rerr.Message)
		}
		return
	}
	out := s.output()
	if rerr != nil {
		if rerr.Code == protocol.CodeInternal || rerr.Code == protocol.CodeUnavailable {
			s.log.Error("request failed", "method", req.Method, "code", rerr.Code, "error", rerr.Message)
		} else {
			s.log.Debug("request rejected", "method", req.Method, "code", rerr.Code, "error", rerr.Message)
		}
		if err := s.codec.ReplyError(out, req, rerr); err != nil {
			s.log.Debug("reply not sent", "method", req.Method, "error", err)
		}
		return
	}
	b, err := json.Marshal(r.result)
	if err != nil {
		_ = s.codec.ReplyError(out, req, rpcError(protocol.CodeInternal, "internal error: "+err.Error(), nil))
		return
	}
	for _, f := range r.rawFields {
		b = spliceField(b, f.name, f.value)
	}
	if err := s.codec.Reply(out, req, b, r.attachment, r.hasAttachment); err != nil {
		s.log.Debug("reply not sent", "method", req.Method, "error", err)
	}
}

// output is where replies and notifications go (io.Discard before Serve).
func (s *Server) output() io.Writer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return io.Discard
	}
	return s.out
}

// spliceField adds "name":value to the JSON object b without re-encoding value.
func spliceField(b []byte, name string, value json.RawMessage) []byte {
	if len(value) == 0 {
		value = json.RawMessage("null")
	}
	end := bytes.LastIndexByte(b, '}')
	if end < 0 {
		return b
	}
	key, _ := json.Marshal(name)
	out := make([]byte, 0, len(b)+len(key)+len(value)+2)
	out = append(out, b[:end]...)
	if len(bytes.TrimSpace(b[1:end])) > 0 {
		out = append(out, ',')
	}
	out = append(out, key...)
	out = append(out, ':')
	out = append(out, value...)
	out = append(out, b[end:]...)
	return out
}

// notify sends an opted-in notification; delivery failures are logged, never fatal.
func (s *Server) notify(method string, params any) {
	s.mu.Lock()
	on := s.events[method]
	out := s.out
	s.mu.Unlock()
	if !on || out == nil {
		return
	}
	if err := s.codec.Notify(out, method, params); err != nil {
		s.log.Debug("notification not sent", "method", method, "error", err)
	}
}

func (s *Server) onPruned(workflowID string, ids []string, reason string) {
	s.metrics.add(&s.metrics.pruned, int64(len(ids)))
	s.notify(protocol.NotifyPruned, protocol.PrunedEvent{WorkflowID: workflowID, CheckpointIDs: ids, Reason: reason})
}

// stdio joins the process's stdin and stdout, counting reads for drained.
type stdio struct {
	in  io.ReadCloser
	out io.Writer
	// reads counts Read calls begun; waiting is set while one is blocked in in.Read; ended
	// once a Read failed (EOF: the client closed its end).
	reads   atomic.Uint64
	waiting atomic.Bool
	ended   atomic.Bool
}

func (s *stdio) Read(p []byte) (int, error) {
	s.reads.Add(1)
	s.waiting.Store(true)
	n, err := s.in.Read(p)
	s.waiting.Store(false)
	if err != nil {
		s.ended.Store(true)
	}
	return n, err
}

// drained waits (up to limit) until the read loop has consumed everything the client already
// sent: it sits in Read and has not come back for more for a few milliseconds. Requests that
// arrived together with shutdown are answered (refused) before the connection closes, rather
// than left without a reply.
func (s *stdio) drained(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && !s.ended.Load() {
		n := s.reads.Load()
		if s.waiting.Load() {
			time.Sleep(2 * time.Millisecond)
			if s.waiting.Load() && s.reads.Load() == n {
				return
			}
			continue
		}
		time.Sleep(time.Millisecond)
	}
}
func (s *stdio) Write(p []byte) (int, error) { return s.out.Write(p) }
func (s *stdio) Close() error                { return s.in.Close() }
