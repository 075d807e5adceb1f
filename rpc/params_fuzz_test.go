package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// fuzzCoreMethods are named by index in the seed corpus: append only. Methods registered
// besides these (lg/*, thread/*, ...) follow them, sorted by name.
var fuzzCoreMethods = []string{protocol.MethodInitialize, protocol.MethodSave, protocol.MethodLoad,
	protocol.MethodList, protocol.MethodDelete, protocol.MethodPrune, protocol.MethodConfigure,
	protocol.MethodComplete, protocol.MethodWorkflowList, protocol.MethodWritesPut,
	protocol.MethodResumePlan, protocol.MethodStats}

// fuzzMaxState keeps -32004 cheap to reach.
const fuzzMaxState = 64 << 10

// knownCodes are the error codes a handler may answer with (docs/protocol.md). -32603 is not
// among them: it means a bug.
var knownCodes = map[int64]bool{protocol.CodeInvalidParams: true, protocol.CodeNotFound: true,
	protocol.CodeCorrupt: true, protocol.CodeConflict: true, protocol.CodeTooLarge: true,
	protocol.CodeResumeInvalid: true, protocol.CodeUnavailable: true, protocol.CodeShuttingDown: true,
	protocol.CodeClaimed: true}

const (
	fuzzKnownWF = "fuzz-known"
	fuzzKnownID = "fuzz-known-1"
)

var fuzzKnownState = []byte(`{"known": ["state", 1, true, null, {"x": "<&>"}]}`)

func fuzzMethodNames(s *Server) []string {
	names := append([]string(nil), fuzzCoreMethods...)
	var extra []string
	for name := range s.methods {
		core := false
		for _, c := range fuzzCoreMethods {
			core = core || c == name
		}
		if !core {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	return append(names, extra...)
}

// fuzzAttachment decodes the fuzzer's attachment argument: an odd first byte means the frame
// carries the rest as its attachment (possibly empty); otherwise there is none.
func fuzzAttachment(b []byte) ([]byte, bool) {
	if len(b) == 0 || b[0]%2 == 0 {
		return nil, false
	}
	return b[1:], true
}

// FuzzParams calls every method's handler of a real Server, backed by a real store, with
// arbitrary params and attachment. It must never panic (safeRun would turn a panic into
// -32603), always reply with a result that encodes to valid JSON or an error with a protocol
// code other than -32603 (with data {field, reason} for -32602), and leave the store consistent:
// a known good checkpoint saved before still loads intact (unless the input was a mutation
// that may legitimately delete it, then it is saved again).
//
// Seeds: ../testdata/fuzz/FuzzParams ("go test fuzz v1" files: method index, params, attachment).
func FuzzParams(f *testing.F) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, store.Options{
		Path:             filepath.Join(f.TempDir(), "fuzz.db"),
		Durability:       store.DurabilityNormal, // no fsync per commit: more execs
		MaxStateBytes:    fuzzMaxState,
		DefaultRetention: store.Retention{KeepLast: 4},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	srv := New(st, Options{Version: "fuzz", Durability: store.DurabilityNormal, MaxStateBytes: fuzzMaxState,
		DefaultRetention: store.Retention{KeepLast: 4}})
	names := fuzzMethodNames(srv)
	ensureKnown := func(tb testing.TB) {
		// An input may have claimed the known workflow: its claim would refuse the save.
		if c, _, err := st.ClaimOf(ctx, fuzzKnownWF); err == nil && c.Held() {
			if _, err := st.Release(ctx, fuzzKnownWF, c.Token); err != nil {
				tb.Fatalf("releasing the known workflow's claim: %v", err)
			}
		}
		if _, err := st.Save(ctx, store.SaveRequest{WorkflowID: fuzzKnownWF, CheckpointID: fuzzKnownID, Step: 1,
			State: fuzzKnownState, StateType: store.StateJSON}); err != nil {
			tb.Fatalf("saving the known checkpoint: %v", err)
		}
	}
	ensureKnown(f)

	for _, s := range loadParamSeeds(f, "../testdata/fuzz/FuzzParams") {
		f.Add(s.method, s.params, s.attachment)
	}
	for i := range names { // every method, even ones without seed files: empty and no params
		f.Add(uint8(i), []byte(`{}`), []byte(nil))
		f.Add(uint8(i), []byte(`null`), []byte{1})
	}

	var execs atomic.Int64
	f.Fuzz(func(t *testing.T, mi uint8, params []byte, attArg []byte) {
		if len(params) > 0 && !json.Valid(params) {
			return // the codec hands handlers valid JSON only (a sub-slice of a valid body)
		}
		name := names[int(mi)%len(names)]
		m := srv.methods[name]
		att, hasAtt := fuzzAttachment(attArg)
		c := &call{
			req:           &Request{Method: name, In: Incoming{RawID: json.RawMessage("1")}},
			params:        json.RawMessage(params),
			attachment:    att,
			hasAttachment: hasAtt,
			release:       func() {},
		}
		if len(params) == 0 {
			c.params = nil
		}
		r, rerr := srv.safeRun(context.Background(), m, c)
		checkFuzzReply(t, name, params, r, rerr)

		// the store stays consistent
		cp, err := st.Load(ctx, fuzzKnownID)
		switch {
		case errors.Is(err, store.ErrNotFound) && m.kind == kindMutation:
			ensureKnown(t) // deleted by the input (delete, prune, complete, retention): fine
		case err != nil:
			t.Fatalf("%s %s: the known checkpoint no longer loads: %v", name, params, err)
		case string(cp.State) != string(fuzzKnownState) || cp.WorkflowID != fuzzKnownWF:
			t.Fatalf("%s %s: the known checkpoint changed: %s", name, params, cp.State)
		}
		if n := execs.Add(1); n%5000 == 0 {
			bad, err := st.Verify(ctx, nil)
			if err != nil || len(bad) > 0 {
				t.Fatalf("after %d execs: verify: %v %+v", n, err, bad)
			}
		}
	})
}

// checkFuzzReply asserts what respond would send is well-formed.
func checkFuzzReply(t *testing.T, name string, params []byte, r reply, rerr *jsonrpc2.Error) {
	t.Helper()
	if rerr != nil {
		if !knownCodes[rerr.Code] {
			t.Fatalf("%s %s: error code %d: %s", name, params, rerr.Code, rerr.Message)
		}
		if rerr.Message == "" {
			t.Fatalf("%s %s: error %d without message", name, params, rerr.Code)
		}
		if rerr.Code == protocol.CodeInvalidParams {
			var data struct{ Field, Reason *string }
			if rerr.Data == nil || json.Unmarshal(*rerr.Data, &data) != nil || data.Field == nil || data.Reason == nil {
				t.Fatalf("%s %s: -32602 without data {field, reason}: %s", name, params, rerr.Message)
			}
			// the message names the field as is, or quoted (a control character is escaped)
			if f := *data.Field; f != "" && !strings.Contains(rerr.Message, f) && !strings.Contains(rerr.Message, strconv.Quote(f)) {
				t.Fatalf("%s %s: -32602 message does not name the field %q: %s", name, params, *data.Field, rerr.Message)
			}
		}
		if _, err := json.Marshal(rerr); err != nil {
			t.Fatalf("%s %s: error does not encode: %v", name, params, err)
		}
		return
	}
	b, err := json.Marshal(r.result)
	if err != nil {
		t.Fatalf("%s %s: result does not encode: %v", name, params, err)
	}
	for _, f := range r.rawFields {
		b = spliceField(b, f.name, f.value)
	}
	if !json.Valid(b) {
		t.Fatalf("%s %s: reply is not valid JSON: %.300s", name, params, b)
	}
}

type paramSeed struct {
	method             uint8
	params, attachment []byte
}

// loadParamSeeds reads "go test fuzz v1" files holding (uint8|byte, []byte, []byte).
func loadParamSeeds(tb testing.TB, dir string) []paramSeed {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var out []paramSeed
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 4 || lines[0] != "go test fuzz v1" {
			tb.Fatalf("%s: not a (uint8, []byte, []byte) fuzz corpus file", e.Name())
		}
		var s paramSeed
		m, err := unquoteArg(lines[1], "byte", "uint8")
		if err == nil {
			if n, perr := strconv.ParseUint(m, 10, 8); perr == nil {
				s.method = uint8(n)
			} else if r, perr := strconv.Unquote(m); perr == nil && len(r) == 1 {
				s.method = r[0]
			} else {
				err = errors.New("bad method index " + m)
			}
		}
		var p, a string
		if err == nil {
			if p, err = unquoteArg(lines[2], "[]byte"); err == nil {
				p, err = strconv.Unquote(p)
			}
		}
		if err == nil {
			if a, err = unquoteArg(lines[3], "[]byte"); err == nil {
				a, err = strconv.Unquote(a)
			}
		}
		if err != nil {
			tb.Fatalf("%s: %v", e.Name(), err)
		}
		s.params, s.attachment = []byte(p), []byte(a)
		out = append(out, s)
	}
	return out
}

func unquoteArg(line string, types ...string) (string, error) {
	for _, typ := range types {
		if strings.HasPrefix(line, typ+"(") && strings.HasSuffix(line, ")") {
			return strings.TrimSuffix(strings.TrimPrefix(line, typ+"("), ")"), nil
		}
	}
	return "", errors.New("want " + strings.Join(types, " or ") + "(...), got " + line)
}
