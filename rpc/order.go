package rpc

// Ordering of pipelined requests (docs/protocol.md, "Ordering of pipelined requests").
//
// Every request has a scope, read from its params when it arrives:
//
//   - a set of keys: "w:<workflowId>" for the checkpoint family, "t:<threadId>" for the
//     LangGraph family (two for thread/copy, one per thread for thread/prune). A request that
//     names only a checkpointId is keyed by that checkpoint's workflow: the one of an earlier
//     in-flight mutation that named the same id, or the one stored in the database;
//   - global: the request spans every workflow or thread (checkpoint/prune and checkpoint/list
//     without workflowId, workflow/list, lg/list without threadId, lg/deleteForRuns);
//   - none: the request reads nothing another request writes (initialize, stats,
//     drift/unwatch), or it will be refused for the very param that would key it (a required
//     workflowId that is missing or not a string), so it waits for nothing.
//
// Mutations start in arrival order per key: one waits until every earlier mutation sharing a key
// with it, and every earlier global mutation, is queued in the store (a save: after its source
// fingerprint, when its transaction is queued); a global mutation waits for every earlier
// mutation. A read waits until those same earlier mutations have finished (read-your-writes).
// Nothing waits for a request of another key: a long save of workflow A (a big source scan)
// delays A's later requests and global ones, never B's.

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/ckptd/ckptd/protocol"
)

type scopeKind int

const (
	scopeNone   scopeKind = iota // ordered after nothing, nothing is ordered after it
	scopeKeys                    // ordered with the requests sharing one of its keys
	scopeGlobal                  // ordered with every request
)

type scope struct {
	kind scopeKind
	keys []string
	// ids are checkpoint ids a mutation names explicitly (a save's checkpointId, a
	// writes/put's, a delete's): later requests naming only such an id are keyed like it.
	ids []string
}

func keyed(keys ...string) scope { return scope{kind: scopeKeys, keys: keys} }

// orderNode is one mutation in the order.
type orderNode struct {
	queued   chan struct{} // closed when later mutations of its keys may start
	done     chan struct{} // closed when it and every mutation it waited for have finished
	keys     []string      // nil: global
	ids      []string
	queuedMu sync.Once
}

func (n *orderNode) release() { n.queuedMu.Do(func() { close(n.queued) }) }

// orderer keeps, per key, the latest mutation that has not finished.
type orderer struct {
	mu     sync.Mutex
	tails  map[string]*orderNode
	global *orderNode
	ids    map[string]map[string]int // checkpoint id -> workflow key -> in-flight mutations naming it
}

func newOrderer() *orderer {
	return &orderer{tails: map[string]*orderNode{}, ids: map[string]map[string]int{}}
}

// enter places a request in the order. deps are the mutations it must wait for (their queued
// channel for a mutation, their done channel for a read); mine is the new node of a mutation
// (nil for a read or an unordered request).
func (o *orderer) enter(sc scope, mutation bool) (deps []*orderNode, mine *orderNode) {
	if sc.kind == scopeNone {
		return nil, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	add := func(n *orderNode) {
		if n == nil {
			return
		}
		for _, d := range deps {
			if d == n {
				return
			}
		}
		deps = append(deps, n)
	}
	add(o.global)
	if sc.kind == scopeGlobal {
		for _, n := range o.tails {
			add(n)
		}
	} else {
		for _, k := range sc.keys {
			add(o.tails[k])
		}
	}
	if !mutation {
		return deps, nil
	}
	mine = &orderNode{queued: make(chan struct{}), done: make(chan struct{}), ids: sc.ids}
	if sc.kind == scopeGlobal {
		// Everything later waits for this one, which waits for everything earlier.
		clear(o.tails)
		o.global = mine
	} else {
		mine.keys = sc.keys
		for _, k := range sc.keys {
			o.tails[k] = mine
		}
		for _, id := range sc.ids {
			m := o.ids[id]
			if m == nil {
				m = map[string]int{}
				o.ids[id] = m
			}
			for _, k := range sc.keys {
				m[k]++
			}
		}
	}
	return deps, mine
}

// idKeys returns the keys of the in-flight mutations that named checkpoint id, and whether any
// mutation at all is in flight (queued, running, or waiting for an earlier one).
func (o *orderer) idKeys(id string) (keys []string, busy bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.ids[id] {
		keys = append(keys, k)
	}
	return keys, o.global != nil || len(o.tails) > 0
}

// ready reports whether every channel picked from deps is closed.
func ready(deps []*orderNode, pick func(*orderNode) chan struct{}) bool {
	for _, d := range deps {
		select {
		case <-pick(d):
		default:
			return false
		}
	}
	return true
}

func queuedOf(n *orderNode) chan struct{} { return n.queued }
func doneOf(n *orderNode) chan struct{}   { return n.done }

// wait waits for every picked channel of deps, or ctx.
func wait(ctx context.Context, deps []*orderNode, pick func(*orderNode) chan struct{}) error {
	for _, d := range deps {
		select {
		case <-pick(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// finish completes mine once its own work is over (run, refused or cancelled): later mutations
// of its keys may start once the ones it waited for are queued, and it counts as done once those
// are done too. It never blocks: when something is still running it waits on a goroutine.
func (o *orderer) finish(mine *orderNode, deps []*orderNode) {
	if mine == nil {
		return
	}
	complete := func() {
		_ = wait(context.Background(), deps, queuedOf)
		mine.release()
		_ = wait(context.Background(), deps, doneOf)
		close(mine.done)
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, k := range mine.keys {
			if o.tails[k] == mine {
				delete(o.tails, k)
			}
		}
		if o.global == mine {
			o.global = nil
		}
		for _, id := range mine.ids {
			m := o.ids[id]
			for _, k := range mine.keys {
				if m[k]--; m[k] <= 0 {
					delete(m, k)
				}
			}
			if len(m) == 0 {
				delete(o.ids, id)
			}
		}
	}
	if ready(deps, doneOf) {
		complete()
		return
	}
	go complete()
}

// --- scopes ---

// scopeRule says how a method's params key it.
type scopeRule struct {
	field    string // the param holding the key ("" : see kind)
	prefix   string // "w:" or "t:"
	also     string // a second prefix for the same id (claims: a workflow and the thread of one id)
	required bool   // absent, "" or not a string: the handler refuses it (scope none)
	kind     scopeKind
	byID     bool     // keyed by checkpointId's workflow when field is absent
	fields   []string // several keys (thread/copy)
	list     string   // a param holding an array of keys (thread/prune)
	namesIDs bool     // the mutation names a checkpointId (ids of scope)
	emptyOK  bool     // "" is a key (a LangGraph thread id), not an absent one
}

var scopeRules = map[string]scopeRule{
	"initialize":         {kind: scopeNone},
	"stats":              {kind: scopeNone},
	"drift/unwatch":      {kind: scopeNone},
	"checkpoint/save":    {field: "workflowId", prefix: "w:", required: true, namesIDs: true},
	"checkpoint/load":    {field: "workflowId", prefix: "w:", byID: true},
	"checkpoint/list":    {field: "workflowId", prefix: "w:"},
	"checkpoint/delete":  {field: "workflowId", prefix: "w:", byID: true},
	"checkpoint/prune":   {field: "workflowId", prefix: "w:"},
	"workflow/configure": {field: "workflowId", prefix: "w:", required: true},
	"workflow/complete":  {field: "workflowId", prefix: "w:", required: true},
	"workflow/list":      {kind: scopeGlobal},
	"writes/put":         {field: "workflowId", prefix: "w:", required: true, namesIDs: true},
	"resume/plan":        {field: "workflowId", prefix: "w:", required: true},
	"drift/status":       {field: "workflowId", prefix: "w:", byID: true},
	"drift/watch":        {field: "workflowId", prefix: "w:", byID: true},
	"lg/put":             {field: "threadId", prefix: "t:", required: true, emptyOK: true},
	"lg/putWrites":       {field: "threadId", prefix: "t:", required: true, emptyOK: true},
	"lg/putValue":        {field: "threadId", prefix: "t:", required: true, emptyOK: true},
	"lg/get":             {field: "threadId", prefix: "t:", required: true, emptyOK: true},
	"lg/list":            {field: "threadId", prefix: "t:", emptyOK: true},
	"lg/channelHistory":  {field: "threadId", prefix: "t:", required: true, emptyOK: true},
	"lg/configure":       {field: "threadId", prefix: "t:", emptyOK: true},
	"lg/deleteForRuns":   {kind: scopeGlobal},
	"thread/delete":      {field: "threadId", prefix: "t:", required: true, emptyOK: true},
	"thread/copy":        {fields: []string{"sourceThreadId", "targetThreadId"}, prefix: "t:", emptyOK: true},
	"thread/prune":       {list: "threadIds", prefix: "t:"},
	// A claim fences the writes of the workflow and of the LangGraph thread of its id.
	"workflow/claim":   {field: "workflowId", prefix: "w:", also: "t:", required: true},
	"workflow/renew":   {field: "workflowId", prefix: "w:", also: "t:", required: true},
	"workflow/release": {field: "workflowId", prefix: "w:", also: "t:", required: true},
	// The compensation log (rpc/compensation.go). compensation/done and rollback/complete name
	// only a compensation or a rollback: global, which orders them after every earlier mutation
	// of their workflow too.
	"compensation/register": {field: "workflowId", prefix: "w:", required: true},
	"rollback/plan":         {field: "workflowId", prefix: "w:", required: true},
	"compensation/done":     {kind: scopeGlobal},
	"rollback/complete":     {kind: scopeGlobal},
}

// lookupTimeout bounds the database read that finds the workflow of a checkpoint named by id.
const lookupTimeout = 2 * time.Second

// scopeOf reads the scope of a request from its params. It runs on the read loop: it scans only
// the top-level members of params (no decoding of large values) and, for a request naming only
// a checkpointId, reads that checkpoint's workflow from the database (an indexed lookup).
func (s *Server) scopeOf(method string, params json.RawMessage) scope {
	rule, ok := scopeRules[method]
	if !ok {
		return scope{kind: scopeGlobal} // a method added without a rule: the safe choice
	}
	if rule.kind != scopeKeys && rule.field == "" && rule.fields == nil && rule.list == "" {
		return scope{kind: rule.kind}
	}
	want := append([]string{rule.field, "checkpointId", rule.list}, rule.fields...)
	m := topMembers(params, want...)
	if params = bytes.TrimSpace(params); len(params) > 0 && params[0] != '{' && !bytes.Equal(params, jsonNull) {
		return scope{kind: scopeNone} // not an object: refused
	}
	switch {
	case rule.fields != nil:
		var keys []string
		for _, f := range rule.fields {
			v, st := stringMember(m, f, rule.emptyOK)
			if st != memberString {
				return scope{kind: scopeNone}
			}
			keys = append(keys, rule.prefix+v)
		}
		return keyed(keys...)
	case rule.list != "":
		raw, ok := m[rule.list]
		var ids []string
		if !ok || json.Unmarshal(raw, &ids) != nil || len(ids) == 0 {
			return scope{kind: scopeNone}
		}
		keys := make([]string, 0, len(ids))
		for _, id := range ids {
			keys = append(keys, rule.prefix+id)
		}
		return keyed(keys...)
	}
	v, st := stringMember(m, rule.field, rule.emptyOK)
	switch {
	case st == memberString:
		sc := keyed(rule.prefix + v)
		if rule.also != "" {
			sc.keys = append(sc.keys, rule.also+v)
		}
		if rule.namesIDs {
			if id, st := stringMember(m, "checkpointId"); st == memberString {
				sc.ids = []string{id}
			}
		}
		return sc
	case st == memberInvalid || rule.required:
		return scope{kind: scopeNone}
	case !rule.byID:
		return scope{kind: scopeGlobal}
	}
	id, st := stringMember(m, "checkpointId")
	if st != memberString {
		return scope{kind: scopeNone} // refused: neither workflowId nor checkpointId
	}
	return s.checkpointScope(method, id)
}

// checkpointScope keys a request that names only checkpoint id by that checkpoint's workflow.
// With no mutation in flight there is nothing to wait for, and the database is not asked.
func (s *Server) checkpointScope(method, id string) scope {
	keys, busy := s.order.idKeys(id)
	if !busy && method != protocol.MethodDelete {
		// (A delete is itself a mutation: the requests after it must find its workflow's key.)
		return scope{kind: scopeNone}
	}
	return s.storedScope(method, id, keys)
}

// storedScope keys a request naming checkpoint id by the workflow stored for it (a database
// read), besides keys.
func (s *Server) storedScope(method, id string, keys []string) scope {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	sums, err := s.store.Summaries(ctx, []string{id})
	if err != nil {
		s.log.Warn("cannot find the workflow of a checkpoint; ordering the request after every earlier one",
			"method", method, "checkpointId", id, "error", err)
		return scope{kind: scopeGlobal}
	}
	if sm, ok := sums[id]; ok {
		k := "w:" + sm.WorkflowID
		found := false
		for _, x := range keys {
			found = found || x == k
		}
		if !found {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		// Neither stored nor named by an earlier request in flight: nothing earlier can
		// change what this request finds.
		return scope{kind: scopeNone}
	}
	sc := keyed(keys...)
	if method == protocol.MethodDelete {
		sc.ids = []string{id}
	}
	return sc
}

type memberState int

const (
	memberAbsent  memberState = iota // absent, null or ""
	memberString                     // a non-empty string
	memberInvalid                    // present but not a string
)

// stringMember reads member name of m as a non-empty string.
func stringMember(m map[string][]byte, name string, emptyOK ...bool) (string, memberState) {
	raw, ok := m[name]
	if !ok || bytes.Equal(raw, jsonNull) {
		return "", memberAbsent
	}
	var v string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
		return "", memberInvalid
	}
	if v == "" && (len(emptyOK) == 0 || !emptyOK[0]) {
		return "", memberAbsent
	}
	return v, memberString
}

// topMembers returns the raw values of the named top-level members of the JSON object b (names
// matched case-insensitively, the last occurrence winning: what encoding/json decodes), without
// decoding or copying the other members. b should be valid JSON (the codec checked the whole
// body); of anything else it returns what could be read.
func topMembers(b []byte, names ...string) map[string][]byte {
	out := map[string][]byte{}
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return out
	}
	i = skipWS(b, i+1)
	for i < len(b) && b[i] == '"' {
		ke := scanString(b, i)
		if ke < 0 {
			return out
		}
		key := b[i+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if json.Unmarshal(b[i:ke], &k) != nil {
				return out
			}
			key = []byte(k)
		}
		i = skipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return out
		}
		i = skipWS(b, i+1)
		if i >= len(b) {
			return out
		}
		ve := scanValue(b, i)
		if ve < 0 {
			return out
		}
		for _, n := range names {
			// encoding/json matches field names case-insensitively: so must the scope.
			if n != "" && (string(key) == n || strings.EqualFold(string(key), n)) {
				out[n] = b[i:ve]
			}
		}
		i = skipWS(b, ve)
		if i >= len(b) || b[i] != ',' {
			return out
		}
		i = skipWS(b, i+1)
	}
	return out
}
