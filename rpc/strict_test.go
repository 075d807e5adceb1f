package rpc

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/protocol"
)

// TestDecodeParamsStrict: the names decodeParams refuses, the field it names, the name it
// suggests, and the user data it leaves alone.
func TestDecodeParamsStrict(t *testing.T) {
	dir := t.TempDir()
	save := func() any { return &protocol.SaveParams{} }
	prune := func() any { return &protocol.PruneParams{} }
	configure := func() any { return &protocol.ConfigureParams{} }
	writesPut := func() any { return &protocol.WritesPutParams{} }
	list := func() any { return &protocol.ListParams{} }
	lgPut := func() any { return &protocol.LGPutParams{} }
	lgPutWrites := func() any { return &protocol.LGPutWritesParams{} }
	driftWatch := func() any { return &protocol.DriftWatchParams{} }
	type want struct {
		field string
		meant string // "" : no suggestion
	}
	for _, tc := range []struct {
		name   string
		params string
		into   func() any
		bad    *want // nil: accepted
	}{
		// top level
		{"typo of state", `{"workflowId":"a","stat":{"x":1}}`, save, &want{"stat", "state"}},
		{"case variant", `{"workflowid":"a"}`, save, &want{"workflowid", "workflowId"}},
		{"capitalised", `{"WorkflowId":"a"}`, save, &want{"WorkflowId", "workflowId"}},
		{"Go field name", `{"workflowId":"a","StepName":"s"}`, save, &want{"StepName", "stepName"}},
		{"snake case", `{"workflow_id":"a"}`, save, &want{"workflow_id", "workflowId"}},
		{"transposition", `{"workflowId":"a","stpe":1}`, save, &want{"stpe", "step"}},
		{"nothing close", `{"workflowId":"a","zzz":1}`, save, &want{"zzz", ""}},
		{"unknown after a big state", `{"workflowId":"a","state":{"s":"` + strings.Repeat(`\"}]`, 1000) + `"},"phse":"failed"}`, save, &want{"phse", "phase"}},
		{"escaped known name", `{"workflowId":"a","\u0073tate":1}`, save, nil},
		{"escaped case variant", `{"workflowId":"a","\u0053tate":1}`, save, &want{"State", "state"}},
		{"Kelvin sign folds to k in encoding/json", `{"workflowId":"a","\u212aeepLast":1}`, prune, &want{"\u212aeepLast", "keepLast"}},
		{"every save field", `{"workflowId":"a","namespace":"n","checkpointId":"c","parentId":"p","phase":"failed","step":1,
			"stepName":"s","error":{"message":"m","retryable":true},"state":1,"stateBase64":null,"stateAttachment":false,
			"stateType":"json","completedTasks":[],"pendingTasks":[],"workflowHash":"h","metadata":{},"sources":null}`, save, nil},
		{"no params taken", `{"x":1}`, func() any { return &struct{}{} }, &want{"x", ""}},
		{"empty object", `{}`, save, nil},
		{"whitespace everywhere", " {\n\t\"workflowId\" :\r\n \"a\" , \"step\" : 1 } ", save, nil},

		// nested objects are strict
		{"error.mesage", `{"workflowId":"a","error":{"mesage":"m"}}`, save, &want{"error.mesage", "error.message"}},
		{"error.Retryable", `{"workflowId":"a","error":{"message":"m","Retryable":true}}`, save, &want{"error.Retryable", "error.retryable"}},
		{"error null", `{"workflowId":"a","error":null}`, save, nil},
		{"retention.keeplast", `{"workflowId":"a","retention":{"keeplast":3}}`, configure, &want{"retention.keeplast", "retention.keepLast"}},
		{"retention.idleTTLSeconds", `{"workflowId":"a","retention":{"idleTTLSeconds":3}}`, configure, &want{"retention.idleTTLSeconds", "retention.idleTtlSeconds"}},
		{"writes[1].chanel", `{"writes":[{"channel":"a","value":{"chanel":1}},{"chanel":"b"}]}`, writesPut, &want{"writes[1].chanel", "writes[1].channel"}},
		{"null writes", `{"writes":[null,{"channel":"a"}]}`, writesPut, nil},
		{"lg checkpoint segment", `{"checkpoint":{"type":"t","offest":0,"length":1}}`, lgPut, &want{"checkpoint.offest", "checkpoint.offset"}},
		{"lg blob promoted segment fields", `{"blobs":[{"channel":"a","version":1,"type":"t","offset":0,"length":1}]}`, lgPut, nil},
		{"lg blob unknown", `{"blobs":[{"channel":"a","version":1,"type":"t","offset":0,"lenght":1}]}`, lgPut, &want{"blobs[0].lenght", "blobs[0].length"}},
		{"lg write Idx", `{"writes":[{"channel":"a","Idx":1}]}`, lgPutWrites, &want{"writes[0].Idx", "writes[0].idx"}},
		{"embedded target params", `{"checkpointId":"c","debounceMs":5}`, driftWatch, nil},
		{"embedded target params typo", `{"workflowID":"w"}`, driftWatch, &want{"workflowID", "workflowId"}},

		// user data is not inspected
		{"state, metadata, tasks", `{"workflowId":"a","state":{"Stat":1,"workflowid":2},"metadata":{"WorkflowId":1},
			"completedTasks":[{"bogus":1}],"pendingTasks":[{"Phase":1}]}`, save, nil},
		{"list metadata filter", `{"metadata":{"Anything":{"x":1}}}`, list, nil},
		{"lg channel versions, metadata, versions", `{"channelVersions":{"Channel":1},"metadata":{"Offset":1},
			"blobs":[{"channel":"a","version":{"Type":1}}]}`, lgPut, nil},
		{"write values", `{"writes":[{"channel":"a","value":{"Channel":1,"idx":[{"x":1}]}}]}`, writesPut, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeParams(json.RawMessage(tc.params), tc.into())
			if tc.bad == nil {
				require.Nil(t, err)
				return
			}
			require.NotNil(t, err)
			requireUnknownParam(t, err, tc.bad.field, tc.bad.meant)
		})
	}

	t.Run("sources", func(t *testing.T) {
		_, err := parseSources("sources", json.RawMessage(`{"root":`+quote(dir)+`,"excludes":["x"]}`))
		require.NotNil(t, err)
		requireUnknownParam(t, err, "sources.excludes", "sources.exclude")
		_, err = parseSources("sources", json.RawMessage(`{"Root":`+quote(dir)+`}`))
		requireUnknownParam(t, err, "sources.Root", "sources.root")
		spec, err := parseSources("sources", json.RawMessage(`{"root":`+quote(dir)+`,"include":["a"],"exclude":["b"],"gitignore":false,"editorFiles":true}`))
		require.Nil(t, err)
		require.Equal(t, drift.Spec{Root: dir, Include: []string{"a"}, Exclude: []string{"b"}, EditorFiles: true}, spec)
	})

	t.Run("a huge unknown key is named in part", func(t *testing.T) {
		key := strings.Repeat("k", 10000)
		err := decodeParams(json.RawMessage(`{"`+key+`":1}`), save())
		require.NotNil(t, err)
		require.Less(t, len(err.Message), 400)
	})

	t.Run("a key that is not UTF-8 is named as JSON carries it", func(t *testing.T) {
		err := decodeParams(json.RawMessage("{\"checkpoin\xf4Id\":\"c1\"}"), save())
		requireUnknownParam(t, err, "checkpoin\uFFFDId", "checkpointId")
		// and round-tripped through JSON, data.field is still what the message names
		b, merr := json.Marshal(err.Data)
		require.NoError(t, merr)
		var data struct{ Field string }
		require.NoError(t, json.Unmarshal(b, &data))
		require.Contains(t, err.Message, data.Field)
	})

	t.Run("type errors still name their field", func(t *testing.T) {
		err := decodeParams(json.RawMessage(`{"workflowId":"a","step":"one"}`), save())
		require.NotNil(t, err)
		require.Equal(t, int64(protocol.CodeInvalidParams), err.Code)
		require.Contains(t, err.Message, "step")
		err = decodeParams(json.RawMessage(`{"writes":[[{"bogus":1}]]}`), writesPut())
		require.NotNil(t, err)
		require.Equal(t, "invalid params: writes: expected object, got JSON array", err.Message)
	})
}

// requireUnknownParam checks err is the -32602 of an unknown param: data {field, reason}, the
// message and reason naming field and, if meant is not "", the name meant.
func requireUnknownParam(t *testing.T, je *jsonrpc2.Error, field, meant string) {
	t.Helper()
	require.NotNil(t, je)
	require.Equal(t, int64(protocol.CodeInvalidParams), je.Code, je.Message)
	var data struct{ Field, Reason string }
	require.NotNil(t, je.Data)
	require.NoError(t, json.Unmarshal(*je.Data, &data))
	require.Equal(t, field, data.Field)
	reason := "unknown param " + quote(field)
	if meant != "" {
		reason += " (did you mean " + quote(meant) + "?)"
	}
	require.Equal(t, reason, data.Reason)
	require.Equal(t, "invalid params: "+reason, je.Message)
}

// BenchmarkDecodeParams measures decodeParams (strict: key walk + json.Unmarshal) against the
// json.Unmarshal it did alone before strict params ("lenient"), in the same run, on the params
// bodies of the hot methods: a client's checkpoint/save (state in the attachment), a save with
// a 64 KiB JSON state inline, and an lg/put with 12 channel values; keys-only is the key walk
// alone.
func BenchmarkDecodeParams(b *testing.B) {
	inline := `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"say \"hi\" to the {world} [please]","n":12345},`, 900), ",") + `]}`
	var blobs []string
	for i := range 12 {
		blobs = append(blobs, `{"channel":"ch`+itoa(i)+`","version":"00000000000000000000000000000003.0.`+itoa(i)+`","type":"msgpack","offset":`+itoa(i*100)+`,"length":100}`)
	}
	for _, bc := range []struct {
		name   string
		params string
		into   func() any
	}{
		{"save", `{"workflowId":"wf-0042","namespace":"","phase":"completed","step":7,"stepName":"summarize",` +
			`"stateAttachment":true,"stateType":"json","completedTasks":["fetch","parse","rank"],"pendingTasks":[],` +
			`"workflowHash":"sha256:9f2c1e","metadata":{"source":"loop","attempt":1}}`, func() any { return &protocol.SaveParams{} }},
		{"save-inline-64KiB", `{"workflowId":"wf-0042","phase":"completed","step":7,"stepName":"summarize","state":` + inline + `}`,
			func() any { return &protocol.SaveParams{} }},
		{"lg-put", `{"threadId":"t-1","namespace":"","checkpointId":"1f0a-0003","parentId":"1f0a-0002",` +
			`"checkpoint":{"type":"msgpack","offset":0,"length":300},"channelVersions":{"messages":"3.0.1","step":3},` +
			`"metadata":{"source":"loop","step":3,"run_id":"r-1"},"blobs":[` + strings.Join(blobs, ",") + `]}`,
			func() any { return &protocol.LGPutParams{} }},
	} {
		raw := json.RawMessage(bc.params)
		if len(raw) > 60000 && len(raw) < 64<<10 {
			b.Fatalf("%s: %d bytes", bc.name, len(raw))
		}
		if err := decodeParams(raw, bc.into()); err != nil {
			b.Fatalf("%s: %v", bc.name, err)
		}
		b.Run(bc.name+"/lenient", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := json.Unmarshal(bytes.TrimSpace(raw), bc.into()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/keys-only", func(b *testing.B) { // what strict adds
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			v := bc.into()
			for b.Loop() {
				if err := checkParamKeys(raw, v, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/strict", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := decodeParams(raw, bc.into()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzStrictKeys checks the key walk against an independent oracle, encoding/json's token
// stream, on checkpoint/save params: a body is accepted exactly when every top-level key is a
// protocol.SaveParams name and every key of each object-valued "error" is message or retryable; when it
// is refused, the field named is one of the offending keys (a long one shortened with "...").
// User data (state, metadata, ...) may hold anything.
//
// Seeds: ../testdata/fuzz/FuzzStrictKeys.
func FuzzStrictKeys(f *testing.F) {
	for _, s := range loadFuzzSeeds(f, "../testdata/fuzz/FuzzStrictKeys") {
		f.Add(s)
	}
	known := map[string]bool{}
	for _, fl := range jsonFields(reflect.TypeOf(protocol.SaveParams{})) {
		known[fl.Name] = true
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) {
			return // the codec hands handlers valid UTF-8 JSON only
		}
		bad, isObject := oracleBadKeys(t, b, known)
		err := checkParamKeys(b, &protocol.SaveParams{}, "")
		if !isObject || len(bad) == 0 {
			if err != nil {
				t.Fatalf("%s: refused: %s", b, err.Message)
			}
			return
		}
		if err == nil {
			t.Fatalf("%s: accepted with unknown %q", b, bad)
		}
		var d struct{ Field string }
		if jerr := json.Unmarshal(*err.Data, &d); jerr != nil {
			t.Fatal(jerr)
		}
		for _, k := range bad {
			if k == d.Field || strings.HasSuffix(d.Field, "...") && strings.HasPrefix(k, strings.TrimSuffix(d.Field, "...")) {
				return
			}
		}
		t.Fatalf("%s: names %q, not one of %q", b, d.Field, bad)
	})
}

// oracleBadKeys lists the keys of b (a checkpoint/save params object) that are not protocol.SaveParams
// names, and those of object-valued "error"s that are not message or retryable.
func oracleBadKeys(t *testing.T, b []byte, known map[string]bool) ([]string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var bad []string
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		k := kt.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if !known[k] {
			bad = append(bad, k)
			continue
		}
		if k != "error" {
			continue
		}
		sub := json.NewDecoder(bytes.NewReader(v))
		if tok, err := sub.Token(); err != nil || tok != json.Delim('{') {
			continue
		}
		for sub.More() {
			et, err := sub.Token()
			if err != nil {
				t.Fatal(err)
			}
			if ek := et.(string); ek != "message" && ek != "retryable" {
				bad = append(bad, "error."+ek)
			}
			var skip json.RawMessage
			if err := sub.Decode(&skip); err != nil {
				t.Fatal(err)
			}
		}
	}
	return bad, true
}
