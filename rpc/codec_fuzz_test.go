package rpc

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/framing"
)

// fuzzCodecLimits are small so that the fuzzer reaches -32004 cheaply.
var fuzzCodecLimits = framing.Limits{MaxBody: 2 << 10, MaxAttachment: 1 << 10}

// fuzzSentinel is sent after the fuzz input; whenever the framing puts it in a frame of its own
// it must be answered.
const fuzzSentinel = `{"jsonrpc":"2.0","id":"fuzz-sentinel","method":"echo","params":{"s":"<&>"}}`

// FuzzCodec feeds arbitrary bytes through the Codec the way the server drives it (Read, then a
// reply for every request), without pipes or goroutines, so that each input costs microseconds.
// It must never panic or hang, every frame it writes must be a valid JSON-RPC message, a second
// reply to a request must be refused, and a well-formed request following the input must be
// answered whenever the framing delimits it as a frame of its own.
//
// Seeds: the framing vectors and ../testdata/fuzz/FuzzCodec (go test -fuzz only looks in the
// package's own testdata, so they are added with f.Add).
func FuzzCodec(f *testing.F) {
	b, err := os.ReadFile("../testdata/framing.json")
	if err != nil {
		f.Fatal(err)
	}
	var file struct{ Vectors []ctVector }
	if err := json.Unmarshal(b, &file); err != nil {
		f.Fatal(err)
	}
	for _, v := range file.Vectors {
		in, err := base64.StdEncoding.DecodeString(v.Input)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(in)
	}
	for _, s := range loadFuzzSeeds(f, "../testdata/fuzz/FuzzCodec") {
		f.Add(s)
	}
	sentinelFrame := framing.AppendFrame(nil, []byte(fuzzSentinel), nil, false)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > fuzzMaxInput {
			return // the limits are 2 KiB: longer inputs explore nothing new, slowly
		}
		stream := append(append([]byte{}, in...), sentinelFrame...)
		wantSentinel := sentinelDelimited(stream)

		c := NewCodec(fuzzCodecLimits, nil)
		src := bufio.NewReader(bytes.NewReader(stream))
		var out bytes.Buffer
		for reads := 0; ; reads++ {
			if reads > len(stream)+1 {
				t.Fatalf("no progress after %d reads of %d bytes", reads, len(stream))
			}
			req, err := c.Read(src)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, framing.ErrAbandoned) {
					t.Fatalf("Read: %v", err)
				}
				break
			}
			inc := req.In
			if req.Notif {
				continue
			}
			var werr error
			switch {
			case inc.ProtocolError != nil:
				werr = c.ReplyError(&out, req, inc.ProtocolError)
			case req.Method == "echo":
				werr = c.Reply(&out, req, inc.Params, inc.Attachment, inc.HasAttachment)
			default:
				werr = c.ReplyError(&out, req, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "method not found"})
			}
			if werr != nil {
				t.Fatalf("reply: %v", werr)
			}
			if err := c.Reply(&out, req, nil, nil, false); err == nil {
				t.Fatal("a second reply to the same request was written")
			}
		}
		answered := false
		fr := framing.NewReader(&out, framing.Limits{MaxBody: 1 << 30, MaxAttachment: 1 << 30})
		for {
			f, err := fr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("the codec wrote a bad frame: %v", err)
			}
			r := parseReply(t, f)
			switch {
			case r.ID == nil:
				t.Fatalf("reply without id: %s", r.body)
			case r.Error == nil && r.Result == nil:
				t.Fatalf("reply without result or error: %s", r.body)
			}
			if r.Error != nil && r.Error.Code == 0 {
				t.Fatalf("error without code: %s", r.body)
			}
			// Other replies may carry the sentinel's id too: the input may use it, and a frame
			// whose header swallows the sentinel's is answered (-32004) with the id its body
			// starts with, which is then the sentinel's.
			if string(r.ID) == `"fuzz-sentinel"` && string(r.Result) == `{"s":"<&>"}` {
				answered = true
			}
		}
		if wantSentinel && !answered {
			t.Fatal("the request after the input was not answered")
		}
	})
}

// fuzzMaxInput bounds the inputs the fuzz targets of this package look at: a few times the
// fuzz limits, enough to reach every path.
const fuzzMaxInput = 16 << 10

// sentinelDelimited reports whether package framing reads the sentinel as the last frame of
// stream, on its own. A frame too large to skip abandons the input (every later Next returns
// framing.ErrAbandoned): the sentinel is then never read.
func sentinelDelimited(stream []byte) bool {
	r := framing.NewReader(bytes.NewReader(stream), fuzzCodecLimits)
	last := false
	for {
		fr, err := r.Next()
		if err == io.EOF {
			return last
		}
		if err == io.ErrUnexpectedEOF || errors.Is(err, framing.ErrAbandoned) {
			return false
		}
		last = err == nil && string(fr.Body) == fuzzSentinel && !fr.HasAttachment
	}
}

// loadFuzzSeeds reads files in the "go test fuzz v1" format holding one []byte value.
func loadFuzzSeeds(tb testing.TB, dir string) [][]byte {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" ||
			!strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
			tb.Fatalf("%s: not a one-[]byte fuzz corpus file", e.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			tb.Fatalf("%s: %v", e.Name(), err)
		}
		out = append(out, []byte(s))
	}
	return out
}

// TestJSONValidDepth: jsonValid agrees with encoding/json at and around the nesting limit, which
// FuzzJSONValid's small inputs cannot reach.
func TestJSONValidDepth(t *testing.T) {
	for _, s := range []string{
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000), strings.Repeat("[", 10000) + "[]" + strings.Repeat("]", 10000),
		strings.Repeat("[", 100000),
	} {
		b := []byte(s)
		if got, want := jsonValid(b), json.Valid(b) && utf8.Valid(b); got != want {
			t.Errorf("jsonValid(%.20q... %d bytes) = %v, encoding/json says %v", b, len(b), got, want)
		}
	}
}

// FuzzJSONValid checks the codec's validator against encoding/json: jsonValid(b) must equal
// json.Valid(b) && utf8.Valid(b) for any input.
func FuzzJSONValid(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `[ ]`, `{ }`, `null`, `true`, `false`, `nul`, `0`, `-0`, `01`, `1.`, `1.5e+3`, `-1E-0`, `1e`,
		`"a"`, `"\u00e9\ud83d"`, `"\x"`, `"\u12G4"`, "\"\x01\"", "\"\xff\"", "\"é☃𝄞\"", `"` + strings.Repeat("abcdefgh", 5) + `\"x"`,
		`{"a":[1,{"b":null}],"c":"d"}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{1:2}`, `[1]]`, `[[]`, `{} {}`, "\t\n\r [1] \n",
		fuzzSentinel,
	} {
		f.Add([]byte(s))
	}
	for _, s := range loadFuzzSeeds(f, "../testdata/fuzz/FuzzCodec") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4<<10 {
			// Long inputs only repeat what short ones cover, slowly; the nesting limit (10000
			// levels) is checked by TestJSONValidDepth.
			return
		}
		want := json.Valid(b) && utf8.Valid(b)
		if got := jsonValid(b); got != want {
			t.Fatalf("jsonValid(%q) = %v, encoding/json says %v", b, got, want)
		}
		// A frame body is often a value inside an object: check that too.
		obj := append(append([]byte(`{"k":`), b...), '}')
		if got, want := jsonValid(obj), json.Valid(obj) && utf8.Valid(obj); got != want {
			t.Fatalf("jsonValid(%q) = %v, encoding/json says %v", obj, got, want)
		}
	})
}
