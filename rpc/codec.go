package rpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/jsonvalid"
)

// Codec reads and writes ckptd's stdio protocol (docs/protocol.md): frames are read and written
// by package framing (Content-Length + Ckptd-Attachment-Length), and the JSON-RPC envelope is
// split here without decoding it: params stay a sub-slice of the frame body (never re-encoded,
// so a state is stored byte-for-byte as sent), ids are kept as the raw bytes sent (echoed
// verbatim in the reply), and results are written verbatim. The only JSON-RPC library type it
// uses is jsonrpc2.Error, the error object handlers return.
//
// Read returns the next request or notification; a bad frame does not end the input, it comes
// back as a *Request of the internal method "$/ckptd/protocolError" whose In.ProtocolError is
// the error to answer with ReplyError (In.RawID is the id that reply carries: the request's own
// id when it was valid, else null). Only the end of the input (io.EOF, io.ErrUnexpectedEOF), a
// read error, or a frame too large to skip (framing.ErrAbandoned) is returned as an error.
// Every request must be answered exactly once (Reply or ReplyError; a second answer is refused
// with an error); notifications are never answered.
//
// Error mapping (see docs/protocol.md, "Bad frames never kill the connection"):
//
//	input                                        code    message                              reply id
//	*framing.HeaderError                         -32700  "parse error: <reason>"              null
//	invalid JSON / UTF-8, nesting over 10000     -32700  "parse error: ..."                   echoed if readable (*)
//	top-level array (batch)                      -32600  "batch requests are not supported"   null
//	not an object                                -32600  "invalid request: not a JSON object" null
//	duplicate id/method/jsonrpc/params/...       -32600  "invalid request: duplicate member"  echoed if valid
//	id not a string or an integer in [0, 2^53]   -32600  "invalid request: id must be ..."    null
//	jsonrpc missing or not "2.0"                 -32600  "invalid request: jsonrpc: ..."      echoed if valid
//	method missing or not a string               -32600  "invalid request: method: ..."       echoed if valid
//	method "$/ckptd/protocolError" from client   -32601  "method not found: ..."              echoed
//	*framing.TooLargeError                       -32004  "too large: ..."                     echoed if found
//	a response (result/error, no method)         none: logged and skipped (ckptd never calls the client)
//
// (*) when the body is a complete JSON object at the top level (only a nested value is wrong:
// too deep, invalid UTF-8 in a string, a bad literal) and its "id" member is valid.
//
// -32700 and -32600 carry data {reason}; -32004 carries data {limit, size, field}. A notification
// (no id) is never answered: one with an oversized attachment is logged and dropped.
//
// An oversized frame is answered as soon as its header block (and, for an oversized attachment,
// its body) has been read; its bytes are then discarded as they arrive. One that declares more
// than framing.Limits.MaxDiscard bytes is answered, logged at error level, and ends the input
// (Err reports why): nothing after it could be trusted to be a frame boundary.
//
// The codec never closes anything: replies can be written after the input ended, so a client
// that sends its last requests and then closes its end of stdin still gets their replies.
type Codec struct {
	lim framing.Limits
	log *slog.Logger

	// Read side: used only by the reading goroutine.
	src *bufio.Reader
	fr  *framing.Reader

	ended     chan struct{} // closed when the input ends (EOF, read error, abandoned stream)
	endOnce   sync.Once
	abandoned error // set (before ended is closed) when an absurd frame ended the input

	out outQueue // write side: frames of concurrent replies go out together (outqueue.go)
}

// Request is a request or notification read by Codec.Read.
type Request struct {
	Method string
	Notif  bool // no id: never answered
	In     Incoming

	replied atomic.Bool
}

// Incoming is what a request or notification carried besides its method.
type Incoming struct {
	// Params is the raw "params" value exactly as sent (a sub-slice of the frame body, never
	// re-encoded); nil when the request had no params.
	Params json.RawMessage
	// Attachment is the frame's Ckptd-Attachment-Length payload; HasAttachment tells a frame
	// without the header from an empty attachment.
	Attachment    []byte
	HasAttachment bool
	// RawID is the request id exactly as sent; nil for a notification, `null` for a protocol
	// error whose id could not be determined.
	RawID json.RawMessage
	// ProtocolError is set for requests of the internal method $/ckptd/protocolError only: the
	// error to answer with.
	ProtocolError *jsonrpc2.Error
}

const (
	// protocolErrorMethod is the internal method protocol errors are delivered as.
	protocolErrorMethod = "$/ckptd/protocolError"

	codeTooLarge = -32004

	// maxID is the largest numeric id accepted (2^53, the largest integer every JSON
	// implementation represents exactly).
	maxID = 1 << 53
)

// NewCodec returns a Codec that enforces lim on incoming frames and logs to log (nil: nowhere).
func NewCodec(lim framing.Limits, log *slog.Logger) *Codec {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Codec{lim: lim, log: log, ended: make(chan struct{})}
}

// InputEnded is closed as soon as the input has ended (the client closed its end, a read
// failed, or a frame too large to skip abandoned the stream).
func (c *Codec) InputEnded() <-chan struct{} { return c.ended }

// Err returns why the codec gave up on an input that had not ended by itself (a frame too large
// to skip), or nil.
func (c *Codec) Err() error {
	select {
	case <-c.ended:
		return c.abandoned
	default:
		return nil
	}
}

func (c *Codec) endInput(err error) {
	c.endOnce.Do(func() {
		c.abandoned = err
		close(c.ended)
	})
}

// Read returns the next request or notification from stream (always the same stream). It
// returns an error only when the input ends or fails; everything else becomes a request (see
// Codec).
func (c *Codec) Read(stream *bufio.Reader) (*Request, error) {
	if c.fr == nil || c.src != stream {
		c.src, c.fr = stream, framing.NewReader(stream, c.lim)
	}
	for {
		f, err := c.fr.Next()
		var (
			he *framing.HeaderError
			tl *framing.TooLargeError
			m  *Request
		)
		switch {
		case err == nil:
			m = c.parse(f)
		case errors.As(err, &he):
			m = protocolError(nil, jsonrpc2.CodeParseError, "parse error: "+he.Reason, map[string]string{"reason": he.Reason})
		case errors.As(err, &tl):
			m = c.tooLarge(f, tl)
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			c.endInput(nil)
			return nil, err
		case errors.Is(err, framing.ErrAbandoned):
			c.endInput(fmt.Errorf("stdin: %w", err))
			return nil, err
		default:
			c.endInput(nil)
			return nil, err // the input failed or was closed under us
		}
		if m == nil {
			continue // skipped (logged)
		}
		if m.In.ProtocolError != nil {
			c.log.Debug("protocol error", "code", m.In.ProtocolError.Code, "error", m.In.ProtocolError.Message, "id", string(m.In.RawID))
		}
		return m, nil
	}
}

var jsonNull = json.RawMessage("null")

func protocolError(rawID json.RawMessage, code int64, msg string, data any) *Request {
	if rawID == nil {
		rawID = jsonNull
	}
	e := &jsonrpc2.Error{Code: code, Message: msg}
	if data != nil {
		e.SetError(data)
	}
	return &Request{Method: protocolErrorMethod, In: Incoming{RawID: rawID, ProtocolError: e}}
}

func invalidRequest(rawID json.RawMessage, reason string) *Request {
	return protocolError(rawID, jsonrpc2.CodeInvalidRequest, "invalid request: "+reason, map[string]string{"reason": reason})
}

// decodeString decodes the JSON string raw (valid JSON: the codec checked the body).
func decodeString(raw []byte) string {
	if len(raw) >= 2 && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// parse validates a frame body as a JSON-RPC 2.0 request. It returns nil for a message to skip.
func (c *Codec) parse(f framing.Frame) *Request {
	env, m := checkEnvelope(f.Body)
	if m != nil {
		return m
	}
	if env.isResponse() {
		c.log.Debug("ignoring a response from the client (ckptd sends no requests)", "id", string(env.id))
		return nil
	}
	if isString(env.method, protocolErrorMethod) { // compared decoded: "\u0024/ckptd/..." too
		if !env.hasID {
			c.log.Debug("ignoring a notification for an internal method", "method", protocolErrorMethod)
			return nil
		}
		return protocolError(env.id, jsonrpc2.CodeMethodNotFound, "method not found: "+protocolErrorMethod,
			map[string]string{"method": protocolErrorMethod})
	}
	m = &Request{Method: decodeString(env.method), Notif: !env.hasID, In: Incoming{
		Attachment:    f.Attachment,
		HasAttachment: f.HasAttachment,
		RawID:         env.id,
	}}
	if env.hasParams {
		m.In.Params = env.params
	}
	return m
}

// checkEnvelope parses body. It returns a protocol error message, or the envelope of a valid
// request, notification or response.
func checkEnvelope(body []byte) (*envelope, *Request) {
	if !jsonValid(body) {
		// Only on this path: find out what is wrong. encoding/json's scanner is iterative and
		// rejects nesting deeper than 10000, like jsonValid, so deep input is harmless.
		reason := "body is not valid UTF-8"
		if utf8.Valid(body) {
			reason = "invalid JSON"
			if err := json.Unmarshal(body, new(json.RawMessage)); err != nil {
				reason = "invalid JSON: " + err.Error()
			}
		}
		return nil, protocolError(readableID(body), jsonrpc2.CodeParseError, "parse error: "+reason, map[string]string{"reason": reason})
	}
	switch first := body[skipWS(body, 0)]; first {
	case '{':
	case '[':
		const reason = "batch requests are not supported"
		return nil, protocolError(nil, jsonrpc2.CodeInvalidRequest, reason, map[string]string{"reason": reason})
	default:
		return nil, invalidRequest(nil, "not a JSON object")
	}
	env := new(envelope)
	if complete, err := env.scan(body); !complete || err != nil {
		// Cannot happen for valid JSON; be safe anyway.
		return nil, invalidRequest(nil, "not a JSON object")
	}
	var id json.RawMessage
	if env.hasID && validID(env.id) && env.dup != "id" {
		id = env.id
	}
	switch {
	case env.isResponse():
		return env, nil
	case env.dup != "":
		return nil, invalidRequest(id, fmt.Sprintf("duplicate member %q", env.dup))
	case env.hasID && id == nil:
		return nil, invalidRequest(nil, "id must be a string or an integer in [0, 2^53]")
	case !env.hasJSONRPC:
		return nil, invalidRequest(id, `jsonrpc: required, must be "2.0"`)
	case !isString(env.jsonrpc, "2.0"):
		return nil, invalidRequest(id, `jsonrpc: must be "2.0"`)
	case !env.hasMethod:
		return nil, invalidRequest(id, "method: required")
	case env.method[0] != '"':
		return nil, invalidRequest(id, "method: must be a string")
	}
	return env, nil
}

// readableID returns the id of a body that is not valid JSON when it can still be read: the body
// is a complete object at the top level (what is wrong is inside a member's value: nesting
// deeper than 10000, invalid UTF-8 in a string, a bad literal) whose "id" member is a valid id
// and given once. Otherwise nil (the reply carries id null). A caller whose request was merely
// too deep thus gets its answer instead of waiting for ever.
func readableID(body []byte) json.RawMessage {
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil
	}
	if end := scanValue(body, i); end < 0 || skipWS(body, end) != len(body) {
		return nil // truncated, or something after the object
	}
	env := new(envelope)
	if complete, err := env.scan(body); !complete || err != nil || !env.hasID || env.dup == "id" || env.isResponse() || !validID(env.id) {
		return nil
	}
	return env.id
}

// tooLarge answers a frame over the limits. For an oversized attachment the body is known and
// parsed; for an oversized body the id is looked for in its first bytes.
func (c *Codec) tooLarge(f framing.Frame, tl *framing.TooLargeError) *Request {
	what := "frame body"
	if tl.Field == "attachment" {
		what = "attachment"
	}
	msg := fmt.Sprintf("too large: %s of %d bytes exceeds the limit of %d bytes", what, tl.Size, tl.Limit)
	data := map[string]any{"limit": tl.Limit, "size": tl.Size, "field": tl.Field}
	if tl.Abandoned {
		msg += fmt.Sprintf("; more than %d bytes cannot be skipped, closing the connection", c.fr.Limits().MaxDiscard)
		c.log.Error("closing the connection: a frame declares more bytes than can be skipped to find the next frame",
			"field", tl.Field, "declared", tl.Discard, "limit", tl.Limit, "maxDiscard", c.fr.Limits().MaxDiscard)
	}
	var id json.RawMessage
	if tl.Field == "attachment" {
		env, m := checkEnvelope(f.Body)
		switch {
		case m != nil:
			id = m.In.RawID
		case env.isResponse():
			c.log.Debug("ignoring a response from the client with an oversized attachment")
			return nil
		case !env.hasID:
			c.log.Warn("notification dropped: attachment too large", "size", tl.Size, "limit", tl.Limit)
			return nil
		default:
			id = env.id
		}
	} else {
		// Best effort: clients usually put "id" before "params".
		env := new(envelope)
		_, _ = env.scan(tl.Prefix)
		if env.hasID && env.dup != "id" && validID(env.id) {
			id = env.id
		}
	}
	return protocolError(id, codeTooLarge, msg, data)
}

// validID reports whether raw is an id the protocol accepts: a JSON string, or an integer
// literal in [0, 2^53]. It is safe on unvalidated bytes.
func validID(raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	if raw[0] == '"' {
		return utf8.Valid(raw) && json.Valid(raw)
	}
	if len(raw) > 16 || (raw[0] == '0' && len(raw) > 1) {
		return false
	}
	var n uint64
	for _, ch := range raw {
		if ch < '0' || ch > '9' {
			return false
		}
		n = n*10 + uint64(ch-'0')
	}
	return n <= maxID
}

// isString reports whether the JSON value raw is the string s.
func isString(raw []byte, s string) bool {
	var got string
	return len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &got) == nil && got == s
}

// --- writing ---

var errReplied = errors.New("rpc: request already answered")

// Reply answers req with result (valid JSON, written verbatim: no re-encoding, key order,
// spacing and escaping kept; nil: null) and, when hasAtt, att as the frame's attachment. A
// result that is not valid JSON is replaced by an internal error. A notification is not
// answered; a second answer to req is refused (errReplied).
func (c *Codec) Reply(stream io.Writer, req *Request, result json.RawMessage, att []byte, hasAtt bool) error {
	if req.Notif {
		return nil
	}
	if req.replied.Swap(true) {
		return errReplied
	}
	if result == nil {
		result = jsonNull
	}
	if !jsonValid(result) {
		c.log.Error("codec: handler produced a result that is not valid JSON; sending an internal error instead", "id", string(req.In.RawID))
		return c.writeResponse(stream, req.In.RawID, nil, []byte(`{"code":-32603,"message":"internal error (please report): the reply was not valid JSON"}`), nil, false)
	}
	if hasAtt && att == nil {
		att = []byte{}
	}
	return c.writeResponse(stream, req.In.RawID, result, nil, att, hasAtt)
}

// ReplyError answers req with the error e.
func (c *Codec) ReplyError(stream io.Writer, req *Request, e *jsonrpc2.Error) error {
	if req.Notif {
		return nil
	}
	if req.replied.Swap(true) {
		return errReplied
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return c.writeResponse(stream, req.In.RawID, nil, b, nil, false)
}

// Notify writes the notification method with params (encoded with encoding/json).
func (c *Codec) Notify(stream io.Writer, method string, params any) error {
	m, err := json.Marshal(method)
	if err != nil {
		return err
	}
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return c.writeFrame(stream, [][]byte{[]byte(`{"jsonrpc":"2.0","method":`), m, []byte(`,"params":`), p, []byte(`}`)}, nil, false)
}

// writeResponse writes {"jsonrpc":"2.0","id":...,"result"|"error":...}.
func (c *Codec) writeResponse(stream io.Writer, rawID, result, errJSON, att []byte, hasAtt bool) error {
	if rawID == nil {
		rawID = jsonNull
	}
	parts := [][]byte{[]byte(`{"jsonrpc":"2.0","id":`), rawID, nil, nil, []byte(`}`)}
	if errJSON != nil {
		parts[2], parts[3] = []byte(`,"error":`), errJSON
	} else {
		parts[2], parts[3] = []byte(`,"result":`), result
	}
	return c.writeFrame(stream, parts, att, hasAtt)
}

// copyMax is the largest part writeFrame copies into the output buffer; larger ones (a state, an
// attachment) are written from where they are, so a reply never costs another copy of a state.
const copyMax = 64 << 10

// writeFrame writes one frame whose body is the concatenation of parts, followed by att, and
// returns once it is written. Frames written concurrently go out together, in as few writes as
// their sizes allow (outQueue); the bytes of one frame are never interleaved with another's.
func (c *Codec) writeFrame(stream io.Writer, parts [][]byte, att []byte, hasAtt bool) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	q := &c.out
	f := q.begin(stream)
	q.buf = framing.AppendHeader(q.buf, n, len(att), hasAtt)
	for _, p := range parts {
		q.add(stream, p)
	}
	q.add(stream, att)
	return q.finish(f)
}

// --- envelope scanning ---

// envelope holds the raw top-level members of a JSON-RPC message.
type envelope struct {
	jsonrpc, id, method, params, result, err                     []byte
	hasJSONRPC, hasID, hasMethod, hasParams, hasResult, hasError bool
	dup                                                          string // first envelope member seen twice
}

func (e *envelope) isResponse() bool { return !e.hasMethod && (e.hasResult || e.hasError) }

var errSyntax = errors.New("syntax error")

// scan splits the top-level members of the JSON object b. It is safe on arbitrary bytes:
// complete is false when b ends before the object does (the members seen so far are kept),
// err is set when b is not an object. It does not validate values; callers run json.Valid
// first where that matters.
func (e *envelope) scan(b []byte) (complete bool, err error) {
	i := skipWS(b, 0)
	if i >= len(b) {
		return false, nil
	}
	if b[i] != '{' {
		return false, errSyntax
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true, nil
	}
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			return false, nil
		}
		if b[i] != '"' {
			return false, errSyntax
		}
		ke := scanString(b, i)
		if ke < 0 {
			return false, nil
		}
		key := b[i:ke]
		i = skipWS(b, ke)
		if i >= len(b) {
			return false, nil
		}
		if b[i] != ':' {
			return false, errSyntax
		}
		i = skipWS(b, i+1)
		if i >= len(b) {
			return false, nil
		}
		ve := scanValue(b, i)
		if ve < 0 {
			return false, nil
		}
		e.set(key, b[i:ve])
		i = skipWS(b, ve)
		if i >= len(b) {
			return false, nil
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return true, nil
		default:
			return false, errSyntax
		}
	}
}

func (e *envelope) set(key, val []byte) {
	name := key[1 : len(key)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		var s string
		if json.Unmarshal(key, &s) != nil {
			return
		}
		name = []byte(s)
	}
	var dst *[]byte
	var has *bool
	switch string(name) {
	case "jsonrpc":
		dst, has = &e.jsonrpc, &e.hasJSONRPC
	case "id":
		dst, has = &e.id, &e.hasID
	case "method":
		dst, has = &e.method, &e.hasMethod
	case "params":
		dst, has = &e.params, &e.hasParams
	case "result":
		dst, has = &e.result, &e.hasResult
	case "error":
		dst, has = &e.err, &e.hasError
	default:
		return
	}
	if *has && e.dup == "" {
		e.dup = string(name)
	}
	*dst, *has = val, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index just past the string starting at b[i] == '"', or -1.
func scanString(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		k += j
		n := 0
		for m := k - 1; m > i && b[m] == '\\'; m-- {
			n++
		}
		if n%2 == 0 {
			return k + 1
		}
		j = k + 1
	}
	return -1
}

// scanValue returns the index just past the value starting at b[i], or -1 when b ends first
// (or the value is malformed).
func scanValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return scanString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				e := scanString(b, i)
				if e < 0 {
					return -1
				}
				i = e
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	j := i
	for j < len(b) && !isDelim(b[j]) {
		j++
	}
	if j == i || j == len(b) {
		return -1
	}
	return j
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n', '{', '[', '"', ':':
		return true
	}
	return false
}

// --- validation ---

// jsonValid reports whether b is exactly one JSON value in valid UTF-8 (jsonvalid.Valid: what
// json.Valid(b) && utf8.Valid(b) accepts, several times faster).
func jsonValid(b []byte) bool { return jsonvalid.Valid(b) }
