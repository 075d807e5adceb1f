package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/framing"
)

// --- harness: a Codec read loop over io.Pipe pairs, driven with raw bytes ---

// ctLimits are the limits of codec tests: small enough to test -32004 cheaply.
var ctLimits = framing.Limits{MaxBody: 8 << 10, MaxAttachment: 4 << 10}

type ctSeen struct {
	method string
	notif  bool
	in     Incoming
}

// ctHandler answers like the server does for protocol errors, and otherwise:
// "echo" -> result = params verbatim (null if absent), attachment echoed;
// "notify" -> sends a server->client notification, then replies "sent";
// "twice" -> replies twice (the second must fail); "slow" -> replies 100ms later from another
// goroutine; anything else -> -32601. Every request and notification is recorded in seen.
type ctHandler struct {
	codec     *Codec
	out       io.Writer
	seen      chan ctSeen
	twiceErrs chan error
}

func (h *ctHandler) handle(req *Request) {
	in := req.In
	if req.Method == protocolErrorMethod {
		if in.ProtocolError == nil || req.Notif {
			panic("protocol error request without error")
		}
		_ = h.codec.ReplyError(h.out, req, in.ProtocolError)
		return
	}
	select {
	case h.seen <- ctSeen{req.Method, req.Notif, in}:
	default:
	}
	if req.Notif {
		return
	}
	switch req.Method {
	case "echo":
		_ = h.codec.Reply(h.out, req, in.Params, in.Attachment, in.HasAttachment)
	case "notify":
		_ = h.codec.Notify(h.out, "server/event", map[string]any{"x": 1, "html": "<&>"})
		_ = h.codec.Reply(h.out, req, json.RawMessage(`"sent"`), nil, false)
	case "slow": // replies from another goroutine, later
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = h.codec.Reply(h.out, req, json.RawMessage(`"slow"`), nil, false)
		}()
	case "twice":
		_ = h.codec.Reply(h.out, req, json.RawMessage(`1`), nil, false)
		err := h.codec.Reply(h.out, req, json.RawMessage(`2`), nil, false)
		select {
		case h.twiceErrs <- err:
		default:
		}
	default:
		_ = h.codec.ReplyError(h.out, req, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "method not found: " + req.Method})
	}
}

// ctLoop reads requests from r and hands them to h until the input ends.
func ctLoop(c *Codec, r io.Reader, h *ctHandler) {
	br := bufio.NewReader(r)
	for {
		req, err := c.Read(br)
		if err != nil {
			return
		}
		h.handle(req)
	}
}

type ctServer struct {
	t       testing.TB
	codec   *Codec
	handler *ctHandler
	in      *io.PipeWriter
	done    chan struct{} // closed when the read loop ended
	frames  chan framing.Frame
}

func newCtServer(t testing.TB, lim framing.Limits) *ctServer {
	cr, cw := io.Pipe() // client -> server
	sr, sw := io.Pipe() // server -> client
	codec := NewCodec(lim, slog.New(slog.DiscardHandler))
	h := &ctHandler{codec: codec, out: sw, seen: make(chan ctSeen, 1000), twiceErrs: make(chan error, 10)}
	s := &ctServer{t: t, codec: codec, handler: h, in: cw, done: make(chan struct{}), frames: make(chan framing.Frame, 10000)}
	go func() {
		defer close(s.done)
		ctLoop(codec, cr, h)
	}()
	go func() {
		defer close(s.frames)
		fr := framing.NewReader(sr, framing.Limits{MaxBody: 1 << 30, MaxAttachment: 1 << 30})
		for {
			f, err := fr.Next()
			if err != nil {
				_ = sr.CloseWithError(err)
				return
			}
			s.frames <- f
		}
	}()
	t.Cleanup(func() {
		_ = cw.Close()
		_ = cr.Close()
		<-s.done
		_ = sw.Close()
	})
	return s
}

// send writes raw client bytes. It runs in its own goroutine: io.Pipe writes block until the
// server has read them, and a big write may block while replies are pending.
func (s *ctServer) send(raw string) {
	go func() { _, _ = io.WriteString(s.in, raw) }()
}

// sendSync writes and waits until the server has consumed the bytes.
func (s *ctServer) sendSync(raw string) {
	if _, err := io.WriteString(s.in, raw); err != nil {
		s.t.Fatal(err)
	}
}

type ctReply struct {
	Jsonrpc string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	body   []byte
	frame  framing.Frame
	hasErr bool
}

func parseReply(tb testing.TB, f framing.Frame) ctReply {
	tb.Helper()
	var r ctReply
	if err := json.Unmarshal(f.Body, &r); err != nil {
		tb.Fatalf("server wrote invalid JSON %q: %v", f.Body, err)
	}
	if r.Jsonrpc != "2.0" {
		tb.Fatalf("reply without jsonrpc 2.0: %s", f.Body)
	}
	r.body, r.frame, r.hasErr = f.Body, f, r.Error != nil
	return r
}

func (s *ctServer) next() ctReply {
	s.t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			s.t.Fatal("server output closed")
		}
		return parseReply(s.t, f)
	case <-time.After(10 * time.Second):
		s.t.Fatal("no reply within 10s")
	}
	panic("unreachable")
}

func (s *ctServer) expectNoFrame(d time.Duration) {
	s.t.Helper()
	select {
	case f, ok := <-s.frames:
		if ok {
			s.t.Fatalf("unexpected frame %s", f.Body)
		}
	case <-time.After(d):
	}
}

// waitEnd waits until the read loop has seen the end of the input.
func (s *ctServer) waitEnd() {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.t.Fatal("the input did not end")
	}
}

func ctFrame(body string, att ...string) string {
	if len(att) == 0 {
		return string(framing.AppendFrame(nil, []byte(body), nil, false))
	}
	return string(framing.AppendFrame(nil, []byte(body), []byte(att[0]), true))
}

// sentinel is a good request sent after every error case: it must always be answered.
const sentinel = `{"jsonrpc":"2.0","id":"next","method":"echo","params":{"ok":true}}`

func (s *ctServer) expectSentinel() {
	s.t.Helper()
	r := s.next()
	if string(r.ID) != `"next"` || string(r.Result) != `{"ok":true}` {
		s.t.Fatalf("want the sentinel's reply, got %s", r.body)
	}
}

// --- tests ---

type ctVector struct {
	Name     string `json:"name"`
	Input    string `json:"input"`
	Messages []struct {
		JSON       json.RawMessage `json:"json"`
		Attachment *string         `json:"attachment"`
	} `json:"messages"`
	Error string `json:"error"`
}

func TestCodecVectors(t *testing.T) {
	b, err := os.ReadFile("../testdata/framing.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Vectors []ctVector }
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			input, err := base64.StdEncoding.DecodeString(v.Input)
			if err != nil {
				t.Fatal(err)
			}
			s := newCtServer(t, framing.Limits{})
			if v.Error == "eof" {
				s.sendSync(string(input))
				_ = s.in.Close()
				s.waitEnd()
				s.expectNoFrame(50 * time.Millisecond)
				return
			}
			s.send(string(input) + ctFrame(sentinel))
			for i, m := range v.Messages {
				var msg struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
					Params json.RawMessage `json:"params"`
				}
				if err := json.Unmarshal(m.JSON, &msg); err != nil {
					t.Fatal(err)
				}
				seen := <-s.handler.seen
				if seen.method != msg.Method || !ctJSONEqual(t, seen.in.Params, msg.Params) || !ctJSONEqual(t, seen.in.RawID, msg.ID) {
					t.Errorf("message %d: handler saw %q params %s id %s", i, seen.method, seen.in.Params, seen.in.RawID)
				}
				wantAtt := m.Attachment != nil
				var att []byte
				if wantAtt {
					att, _ = base64.StdEncoding.DecodeString(*m.Attachment)
				}
				if seen.in.HasAttachment != wantAtt || !bytes.Equal(seen.in.Attachment, att) {
					t.Errorf("message %d: attachment %q (%v), want %q (%v)", i, seen.in.Attachment, seen.in.HasAttachment, att, wantAtt)
				}
				r := s.next()
				if !ctJSONEqual(t, r.ID, msg.ID) || r.Error == nil || r.Error.Code != jsonrpc2.CodeMethodNotFound {
					t.Errorf("message %d: reply %s", i, r.body)
				}
			}
			if v.Error == "header" {
				r := s.next()
				if string(r.ID) != "null" || r.Error == nil || r.Error.Code != jsonrpc2.CodeParseError {
					t.Errorf("want -32700 with id null, got %s", r.body)
				}
			}
			s.expectSentinel()
		})
	}
}

func ctJSONEqual(tb testing.TB, a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

type ctWant struct {
	id   string // exact id bytes of the reply
	code int64  // 0: a result
	msg  string // substring of the error message
}

func TestCodecErrors(t *testing.T) {
	req := func(fields string) string { return ctFrame(`{"jsonrpc":"2.0",` + fields + `}`) }
	bigParams := `"` + strings.Repeat("x", 9000) + `"`
	deep := strings.Repeat("[", 100000)
	deepClosed := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	cases := []struct {
		name string
		in   string
		want []ctWant
	}{
		// frames
		{"missing Content-Length", "Content-Type: x\r\n\r\n{}", []ctWant{{"null", -32700, "missing Content-Length"}}},
		{"non-numeric Content-Length", "Content-Length: ten\r\n\r\n{}", []ctWant{{"null", -32700, "non-numeric"}}},
		{"negative Content-Length", "Content-Length: -2\r\n\r\n{}", []ctWant{{"null", -32700, "negative"}}},
		{"header garbage", "hello there\r\n\r\n", []ctWant{{"null", -32700, "not a header line"}}},
		{"body without any header", `{"jsonrpc":"2.0","id":1,"method":"echo"}`, []ctWant{{"null", -32700, "not a header line"}}},
		{"header block over 8 KiB", "X-Pad: " + strings.Repeat("p", 9000) + "\r\n\r\n", []ctWant{{"null", -32700, "header block longer"}}},
		{"oversized body, id found in its first bytes", req(`"id":7,"method":"echo","params":` + bigParams), []ctWant{{"7", -32004, "frame body of 9052 bytes exceeds the limit of 8192"}}},
		{"oversized body, id too far in", req(`"method":"echo","params":` + bigParams + `,"id":7`), []ctWant{{"null", -32004, "exceeds"}}},
		{"oversized attachment", ctFrame(`{"jsonrpc":"2.0","id":"big","method":"echo"}`, strings.Repeat("a", 5000)), []ctWant{{`"big"`, -32004, "attachment of 5000 bytes exceeds the limit of 4096"}}},
		{"oversized attachment of a notification", ctFrame(`{"jsonrpc":"2.0","method":"echo"}`, strings.Repeat("a", 5000)), nil},
		{"oversized attachment, bad body", ctFrame(`{`, strings.Repeat("a", 5000)), []ctWant{{"null", -32004, "attachment"}}},
		// JSON
		{"invalid JSON", ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo",}`), []ctWant{{"null", -32700, "invalid JSON"}}},
		{"empty body", ctFrame(``), []ctWant{{"null", -32700, "invalid JSON"}}},
		{"two JSON values", ctFrame(`{} {}`), []ctWant{{"null", -32700, "invalid JSON"}}},
		{"invalid UTF-8, id readable", ctFrame("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":\"\xff\xfe\"}"), []ctWant{{"1", -32700, "UTF-8"}}},
		{"invalid UTF-8 in the id", ctFrame("{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"echo\"}"), []ctWant{{"null", -32700, "UTF-8"}}},
		{"bad literal, id readable", ctFrame(`{"jsonrpc":"2.0","id":"x","method":"echo","params":tru}`), []ctWant{{`"x"`, -32700, "invalid JSON"}}},
		{"truncated object: id not trusted", ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{`), []ctWant{{"null", -32700, "invalid JSON"}}},
		{"100000 [", ctFrame(deep), []ctWant{{"null", -32700, "parse error"}}},
		{"nesting over 10000, closed", ctFrame(deepClosed), []ctWant{{"null", -32700, "exceeded max depth"}}},
		{"deep params: answered with the request's id", req(`"id":1,"method":"echo","params":` + deepClosed), []ctWant{{"1", -32700, "exceeded max depth"}}},
		{"deep params before the id", req(`"method":"echo","params":` + deepClosed + `,"id":"late"`), []ctWant{{`"late"`, -32700, "exceeded max depth"}}},
		{"deep params, duplicate id", req(`"id":1,"method":"echo","params":` + deepClosed + `,"id":2`), []ctWant{{"null", -32700, "exceeded max depth"}}},
		{"nesting of 10000 is fine", req(`"id":1,"method":"echo","params":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999)), []ctWant{{"1", 0, ""}}},
		// JSON-RPC
		{"batch", ctFrame(`[{"jsonrpc":"2.0","id":1,"method":"echo"}]`), []ctWant{{"null", -32600, "batch requests are not supported"}}},
		{"empty batch", ctFrame(`[]`), []ctWant{{"null", -32600, "batch requests are not supported"}}},
		{"string", ctFrame(`"hello"`), []ctWant{{"null", -32600, "not a JSON object"}}},
		{"number", ctFrame(`42`), []ctWant{{"null", -32600, "not a JSON object"}}},
		{"null", ctFrame(`null`), []ctWant{{"null", -32600, "not a JSON object"}}},
		{"object that is not JSON-RPC", ctFrame(`{"hello":"world"}`), []ctWant{{"null", -32600, "jsonrpc"}}},
		{"jsonrpc missing", ctFrame(`{"id":5,"method":"echo"}`), []ctWant{{"5", -32600, `jsonrpc: required`}}},
		{"jsonrpc 1.0", ctFrame(`{"jsonrpc":"1.0","id":5,"method":"echo"}`), []ctWant{{"5", -32600, `jsonrpc: must be "2.0"`}}},
		{"jsonrpc number", ctFrame(`{"jsonrpc":2.0,"id":"s","method":"echo"}`), []ctWant{{`"s"`, -32600, `jsonrpc`}}},
		{"method missing", req(`"id":5`), []ctWant{{"5", -32600, "method: required"}}},
		{"method not a string", req(`"id":5,"method":7`), []ctWant{{"5", -32600, "method: must be a string"}}},
		{"method null", req(`"id":5,"method":null`), []ctWant{{"5", -32600, "method: must be a string"}}},
		{"keys are case-sensitive", ctFrame(`{"JSONRPC":"2.0","ID":1,"METHOD":"echo"}`), []ctWant{{"null", -32600, "jsonrpc"}}},
		{"duplicate id", req(`"id":1,"id":2,"method":"echo"`), []ctWant{{"null", -32600, `duplicate member "id"`}}},
		{"duplicate method", req(`"id":1,"method":"a","method":"echo"`), []ctWant{{"1", -32600, `duplicate member "method"`}}},
		{"internal method", req(`"id":4,"method":"$/ckptd/protocolError"`), []ctWant{{"4", -32601, "method not found"}}},
		{"internal method, escaped", req(`"id":4,"method":"\u0024/ckptd/protocolError"`), []ctWant{{"4", -32601, "method not found"}}},
		{"internal method notification", req(`"method":"$/ckptd/protocolError"`), nil},
		{"response from the client is skipped", req(`"id":1,"result":{"a":1}`), nil},
		{"error response from the client is skipped", req(`"id":null,"error":{"code":1,"message":"x"}`), nil},
		{"notification is not answered", req(`"method":"echo","params":[1]`), nil},
		{"unknown method", req(`"id":3,"method":"nope"`), []ctWant{{"3", -32601, "nope"}}},
		// ids
		{"id string", req(`"id":"abc","method":"echo"`), []ctWant{{`"abc"`, 0, ""}}},
		{"id string with escapes", req(`"id":"\u00e9\"<x>","method":"echo"`), []ctWant{{`"\u00e9\"<x>"`, 0, ""}}},
		{"id empty string", req(`"id":"","method":"echo"`), []ctWant{{`""`, 0, ""}}},
		{"id int", req(`"id":7,"method":"echo"`), []ctWant{{"7", 0, ""}}},
		{"id zero", req(`"id":0,"method":"echo"`), []ctWant{{"0", 0, ""}}},
		{"id 2^53", req(`"id":9007199254740992,"method":"echo"`), []ctWant{{"9007199254740992", 0, ""}}},
		{"id 2^53+1", req(`"id":9007199254740993,"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"id negative", req(`"id":-1,"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"id float", req(`"id":1.5,"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"id 1.0", req(`"id":1.0,"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"id exponent", req(`"id":1e3,"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"id 2^64", req(`"id":18446744073709551616,"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"id null", req(`"id":null,"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"id true", req(`"id":true,"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"id object", req(`"id":{"a":1},"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"id array", req(`"id":[1],"method":"echo"`), []ctWant{{"null", -32600, "id must be"}}},
		{"bad id beats other problems", ctFrame(`{"id":[1]}`), []ctWant{{"null", -32600, "id must be"}}},
		{"escaped member name", req(`"\u0069d":8,"method":"echo"`), []ctWant{{"8", 0, ""}}},
		// several at once
		{"two bad frames then a good one", "Content-Length: x\r\n\r\n" + ctFrame(`[1]`) + ctFrame(`{`),
			[]ctWant{{"null", -32700, ""}, {"null", -32600, "batch"}, {"null", -32700, ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lim := ctLimits
			if strings.Contains(c.name, "nest") || strings.Contains(c.name, "deep") || strings.Contains(c.name, "[") {
				lim = framing.Limits{} // defaults: the deep bodies are over 8 KiB
			}
			s := newCtServer(t, lim)
			s.send(c.in + ctFrame(sentinel))
			for i, w := range c.want {
				r := s.next()
				if string(r.ID) != w.id {
					t.Errorf("reply %d: id %s, want %s (%s)", i, r.ID, w.id, r.body)
				}
				switch {
				case w.code == 0 && r.Error != nil:
					t.Errorf("reply %d: unexpected error %s", i, r.body)
				case w.code != 0 && (r.Error == nil || r.Error.Code != w.code || !strings.Contains(r.Error.Message, w.msg)):
					t.Errorf("reply %d: %s, want code %d with %q", i, r.body, w.code, w.msg)
				}
				if r.Error != nil && (r.Error.Code == -32700 || r.Error.Code == -32600) {
					var d struct{ Reason string }
					if json.Unmarshal(r.Error.Data, &d) != nil || d.Reason == "" {
						t.Errorf("reply %d: data %s has no reason", i, r.Error.Data)
					}
				}
			}
			s.expectSentinel()
		})
	}
}

func TestCodecTooLargeData(t *testing.T) {
	s := newCtServer(t, ctLimits)
	s.send(ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo"}`, strings.Repeat("a", 5000)) + ctFrame(sentinel))
	r := s.next()
	var d map[string]any
	if err := json.Unmarshal(r.Error.Data, &d); err != nil {
		t.Fatal(err)
	}
	if d["limit"] != float64(4096) || d["size"] != float64(5000) || d["field"] != "attachment" || r.Error.Code != -32004 {
		t.Fatalf("%s", r.body)
	}
	s.expectSentinel()
}

// An oversized frame is answered as soon as its header (and the body bytes sent with it) is read,
// before the rest of the body arrives; its bytes are then skipped as they come and the next
// request is answered. A declared length past any sane bound is answered the same way, then the
// connection ends with Err saying why.
func TestCodecTooLargeAnsweredAtOnce(t *testing.T) {
	t.Run("skipped", func(t *testing.T) {
		s := newCtServer(t, ctLimits)
		s.sendSync("Content-Length: 20000\r\n\r\n" + `{"jsonrpc":"2.0","id":9,"method":"echo","params":"`)
		r := s.next()
		if string(r.ID) != "9" || r.Error == nil || r.Error.Code != -32004 || !strings.Contains(r.Error.Message, "limit of 8192") {
			t.Fatalf("got %s", r.body)
		}
		s.sendSync(strings.Repeat("x", 20000-len(`{"jsonrpc":"2.0","id":9,"method":"echo","params":"`)))
		s.send(ctFrame(sentinel))
		s.expectSentinel()
		if s.codec.Err() != nil {
			t.Fatal(s.codec.Err())
		}
	})
	body := `{"jsonrpc":"2.0","id":3,"method":"echo"}`
	for _, header := range []string{"Content-Length: 1000000000000000\r\n\r\n", fmt.Sprintf("Content-Length: %d\r\nCkptd-Attachment-Length: 1000000000000000\r\n\r\n", len(body))} {
		t.Run("abandoned/"+header[:16], func(t *testing.T) {
			s := newCtServer(t, ctLimits)
			s.send(header + body + ctFrame(sentinel))
			r := s.next()
			if string(r.ID) != "3" || r.Error == nil || r.Error.Code != -32004 || !strings.Contains(r.Error.Message, "1000000000000000 bytes") || !strings.Contains(r.Error.Message, "closing the connection") {
				t.Fatalf("got %s", r.body)
			}
			s.waitEnd()
			if err := s.codec.Err(); !errors.Is(err, framing.ErrAbandoned) {
				t.Fatalf("Err() = %v", err)
			}
		})
	}
}

// A state must reach the handler byte-for-byte (key order, HTML characters, unicode escapes,
// whitespace, number spelling), and a result must leave the codec byte-for-byte too.
func TestCodecStateByteIdentical(t *testing.T) {
	params := `{"workflowId":"w","state": {"z":1, "a":"<b>&amp;</b>\u2028", "u":"\u00e9\ud83d\ude00é", "n":1.0e+2,` +
		"\n\t" + `"sp" : [ 1 , 2 ], "esc":"\/\"\\"}}`
	s := newCtServer(t, ctLimits)
	s.send(ctFrame(`{"method":"echo","params":` + params + `,"jsonrpc":"2.0","id":"p"}`))
	seen := <-s.handler.seen
	if string(seen.in.Params) != params {
		t.Fatalf("params changed:\n got %s\nwant %s", seen.in.Params, params)
	}
	r := s.next()
	want := `{"jsonrpc":"2.0","id":"p","result":` + params + `}`
	if string(r.body) != want {
		t.Fatalf("reply changed:\n got %s\nwant %s", r.body, want)
	}
}

func TestCodecAttachments(t *testing.T) {
	bin := "\x00\xff\r\n\r\nContent-Length: 5\r\n\r\n{}{}"
	cases := []struct {
		name, in string
		att      string
		hasAtt   bool
	}{
		{"binary", ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo"}`, bin), bin, true},
		{"empty attachment is an attachment", ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo"}`, ""), "", true},
		{"no attachment", ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo"}`), "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newCtServer(t, ctLimits)
			s.send(c.in + ctFrame(sentinel))
			r := s.next()
			if r.frame.HasAttachment != c.hasAtt || string(r.frame.Attachment) != c.att || string(r.Result) != "null" {
				t.Fatalf("reply %s att %q (%v)", r.body, r.frame.Attachment, r.frame.HasAttachment)
			}
			s.expectSentinel() // and the sentinel's reply has no attachment
		})
	}
	// An attachment registered for a request does not leak to the next reply.
	s := newCtServer(t, ctLimits)
	s.send(ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo"}`, "abc") + ctFrame(sentinel))
	if r := s.next(); string(r.frame.Attachment) != "abc" {
		t.Fatal("no attachment")
	}
	if f := (<-s.frames); f.HasAttachment {
		t.Fatal("attachment leaked to the next reply")
	}
}

func TestCodecStdinClosedMidFrame(t *testing.T) {
	full := ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`, "att")
	for _, cut := range []int{0, 1, 10, 20, len(full) / 2, len(full) - 4, len(full) - 1} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			s := newCtServer(t, ctLimits)
			s.sendSync(ctFrame(sentinel) + full[:cut])
			s.expectSentinel()
			_ = s.in.Close()
			s.waitEnd()
			s.expectNoFrame(20 * time.Millisecond)
		})
	}
}

// Replies can be written after the input ended: a client that sends its last requests and then
// closes its end of stdin gets their replies.
func TestCodecRepliesAfterInputEnds(t *testing.T) {
	for _, tail := range []string{"", "Content-Length: 10\r\n\r\n{"} {
		s := newCtServer(t, ctLimits)
		s.sendSync(ctFrame(`{"jsonrpc":"2.0","id":1,"method":"slow"}`) + ctFrame(`{"jsonrpc":"2.0","id":2,"method":"slow"}`) + tail)
		_ = s.in.Close()
		s.waitEnd()
		got := map[string]bool{}
		for range 2 {
			r := s.next()
			got[string(r.ID)] = string(r.Result) == `"slow"`
		}
		if !got["1"] || !got["2"] {
			t.Fatalf("replies %v", got)
		}
	}
}

func TestCodecNotifications(t *testing.T) {
	s := newCtServer(t, ctLimits)
	s.send(ctFrame(`{"jsonrpc":"2.0","method":"note","params":{"b":2,"a":1}}`, "x") + ctFrame(`{"jsonrpc":"2.0","id":1,"method":"notify"}`))
	seen := <-s.handler.seen
	if !seen.notif || seen.method != "note" || string(seen.in.Params) != `{"b":2,"a":1}` || string(seen.in.Attachment) != "x" || seen.in.RawID != nil {
		t.Fatalf("%+v", seen)
	}
	// Server -> client notification, then the reply.
	n := s.next()
	if n.Method != "server/event" || n.ID != nil || !ctJSONEqual(t, n.Params, []byte(`{"x":1,"html":"<&>"}`)) {
		t.Fatalf("notification %s", n.body)
	}
	if r := s.next(); string(r.ID) != "1" || string(r.Result) != `"sent"` {
		t.Fatalf("reply %s", r.body)
	}
}

func TestCodecReplyOnce(t *testing.T) {
	s := newCtServer(t, ctLimits)
	s.send(ctFrame(`{"jsonrpc":"2.0","id":1,"method":"twice"}`) + ctFrame(sentinel))
	if r := s.next(); string(r.ID) != "1" || string(r.Result) != "1" {
		t.Fatalf("%s", r.body)
	}
	if err := <-s.handler.twiceErrs; err == nil || !strings.Contains(err.Error(), "already answered") {
		t.Fatalf("second reply: %v", err)
	}
	s.expectSentinel()
}

// Reply, ReplyError and Notify write exactly these bytes; a notification is never answered and
// a result that is not valid JSON becomes an internal error.
func TestCodecWrites(t *testing.T) {
	c := NewCodec(ctLimits, nil)
	var buf bytes.Buffer
	if err := c.Reply(&buf, &Request{Method: "m", In: Incoming{RawID: json.RawMessage("3")}}, json.RawMessage(`{"a": 1}`), nil, false); err != nil {
		t.Fatal(err)
	}
	if err := c.ReplyError(&buf, &Request{Method: "m", In: Incoming{RawID: json.RawMessage(`"x"`)}}, &jsonrpc2.Error{Code: 1, Message: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Notify(&buf, "ev", map[string]any{"html": "<&>"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Reply(&buf, &Request{Method: "m", In: Incoming{RawID: json.RawMessage("4")}}, json.RawMessage(`{bad`), nil, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Reply(&buf, &Request{Method: "m", Notif: true}, json.RawMessage(`1`), nil, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Reply(&buf, &Request{Method: "m", In: Incoming{RawID: json.RawMessage("5")}}, nil, []byte("att"), true); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"jsonrpc":"2.0","id":3,"result":{"a": 1}}`,
		`{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":"m"}}`,
		`{"jsonrpc":"2.0","method":"ev","params":{"html":"\u003c\u0026\u003e"}}`,
		`{"jsonrpc":"2.0","id":4,"error":{"code":-32603,"message":"internal error (please report): the reply was not valid JSON"}}`,
		`{"jsonrpc":"2.0","id":5,"result":null}`,
	}
	r := framing.NewReader(&buf, framing.Limits{})
	for i, w := range want {
		f, err := r.Next()
		if err != nil || string(f.Body) != w {
			t.Errorf("frame %d: %v %s, want %s", i, err, f.Body, w)
		}
		if i == 4 && (!f.HasAttachment || string(f.Attachment) != "att") {
			t.Errorf("frame %d: attachment %q (%v)", i, f.Attachment, f.HasAttachment)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("extra output: %v", err)
	}
}

func TestEnvelopeScanPartial(t *testing.T) {
	for _, in := range []string{`{"id":7,"params":"xx`, ` {"id" : 7 , "method":"a"`, `{"id":7`} {
		env := new(envelope)
		complete, err := env.scan([]byte(in))
		if complete || err != nil || (in != `{"id":7` && string(env.id) != "7") {
			t.Errorf("%q: complete %v err %v id %q", in, complete, err, env.id)
		}
	}
	for _, in := range []string{`[`, `x`, `{"a" x`, `{1:2}`} {
		if _, err := new(envelope).scan([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// --- benchmarks ---

// BenchmarkCodecRoundTrip measures one request -> reply through a Codec read loop over
// in-memory pipes (echo with params verbatim / attachment echoed) against jsonrpc2.Conn with its
// own VSCodeObjectCodec doing the same echo (the baseline).
func BenchmarkCodecRoundTrip(b *testing.B) {
	for _, size := range []int{1 << 10, 100 << 10} {
		state := `"` + strings.Repeat("s", size) + `"`
		inline := ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"workflowId":"w","state":` + state + `}}`)
		attached := ctFrame(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"workflowId":"w","stateAttachment":true}}`, strings.Repeat("s", size))
		label := fmt.Sprintf("%dKB", size>>10)
		b.Run("ckptd/inline/"+label, func(b *testing.B) { benchRoundTrip(b, inline, false) })
		b.Run("ckptd/attachment/"+label, func(b *testing.B) { benchRoundTrip(b, attached, false) })
		b.Run("jsonrpc2-vscode/inline/"+label, func(b *testing.B) { benchRoundTrip(b, inline, true) })
	}
}

type ctPipes struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func (p ctPipes) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p ctPipes) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p ctPipes) Close() error {
	_ = p.r.Close()
	return p.w.Close()
}

type ctDiscard struct{}

func (ctDiscard) Printf(string, ...any) {}

func benchRoundTrip(b *testing.B, frame string, baseline bool) {
	cr, cw := io.Pipe()
	sr, sw := io.Pipe()
	if baseline {
		h := jsonrpc2.HandlerWithError(func(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
			return req.Params, nil
		})
		conn := jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(ctPipes{cr, sw}, jsonrpc2.VSCodeObjectCodec{}), h, jsonrpc2.SetLogger(ctDiscard{}))
		defer conn.Close()
	} else {
		c := NewCodec(framing.Limits{}, nil)
		go ctLoop(c, cr, &ctHandler{codec: c, out: sw, seen: make(chan ctSeen), twiceErrs: make(chan error, 1)})
		defer cr.Close()
	}
	defer cw.Close()
	fr := framing.NewReader(sr, framing.Limits{})
	in := []byte(frame)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		go func() { _, _ = cw.Write(in) }()
		f, err := fr.Next()
		if err != nil || !bytes.Contains(f.Body[:40], []byte(`"id":1`)) {
			b.Fatalf("%v %.100s", err, f.Body)
		}
	}
}
