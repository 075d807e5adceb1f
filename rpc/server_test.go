package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// srvConn is a Server on pipes whose handlers a test may replace, spoken to with raw frames.
type srvConn struct {
	t      *testing.T
	srv    *Server
	st     store.Backend
	in     *io.PipeWriter
	r      *framing.Reader
	done   chan struct{}
	serveE error
	sent   atomic.Int64 // frames fully written by sendAsync
}

func newSrvConn(t *testing.T, opts Options, patch func(s *Server)) *srvConn {
	t.Helper()
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "s.db")})
	require.NoError(t, err)
	opts.Version = "test"
	srv := New(st, opts)
	if patch != nil {
		patch(srv)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &srvConn{t: t, srv: srv, st: st, in: inW, r: framing.NewReader(outR, framing.Limits{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.serveE = srv.Serve(context.Background(), inR, outW)
		_ = outW.Close()
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		go func() { _, _ = io.Copy(io.Discard, outR) }()
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
		require.NoError(t, st.Close())
	})
	return c
}

func reqFrame(id any, method string, params any) []byte {
	m := map[string]any{"jsonrpc": "2.0", "method": method}
	if id != nil {
		m["id"] = id
	}
	if params != nil {
		m["params"] = params
	}
	b, _ := json.Marshal(m)
	return framing.AppendFrame(nil, b, nil, false)
}

// sendAsync writes frames one by one on a goroutine (pipe writes block until read), counting
// those fully written.
func (c *srvConn) sendAsync(frames ...[]byte) {
	go func() {
		for _, f := range frames {
			if _, err := c.in.Write(f); err != nil {
				return
			}
			c.sent.Add(1)
		}
	}()
}

type srvReply struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (c *srvConn) next() srvReply {
	c.t.Helper()
	ch := make(chan srvReply, 1)
	go func() {
		f, err := c.r.Next()
		if err != nil {
			close(ch)
			return
		}
		var r srvReply
		_ = json.Unmarshal(f.Body, &r)
		ch <- r
	}()
	select {
	case r, ok := <-ch:
		require.True(c.t, ok, "server output ended")
		return r
	case <-time.After(10 * time.Second):
		c.t.Fatal("no reply within 10s")
	}
	return srvReply{}
}

// replies reads n replies keyed by id, in the order they came.
func (c *srvConn) replies(n int) ([]string, map[string]srvReply) {
	c.t.Helper()
	var order []string
	out := map[string]srvReply{}
	for len(order) < n {
		r := c.next()
		if r.Method != "" {
			continue
		}
		order = append(order, string(r.ID))
		out[string(r.ID)] = r
	}
	return order, out
}

// blockingSave replaces checkpoint/save: a save with stepName "block" blocks until release is
// closed or its context is cancelled (like a source scan); others run normally.
func blockingSave(release <-chan struct{}, started chan<- string) func(s *Server) {
	return func(s *Server) {
		real := s.methods[protocol.MethodSave]
		s.methods[protocol.MethodSave] = method{kindMutation, func(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
			var p struct {
				WorkflowID string `json:"workflowId"`
				StepName   string `json:"stepName"`
			}
			_ = json.Unmarshal(c.params, &p)
			if p.StepName == "block" {
				started <- p.WorkflowID
				select {
				case <-release:
				case <-ctx.Done():
					return reply{}, rpcError(protocol.CodeUnavailable, "scan interrupted: "+ctx.Err().Error(), nil)
				}
			}
			return real.run(ctx, c)
		}}
	}
}

// TestOrderingPerWorkflow: while a save of one workflow runs (blocked), other workflows' saves,
// loads and lists are answered; the blocked workflow's later requests and global ones wait for
// it, and see it.
func TestOrderingPerWorkflow(t *testing.T) {
	release, started := make(chan struct{}), make(chan string, 1)
	c := newSrvConn(t, Options{}, blockingSave(release, started))
	c.sendAsync(reqFrame("b0", protocol.MethodSave, map[string]any{"workflowId": "B", "checkpointId": "b-0", "state": 0}))
	_, rs := c.replies(1)
	require.Nil(t, rs[`"b0"`].Error)

	c.sendAsync(
		reqFrame("a1", protocol.MethodSave, map[string]any{"workflowId": "slow", "checkpointId": "a-1", "state": 1, "stepName": "block"}),
		reqFrame("a2", protocol.MethodList, map[string]any{"workflowId": "slow"}),
		reqFrame("all", protocol.MethodList, map[string]any{}),
		reqFrame("a-by-id", protocol.MethodLoad, map[string]any{"checkpointId": "a-1"}),
		reqFrame("b1", protocol.MethodSave, map[string]any{"workflowId": "B", "checkpointId": "b-1", "state": 1}),
		reqFrame("b2", protocol.MethodLoad, map[string]any{"workflowId": "B"}),
		reqFrame("b3", protocol.MethodList, map[string]any{"workflowId": "B"}),
		reqFrame("b-by-id", protocol.MethodLoad, map[string]any{"checkpointId": "b-0"}),
		reqFrame("stats", protocol.MethodStats, nil),
	)
	<-started
	order, rs := c.replies(5)
	assert.ElementsMatch(t, []string{`"b1"`, `"b2"`, `"b3"`, `"b-by-id"`, `"stats"`}, order, "answered while workflow slow's save runs")
	for _, id := range order {
		require.Nil(t, rs[id].Error, "%s: %+v", id, rs[id].Error)
	}
	assert.Contains(t, string(rs[`"b2"`].Result), `"checkpointId":"b-1"`, "the load sees the save sent before it")
	assert.Contains(t, string(rs[`"b3"`].Result), `"checkpointId":"b-1"`)

	close(release)
	_, rs = c.replies(4)
	for _, id := range []string{`"a1"`, `"a2"`, `"all"`, `"a-by-id"`} {
		require.Nil(t, rs[id].Error, "%s: %+v", id, rs[id].Error)
	}
	assert.Contains(t, string(rs[`"a2"`].Result), `"checkpointId":"a-1"`, "a later list of the workflow sees its save")
	assert.Contains(t, string(rs[`"all"`].Result), `"checkpointId":"a-1"`, "a global list sees every earlier save")
	assert.Contains(t, string(rs[`"a-by-id"`].Result), `"checkpointId":"a-1"`, "a load by id sees the save that named the id")
}

// TestCancelRequest: $/cancelRequest cancels a running request and one waiting behind it; both
// answer -32800 and store nothing, while the rest goes on.
func TestCancelRequest(t *testing.T) {
	release, started := make(chan struct{}), make(chan string, 1)
	defer close(release)
	c := newSrvConn(t, Options{}, blockingSave(release, started))
	c.sendAsync(
		reqFrame(1, protocol.MethodSave, map[string]any{"workflowId": "slow", "checkpointId": "s-1", "state": 1, "stepName": "block"}),
		reqFrame("queued", protocol.MethodSave, map[string]any{"workflowId": "slow", "checkpointId": "s-2", "state": 2}),
	)
	<-started
	c.sendAsync(
		reqFrame(nil, protocol.MethodCancelRequest, map[string]any{"id": "queued"}),
		reqFrame(nil, protocol.MethodCancelRequest, map[string]any{"id": 1}),
		reqFrame(nil, protocol.MethodCancelRequest, map[string]any{"id": "unknown"}),
		reqFrame("after", protocol.MethodSave, map[string]any{"workflowId": "slow", "checkpointId": "s-3", "state": 3}),
	)
	_, rs := c.replies(3)
	for _, id := range []string{"1", `"queued"`} {
		require.NotNil(t, rs[id].Error, id)
		assert.Equal(t, protocol.CodeRequestCancelled, rs[id].Error.Code, id)
	}
	require.Nil(t, rs[`"after"`].Error, "a save after the cancelled ones runs")
	for _, id := range []string{"s-1", "s-2"} {
		_, err := c.st.Load(context.Background(), id)
		assert.ErrorIs(t, err, store.ErrNotFound, "cancelled save %s stored nothing", id)
	}
	_, err := c.st.Load(context.Background(), "s-3")
	require.NoError(t, err)
}

// TestStopCancelsLongRequests: once the server stops (here: the client closes its input),
// requests still running after the grace are cancelled and answered -32007, and Serve returns
// promptly.
func TestStopCancelsLongRequests(t *testing.T) {
	release, started := make(chan struct{}), make(chan string, 1)
	defer close(release)
	c := newSrvConn(t, Options{StopGrace: 100 * time.Millisecond}, blockingSave(release, started))
	c.sendAsync(reqFrame(1, protocol.MethodSave, map[string]any{"workflowId": "slow", "state": 1, "stepName": "block"}),
		reqFrame(2, protocol.MethodSave, map[string]any{"workflowId": "other", "checkpointId": "o-1", "state": 2}))
	<-started
	_, rs := c.replies(1)
	require.Nil(t, rs["2"].Error)
	start := time.Now()
	require.NoError(t, c.in.Close())
	_, rs = c.replies(1)
	require.NotNil(t, rs["1"].Error)
	assert.Equal(t, protocol.CodeShuttingDown, rs["1"].Error.Code)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	assert.Less(t, time.Since(start), 3*time.Second)
	_, err := c.st.Load(context.Background(), "o-1")
	require.NoError(t, err, "the acknowledged save is stored")
}

// TestBackpressure: with replies unread, the server stops reading once MaxInFlight requests are
// in flight, so the client's writes block; once the client reads, everything is answered.
func TestBackpressure(t *testing.T) {
	const limit, n = 4, 200
	c := newSrvConn(t, Options{MaxInFlight: limit}, nil)
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = reqFrame(i, protocol.MethodStats, nil)
	}
	c.sendAsync(frames...)
	// io.Pipe has no buffer: a write returns once the server read it. Replies are not read, so
	// the first reply blocks, and reading stops at the bound.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && c.sent.Load() < n {
		time.Sleep(20 * time.Millisecond)
	}
	sent := c.sent.Load()
	reqs, _ := c.srv.flow.inFlight()
	assert.LessOrEqual(t, sent, int64(limit+2), "the server kept reading with %d requests in flight", reqs)
	assert.LessOrEqual(t, reqs, limit)
	order, _ := c.replies(n)
	assert.Len(t, order, n)
}

// TestBackpressureBytes: MaxInFlightBytes bounds the bytes in flight the same way, and a request
// larger than the bound is still served.
func TestBackpressureBytes(t *testing.T) {
	c := newSrvConn(t, Options{MaxInFlightBytes: 64 << 10}, nil)
	big := strings.Repeat("x", 40<<10)
	var frames [][]byte
	for i := range 20 {
		frames = append(frames, reqFrame(i, protocol.MethodSave, map[string]any{"workflowId": fmt.Sprint("w", i), "state": big}))
	}
	frames = append(frames, reqFrame("huge", protocol.MethodSave, map[string]any{"workflowId": "huge", "state": strings.Repeat("y", 200<<10)}))
	c.sendAsync(frames...)
	time.Sleep(500 * time.Millisecond)
	_, bytes := c.srv.flow.inFlight()
	assert.LessOrEqual(t, bytes, int64(64<<10+40<<10+100), "bytes in flight")
	assert.Less(t, c.sent.Load(), int64(len(frames)), "the client's writes block")
	_, rs := c.replies(len(frames))
	for id, r := range rs {
		require.Nil(t, r.Error, "%s: %+v", id, r.Error)
	}
}

// TestScopeOf: how each method's params key its place in the order.
func TestScopeOf(t *testing.T) {
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "o.db")})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.Save(context.Background(), store.SaveRequest{WorkflowID: "stored-wf", CheckpointID: "stored-cp", StateType: store.StateNone})
	require.NoError(t, err)
	srv := New(st, Options{})
	// an in-flight save naming checkpoint "flying" of workflow "F"
	_, mine := srv.order.enter(scope{kind: scopeKeys, keys: []string{"w:F"}, ids: []string{"flying"}}, true)
	defer srv.order.finish(mine, nil)
	none, global := scope{kind: scopeNone}, scope{kind: scopeGlobal}
	cases := []struct {
		method, params string
		want           scope
	}{
		{protocol.MethodStats, `{}`, none},
		{protocol.MethodInitialize, `{"clientName":"x"}`, none},
		{protocol.MethodSave, `{"workflowId":"A","state":{"workflowId":"B"}}`, scope{kind: scopeKeys, keys: []string{"w:A"}}},
		{protocol.MethodSave, `{"WORKFLOWID":"A"}`, scope{kind: scopeKeys, keys: []string{"w:A"}}},
		{protocol.MethodSave, `{"workflowId":"A","workflowId":"B"}`, scope{kind: scopeKeys, keys: []string{"w:B"}}},
		{protocol.MethodSave, `{"workflowId":"A","checkpointId":"c"}`, scope{kind: scopeKeys, keys: []string{"w:A"}, ids: []string{"c"}}},
		{protocol.MethodSave, `{"state":1}`, none},
		{protocol.MethodSave, `{"workflowId":5}`, none},
		{protocol.MethodSave, `[1]`, none},
		{protocol.MethodList, `{}`, global},
		{protocol.MethodList, `{"workflowId":""}`, global},
		{protocol.MethodList, `{"workflowId":"A"}`, scope{kind: scopeKeys, keys: []string{"w:A"}}},
		{protocol.MethodWorkflowList, `{}`, global},
		{protocol.MethodPrune, `{"keepLast":1}`, global},
		{protocol.MethodPrune, `{"workflowId":"A","keepLast":1}`, scope{kind: scopeKeys, keys: []string{"w:A"}}},
		{protocol.MethodLoad, `{"checkpointId":"stored-cp"}`, scope{kind: scopeKeys, keys: []string{"w:stored-wf"}}},
		{protocol.MethodLoad, `{"checkpointId":"flying"}`, scope{kind: scopeKeys, keys: []string{"w:F"}}},
		{protocol.MethodLoad, `{"checkpointId":"nowhere"}`, none},
		{protocol.MethodDelete, `{"checkpointId":"stored-cp"}`, scope{kind: scopeKeys, keys: []string{"w:stored-wf"}, ids: []string{"stored-cp"}}},
		{protocol.MethodDriftStatus, `{"checkpointId":"stored-cp"}`, scope{kind: scopeKeys, keys: []string{"w:stored-wf"}}},
		{protocol.MethodLoad, `{}`, none},
		{"lg/put", `{"threadId":"T"}`, scope{kind: scopeKeys, keys: []string{"t:T"}}},
		{"lg/list", `{}`, global},
		{"lg/deleteForRuns", `{"runIds":["r"]}`, global},
		{"thread/copy", `{"sourceThreadId":"S","targetThreadId":"T"}`, scope{kind: scopeKeys, keys: []string{"t:S", "t:T"}}},
		{"thread/prune", `{"threadIds":["S","T"]}`, scope{kind: scopeKeys, keys: []string{"t:S", "t:T"}}},
		{"thread/prune", `{"threadIds":"S"}`, none},
		{"workflow/claim", `{"workflowId":"W","owner":"o"}`, scope{kind: scopeKeys, keys: []string{"w:W", "t:W"}}},
		{"workflow/renew", `{"workflowId":"W"}`, scope{kind: scopeKeys, keys: []string{"w:W", "t:W"}}},
		{"workflow/release", `{}`, none},
		{"future/method", `{}`, global},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.params, func(t *testing.T) {
			assert.Equal(t, tc.want, srv.scopeOf(tc.method, json.RawMessage(tc.params)))
		})
	}
	// every method of the server has a rule
	for name := range srv.methods {
		_, ok := scopeRules[name]
		assert.True(t, ok, "no scope rule for %s", name)
	}
}

// TestOrderer: mutations of one key queue behind each other, reads wait for them to finish,
// other keys do not wait, and a global request waits for everything before it.
func TestOrderer(t *testing.T) {
	o := newOrderer()
	a, b := scope{kind: scopeKeys, keys: []string{"w:A"}}, scope{kind: scopeKeys, keys: []string{"w:B"}}
	global := scope{kind: scopeGlobal}
	d1, m1 := o.enter(a, true) // A's first mutation: runs at once
	require.Empty(t, d1)
	d2, m2 := o.enter(a, true) // A's second: after m1 is queued
	require.Equal(t, []*orderNode{m1}, d2)
	dr, _ := o.enter(a, false) // a read of A: after m2 finished
	require.Equal(t, []*orderNode{m2}, dr)
	db, mb := o.enter(b, true) // B: nothing to wait for
	require.Empty(t, db)
	dg, mg := o.enter(global, true) // global: after A's and B's latest
	require.ElementsMatch(t, []*orderNode{m2, mb}, dg)
	d3, _ := o.enter(b, false) // after the global mutation
	require.Equal(t, []*orderNode{mg}, d3)

	assert.False(t, ready(d2, queuedOf))
	m1.release()
	assert.True(t, ready(d2, queuedOf))
	assert.False(t, ready(dr, doneOf))
	o.finish(m1, d1)
	o.finish(m2, d2)
	assert.True(t, ready(dr, doneOf))
	o.finish(mb, db)
	o.finish(mg, dg)
	assert.True(t, ready(d3, doneOf))
	assert.Empty(t, o.tails)
	assert.Nil(t, o.global)

	// A mutation finished before the one it waited for: it counts as done only after it.
	_, x1 := o.enter(a, true)
	dx2, x2 := o.enter(a, true)
	var finished sync.WaitGroup
	finished.Add(1)
	go func() { defer finished.Done(); o.finish(x2, dx2) }()
	dr2, _ := o.enter(a, false)
	time.Sleep(20 * time.Millisecond)
	assert.False(t, ready(dr2, doneOf))
	o.finish(x1, nil)
	finished.Wait()
	require.Eventually(t, func() bool { return ready(dr2, doneOf) }, 5*time.Second, time.Millisecond)
}

// TestFlowReturnsMemoryAfterBurst: once a burst is over and the connection has been idle for a
// moment, the heap is returned to the operating system; not after a request that allocated
// little, and not while requests keep coming.
func TestFlowReturnsMemoryAfterBurst(t *testing.T) {
	f := newFlow(4, 1<<20, false)
	frees := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.frees
	}
	burst := func() {
		f.acquire(0)
		var sink [][]byte
		for range 40 {
			sink = append(sink, make([]byte, 1<<20))
		}
		_ = sink
		f.release(0)
	}
	burst()
	require.Eventually(t, func() bool { return frees() == 1 }, 5*time.Second, 5*time.Millisecond)

	f.acquire(0)
	f.release(0)
	time.Sleep(3 * freeIdle)
	assert.Equal(t, 1, frees(), "nothing to return after a small request")

	burst()
	f.acquire(0) // a request arrives before the connection is idle for freeIdle
	time.Sleep(3 * freeIdle)
	assert.Equal(t, 1, frees(), "not while a request is in flight")
	f.release(0)
	require.Eventually(t, func() bool { return frees() == 2 }, 5*time.Second, 5*time.Millisecond)
}
