package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// strictMethod is one method's entry in TestStrictParamsEveryMethod.
type strictMethod struct {
	params any            // the params struct its handler decodes (a zero value)
	base   map[string]any // params of a call that succeeds; "$dir" is the fixture's source tree
	att    string         // the base call's attachment ("" : none)
	// changes: the base call changes what list/load show (a mutation that does something).
	changes bool
	// setup runs on the fixture before anything else (e.g. drift/unwatch needs a watch); ids it
	// returns replace "$name" strings of base (ids the server makes).
	setup func(c *lgConn) map[string]string
}

// strictMethods has an entry for every method the Server serves: TestStrictParamsEveryMethod
// fails for a method without one, so a new method cannot skip the strict params rule.
var strictMethods = map[string]strictMethod{
	protocol.MethodInitialize: {params: protocol.InitializeParams{}, base: map[string]any{"clientName": "strict", "events": []any{protocol.NotifyCorrupted}}},
	protocol.MethodSave: {params: protocol.SaveParams{}, changes: true, att: `{"Stat":1,"workflowid":"user data"}`, base: map[string]any{
		"workflowId": "new", "namespace": "", "checkpointId": "new-1", "parentId": "keep-2", "phase": "failed",
		"step": 3, "stepName": "s", "error": map[string]any{"message": "boom", "retryable": true},
		"stateAttachment": true, "stateType": "json", "completedTasks": []any{map[string]any{"WorkflowId": 1}},
		"pendingTasks": []any{}, "workflowHash": "h", "metadata": map[string]any{"Stat": true},
		"sources":    map[string]any{"root": "$dir", "include": []any{"*.txt"}, "exclude": []any{"tmp"}, "gitignore": true, "editorFiles": false},
		"validation": map[string]any{"confidence": 0.9, "message": "m", "details": map[string]any{"Confidence": 1}}}},
	protocol.MethodLoad: {params: protocol.LoadParams{}, base: map[string]any{"workflowId": "keep", "namespace": "", "attachment": false}},
	protocol.MethodList: {params: protocol.ListParams{}, base: map[string]any{"workflowId": "keep", "namespace": "", "phase": "completed",
		"metadata": map[string]any{"k": "v"}, "limit": 5, "validation": "passed"}},
	protocol.MethodDelete: {params: protocol.DeleteParams{}, changes: true, base: map[string]any{"checkpointId": "keep-1"}},
	protocol.MethodPrune:  {params: protocol.PruneParams{}, changes: true, base: map[string]any{"workflowId": "keep", "keepLast": 1, "dryRun": false}},
	protocol.MethodConfigure: {params: protocol.ConfigureParams{}, changes: true, base: map[string]any{"workflowId": "keep",
		"retention": map[string]any{"keepLast": 5, "maxAgeSeconds": 86400, "keepFirst": true, "idleTtlSeconds": 86400},
		"sources":   map[string]any{"root": "$dir", "include": []any{"*.txt"}, "exclude": []any{}, "gitignore": false, "editorFiles": true},
		"validation": map[string]any{"minConfidence": 0.5, "warningThreshold": 0.8, "rollbackOnFailure": true,
			"steps": map[string]any{"s": map[string]any{"minConfidence": 0.1}}},
		"compensation": map[string]any{"required": []any{}}}},
	protocol.MethodComplete: {params: protocol.CompleteParams{}, changes: true, base: map[string]any{"workflowId": "keep", "preserve": true}},
	protocol.MethodWorkflowList: {params: protocol.WorkflowListParams{}, base: map[string]any{"resumableOnly": true, "claimable": true,
		"limit": 5, "order": "id", "cursor": ""}},
	protocol.MethodWritesPut: {params: protocol.WritesPutParams{}, changes: true, base: map[string]any{"workflowId": "keep", "namespace": "",
		"checkpointId": "keep-2", "taskId": "t9", "taskPath": "p",
		"writes": []any{map[string]any{"channel": "c", "value": map[string]any{"Channel": 1}, "type": "json", "idx": 0}}}},
	protocol.MethodResumePlan: {params: protocol.ResumePlanParams{}, base: map[string]any{"workflowId": "keep", "namespace": "", "workflowHash": "h",
		"force": true, "attachment": false, "driftAsWarning": true, "sourcesRoot": "$dir"}},
	protocol.MethodStats:       {params: struct{}{}, base: map[string]any{}},
	protocol.MethodDriftStatus: {params: protocol.DriftStatusParams{}, base: map[string]any{"workflowId": "keep", "namespace": "", "sourcesRoot": "$dir"}},
	protocol.MethodDriftWatch:  {params: protocol.DriftWatchParams{}, base: map[string]any{"workflowId": "keep", "namespace": "", "debounceMs": 20}},
	protocol.MethodDriftUnwatch: {params: protocol.DriftUnwatchParams{}, base: map[string]any{"watchId": "w-1"},
		setup: func(c *lgConn) map[string]string {
			c.ok(protocol.MethodDriftWatch, map[string]any{"workflowId": "keep"}, nil, nil)
			return nil
		}},
	protocol.MethodCompensationRegister: {params: protocol.CompensationRegisterParams{}, changes: true, base: map[string]any{"workflowId": "keep",
		"namespace": "", "checkpointId": "keep-2", "stepName": "s", "taskId": "t", "action": map[string]any{"Action": 1}, "description": "undo"}},
	protocol.MethodRollbackPlan: {params: protocol.RollbackPlanParams{}, changes: true, base: map[string]any{"workflowId": "keep",
		"namespace": "", "toCheckpointId": "keep-1"}},
	protocol.MethodCompensationDone: {params: protocol.CompensationDoneParams{}, changes: true, base: map[string]any{
		"compensationId": "$compensationId", "rollbackId": "$rollbackId", "ok": false, "error": "EACCES"},
		setup: func(c *lgConn) map[string]string {
			var reg protocol.CompensationRegisterResult
			c.ok(protocol.MethodCompensationRegister, map[string]any{"workflowId": "keep", "action": 1, "description": "d"}, nil, &reg)
			var plan protocol.RollbackPlanResult
			c.ok(protocol.MethodRollbackPlan, map[string]any{"workflowId": "keep", "full": true}, nil, &plan)
			return map[string]string{"compensationId": reg.CompensationID, "rollbackId": plan.RollbackID}
		}},
	protocol.MethodRollbackComplete: {params: protocol.RollbackCompleteParams{}, changes: true, base: map[string]any{
		"rollbackId": "$rollbackId", "prune": true},
		setup: func(c *lgConn) map[string]string {
			var plan protocol.RollbackPlanResult
			c.ok(protocol.MethodRollbackPlan, map[string]any{"workflowId": "keep", "toCheckpointId": "keep-1"}, nil, &plan)
			return map[string]string{"rollbackId": plan.RollbackID}
		}},
	protocol.MethodLGPut: {params: protocol.LGPutParams{}, changes: true, att: "abc12", base: map[string]any{"threadId": "t-new", "namespace": "",
		"checkpointId": "n-1", "parentId": "", "checkpoint": map[string]any{"type": "msgpack", "offset": 0, "length": 3},
		"channelVersions": map[string]any{"Channel": 1}, "metadata": map[string]any{"Offset": 1},
		"blobs":     []any{map[string]any{"channel": "a", "version": 1, "type": "json", "offset": 3, "length": 2}},
		"retention": map[string]any{"keepLast": 100}}},
	protocol.MethodLGPutWrites: {params: protocol.LGPutWritesParams{}, changes: true, att: "12", base: map[string]any{"threadId": "t-keep",
		"namespace": "", "checkpointId": "lg-2", "taskId": "t9", "taskPath": "p",
		"writes": []any{map[string]any{"channel": "a", "idx": 0, "type": "json", "offset": 0, "length": 2}}}},
	protocol.MethodLGGet: {params: protocol.LGGetParams{}, base: map[string]any{"threadId": "t-keep", "namespace": "", "checkpointId": "lg-1"}},
	protocol.MethodLGList: {params: protocol.LGListParams{}, base: map[string]any{"threadId": "t-keep", "namespace": "",
		"metadata": map[string]any{"run_id": "r1"}, "metadataMatch": "python", "limit": 5}},
	protocol.MethodLGChannelHistory: {params: protocol.LGChannelHistoryParams{}, base: map[string]any{"threadId": "t-keep", "namespace": "",
		"checkpointId": "lg-2", "channels": []any{"a"}}},
	protocol.MethodLGDeleteForRuns: {params: protocol.LGDeleteForRunsParams{}, changes: true, base: map[string]any{"runIds": []any{"r1"}}},
	protocol.MethodThreadDelete:    {params: protocol.ThreadDeleteParams{}, changes: true, base: map[string]any{"threadId": "t-keep"}},
	protocol.MethodThreadCopy: {params: protocol.ThreadCopyParams{}, changes: true, base: map[string]any{"sourceThreadId": "t-keep",
		"targetThreadId": "t-copy"}},
	protocol.MethodThreadPrune: {params: protocol.ThreadPruneParams{}, changes: true, base: map[string]any{"threadIds": []any{"t-keep"},
		"strategy": "keep_latest"}},
	// a staged value and a retention are not what list/load show: no change to see
	protocol.MethodLGPutValue: {params: protocol.LGPutValueParams{}, att: "12", base: map[string]any{"threadId": "t-keep",
		"type": "json", "offset": 0, "length": 2}},
	protocol.MethodLGConfigure: {params: protocol.LGConfigureParams{}, base: map[string]any{"threadId": "t-keep",
		"retention": map[string]any{"keepLast": 50, "keepFirst": false, "maxAgeSeconds": 0, "idleTtlSeconds": 0}, "inherit": false}},
	protocol.MethodClaim: {params: protocol.ClaimParams{}, changes: true, base: map[string]any{"workflowId": "keep", "owner": "w1", "leaseSeconds": 60}},
	protocol.MethodRenew: {params: protocol.RenewParams{}, changes: true, base: map[string]any{"workflowId": "keep", "fencingToken": 1, "leaseSeconds": 120},
		setup: func(c *lgConn) map[string]string {
			c.ok(protocol.MethodClaim, map[string]any{"workflowId": "keep", "owner": "w1", "leaseSeconds": 60}, nil, nil)
			return nil
		}},
	protocol.MethodRelease: {params: protocol.ReleaseParams{}, changes: true, base: map[string]any{"workflowId": "keep", "fencingToken": 1},
		setup: func(c *lgConn) map[string]string {
			c.ok(protocol.MethodClaim, map[string]any{"workflowId": "keep", "owner": "w1", "leaseSeconds": 60}, nil, nil)
			return nil
		}},
}

// strictRawShapes are params kept raw in their struct (decoded later, by their own code) that
// have names of their own: the cases walk into them too.
var strictRawShapes = map[string]reflect.Type{"sources": reflect.TypeOf(drift.Spec{})}

// TestStrictParamsEveryMethod: for every method of the Server's method table, an unknown
// param, and every known param spelt with other case (at the top and in every nested object of
// the base call), are refused with -32602 naming the param and the name meant, and nothing is
// stored (what list/load show is unchanged). Then every known name is accepted, and the base
// call succeeds (and, for a mutation, changes what list/load show: the refused calls would
// have stored something).
func TestStrictParamsEveryMethod(t *testing.T) {
	probe, _ := newStrictConn(t)
	var names []string
	for name := range probe.srv.methods {
		names = append(names, name)
	}
	sort.Strings(names)
	for name := range strictMethods {
		_, served := probe.srv.methods[name]
		require.True(t, served, "strictMethods has %s, which the server does not serve", name)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			m, ok := strictMethods[name]
			require.True(t, ok, "method %s has no entry in strictMethods: add one (params struct and a base call that succeeds)", name)
			c, fx := newStrictConn(t)
			fx.fill(t, c)
			if m.setup != nil {
				fx.ids = m.setup(c.lgConn)
			}
			base := fx.expand(m.base).(map[string]any)
			var att []byte
			if m.att != "" {
				att = []byte(m.att)
			}
			before := fx.snapshot(t, c)

			cases := strictCases(reflect.TypeOf(m.params), base)
			require.NotEmpty(t, cases)
			for _, sc := range cases {
				r := c.call(name, sc.params, att)
				require.NotNil(t, r.Error, "%s: %s was accepted", name, sc.what)
				require.Equal(t, protocol.CodeInvalidParams, r.Error.Code, "%s: %s: %s", name, sc.what, r.Error.Message)
				var data struct{ Field, Reason string }
				require.NoError(t, json.Unmarshal(r.Error.Data, &data))
				require.Equal(t, sc.field, data.Field, "%s: %s: %s", name, sc.what, r.Error.Message)
				want := "unknown param " + quote(sc.field)
				if sc.meant != "" {
					want += " (did you mean " + quote(sc.meant) + "?)"
				}
				if sc.meant != "" || !strings.Contains(data.Reason, "did you mean") {
					require.Equal(t, want, data.Reason, "%s: %s", name, sc.what)
				}
				require.Equal(t, "invalid params: "+data.Reason, r.Error.Message)
				require.Equal(t, before, fx.snapshot(t, c), "%s: %s stored something", name, sc.what)
			}

			r := c.call(name, base, att)
			require.Nil(t, r.Error, "%s: the base call fails: %+v", name, r.Error)
			if m.changes {
				require.NotEqual(t, before, fx.snapshot(t, c), "%s: the base call changed nothing", name)
			} else {
				require.Equal(t, before, fx.snapshot(t, c), "%s: a read changed what is stored", name)
			}

			for _, kc := range knownNameCases(reflect.TypeOf(m.params), base) {
				r := c.call(name, kc.params, att)
				if r.Error != nil {
					require.NotContains(t, r.Error.Message, "unknown param", "%s: %s", name, kc.what)
				}
			}
		})
	}
}

// strictCase is a call that must be refused as naming field (suggesting meant).
type strictCase struct {
	what   string
	params map[string]any
	field  string
	meant  string
}

// jsonFields lists t's JSON names the way encoding/json sees them (tags, promoted fields of
// untagged embedded structs), written independently of rpc/strict.go's walk.
func jsonFields(t reflect.Type) []reflect.StructField {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []reflect.StructField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		f.Name = name
		out = append(out, f)
	}
	return out
}

// nestedStruct returns the struct type of a field whose value is an object (or an array of
// objects) with names of its own, and whether it is an array.
func nestedStruct(f reflect.StructField) (reflect.Type, bool, bool) {
	if t, ok := strictRawShapes[f.Name]; ok {
		return t, false, true
	}
	t := f.Type
	if t == reflect.TypeOf(json.RawMessage(nil)) {
		return nil, false, false
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	array := false
	if t.Kind() == reflect.Slice {
		t, array = t.Elem(), true
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	if t.Kind() != reflect.Struct {
		return nil, false, false
	}
	return t, array, true
}

// caseVariants are spellings of name that differ only by case.
func caseVariants(name string) []string {
	var out []string
	first := name[:1]
	if up := strings.ToUpper(first); up != first {
		out = append(out, up+name[1:])
	} else {
		out = append(out, strings.ToLower(first)+name[1:])
	}
	if low := strings.ToLower(name); low != name && low != out[0] {
		out = append(out, low)
	} else if upAll := strings.ToUpper(name); upAll != name && upAll != out[0] {
		out = append(out, upAll)
	}
	return out
}

// objectAt is one object of a base call the cases change: its path and its struct type.
type objectAt struct {
	path  []any // keys (string) and indices (int) from the params object
	label string
	typ   reflect.Type
}

// objectsOf lists the params object and every nested object of base that has names of its own.
func objectsOf(t reflect.Type, base map[string]any) []objectAt {
	out := []objectAt{{typ: t}}
	for i := 0; i < len(out); i++ {
		o := out[i]
		obj := navigate(base, o.path)
		for _, f := range jsonFields(o.typ) {
			nt, array, ok := nestedStruct(f)
			v, present := obj[f.Name]
			if !ok || !present {
				continue
			}
			p := append(append([]any(nil), o.path...), f.Name)
			label := o.label + f.Name
			if array {
				if arr, _ := v.([]any); len(arr) > 0 {
					if _, isObj := arr[0].(map[string]any); isObj {
						out = append(out, objectAt{path: append(p, 0), label: label + "[0].", typ: nt})
					}
				}
			} else if _, isObj := v.(map[string]any); isObj {
				out = append(out, objectAt{path: p, label: label + ".", typ: nt})
			}
		}
	}
	return out
}

func strictCases(t reflect.Type, base map[string]any) []strictCase {
	var cases []strictCase
	for _, o := range objectsOf(t, base) {
		p := clone(base)
		navigate(p, o.path)["bogusParam"] = 1
		cases = append(cases, strictCase{what: "unknown " + o.label + "bogusParam", params: p, field: o.label + "bogusParam"})
		for _, f := range jsonFields(o.typ) {
			for _, v := range caseVariants(f.Name) {
				p := clone(base)
				obj := navigate(p, o.path)
				val, present := obj[f.Name]
				delete(obj, f.Name)
				obj[v] = val // null when absent: encoding/json alone would take it as f
				what := fmt.Sprintf("%s%s for %s (present: %v)", o.label, v, f.Name, present)
				cases = append(cases, strictCase{what: what, params: p, field: o.label + v, meant: o.label + f.Name})
			}
		}
	}
	return cases
}

// knownNameCases add each known name the base call leaves out, as null: never "unknown".
func knownNameCases(t reflect.Type, base map[string]any) []strictCase {
	var cases []strictCase
	for _, o := range objectsOf(t, base) {
		for _, f := range jsonFields(o.typ) {
			if _, present := navigate(base, o.path)[f.Name]; present {
				continue
			}
			p := clone(base)
			navigate(p, o.path)[f.Name] = nil
			cases = append(cases, strictCase{what: "known " + o.label + f.Name, params: p})
		}
	}
	return cases
}

func navigate(v map[string]any, path []any) map[string]any {
	var cur any = v
	for _, k := range path {
		switch k := k.(type) {
		case string:
			cur = cur.(map[string]any)[k]
		case int:
			cur = cur.([]any)[k]
		}
	}
	return cur.(map[string]any)
}

func clone(v map[string]any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// strictConn is an lgConn that keeps its Server and store.
type strictConn struct {
	*lgConn
	srv *Server
}

// strictFixture is what every method's test starts from: workflow "keep" (checkpoints keep-1,
// keep-2 with sources and a pending write), LangGraph thread "t-keep" (lg-1 of run r1, lg-2
// with a write).
type strictFixture struct {
	st  store.Backend
	dir string
	ids map[string]string // "$name" replacements from the method's setup
}

func newStrictConn(t *testing.T) (*strictConn, *strictFixture) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "strict.db"),
		Durability: store.DurabilityNormal})
	require.NoError(t, err)
	srv := New(st, Options{Version: "test", Durability: store.DurabilityNormal})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &lgConn{t: t, in: inW, r: framing.NewReader(outR, framing.Limits{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		_ = srv.Serve(context.Background(), inR, outW)
		_ = outW.Close()
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
		require.NoError(t, st.Close())
	})
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644))
	return &strictConn{lgConn: c, srv: srv}, &strictFixture{st: st, dir: dir}
}

func (fx *strictFixture) fill(t *testing.T, c *strictConn) {
	t.Helper()
	c.ok(protocol.MethodSave, map[string]any{"workflowId": "keep", "checkpointId": "keep-1", "step": 1, "state": map[string]any{"n": 1},
		"metadata": map[string]any{"k": "v"}}, nil, nil)
	c.ok(protocol.MethodSave, map[string]any{"workflowId": "keep", "checkpointId": "keep-2", "step": 2, "state": map[string]any{"n": 2},
		"metadata": map[string]any{"k": "v"}, "sources": map[string]any{"root": fx.dir}}, nil, nil)
	c.ok(protocol.MethodWritesPut, map[string]any{"workflowId": "keep", "checkpointId": "keep-2", "taskId": "t0",
		"writes": []any{map[string]any{"channel": "c", "value": 1}}}, nil, nil)
	c.ok(protocol.MethodLGPut, map[string]any{"threadId": "t-keep", "checkpointId": "lg-1",
		"checkpoint": map[string]any{"type": "msgpack", "offset": 0, "length": 2}, "channelVersions": map[string]any{"a": 1},
		"metadata": map[string]any{"run_id": "r1"},
		"blobs":    []any{map[string]any{"channel": "a", "version": 1, "type": "json", "offset": 2, "length": 1}}}, []byte("c17"), nil)
	c.ok(protocol.MethodLGPut, map[string]any{"threadId": "t-keep", "checkpointId": "lg-2", "parentId": "lg-1",
		"checkpoint": map[string]any{"type": "msgpack", "offset": 0, "length": 2}, "channelVersions": map[string]any{"a": 2},
		"metadata": map[string]any{"run_id": "r2"},
		"blobs":    []any{map[string]any{"channel": "a", "version": 2, "type": "json", "offset": 2, "length": 1}}}, []byte("c28"), nil)
	c.ok(protocol.MethodLGPutWrites, map[string]any{"threadId": "t-keep", "checkpointId": "lg-2", "taskId": "t0",
		"writes": []any{map[string]any{"channel": "a", "type": "json", "offset": 0, "length": 1}}}, []byte("3"), nil)
}

// expand replaces "$dir" with the fixture's source tree.
func (fx *strictFixture) expand(v any) any {
	switch v := v.(type) {
	case string:
		if v == "$dir" {
			return fx.dir
		}
		if id, ok := fx.ids[strings.TrimPrefix(v, "$")]; ok && strings.HasPrefix(v, "$") {
			return id
		}
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = fx.expand(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = fx.expand(e)
		}
		return out
	}
	return v
}

// snapshot is what list and load show of everything stored, each workflow's settings, and the
// claims of every workflow and thread.
func (fx *strictFixture) snapshot(t *testing.T, c *strictConn) string {
	t.Helper()
	var sb strings.Builder
	var wl protocol.WorkflowListResult
	c.ok(protocol.MethodWorkflowList, map[string]any{}, nil, &wl)
	for _, w := range wl.Workflows {
		b, err := json.Marshal(w)
		require.NoError(t, err)
		fmt.Fprintf(&sb, "workflow %s\n", b)
		var cl protocol.ListResult
		c.ok(protocol.MethodList, map[string]any{"workflowId": w.WorkflowID, "limit": maxListLimit}, nil, &cl)
		for _, s := range cl.Checkpoints {
			r := c.call(protocol.MethodLoad, map[string]any{"checkpointId": s.CheckpointID}, nil)
			require.Nil(t, r.Error)
			fmt.Fprintf(&sb, "checkpoint %s\n", r.Result)
		}
		comps, err := fx.st.Compensations(context.Background(), w.WorkflowID, "", 0, 0)
		require.NoError(t, err)
		for _, cp := range comps {
			fmt.Fprintf(&sb, "compensation %d %s %s %s %s\n", cp.Seq, cp.StepName, cp.Status, cp.Error, cp.Action)
		}
		rb, err := fx.st.LatestRollback(context.Background(), w.WorkflowID, "")
		require.NoError(t, err)
		if rb != nil {
			fmt.Fprintf(&sb, "rollback to %q completed=%v\n", rb.ToCheckpointID, !rb.CompletedAt.IsZero())
		}
		err = fx.st.Export(context.Background(), w.WorkflowID, func(rec store.WorkflowRecord, n int) error {
			fmt.Fprintf(&sb, "settings %+v %s completed=%v\n", rec.Retention, rec.Config, !rec.CompletedAt.IsZero())
			return nil
		}, func(store.Checkpoint) error { return nil })
		require.NoError(t, err)
		fx.claim(t, &sb, w.WorkflowID)
	}
	threads, err := fx.st.LGThreads(context.Background())
	require.NoError(t, err)
	for _, th := range threads {
		r := c.call(protocol.MethodLGList, map[string]any{"threadId": th.ThreadID}, nil)
		require.Nil(t, r.Error)
		fmt.Fprintf(&sb, "thread %s %s %q\n", th.ThreadID, r.Result, r.att)
		fx.claim(t, &sb, th.ThreadID)
	}
	return sb.String()
}

func (fx *strictFixture) claim(t *testing.T, sb *strings.Builder, id string) {
	t.Helper()
	c, _, err := fx.st.ClaimOf(context.Background(), id)
	require.NoError(t, err)
	fmt.Fprintf(sb, "claim %+v\n", c)
}
