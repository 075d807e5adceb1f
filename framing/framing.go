// Package framing reads and writes ckptd's stdio frames: LSP-style `Content-Length` frames plus
// the `Ckptd-Attachment-Length` extension, which carries raw bytes right after the JSON body
// (see docs/protocol.md, "Framing"). It knows nothing about JSON or JSON-RPC.
//
// A frame is
//
//	Content-Length: N\r\n
//	[Ckptd-Attachment-Length: M\r\n]
//	[any other header: ignored\r\n]
//	\r\n
//	<N bytes of body><M bytes of attachment>
//
// Header names are case-insensitive and may come in any order, unknown headers are ignored, a
// bare "\n" is accepted as a line end, and the header block (including its closing empty line)
// may be at most MaxHeaderBlock bytes. Empty lines before a header block are skipped.
//
// # Errors and resynchronisation
//
// Reader.Next never leaves the stream in an unknown place (it may abandon it, see
// TooLargeError):
//
//   - *HeaderError: the header block was unusable (missing, empty, non-numeric, negative or
//     conflicting length, a line that is not "Name: value", or a block longer than
//     MaxHeaderBlock). The next call to Next resynchronises (see below) and continues.
//   - *TooLargeError: the lengths were fine but over Limits. It is returned as soon as the header
//     block (and, for an oversized attachment, the body) has been read, so that the caller can
//     answer at once. The oversized bytes are discarded by the next call to Next as they arrive
//     (never buffered), so the frame after them is read intact. A frame that declares more than
//     Limits.MaxDiscard bytes to skip cannot be skipped in any reasonable time: its
//     TooLargeError has Abandoned set and every later Next returns ErrAbandoned.
//   - io.EOF: the input ended cleanly at a frame boundary. io.ErrUnexpectedEOF: it ended inside
//     a frame (or inside garbage being skipped). Other errors are the underlying reader's.
//
// Resync rule: after a *HeaderError there is no trustworthy length, so the reader skips
// forward to the next occurrence of "Content-Length:" or "Ckptd-Attachment-Length:" (ASCII
// case-insensitive) and parses a new header block starting at that token. The token is
// searched for anywhere in the byte stream, not only at line starts, because the bad frame's
// body may end without a newline right before the next frame's header ("{...}Content-Length: 5").
// The search starts:
//
//   - for a line that is not a header line (or the line that overflowed the block limit): at
//     the second byte of that line, so a header hiding inside the line is found and the same
//     line is never parsed twice;
//   - for a well-formed header line with a bad value (non-numeric, negative, conflicting):
//     after the rest of that header block, and after the body too when the block had a valid
//     Content-Length (within Limits.MaxBody), so that a body that merely mentions
//     "Content-Length:" is not mistaken for a header and the bad frame's body is never
//     delivered as a frame. Exception: when the bad line is the first line of a block that the
//     search itself found, or its value contains a token, the line is treated as garbage
//     (previous rule) — the token was most likely a false hit inside garbage, and the real
//     next header may follow on the same or the next line;
//   - for a block without Content-Length: right after the block.
//
// The search keeps only a few bytes of look-behind, so skipping garbage takes constant memory.
package framing

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

const (
	// MaxHeaderBlock is the largest accepted header block, closing empty line included.
	MaxHeaderBlock = 8 << 10

	// DefaultMaxAttachment is the attachment limit used when Limits.MaxAttachment <= 0
	// (the default --max-state-size).
	DefaultMaxAttachment = 64 << 20
	// DefaultMaxBody is the body limit used when Limits.MaxBody <= 0
	// (2 × --max-state-size + 1 MiB).
	DefaultMaxBody = 2*DefaultMaxAttachment + 1<<20

	// PrefixSize is how many leading bytes of an oversized body are kept in
	// TooLargeError.Prefix (so a codec can try to find the request id in them).
	PrefixSize = 4 << 10

	// HeaderContentLength and HeaderAttachmentLength are the canonical header names.
	HeaderContentLength    = "Content-Length"
	HeaderAttachmentLength = "Ckptd-Attachment-Length"
)

// Limits bound what a Reader accepts. A field <= 0 selects its default.
type Limits struct {
	MaxBody       int64 // largest JSON body, in bytes
	MaxAttachment int64 // largest attachment, in bytes
	// MaxDiscard is the most bytes the Reader discards to skip one oversized frame (what is
	// left of its body plus its attachment). A frame that declares more is not skipped: the
	// stream is abandoned (see TooLargeError.Abandoned). Default: DefaultMaxDiscard or 16 times
	// the larger limit, whichever is more.
	MaxDiscard int64
}

// DefaultMaxDiscard is the smallest default Limits.MaxDiscard: 1 GiB crosses a pipe in about a
// second, while a declared length of, say, 10^15 bytes would never end.
const DefaultMaxDiscard = 1 << 30

func (l Limits) withDefaults() Limits {
	if l.MaxBody <= 0 {
		l.MaxBody = DefaultMaxBody
	}
	if l.MaxAttachment <= 0 {
		l.MaxAttachment = DefaultMaxAttachment
	}
	if l.MaxDiscard <= 0 {
		l.MaxDiscard = DefaultMaxDiscard
		if m := 16 * max(l.MaxBody, l.MaxAttachment); m > l.MaxDiscard && m/16 == max(l.MaxBody, l.MaxAttachment) {
			l.MaxDiscard = m
		}
	}
	return l
}

// Frame is one message: the body and, when the frame had a Ckptd-Attachment-Length header, the
// attachment (HasAttachment is true and Attachment is non-nil, possibly empty). The slices are
// freshly allocated for every frame and owned by the caller.
type Frame struct {
	Body          []byte
	Attachment    []byte
	HasAttachment bool
}

// HeaderError reports an unusable header block. After it the Reader resynchronises on the next
// call to Next (see the package documentation).
type HeaderError struct {
	Reason string
}

func (e *HeaderError) Error() string { return "framing: bad header: " + e.Reason }

// TooLargeError reports a frame whose body or attachment is over its limit. It is returned
// right after the header block (Field "body") or the body (Field "attachment"); the next call
// to Next discards the oversized bytes as they arrive, without buffering them, and then reads
// the following frame intact. With Field "attachment", Next also returns the frame's body
// (Frame.Body; HasAttachment true, Attachment nil) so that the caller can answer the request by
// its id.
type TooLargeError struct {
	Field string // "body" or "attachment"
	Size  int64  // the length the header announced
	Limit int64  // the limit it exceeded
	// Prefix (Field "body"): the leading bytes of the body that had already arrived with the
	// header, at most PrefixSize (the reader does not wait for more).
	Prefix []byte
	// Abandoned: the frame declares more than Limits.MaxDiscard bytes (body plus attachment),
	// so the stream cannot be resynchronised in any reasonable time; nothing more is read and
	// every later Next returns ErrAbandoned.
	Abandoned bool
	// Discard is how many bytes the next Next discards (the declared total when Abandoned).
	Discard int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("framing: %s of %d bytes exceeds the limit of %d bytes", e.Field, e.Size, e.Limit)
}

// ErrAbandoned is returned by every Next after a TooLargeError with Abandoned set.
var ErrAbandoned = errors.New("framing: input abandoned after a frame too large to skip")

// Reader reads frames from a byte stream. It is not safe for concurrent use.
type Reader struct {
	br  *bufio.Reader
	lim Limits

	// carry holds bytes already taken from br that must be read again before br: the tail of
	// a bad header line, re-scanned by resync. Every read goes through carry first.
	carry []byte

	resync    bool   // the previous Next returned a *HeaderError
	skip      int64  // bytes to discard before the next frame (of a frame answered with an error)
	abandoned bool   // a frame too large to skip was met: Next returns ErrAbandoned
	line      []byte // scratch for the current header line
	window    []byte // scratch for resync
}

// NewReader returns a Reader on r. If r is a *bufio.Reader it is used directly (so a caller that
// owns one, like the rpc codec's read loop, loses no buffered bytes).
func NewReader(r io.Reader, lim Limits) *Reader {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 32<<10)
	}
	return &Reader{br: br, lim: lim.withDefaults()}
}

// Limits returns the limits in force (defaults filled in).
func (r *Reader) Limits() Limits { return r.lim }

var errLineTooLong = errors.New("header line too long")

// tokens the resync searches for, lower-case, and the canonical spelling handed to the header
// parser once one is found.
var resyncTokens = [...]struct{ lower, canonical string }{
	{"content-length:", HeaderContentLength + ":"},
	{"ckptd-attachment-length:", HeaderAttachmentLength + ":"},
}

const maxTokenLen = len("ckptd-attachment-length:")

// Next reads the next frame. See the package documentation for the errors.
func (r *Reader) Next() (Frame, error) {
	r.line = r.line[:0]
	if r.abandoned {
		return Frame{}, ErrAbandoned
	}
	if r.skip > 0 {
		n := r.skip
		r.skip = 0
		if err := r.discard(n); err != nil {
			return Frame{}, err
		}
	}
	if r.resync {
		tok, err := r.skipToHeader()
		if err != nil {
			return Frame{}, err
		}
		r.resync = false
		r.line = append(r.line, tok...)
	}
	f, err := r.readFrame()
	if _, ok := err.(*HeaderError); ok {
		r.resync = true
	}
	return f, err
}

// badLine records the tail of a bad header line for the resync search and returns the error.
func (r *Reader) badLine(line []byte, reason string) error {
	if len(line) > 1 {
		// r.carry may still hold unread bytes: they come after the line.
		c := make([]byte, 0, len(line)-1+len(r.carry))
		c = append(c, line[1:]...)
		r.carry = append(c, r.carry...)
	}
	return &HeaderError{Reason: reason}
}

// readFrame parses one header block and reads body and attachment. r.line may already hold the
// start of the first header line (from resync).
func (r *Reader) readFrame() (Frame, error) {
	var (
		bodyLen, attLen int64             = -1, -1
		total           int               // header block bytes so far
		resynced        = len(r.line) > 0 // the block starts at a token found by resync
		started         = resynced
		valueErr        string // first bad value in this block
		bodyLenBad      bool   // the Content-Length value itself was bad
	)
	for {
		line, err := r.readLine(r.line, MaxHeaderBlock-total)
		r.line = line[:0]
		if err == errLineTooLong {
			return Frame{}, r.badLine(line, fmt.Sprintf("header block longer than %d bytes", MaxHeaderBlock))
		}
		if err != nil {
			if err == io.EOF && (started || len(line) > 0) {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
		content := trimEOL(line)
		if len(content) == 0 {
			if !started {
				continue // empty line between frames
			}
			break // end of the header block
		}
		fromResync := resynced && total == 0
		started = true
		total += len(line)
		name, value, ok := splitHeader(content)
		if !ok {
			return Frame{}, r.badLine(line, fmt.Sprintf("not a header line: %q", clip(content, 64)))
		}
		var dst *int64
		switch {
		case asciiEqualFold(name, HeaderContentLength):
			dst = &bodyLen
		case asciiEqualFold(name, HeaderAttachmentLength):
			dst = &attLen
		default:
			continue // unknown headers are ignored
		}
		n, reason := parseLength(value)
		if reason == "" && *dst >= 0 && *dst != n {
			reason = "conflicting values"
		}
		if reason != "" && (fromResync || indexToken(value) >= 0) {
			// Probably not a header at all but a token found inside garbage, or a
			// line that runs into the next frame's header: treat it as garbage.
			return Frame{}, r.badLine(line, canonicalName(name)+": "+reason)
		}
		if reason != "" {
			if valueErr == "" {
				valueErr = canonicalName(name) + ": " + reason
			}
			bodyLenBad = bodyLenBad || dst == &bodyLen
			continue // read the rest of the block, then resync
		}
		*dst = n
	}
	if valueErr != "" {
		if !bodyLenBad && bodyLen >= 0 && bodyLen <= r.lim.MaxBody {
			// The body length is trustworthy: skip the body (on the next call, so that the
			// error can be answered first) so its content cannot be mistaken for a header by
			// the resync search.
			r.skip = bodyLen
		}
		return Frame{}, &HeaderError{Reason: valueErr}
	}
	if bodyLen < 0 {
		return Frame{}, &HeaderError{Reason: "missing " + HeaderContentLength}
	}

	if bodyLen > r.lim.MaxBody {
		// Answerable at once: take only the body bytes that came with the header (the caller
		// may find the request id in them), never wait for more.
		tl := &TooLargeError{Field: "body", Size: bodyLen, Limit: r.lim.MaxBody}
		tl.Prefix = r.takeBuffered(min(bodyLen, PrefixSize))
		declared := bodyLen
		if attLen > 0 {
			declared = satAdd(bodyLen, attLen)
		}
		if declared > r.lim.MaxDiscard {
			tl.Abandoned, tl.Discard, r.abandoned = true, declared, true
			return Frame{}, tl
		}
		tl.Discard = declared - int64(len(tl.Prefix))
		r.skip = tl.Discard
		return Frame{}, tl
	}
	body, err := r.readN(bodyLen)
	if err != nil {
		return Frame{}, err
	}
	f := Frame{Body: body, HasAttachment: attLen >= 0}
	if attLen > r.lim.MaxAttachment {
		tl := &TooLargeError{Field: "attachment", Size: attLen, Limit: r.lim.MaxAttachment, Discard: attLen}
		if satAdd(bodyLen, attLen) > r.lim.MaxDiscard {
			tl.Abandoned, r.abandoned = true, true
		} else {
			r.skip = attLen
		}
		return f, tl
	}
	if attLen >= 0 {
		if f.Attachment, err = r.readN(attLen); err != nil {
			return Frame{}, err
		}
	}
	return f, nil
}

// satAdd adds two non-negative lengths, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// takeBuffered consumes and returns up to n bytes that are already in memory (carry, then
// what br has buffered), without reading from the underlying reader.
func (r *Reader) takeBuffered(n int64) []byte {
	var out []byte
	if len(r.carry) > 0 {
		k := min(int64(len(r.carry)), n)
		out = append(out, r.carry[:k]...)
		r.carry = r.carry[k:]
		n -= k
	}
	if k := min(int64(r.br.Buffered()), n); k > 0 {
		b, _ := r.br.Peek(int(k))
		out = append(out, b...)
		_, _ = r.br.Discard(len(b))
	}
	return out
}

// skipToHeader implements the resync search: it consumes input up to and including the next
// resync token and returns the token's canonical spelling.
func (r *Reader) skipToHeader() (string, error) {
	var tail int // bytes at the start of r.window already consumed (look-behind)
	skipped := false
	r.window = r.window[:0]
	for {
		b, err := r.peek()
		if err != nil {
			if err == io.EOF && (skipped || tail > 0) {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		r.window = append(r.window, b...)
		if j, t := indexToken2(r.window); j >= 0 {
			r.consume(j + len(resyncTokens[t].lower) - tail)
			return resyncTokens[t].canonical, nil
		}
		r.consume(len(b))
		skipped = true
		// Keep maxTokenLen-1 bytes of look-behind: a token may straddle two chunks.
		if keep := maxTokenLen - 1; len(r.window) > keep {
			r.window = append(r.window[:0], r.window[len(r.window)-keep:]...)
		}
		tail = len(r.window)
	}
}

// peek returns the bytes available without blocking beyond one read: carry if any, else what br
// has buffered (filling it if empty). The bytes are not consumed.
func (r *Reader) peek() ([]byte, error) {
	if len(r.carry) > 0 {
		return r.carry, nil
	}
	if r.br.Buffered() == 0 {
		if _, err := r.br.Peek(1); err != nil {
			return nil, err
		}
	}
	b, _ := r.br.Peek(r.br.Buffered())
	return b, nil
}

// consume drops n bytes previously returned by peek.
func (r *Reader) consume(n int) {
	if len(r.carry) > 0 {
		r.carry = r.carry[n:]
		return
	}
	_, _ = r.br.Discard(n)
}

// readLine appends one line (terminator included) to dst. If the line would make dst longer
// than max it stops after max+1 bytes and returns errLineTooLong.
func (r *Reader) readLine(dst []byte, max int) ([]byte, error) {
	for {
		b, err := r.peek()
		if err != nil {
			return dst, err
		}
		i := bytes.IndexByte(b, '\n')
		n := len(b)
		if i >= 0 {
			n = i + 1
		}
		if len(dst)+n > max {
			n = max + 1 - len(dst)
			dst = append(dst, b[:n]...)
			r.consume(n)
			return dst, errLineTooLong
		}
		dst = append(dst, b[:n]...)
		r.consume(n)
		if i >= 0 {
			return dst, nil
		}
	}
}

// readN reads exactly n bytes into a new slice. Up to 1 MiB is allocated at once; a larger
// buffer only after the first MiB has arrived, so a frame that announces a large length and
// then stops costs little, and a real large one is copied once (1 MiB).
func (r *Reader) readN(n int64) ([]byte, error) {
	const first = 1 << 20
	buf := make([]byte, 0, min(n, first))
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), n)
			copy(nb, buf)
			buf = nb
		}
		if len(r.carry) > 0 {
			k := copy(buf[len(buf):cap(buf)], r.carry)
			r.carry = r.carry[k:]
			buf = buf[:len(buf)+k]
			continue
		}
		k, err := r.br.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil && int64(len(buf)) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// discard skips n bytes without buffering them.
func (r *Reader) discard(n int64) error {
	for n > 0 {
		if len(r.carry) > 0 {
			k := min(int64(len(r.carry)), n)
			r.carry = r.carry[k:]
			n -= k
			continue
		}
		k, err := r.br.Discard(int(min(n, 1<<30)))
		n -= int64(k)
		if err != nil && n > 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// AppendHeader appends the header block of a frame with a body of bodyLen bytes and, when
// hasAttachment, an attachment of attachmentLen bytes.
func AppendHeader(dst []byte, bodyLen, attachmentLen int, hasAttachment bool) []byte {
	dst = append(dst, HeaderContentLength+": "...)
	dst = strconv.AppendInt(dst, int64(bodyLen), 10)
	dst = append(dst, '\r', '\n')
	if hasAttachment {
		dst = append(dst, HeaderAttachmentLength+": "...)
		dst = strconv.AppendInt(dst, int64(attachmentLen), 10)
		dst = append(dst, '\r', '\n')
	}
	return append(dst, '\r', '\n')
}

// AppendFrame appends a whole frame to dst, so that it can be written with one Write. The
// attachment header is written when hasAttachment is true or the attachment is not empty.
func AppendFrame(dst []byte, body []byte, attachment []byte, hasAttachment bool) []byte {
	hasAttachment = hasAttachment || len(attachment) > 0
	if need := len(dst) + 64 + len(body) + len(attachment); cap(dst) < need {
		nb := make([]byte, len(dst), need)
		copy(nb, dst)
		dst = nb
	}
	dst = AppendHeader(dst, len(body), len(attachment), hasAttachment)
	dst = append(dst, body...)
	return append(dst, attachment...)
}

// --- header parsing helpers ---

func trimEOL(line []byte) []byte {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	return bytes.TrimSuffix(line, []byte{'\r'})
}

// splitHeader splits "Name: value"; the name must be an RFC 9110 token.
func splitHeader(line []byte) (name, value []byte, ok bool) {
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return nil, nil, false
	}
	for _, c := range line[:i] {
		if !isTokenChar(c) {
			return nil, nil, false
		}
	}
	return line[:i], bytes.Trim(line[i+1:], " \t"), true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// parseLength parses a decimal length; reason is empty on success.
func parseLength(v []byte) (int64, string) {
	if len(v) == 0 {
		return 0, "empty value"
	}
	if v[0] == '-' {
		return 0, fmt.Sprintf("negative length %q", clip(v, 32))
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, fmt.Sprintf("non-numeric length %q", clip(v, 32))
		}
		if n > (1<<63-1-int64(c-'0'))/10 {
			return 0, fmt.Sprintf("length %q out of range", clip(v, 32))
		}
		n = n*10 + int64(c-'0')
	}
	return n, ""
}

func canonicalName(name []byte) string {
	if asciiEqualFold(name, HeaderContentLength) {
		return HeaderContentLength
	}
	return HeaderAttachmentLength
}

func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

// indexFold returns the index of the lower-case ASCII token tok in b, ignoring ASCII case.
func indexFold(b []byte, tok string) int {
	first, firstUp := tok[0], tok[0]-('a'-'A')
	for i := 0; i+len(tok) <= len(b); {
		j := indexEither(b[i:len(b)-len(tok)+1], first, firstUp)
		if j < 0 {
			return -1
		}
		i += j
		if asciiEqualFold(b[i:i+len(tok)], tok) {
			return i
		}
		i++
	}
	return -1
}

// indexToken2 returns the position of the first resync token in b and which one it is.
func indexToken2(b []byte) (pos, which int) {
	pos = -1
	for i, t := range resyncTokens {
		if j := indexFold(b, t.lower); j >= 0 && (pos < 0 || j < pos) {
			pos, which = j, i
		}
	}
	return pos, which
}

func indexToken(b []byte) int {
	j, _ := indexToken2(b)
	return j
}

func indexEither(b []byte, x, y byte) int {
	i := bytes.IndexByte(b, x)
	j := bytes.IndexByte(b, y)
	switch {
	case i < 0:
		return j
	case j < 0 || i < j:
		return i
	}
	return j
}
