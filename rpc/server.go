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
}

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
	lastMutation chan struct{} // closed once the previous mutation is queued in the store
	lastDone     chan struct{} // closed once the previous mutation has finished (read-your-writes)
	inflight     sync.WaitGroup
	shutdownDone chan struct{}

	engine *engine.Engine // the use cases: saves with sources, resume plans, drift (package engine)

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
	s := &Server{
		store:        st,
		engine:       engine.New(st, opts.Logger),
		opts:         opts,
		log:          opts.Logger,
		started:      time.Now(),
		events:       map[string]bool{},
		shutdownDone: make(chan struct{}),
	}
	s.workers.tasks = make(chan func())
	s.codec = NewCodec(framing.Limits{
		MaxBody:       2*opts.MaxStateBytes + 1<<20,
		MaxAttachment: opts.MaxStateBytes,
	}, opts.Logger)
	done := make(chan struct{})
	close(done)
	s.lastMutation = done
	s.lastDone = done
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
	names := make([]string, 0, len(s.methods))
	for name := range s.methods {
		names = append(names, name)
	}
	s.metrics = newMetrics(names)
	st.SetOnPruned(s.onPruned)
	return s
}

// Serve answers requests read from in on out until the client closes its end, sends shutdown,
// or ctx is cancelled. Every accepted mutation is finished before Serve returns.
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
	case <-s.shutdownDone:
		cause = "shutdown requested"
		rwc.drained(500 * time.Millisecond)
	case <-ctx.Done():
		cause = "signal"
	}
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.inflight.Wait()
	s.engine.CloseWatches(2 * time.Second) // the connection is closing: end every drift watch
	s.log.Info("stopping", "reason", cause)
	_ = conn.Close()
	return nil
}

// Handle implements jsonrpc2.Handler. It runs on the connection's read loop, so it only decodes
// enough to schedule the call and returns.
func (s *Server) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	inc, _ := s.codec.Take(req)
	if req.Method == protocolErrorMethod {
		if inc.ProtocolError != nil {
			s.log.Warn("bad frame", "code", inc.ProtocolError.Code, "error", inc.ProtocolError.Message)
			if !req.Notif {
				_ = conn.ReplyWithError(ctx, req.ID, inc.ProtocolError)
			}
		}
		return
	}
	if req.Method == protocol.MethodShutdown {
		s.shutdown(conn, req)
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
	c := &call{req: req, params: inc.Params, attachment: inc.Attachment, hasAttachment: inc.HasAttachment}
	// Mutations start in arrival order (each waits until the previous one is queued in the
	// store); reads wait for the mutations that arrived before them to finish, so a client that
	// pipelines a save and a load reads its own write, while later saves never wait for reads.
	var prev, finished chan struct{}
	if m.kind == kindMutation {
		prev = s.lastMutation
		mine := make(chan struct{})
		s.lastMutation = mine
		var once sync.Once
		c.release = func() { once.Do(func() { close(mine) }) }
		finished = make(chan struct{})
		s.lastDone = finished
	} else {
		prev = s.lastDone
		c.release = func() {}
	}
	s.mu.Unlock()

	s.workers.run(func() {
		defer s.inflight.Done()
		defer c.release()
		if finished != nil {
			defer close(finished)
		}
		<-prev
		start := time.Now()
		// Handlers run on a context that outlives the client's connection: an accepted save is
		// committed even if the client goes away before the reply.
		r, err := s.safeRun(m, c)
		s.respond(conn, req, r, err)
		s.metrics.byMethod[req.Method].observe(time.Since(start))
	})
}

// safeRun runs a handler and turns a panic into an internal error: client input must never
// take the daemon down.
func (s *Server) safeRun(m method, c *call) (r reply, err *jsonrpc2.Error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("handler panic", "method", c.req.Method, "panic", p)
			r, err = reply{}, rpcError(protocol.CodeInternal, "internal error (please report): handler panicked", nil)
		}
	}()
	return m.run(context.Background(), c)
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
	raw := json.RawMessage(b)
	if err := conn.SendResponse(ctx, &jsonrpc2.Response{ID: req.ID, Result: &raw}); err != nil {
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
