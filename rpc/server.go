// Package rpc is ckptd's JSON-RPC face: the server, the framing codec (codec.go) and one
// handler file per method family. The wire types it decodes and encodes are package
// protocol's. Handlers decode params, call the engine (use cases composed of store, drift and
// resume) or the store (plain reads and writes), and encode the reply; none of those packages
// knows JSON-RPC.
package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	conn         *jsonrpc2.Conn
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
	req           *jsonrpc2.Request
	params        json.RawMessage
	attachment    []byte
	hasAttachment bool
	release       func()          // for mutations: lets the next mutation start
	sources       json.RawMessage // checkpoint/save's sources param (saveSources, rpc/drift.go)
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
	conn := jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(rwc, s.codec), s,
		jsonrpc2.SetLogger(slogAdapter{s.log}))
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()

	var cause string
	select {
	case <-conn.DisconnectNotify():
		cause = "client closed the connection"
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
	if cause == "client closed stdin" || cause == "input abandoned" {
		// The codec ends the connection once the replies it owes are written.
		select {
		case <-conn.DisconnectNotify():
		case <-hard.C:
		}
	}
	s.engine.CloseWatches(2 * time.Second) // the connection is closing: end every drift watch
	s.log.Info("stopping", "reason", cause)
	_ = conn.Close()
	if err := s.codec.Err(); err != nil {
		return err
	}
	return nil
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

// Handle implements jsonrpc2.Handler. It runs on the connection's read loop, so it only reads
// enough of the params to schedule the call, and returns once the connection has room for
// another request (see flow.go): while it waits, nothing more is read.
func (s *Server) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	inc, _ := s.codec.Take(req)
	switch req.Method {
	case protocolErrorMethod:
		if inc.ProtocolError != nil {
			s.log.Warn("bad frame", "code", inc.ProtocolError.Code, "error", inc.ProtocolError.Message)
			if !req.Notif {
				_ = conn.ReplyWithError(ctx, req.ID, inc.ProtocolError)
			}
		}
		return
	case protocol.MethodShutdown:
		s.shutdown(conn, req)
		return
	case protocol.MethodCancelRequest:
		s.cancelRequest(conn, req, inc.Params)
		return
	}
	m, ok := s.methods[req.Method]
	if !ok {
		s.respond(conn, req, reply{}, rpcError(protocol.CodeMethodNotFound, "method not found: "+req.Method, map[string]string{"method": req.Method}))
		return
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.respond(conn, req, reply{}, rpcError(protocol.CodeShuttingDown, "shutting down: no new requests are accepted", nil))
		return
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
	run := func() {
		defer end()
		if err := wait(rctx, deps, pick); err != nil {
			s.order.finish(mine, deps)
			s.respond(conn, req, reply{}, cancelledError(rctx))
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
		s.respond(conn, req, r, err)
		s.metrics.byMethod[req.Method].observe(time.Since(start))
	}
	if ready(deps, pick) {
		s.workers.run(run)
	} else {
		// Wait on a small goroutine; a worker (with the stack SQLite grew) runs it when ready.
		go func() {
			_ = wait(rctx, deps, pick)
			s.workers.run(run)
		}()
	}
	s.flow.waitRoom(s.stopping)
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
func (s *Server) cancelRequest(conn *jsonrpc2.Conn, req *jsonrpc2.Request, params json.RawMessage) {
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	if perr := decodeParams(params, &p); perr != nil || !validID(p.ID) {
		if perr == nil {
			perr = invalidParams("id", "must be the id of a request: a string or an integer in [0, 2^53]")
		}
		s.log.Debug("$/cancelRequest ignored", "error", perr.Message)
		if !req.Notif {
			s.respond(conn, req, reply{}, perr)
		}
		return
	}
	s.mu.Lock()
	calls := s.running[idKey(p.ID)]
	for _, rc := range calls {
		rc.cancel(errRequestCancelled)
	}
	s.mu.Unlock()
	s.log.Debug("$/cancelRequest", "id", string(p.ID), "cancelled", len(calls))
	if !req.Notif {
		s.respond(conn, req, reply{result: nil}, nil)
	}
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

func (s *Server) respond(conn *jsonrpc2.Conn, req *jsonrpc2.Request, r reply, rerr *jsonrpc2.Error) {
	ctx := context.Background()
	if r.after != nil {
		defer r.after()
	}
	if req.Notif {
		if rerr != nil {
			s.log.Warn("notification failed", "method", req.Method, "error", rerr.Message)
		}
		return
	}
	if rerr != nil {
		if rerr.Code == protocol.CodeInternal || rerr.Code == protocol.CodeUnavailable {
			s.log.Error("request failed", "method", req.Method, "code", rerr.Code, "error", rerr.Message)
		} else {
			s.log.Debug("request rejected", "method", req.Method, "code", rerr.Code, "error", rerr.Message)
		}
		if err := conn.ReplyWithError(ctx, req.ID, rerr); err != nil {
			s.log.Debug("reply not sent", "method", req.Method, "error", err)
		}
		return
	}
	b, err := json.Marshal(r.result)
	if err != nil {
		_ = conn.ReplyWithError(ctx, req.ID, rpcError(protocol.CodeInternal, "internal error: "+err.Error(), nil))
		return
	}
	for _, f := range r.rawFields {
		b = spliceField(b, f.name, f.value)
	}
	if r.hasAttachment {
		s.codec.AttachToReply(req.ID, r.attachment)
	}
	if err := conn.SendResponse(ctx, &jsonrpc2.Response{ID: req.ID, Result: s.codec.Result(req.ID, b)}); err != nil {
		s.log.Debug("reply not sent", "method", req.Method, "error", err)
	}
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
	conn := s.conn
	s.mu.Unlock()
	if !on || conn == nil {
		return
	}
	if err := conn.Notify(context.Background(), method, params); err != nil && !errors.Is(err, jsonrpc2.ErrClosed) {
		s.log.Debug("notification not sent", "method", method, "error", err)
	}
}

func (s *Server) onPruned(workflowID string, ids []string, reason string) {
	s.metrics.add(&s.metrics.pruned, int64(len(ids)))
	s.notify(protocol.NotifyPruned, protocol.PrunedEvent{WorkflowID: workflowID, CheckpointIDs: ids, Reason: reason})
}

// stdio joins the process's stdin and stdout into the ReadWriteCloser jsonrpc2 wants.
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

// slogAdapter routes jsonrpc2's internal log lines to slog at debug level.
type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Printf(format string, v ...any) {
	a.log.Debug("jsonrpc2", "msg", fmt.Sprintf(format, v...))
}
