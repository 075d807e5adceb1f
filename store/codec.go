package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// State encodings in states.encoding.
const (
	encRaw         = 0
	encZstd        = 1 // one zstd frame
	encZstdChunked = 2 // chunk table + independent zstd frames, (de)compressed in parallel
	encRawPending  = 3 // raw, waiting for the compactor (store/compact.go); read like encRaw
)

// minChunk is the smallest raw chunk of encZstdChunked.
const minChunk = 32 << 10

// codec holds the zstd encoder and decoder of one Store. Both are safe for concurrent EncodeAll /
// DecodeAll calls and keep their own internal pools.
type codec struct {
	enc    *zstd.Encoder
	dec    *zstd.Decoder
	chunks int // max parallel chunks
}

func newCodec(maxBytes int64) (*codec, error) {
	par := runtime.GOMAXPROCS(0)
	conc := max(4, par)
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(false), // SHA-256 of the raw state is verified on every load
		zstd.WithEncoderConcurrency(conc),
		zstd.WithLowerEncoderMem(false))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	mem := uint64(maxBytes) + 1<<20
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(conc),
		zstd.WithDecoderMaxMemory(mem),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		enc.Close()
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &codec{enc: enc, dec: dec, chunks: par}, nil
}

func (c *codec) close() {
	_ = c.enc.Close()
	c.dec.Close()
}

// compress returns the zstd encoding of b when b is larger than threshold and compression saves at
// least 1/8; otherwise it returns b with encRaw. Large inputs are split into independent frames
// compressed in parallel (encZstdChunked).
func (c *codec) compress(b []byte, threshold int) ([]byte, int) {
	if len(b) <= threshold {
		return b, encRaw
	}
	limit := len(b) - len(b)/8
	n := min(c.chunks, len(b)/minChunk)
	if n <= 1 {
		out := c.enc.EncodeAll(b, make([]byte, 0, limit))
		if len(out) > limit {
			return b, encRaw
		}
		return out, encZstd
	}
	size := (len(b) + n - 1) / n
	parts := make([][]byte, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		lo, hi := i*size, min((i+1)*size, len(b))
		if i == n-1 {
			parts[i] = c.enc.EncodeAll(b[lo:hi], make([]byte, 0, (hi-lo)/2))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[i] = c.enc.EncodeAll(b[lo:hi], make([]byte, 0, (hi-lo)/2))
		}()
	}
	wg.Wait()
	hdr := binary.AppendUvarint(nil, uint64(n))
	total := 0
	for i, p := range parts {
		hdr = binary.AppendUvarint(hdr, uint64(len(p)))
		hdr = binary.AppendUvarint(hdr, uint64(min((i+1)*size, len(b))-i*size))
		total += len(p)
	}
	if len(hdr)+total > limit {
		return b, encRaw
	}
	out := make([]byte, 0, len(hdr)+total)
	out = append(out, hdr...)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, encZstdChunked
}

// decode returns the raw state of a stored blob; size is the expected raw size.
func (c *codec) decode(data []byte, enc int, size int64) ([]byte, error) {
	if size < 0 || size > math.MaxInt32*4 {
		return nil, fmt.Errorf("bad recorded size %d", size)
	}
	switch enc {
	case encRaw, encRawPending:
		if int64(len(data)) != size {
			return nil, fmt.Errorf("stored %d bytes, expected %d", len(data), size)
		}
		out := make([]byte, len(data))
		copy(out, data)
		return out, nil
	case encZstd:
		out, err := c.dec.DecodeAll(data, make([]byte, 0, size))
		if err != nil {
			return nil, fmt.Errorf("zstd: %v", err)
		}
		if int64(len(out)) != size {
			return nil, fmt.Errorf("decompressed to %d bytes, expected %d", len(out), size)
		}
		return out, nil
	case encZstdChunked:
		return c.decodeChunked(data, size)
	default:
		return nil, fmt.Errorf("unknown encoding %d", enc)
	}
}

func (c *codec) decodeChunked(data []byte, size int64) ([]byte, error) {
	r := bytes.NewReader(data)
	n, err := binary.ReadUvarint(r)
	if err != nil || n == 0 || n > uint64(len(data)) {
		return nil, errors.New("bad chunk table")
	}
	type chunk struct{ comp, raw int }
	chunks := make([]chunk, n)
	var compTotal, rawTotal uint64
	for i := range chunks {
		cl, err1 := binary.ReadUvarint(r)
		rl, err2 := binary.ReadUvarint(r)
		if err1 != nil || err2 != nil || cl > uint64(len(data)) || rl > uint64(size) {
			return nil, errors.New("bad chunk table")
		}
		compTotal += cl
		rawTotal += rl
		chunks[i] = chunk{int(cl), int(rl)}
	}
	body := data[len(data)-r.Len():]
	if compTotal != uint64(len(body)) || rawTotal != uint64(size) {
		return nil, fmt.Errorf("chunk table sizes %d/%d do not match %d/%d", compTotal, rawTotal, len(body), size)
	}
	out := make([]byte, size)
	errs := make([]error, n)
	var wg sync.WaitGroup
	coff, roff := 0, 0
	for i, ch := range chunks {
		src := body[coff : coff+ch.comp]
		dst := out[roff : roff+ch.raw]
		coff += ch.comp
		roff += ch.raw
		work := func() {
			got, err := c.dec.DecodeAll(src, dst[:0:len(dst)])
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("zstd chunk %d: %v", i, err)
			case len(got) != len(dst) || (len(got) > 0 && &got[0] != &dst[0]):
				errs[i] = fmt.Errorf("chunk %d decompressed to %d bytes, expected %d", i, len(got), len(dst))
			}
		}
		if i == len(chunks)-1 {
			work()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// canonicalJSON returns a compact canonical text of one JSON value: object keys sorted, no
// insignificant whitespace, numbers normalised (1, 1.0 and 1e0 are equal), no HTML escaping.
// Strings and numbers of different types stay different ("1" != 1).
func canonicalJSON(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("trailing data after JSON value")
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		if x {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case json.Number:
		buf.WriteString(canonicalNumber(x))
	case string:
		writeJSONString(buf, x)
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(buf, k)
			buf.WriteByte(':')
			if err := writeCanonical(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("unexpected JSON value %T", v)
	}
	return nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

func canonicalNumber(n json.Number) string {
	s := string(n)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	if !strings.ContainsAny(s, ".eE") {
		return s // an integer beyond int64: keep its digits exactly
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return s // out of float range: keep the literal
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// countArray counts the top-level elements of a JSON array without decoding it. Empty input or
// null counts 0. ok is false when the text is not an array. It runs on every save's task lists
// (a 1000-task list is ~110 KB), so strings are skipped with bytes.IndexByte and everything else
// through a lookup table.
func countArray(b []byte) (n int, isNull bool, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) {
		return 0, true, true
	}
	if bytes.Equal(bytes.TrimSpace(b[i:]), []byte("null")) {
		return 0, true, true
	}
	if b[i] != '[' {
		return 0, false, false
	}
	depth, commas, content := 0, 0, false
	for i < len(b) {
		c := b[i]
		switch arrayClass[c] {
		case clsSpace:
			i++
			continue
		case clsOther:
			content = true
			i++
			continue
		}
		switch c {
		case '"':
			end, found := stringEnd(b, i+1)
			if !found {
				return 0, false, false
			}
			content = true
			i = end + 1
			continue
		case '[', '{':
			if depth >= 1 {
				content = true
			}
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				if skipSpace(b, i+1) != len(b) {
					return 0, false, false
				}
				if !content {
					return 0, false, true
				}
				return commas + 1, false, true
			}
		case ',':
			if depth == 1 {
				commas++
			}
		}
		i++
	}
	return 0, false, false // unterminated
}

const (
	clsOther = iota
	clsSpace
	clsStructural
)

var arrayClass = func() (t [256]uint8) {
	for _, c := range " \t\r\n" {
		t[c] = clsSpace
	}
	for _, c := range `"[]{},` {
		t[c] = clsStructural
	}
	return t
}()

// stringEnd returns the index of the quote that closes the string whose body starts at i.
func stringEnd(b []byte, i int) (int, bool) {
	for {
		k := bytes.IndexByte(b[i:], '"')
		if k < 0 {
			return 0, false
		}
		j := i + k
		backslashes := 0
		for p := j - 1; p >= i && b[p] == '\\'; p-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return j, true
		}
		i = j + 1
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// contentHasher builds the idempotency digest of a save: every saved field, length-prefixed.
type contentHasher struct {
	buf [8]byte
	h   interface {
		Write([]byte) (int, error)
		Sum([]byte) []byte
	}
}

func newContentHasher() *contentHasher { return &contentHasher{h: sha256.New()} }

func (c *contentHasher) bytes(b []byte) {
	binary.LittleEndian.PutUint64(c.buf[:], uint64(len(b)))
	_, _ = c.h.Write(c.buf[:])
	_, _ = c.h.Write(b)
}

func (c *contentHasher) str(s string) { c.bytes([]byte(s)) }

func (c *contentHasher) int(i int64) {
	binary.LittleEndian.PutUint64(c.buf[:], uint64(i))
	_, _ = c.h.Write(c.buf[:])
}

func (c *contentHasher) sum() []byte { return c.h.Sum(nil) }
