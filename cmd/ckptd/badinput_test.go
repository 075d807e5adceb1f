package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// Bad input through the real binary: every case gets the right JSON-RPC error (or, for the
// ids that are valid, a result with the id echoed byte for byte), and the request sent right
// behind it in the same write is still served.

// frame builds a plain frame around body.
func frame(body string) []byte { return framing.AppendFrame(nil, []byte(body), nil, false) }

// badCase is raw input and what ckptd must answer.
type badCase struct {
	name   string
	input  []byte
	code   int    // 0: a result is expected
	id     string // raw id of the reply: "null", "7", `"x"`
	msgHas string // substring of the error message (case-insensitive)
}

// followUp is the well-formed save sent right behind every bad input.
func followUp(n int) (string, []byte) {
	id := fmt.Sprintf(`"after-%d"`, n)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"checkpoint/save","params":{"workflowId":"after","step":%d,"state":{"n":%d}}}`, id, n, n)
	return id, frame(body)
}

// replies reads n responses (skipping notifications), keyed by raw id. Replies of requests
// handled concurrently may come in any order.
func (d *daemon) replies(n int) map[string]msg {
	d.t.Helper()
	out := map[string]msg{}
	for len(out) < n {
		m := d.read()
		if m.Method != "" {
			continue
		}
		_, dup := out[string(m.ID)]
		require.False(d.t, dup, "two replies with id %s", m.ID)
		out[string(m.ID)] = m
	}
	return out
}

// runBadCases sends each case followed by a save in one write and checks both replies.
func runBadCases(t *testing.T, d *daemon, cases []badCase, after *int) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			*after++
			fid, follow := followUp(*after)
			d.raw(append(bytes.Clone(tc.input), follow...))
			rs := d.replies(2)
			m, ok := rs[tc.id]
			require.True(t, ok, "no reply with id %s; got %v", tc.id, keys(rs))
			if tc.code == 0 {
				require.Nil(t, m.Error, "unexpected error: %+v", m.Error)
				require.NotEmpty(t, m.Result)
			} else {
				require.NotNil(t, m.Error, "expected error %d, got result %s", tc.code, m.Result)
				assert.Equal(t, tc.code, m.Error.Code, m.Error.Message)
				assert.Contains(t, strings.ToLower(m.Error.Message), strings.ToLower(tc.msgHas))
				assert.NotEqual(t, -32603, m.Error.Code)
			}
			f, ok := rs[fid]
			require.True(t, ok, "the request behind the bad input got no reply; got %v", keys(rs))
			require.Nil(t, f.Error, "the request behind the bad input failed: %+v", f.Error)
		})
	}
}

func keys(m map[string]msg) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestBadInputFramingAndEnvelope(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"), "--keep-last", "0")
	stats := func(id string) []byte { return frame(`{"jsonrpc":"2.0","id":` + id + `,"method":"stats"}`) }
	deep := func(depth int) string {
		return `{"jsonrpc":"2.0","id":"deep","method":"checkpoint/save","params":{"workflowId":"deep","state":` +
			strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}`
	}
	cases := []badCase{
		// framing
		{"missing Content-Length", []byte("Content-Type: application/json\r\n\r\n" + `{"jsonrpc":"2.0","id":1,"method":"stats"}`), -32700, "null", "Content-Length"},
		{"empty header block value", []byte("Content-Length: \r\n\r\n{}"), -32700, "null", "parse error"},
		{"non-numeric Content-Length", []byte("Content-Length: twelve\r\n\r\n{}"), -32700, "null", "non-numeric"},
		{"negative Content-Length", []byte("Content-Length: -2\r\n\r\n{}"), -32700, "null", "negative"},
		{"Content-Length out of range", []byte("Content-Length: 99999999999999999999999\r\n\r\n{}"), -32700, "null", "out of range"},
		{"conflicting Content-Length", []byte("Content-Length: 2\r\ncontent-length: 3\r\n\r\n{}"), -32700, "null", "conflicting"},
		{"header garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), -32700, "null", "not a header line"},
		{"binary garbage", []byte("\x00\x01\x02\xff\xfe garbage without any newline "), -32700, "null", "parse error"},
		{"header block too long", []byte("X-Pad: " + strings.Repeat("a", 9000) + "\r\n\r\n"), -32700, "null", "longer than"},
		// JSON
		{"invalid JSON", frame(`{"jsonrpc":"2.0","id":1,"method":`), -32700, "null", "invalid JSON"},
		{"trailing garbage", frame(`{"jsonrpc":"2.0","id":1,"method":"stats"} x`), -32700, "null", "invalid JSON"},
		{"empty body", frame(``), -32700, "null", "parse error"},
		{"invalid UTF-8 in a string: answered with the id", frame("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"checkpoint/save\",\"params\":{\"workflowId\":\"w\xff\"}}"), -32700, "2", "UTF-8"},
		{"invalid UTF-8 outside strings", frame("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"stats\"}\xc3"), -32700, "null", "UTF-8"},
		{"nesting deeper than 10000: answered with the request's id", frame(deep(10001)), -32700, `"deep"`, "exceeded max depth"},
		{"nesting of 100000 inside params: answered with the request's id", frame(deep(100000)), -32700, `"deep"`, "exceeded max depth"},
		{"nesting of 10000 is fine", frame(deep(9998)), 0, `"deep"`, ""},
		// valid JSON that is not JSON-RPC
		{"object without jsonrpc", frame(`{"hello":"world"}`), -32600, "null", "jsonrpc"},
		{"jsonrpc 1.0", frame(`{"jsonrpc":"1.0","id":6,"method":"stats"}`), -32600, "6", "jsonrpc"},
		{"jsonrpc not a string", frame(`{"jsonrpc":2.0,"id":6,"method":"stats"}`), -32600, "6", "jsonrpc"},
		{"no method", frame(`{"jsonrpc":"2.0","id":5}`), -32600, "5", "method"},
		{"method not a string", frame(`{"jsonrpc":"2.0","id":8,"method":5}`), -32600, "8", "method"},
		{"duplicate id", frame(`{"jsonrpc":"2.0","id":1,"id":2,"method":"stats"}`), -32600, "null", "duplicate"},
		{"duplicate method", frame(`{"jsonrpc":"2.0","id":3,"method":"stats","method":"shutdown"}`), -32600, "3", "duplicate"},
		{"a string", frame(`"checkpoint/save"`), -32600, "null", "not a JSON object"},
		{"a number", frame(`42`), -32600, "null", "not a JSON object"},
		{"null", frame(`null`), -32600, "null", "not a JSON object"},
		{"batch", frame(`[{"jsonrpc":"2.0","id":1,"method":"stats"},{"jsonrpc":"2.0","id":2,"method":"stats"}]`), -32600, "null", "batch"},
		{"empty batch", frame(`[]`), -32600, "null", "batch"},
		{"unknown method", frame(`{"jsonrpc":"2.0","id":9,"method":"checkpoint/explode","params":{}}`), -32601, "9", "checkpoint/explode"},
		{"internal method", frame(`{"jsonrpc":"2.0","id":10,"method":"$/ckptd/protocolError"}`), -32601, "10", "method not found"},
		{"params not structured", frame(`{"jsonrpc":"2.0","id":11,"method":"checkpoint/load","params":"c-1"}`), -32602, "11", "params"},
		// ids of every JSON type: a string or an integer in [0, 2^53] is echoed, anything else is
		// refused with id null
		{"id string", stats(`"abc"`), 0, `"abc"`, ""},
		{"id empty string", stats(`""`), 0, `""`, ""},
		{"id string with escapes", stats(`"\u00e9\"x"`), 0, `"\u00e9\"x"`, ""},
		{"id int", stats(`7`), 0, `7`, ""},
		{"id 0", stats(`0`), 0, `0`, ""},
		{"id 2^53", stats(`9007199254740992`), 0, `9007199254740992`, ""},
		{"id 2^53+1", stats(`9007199254740993`), -32600, "null", "id"},
		{"id huge", stats(`123456789012345678901234567890`), -32600, "null", "id"},
		{"id negative", stats(`-1`), -32600, "null", "id"},
		{"id float", stats(`1.5`), -32600, "null", "id"},
		{"id integral float", stats(`1.0`), -32600, "null", "id"},
		{"id exponent", stats(`1e3`), -32600, "null", "id"},
		{"id null", stats(`null`), -32600, "null", "id"},
		{"id true", stats(`true`), -32600, "null", "id"},
		{"id false", stats(`false`), -32600, "null", "id"},
		{"id object", stats(`{"a":1}`), -32600, "null", "id"},
		{"id array", stats(`[1]`), -32600, "null", "id"},
		// sizes
		{"100 MiB attachment", framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":"big","method":"checkpoint/save","params":{"workflowId":"big","stateAttachment":true,"stateType":"bytes"}}`),
			make([]byte, 100<<20), true), -32004, `"big"`, "too large"},
		// attachments
		{"attachment not announced", framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":12,"method":"checkpoint/save","params":{"workflowId":"w"}}`), []byte(`{}`), true), -32602, "12", "stateAttachment"},
		{"attachment missing", frame(`{"jsonrpc":"2.0","id":13,"method":"checkpoint/save","params":{"workflowId":"w","stateAttachment":true}}`), -32602, "13", "stateAttachment"},
		{"invalid UTF-8 JSON attachment", framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":14,"method":"checkpoint/save","params":{"workflowId":"w","stateAttachment":true,"stateType":"json"}}`), []byte("\"\xff\""), true), -32602, "14", "stateType"},
		// large JSON attachments are validated while the save is written: it must still fail whole
		{"large invalid JSON attachment", framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":"bigbad1","method":"checkpoint/save","params":{"workflowId":"w-big-bad","stateAttachment":true,"stateType":"json"}}`), append([]byte(`{"a":"`+strings.Repeat("x", 100<<10)), "\"}}"...), true), -32602, `"bigbad1"`, "stateType"},
		{"large truncated JSON attachment", framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":"bigbad2","method":"checkpoint/save","params":{"workflowId":"w-big-bad","stateAttachment":true,"stateType":"json"}}`), []byte(`{"a":"`+strings.Repeat("y", 100<<10)), true), -32602, `"bigbad2"`, "stateType"},
		{"invalid UTF-8 bytes attachment is fine", framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":15,"method":"checkpoint/save","params":{"workflowId":"w","stateAttachment":true,"stateType":"bytes"}}`), []byte("\xff\xfe"), true), 0, "15", ""},
		{"two state sources", frame(`{"jsonrpc":"2.0","id":16,"method":"checkpoint/save","params":{"workflowId":"w","state":1,"stateBase64":"AA=="}}`), -32602, "16", "state"},
		{"bad base64", frame(`{"jsonrpc":"2.0","id":17,"method":"checkpoint/save","params":{"workflowId":"w","stateBase64":"!!"}}`), -32602, "17", "stateBase64"},
		// every save param is checked and bounded (#20)
		{"empty checkpointId", frame(`{"jsonrpc":"2.0","id":18,"method":"checkpoint/save","params":{"workflowId":"w","checkpointId":""}}`), -32602, "18", "checkpointId"},
		{"bogus stateType without attachment", frame(`{"jsonrpc":"2.0","id":19,"method":"checkpoint/save","params":{"workflowId":"w","stateType":"bogus"}}`), -32602, "19", "stateType"},
		{"metadata over 1 MiB", frame(`{"jsonrpc":"2.0","id":20,"method":"checkpoint/save","params":{"workflowId":"w","metadata":{"m":"` + strings.Repeat("m", 1<<20) + `"}}}`), -32602, "20", "metadata"},
		{"pendingTasks over 16 MiB", frame(`{"jsonrpc":"2.0","id":21,"method":"checkpoint/save","params":{"workflowId":"w","pendingTasks":["` + strings.Repeat("t", 16<<20) + `"]}}`), -32602, "21", "pendingTasks"},
	}
	after := 0
	start := time.Now()
	runBadCases(t, d, cases, &after)
	t.Logf("%d bad inputs in %s", len(cases), time.Since(start).Round(time.Millisecond))

	// the deeply nested state was stored byte for byte
	m := d.call("checkpoint/load", map[string]any{"workflowId": "deep", "attachment": true}, nil, nil)
	assert.Equal(t, strings.Repeat("[", 9998)+strings.Repeat("]", 9998), string(m.Attachment))
	// every follow-up save is there, and nothing else was saved by the bad inputs
	var list struct{ Checkpoints []map[string]any }
	d.call("checkpoint/list", map[string]any{"workflowId": "after", "limit": 10000}, nil, &list)
	assert.Len(t, list.Checkpoints, after)
	var wfs struct{ Workflows []struct{ WorkflowID string } }
	d.call("workflow/list", nil, nil, &wfs)
	var names []string
	for _, w := range wfs.Workflows {
		names = append(names, w.WorkflowID)
	}
	assert.ElementsMatch(t, []string{"after", "deep", "w"}, names)
	d.shutdownWait()
}

// TestBadInputLimits: frames and states over --max-state-size.
func TestBadInputLimits(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"), "--max-state-size", "1MiB")
	big := strings.Repeat("x", 2<<20)
	cases := []badCase{
		// body limit: 2 x 1 MiB + 1 MiB; the frame is skipped unread, the id found in its start
		{"body over the limit", frame(`{"jsonrpc":"2.0","id":"body","method":"checkpoint/save","params":{"workflowId":"w","state":"` + big + big + `"}}`), -32004, `"body"`, "frame body"},
		{"state over the limit inline", frame(`{"jsonrpc":"2.0","id":"inline","method":"checkpoint/save","params":{"workflowId":"w","state":"` + big + `"}}`), -32004, `"inline"`, "too large"},
		{"state over the limit base64", frame(`{"jsonrpc":"2.0","id":"b64","method":"checkpoint/save","params":{"workflowId":"w","stateBase64":"` + strings.Repeat("AAAA", (1<<20)/3+4) + `"}}`), -32004, `"b64"`, "too large"},
		{"attachment over the limit", framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":"att","method":"checkpoint/save","params":{"workflowId":"w","stateAttachment":true}}`), []byte(big), true), -32004, `"att"`, "attachment"},
		{"attachment at the limit", framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":"atl","method":"checkpoint/save","params":{"workflowId":"w","stateAttachment":true,"stateType":"bytes"}}`), make([]byte, 1<<20), true), 0, `"atl"`, ""},
	}
	after := 0
	runBadCases(t, d, cases, &after)
	// -32004 carries {limit, size}
	d.raw(frame(`{"jsonrpc":"2.0","id":"inline2","method":"checkpoint/save","params":{"workflowId":"w","state":"` + big + `"}}`))
	m := d.response()
	require.NotNil(t, m.Error)
	var data struct{ Limit, Size int64 }
	require.NoError(t, json.Unmarshal(m.Error.Data, &data))
	assert.EqualValues(t, 1<<20, data.Limit)
	assert.EqualValues(t, 2<<20+2, data.Size)
}

// wrongType is one param sent with a JSON type it does not have.
type wrongType struct {
	method string
	params string // JSON object
	field  string // what the error must name
}

// TestBadInputWrongParamTypes sends every param of every method with a wrong JSON type: each
// gets -32602 naming the field (message and data.field), and the daemon keeps serving.
func TestBadInputWrongParamTypes(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"))
	save := func(extra string) string { return `{"workflowId":"w",` + extra + `}` }
	writes := func(extra string) string {
		return `{"workflowId":"w","checkpointId":"c","taskId":"t","writes":[{"channel":"a","value":1}],` + extra + `}`
	}
	write0 := func(w string) string {
		return `{"workflowId":"w","checkpointId":"c","taskId":"t","writes":[` + w + `]}`
	}
	cases := []wrongType{
		{"initialize", `{"clientName":5}`, "clientName"},
		{"initialize", `{"events":"checkpoint/saved"}`, "events"},
		{"initialize", `{"events":[5]}`, "events"},
		{"initialize", `{"events":["checkpoint/everything"]}`, "events[0]"},

		{"checkpoint/save", `{"workflowId":5}`, "workflowId"},
		{"checkpoint/save", `{"workflowId":["w"]}`, "workflowId"},
		{"checkpoint/save", save(`"namespace":5`), "namespace"},
		{"checkpoint/save", save(`"checkpointId":5`), "checkpointId"},
		{"checkpoint/save", save(`"parentId":{}`), "parentId"},
		{"checkpoint/save", save(`"phase":5`), "phase"},
		{"checkpoint/save", save(`"step":"1"`), "step"},
		{"checkpoint/save", save(`"step":1.5`), "step"},
		{"checkpoint/save", save(`"step":true`), "step"},
		{"checkpoint/save", save(`"step":99999999999999999999`), "step"},
		{"checkpoint/save", save(`"stepName":5`), "stepName"},
		{"checkpoint/save", save(`"error":"boom"`), "error"},
		{"checkpoint/save", save(`"error":{"message":5}`), "error.message"},
		{"checkpoint/save", save(`"error":{"message":"m","retryable":"no"}`), "error.retryable"},
		{"checkpoint/save", save(`"stateBase64":5`), "stateBase64"},
		{"checkpoint/save", save(`"stateAttachment":"yes"`), "stateAttachment"},
		{"checkpoint/save", save(`"stateType":5`), "stateType"},
		{"checkpoint/save", save(`"completedTasks":{}`), "completedTasks"},
		{"checkpoint/save", save(`"pendingTasks":"t1"`), "pendingTasks"},
		{"checkpoint/save", save(`"workflowHash":5`), "workflowHash"},
		{"checkpoint/save", save(`"metadata":[1]`), "metadata"},
		{"checkpoint/save", save(`"metadata":"x"`), "metadata"},

		{"checkpoint/load", `{"checkpointId":5}`, "checkpointId"},
		{"checkpoint/load", `{"workflowId":true}`, "workflowId"},
		{"checkpoint/load", `{"workflowId":"w","namespace":5}`, "namespace"},
		{"checkpoint/load", `{"workflowId":"w","attachment":"yes"}`, "attachment"},

		{"checkpoint/list", `{"workflowId":5}`, "workflowId"},
		{"checkpoint/list", `{"namespace":5}`, "namespace"},
		{"checkpoint/list", `{"phase":5}`, "phase"},
		{"checkpoint/list", `{"metadata":[1]}`, "metadata"},
		{"checkpoint/list", `{"before":5}`, "before"},
		{"checkpoint/list", `{"limit":"10"}`, "limit"},
		{"checkpoint/list", `{"limit":1.5}`, "limit"},

		{"checkpoint/delete", `{"checkpointId":5}`, "checkpointId"},
		{"checkpoint/delete", `{"workflowId":5}`, "workflowId"},

		{"checkpoint/prune", `{"workflowId":5,"keepLast":1}`, "workflowId"},
		{"checkpoint/prune", `{"keepLast":"3"}`, "keepLast"},
		{"checkpoint/prune", `{"olderThanSeconds":"60"}`, "olderThanSeconds"},
		{"checkpoint/prune", `{"keepLast":1,"dryRun":"yes"}`, "dryRun"},

		{"workflow/configure", `{"workflowId":5}`, "workflowId"},
		{"workflow/configure", `{"workflowId":"w","retention":"keep"}`, "retention"},
		{"workflow/configure", `{"workflowId":"w","retention":{"keepLast":"3"}}`, "retention.keepLast"},
		{"workflow/configure", `{"workflowId":"w","retention":{"maxAgeSeconds":"60"}}`, "retention.maxAgeSeconds"},
		{"workflow/configure", `{"workflowId":"w","retention":{"keepFirst":"yes"}}`, "retention.keepFirst"},
		{"workflow/configure", `{"workflowId":"w","retention":{"idleTtlSeconds":true}}`, "retention.idleTtlSeconds"},

		{"workflow/complete", `{"workflowId":5}`, "workflowId"},
		{"workflow/complete", `{"workflowId":"w","preserve":"yes"}`, "preserve"},

		{"workflow/list", `{"resumableOnly":"yes"}`, "resumableOnly"},

		{"writes/put", writes(`"workflowId":5`), "workflowId"},
		{"writes/put", writes(`"namespace":5`), "namespace"},
		{"writes/put", writes(`"checkpointId":5`), "checkpointId"},
		{"writes/put", writes(`"taskId":5`), "taskId"},
		{"writes/put", writes(`"taskPath":5`), "taskPath"},
		{"writes/put", writes(`"writes":{}`), "writes"},
		{"writes/put", write0(`5`), "writes"},
		{"writes/put", write0(`{"channel":5}`), "channel"},
		{"writes/put", write0(`{"channel":"a","valueBase64":5}`), "valueBase64"},
		{"writes/put", write0(`{"channel":"a","type":5}`), "type"},
		{"writes/put", write0(`{"channel":"a","idx":"0"}`), "idx"},

		{"resume/plan", `{"workflowId":5}`, "workflowId"},
		{"resume/plan", `{"workflowId":"w","namespace":5}`, "namespace"},
		{"resume/plan", `{"workflowId":"w","checkpointId":5}`, "checkpointId"},
		{"resume/plan", `{"workflowId":"w","workflowHash":5}`, "workflowHash"},
		{"resume/plan", `{"workflowId":"w","force":"yes"}`, "force"},
		{"resume/plan", `{"workflowId":"w","attachment":"yes"}`, "attachment"},
	}
	// params that are not an object, for every method that takes params
	for _, method := range []string{"initialize", "checkpoint/save", "checkpoint/load", "checkpoint/list",
		"checkpoint/delete", "checkpoint/prune", "workflow/configure", "workflow/complete", "workflow/list",
		"writes/put", "resume/plan", "stats"} {
		cases = append(cases, wrongType{method, `[1]`, "params"}, wrongType{method, `"x"`, "params"}, wrongType{method, `5`, "params"})
	}
	var input []byte
	for i, c := range cases {
		input = append(input, frame(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, i, c.method, c.params))...)
	}
	_, follow := followUp(1)
	d.raw(append(input, follow...)) // all at once: pipelined
	rs := d.replies(len(cases) + 1)
	for i, c := range cases {
		m := rs[strconv.Itoa(i)]
		name := c.method + " " + c.params
		if !assert.NotNil(t, m.Error, "%s: expected -32602, got %s", name, m.Result) {
			continue
		}
		assert.Equal(t, -32602, m.Error.Code, "%s: %s", name, m.Error.Message)
		assert.Contains(t, m.Error.Message, c.field, name)
		var data struct{ Field, Reason string }
		if assert.NoError(t, json.Unmarshal(m.Error.Data, &data), "%s: data %s", name, m.Error.Data) {
			assert.Contains(t, data.Field, lastSegment(c.field), name)
			assert.NotEmpty(t, data.Reason, name)
		}
	}
	require.Nil(t, rs[`"after-1"`].Error)
	var list struct{ Checkpoints []map[string]any }
	d.call("checkpoint/list", nil, nil, &list)
	assert.Len(t, list.Checkpoints, 1, "only the follow-up save was stored")
}

func lastSegment(field string) string {
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		return field[i+1:]
	}
	return field
}

// TestBadInputStdinClosedMidFrame: a client that closes stdin inside a frame (header, body or
// attachment) gets replies to every complete request before it, ckptd exits 0, and every
// acknowledged save is on disk.
func TestBadInputStdinClosedMidFrame(t *testing.T) {
	save := func(i int) []byte {
		return framing.AppendFrame(nil, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":"w","step":%d,"stateAttachment":true}}`, i, i)),
			checkpointState(3000+i*100, int64(i)), true)
	}
	full := save(99)
	bodyStart := bytes.Index(full, []byte("\r\n\r\n")) + 4
	cuts := map[string][]byte{
		"in the header":     []byte("Content-Len"),
		"after the header":  full[:bodyStart],
		"in the body":       full[:bodyStart+20],
		"in the attachment": full[:len(full)-100],
		"in resync garbage": []byte("garbage\r\n\r\nmore garbage"),
	}
	for name, tail := range cuts {
		t.Run(name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "c.db")
			cmd := exec.Command(binPath, "--db", db, "--keep-last", "0")
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			// pipelined saves, then the cut frame, then EOF: no reply is awaited before closing
			const saves = 8
			var in []byte
			for i := 1; i <= saves; i++ {
				in = append(in, save(i)...)
			}
			in = append(in, tail...)
			go func() {
				_, _ = stdin.Write(in)
				_ = stdin.Close()
			}()
			acked := map[string]string{} // checkpointId -> sha
			r := framing.NewReader(stdout, framing.Limits{})
			for {
				f, err := r.Next()
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				var m struct {
					Result *struct{ CheckpointID, SHA256 string }
					Error  *rpcErr
				}
				require.NoError(t, json.Unmarshal(f.Body, &m))
				if name == "in resync garbage" && m.Error != nil && m.Error.Code == -32700 {
					continue
				}
				require.Nil(t, m.Error, "%s", f.Body)
				acked[m.Result.CheckpointID] = m.Result.SHA256
			}
			require.NoError(t, waitExit(cmd, 20*time.Second), "stderr:\n%s", stderr.String())
			assert.Equal(t, 0, cmd.ProcessState.ExitCode())
			require.Len(t, acked, saves, "every complete request is answered before ckptd exits")

			// on disk: read back in-process (a second daemon per case only costs time)
			ctx := context.Background()
			st, err := sqlite.Open(ctx, store.Options{Path: db})
			require.NoError(t, err)
			defer st.Close()
			for id, sum := range acked {
				cp, err := st.Load(ctx, id)
				require.NoError(t, err)
				assert.Equal(t, sum, sha(cp.State))
			}
			list, err := st.List(ctx, store.ListFilter{WorkflowID: "w"})
			require.NoError(t, err)
			assert.Len(t, list, saves, "the cut frame saved nothing")
		})
	}
}
