package framing

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// vectorsPath is the shared framing test vectors (docs/protocol.md, "Framing").
const vectorsPath = "../testdata/framing.json"

type vector struct {
	Name     string `json:"name"`
	Input    string `json:"input"`
	Messages []struct {
		JSON       json.RawMessage `json:"json"`
		Attachment *string         `json:"attachment"`
	} `json:"messages"`
	Error string `json:"error"`
}

func loadVectors(tb testing.TB) []vector {
	tb.Helper()
	b, err := os.ReadFile(vectorsPath)
	if err != nil {
		tb.Fatal(err)
	}
	var f struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		tb.Fatal(err)
	}
	if len(f.Vectors) == 0 {
		tb.Fatal("no vectors")
	}
	return f.Vectors
}

func (v vector) input(tb testing.TB) []byte {
	b, err := base64.StdEncoding.DecodeString(v.Input)
	if err != nil {
		tb.Fatalf("%s: %v", v.Name, err)
	}
	return b
}

// errKind classifies a Next error the way framing.json does.
func errKind(err error) string {
	var he *HeaderError
	var tl *TooLargeError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &he):
		return "header"
	case errors.As(err, &tl):
		return "too-large"
	case err == io.EOF:
		return "clean-eof"
	case err == io.ErrUnexpectedEOF:
		return "eof"
	case err == ErrAbandoned:
		return "abandoned"
	}
	return "other: " + err.Error()
}

func jsonEqual(tb testing.TB, got []byte, want json.RawMessage) bool {
	tb.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		tb.Errorf("body %q is not JSON: %v", got, err)
		return false
	}
	if err := json.Unmarshal(want, &w); err != nil {
		tb.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}

var testLimits = Limits{MaxBody: 1 << 20, MaxAttachment: 1 << 20}

func TestReaderVectors(t *testing.T) {
	readers := map[string]func([]byte) io.Reader{
		"whole":    func(b []byte) io.Reader { return bytes.NewReader(b) },
		"one-byte": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"data-err": func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
		"bufio-16": func(b []byte) io.Reader { return bufio.NewReaderSize(bytes.NewReader(b), 16) },
	}
	for _, v := range loadVectors(t) {
		for rname, mk := range readers {
			t.Run(v.Name+"/"+rname, func(t *testing.T) {
				r := NewReader(mk(v.input(t)), testLimits)
				for i, m := range v.Messages {
					f, err := r.Next()
					if err != nil {
						t.Fatalf("message %d: %v", i, err)
					}
					if !jsonEqual(t, f.Body, m.JSON) {
						t.Errorf("message %d: body %s, want %s", i, f.Body, m.JSON)
					}
					if m.Attachment == nil {
						if f.HasAttachment || f.Attachment != nil {
							t.Errorf("message %d: unexpected attachment %q", i, f.Attachment)
						}
					} else {
						want, _ := base64.StdEncoding.DecodeString(*m.Attachment)
						if !f.HasAttachment || f.Attachment == nil || !bytes.Equal(f.Attachment, want) {
							t.Errorf("message %d: attachment %q (has %v), want %q", i, f.Attachment, f.HasAttachment, want)
						}
					}
				}
				_, err := r.Next()
				want := v.Error
				if want == "" {
					want = "clean-eof"
				}
				if got := errKind(err); got != want {
					t.Fatalf("after %d messages: error %v (%s), want kind %s", len(v.Messages), err, got, want)
				}
			})
		}
	}
}

func frame(body string, att ...string) string {
	if len(att) == 0 {
		return string(AppendFrame(nil, []byte(body), nil, false))
	}
	return string(AppendFrame(nil, []byte(body), []byte(att[0]), true))
}

// step is one expected result of Next: a frame, or an error kind.
type step struct {
	body, att string
	hasAtt    bool
	err       string
}

func ok(body string) step         { return step{body: body} }
func okAtt(body, att string) step { return step{body: body, att: att, hasAtt: true} }
func fails(kind string) step      { return step{err: kind} }
func (s step) String() string {
	return fmt.Sprintf("%+v", struct{ B, A, E string }{s.body, s.att, s.err})
}
func tooLarge(field string) step { return step{err: "too-large:" + field} }
func tooLargeAtt(body string) step {
	return step{body: body, hasAtt: true, err: "too-large:attachment"}
}
func runSteps(t *testing.T, r *Reader, steps []step) {
	t.Helper()
	for i, s := range steps {
		f, err := r.Next()
		kind := errKind(err)
		if kind == "too-large" {
			kind += ":" + err.(*TooLargeError).Field
		}
		if kind != s.err {
			t.Fatalf("step %d: got error %v (%s), want %s", i, err, kind, s)
		}
		if string(f.Body) != s.body || string(f.Attachment) != s.att || f.HasAttachment != s.hasAtt {
			t.Fatalf("step %d: got body %q att %q has %v, want %s", i, f.Body, f.Attachment, f.HasAttachment, s)
		}
	}
}

func TestReaderTable(t *testing.T) {
	good := `{"jsonrpc":"2.0","id":1,"method":"stats"}`
	long := strings.Repeat("x", MaxHeaderBlock)
	cases := []struct {
		name  string
		in    string
		lim   Limits
		steps []step
	}{
		{"two bad frames then a good one",
			"Content-Length: ten\r\n\r\n{}" + "Ckptd-Attachment-Length: 2\r\n\r\n[1]ab" + frame(good),
			testLimits, []step{fails("header"), fails("header"), ok(good), fails("clean-eof")}},
		{"body ends without newline right before the next header",
			"{\"no\":\"header\"}" + frame(good),
			testLimits, []step{fails("header"), ok(good), fails("clean-eof")}},
		{"resync finds an attachment header first",
			"junk\r\n" + "Ckptd-Attachment-Length: 3\r\nContent-Length: 2\r\n\r\n{}abc",
			testLimits, []step{fails("header"), okAtt("{}", "abc"), fails("clean-eof")}},
		{"resync token is case-insensitive and may straddle reads",
			strings.Repeat("z", 70000) + "\r\ncOnTeNt-LeNgTh: 2\r\n\r\n{}",
			testLimits, []step{fails("header"), ok("{}"), fails("clean-eof")}},
		{"bad attachment value with valid Content-Length skips the body",
			"Content-Length: 20\r\nCkptd-Attachment-Length: x\r\n\r\n" + `{"Content-Length:1"}` + frame(good),
			testLimits, []step{fails("header"), ok(good), fails("clean-eof")}},
		{"missing Content-Length",
			"Content-Type: x\r\n\r\n{}" + frame(good),
			testLimits, []step{fails("header"), ok(good), fails("clean-eof")}},
		{"empty Content-Length", "Content-Length:\r\n\r\n{}" + frame(good),
			testLimits, []step{fails("header"), ok(good), fails("clean-eof")}},
		{"negative Content-Length", "Content-Length: -5\r\n\r\nhello" + frame(good),
			testLimits, []step{fails("header"), ok(good), fails("clean-eof")}},
		{"Content-Length out of range", "Content-Length: 99999999999999999999\r\n\r\n" + frame(good),
			testLimits, []step{fails("header"), ok(good), fails("clean-eof")}},
		{"conflicting Content-Length", "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}" + frame(good),
			testLimits, []step{fails("header"), ok(good), fails("clean-eof")}},
		{"repeated equal Content-Length is fine", "Content-Length: 2\r\ncontent-length: 2\r\n\r\n{}",
			testLimits, []step{ok("{}"), fails("clean-eof")}},
		{"bare newlines and extra spaces", "Content-Length:2 \nX-Other:  y\n\n{}",
			testLimits, []step{ok("{}"), fails("clean-eof")}},
		{"empty lines between frames are skipped", "\r\n\n" + frame("{}") + "\r\n" + frame("[]") + "\r\n",
			testLimits, []step{ok("{}"), ok("[]"), fails("clean-eof")}},
		{"header name with a space is garbage", "Content Length: 2\r\n\r\n{}" + frame(good),
			testLimits, []step{fails("header"), ok(good), fails("clean-eof")}},
		{"header overflow (8 KiB)", "X-Pad: " + long + "\r\nContent-Length: 2\r\n\r\n{}" + frame(good),
			testLimits, []step{fails("header"), ok("{}"), ok(good), fails("clean-eof")}},
		{"header overflow by many short lines", strings.Repeat("X-A: b\r\n", MaxHeaderBlock/8+1) + "\r\n" + frame(good),
			testLimits, []step{fails("header"), ok(good), fails("clean-eof")}},
		{"header block of exactly 8 KiB is accepted",
			"Content-Length: 2\r\nX-Pad: " + strings.Repeat("p", MaxHeaderBlock-len("Content-Length: 2\r\nX-Pad: \r\n\r\n")) + "\r\n\r\n{}",
			testLimits, []step{ok("{}"), fails("clean-eof")}},
		{"oversized body skipped, next frame intact",
			frame(strings.Repeat("b", 101)) + frame(good),
			Limits{MaxBody: 100, MaxAttachment: 100}, []step{tooLarge("body"), ok(good), fails("clean-eof")}},
		{"oversized body with attachment skipped",
			frame(strings.Repeat("b", 101), "attachment") + frame(good),
			Limits{MaxBody: 100, MaxAttachment: 100}, []step{tooLarge("body"), ok(good), fails("clean-eof")}},
		{"oversized attachment skipped, body kept, next frame intact",
			frame("{}", strings.Repeat("a", 101)) + frame(good, "att"),
			Limits{MaxBody: 100, MaxAttachment: 100}, []step{tooLargeAtt("{}"), okAtt(good, "att"), fails("clean-eof")}},
		{"limits are inclusive",
			frame(strings.Repeat("b", 100), strings.Repeat("a", 100)),
			Limits{MaxBody: 100, MaxAttachment: 100}, []step{okAtt(strings.Repeat("b", 100), strings.Repeat("a", 100)), fails("clean-eof")}},
		{"garbage then EOF", "Content-Length: x\r\n\r\nnot a frame",
			testLimits, []step{fails("header"), fails("eof"), fails("clean-eof")}},
		{"bad header block at the very end", "Content-Length: x\r\n\r\n",
			testLimits, []step{fails("header"), fails("clean-eof")}},
		{"bad attachment length, body cut short", "Content-Length: 10\r\nCkptd-Attachment-Length: -1\r\n\r\nabc",
			testLimits, []step{fails("header"), fails("eof"), fails("clean-eof")}},
		{"false token inside a bad frame's body costs one more error",
			"garbage\r\n" + `{"note":"Content-Length: 5"}` + frame(good),
			testLimits, []step{fails("header"), fails("header"), ok(good), fails("clean-eof")}},
		{"false token, real header on the next line",
			"garbage\r\n" + `{"note":"Content-Length: 5"}` + "\r\n" + frame(good),
			testLimits, []step{fails("header"), fails("header"), ok(good), fails("clean-eof")}},
		{"garbage line then a header block that is fine",
			"oops\r\nContent-Length: 2\r\n\r\n{}",
			testLimits, []step{fails("header"), ok("{}"), fails("clean-eof")}},
		{"empty input", "", testLimits, []step{fails("clean-eof"), fails("clean-eof")}},
		{"absurd Content-Length abandons the stream",
			"Content-Length: 1000000000000000\r\n\r\n{}" + frame(good),
			testLimits, []step{tooLarge("body"), fails("abandoned"), fails("abandoned")}},
		{"absurd attachment length abandons the stream after the body",
			"Content-Length: 2\r\nCkptd-Attachment-Length: 1000000000000000\r\n\r\n{}" + frame(good),
			testLimits, []step{tooLargeAtt("{}"), fails("abandoned")}},
		{"declared total up to MaxDiscard is skipped exactly",
			frame(strings.Repeat("b", 60), strings.Repeat("a", 40)) + frame(good),
			Limits{MaxBody: 45, MaxAttachment: 45, MaxDiscard: 100}, []step{tooLarge("body"), ok(good), fails("clean-eof")}},
		{"declared total past MaxDiscard abandons",
			frame(strings.Repeat("b", 60), strings.Repeat("a", 41)) + frame(good),
			Limits{MaxBody: 45, MaxAttachment: 45, MaxDiscard: 100}, []step{tooLarge("body"), fails("abandoned")}},
		{"oversized attachment within MaxDiscard is skipped",
			frame("{}", strings.Repeat("a", 98)) + frame(good),
			Limits{MaxBody: 45, MaxAttachment: 45, MaxDiscard: 100}, []step{tooLargeAtt("{}"), ok(good), fails("clean-eof")}},
		{"oversized body cut short by EOF while skipping",
			"Content-Length: 500\r\n\r\n{\"id\":1}",
			Limits{MaxBody: 100, MaxAttachment: 100}, []step{tooLarge("body"), fails("eof"), fails("clean-eof")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runSteps(t, NewReader(strings.NewReader(c.in), c.lim), c.steps)
			// The same input byte by byte must give the same results.
			runSteps(t, NewReader(iotest.OneByteReader(strings.NewReader(c.in)), c.lim), c.steps)
		})
	}
}

func TestReaderTooLargeError(t *testing.T) {
	body := `{"jsonrpc":"2.0","id":42,"method":"checkpoint/save","params":{"state":"` + strings.Repeat("s", 10000) + `"}}`
	r := NewReader(strings.NewReader(frame(body)), Limits{MaxBody: 1000, MaxAttachment: 1000})
	_, err := r.Next()
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("got %v", err)
	}
	if tl.Field != "body" || tl.Size != int64(len(body)) || tl.Limit != 1000 || string(tl.Prefix) != body[:PrefixSize] {
		t.Fatalf("got %+v (prefix %d bytes)", tl, len(tl.Prefix))
	}
	if !strings.Contains(tl.Error(), "exceeds the limit of 1000 bytes") {
		t.Error(tl.Error())
	}
}

// An oversized frame is reported as soon as its header block has arrived (with the body bytes
// that came with it), before the body is sent, and its bytes are then discarded as they arrive:
// the next frame is read intact.
func TestReaderTooLargeAnsweredBeforeBody(t *testing.T) {
	pr, pw := io.Pipe()
	r := NewReader(pr, Limits{MaxBody: 100, MaxAttachment: 100})
	type res struct {
		f   Frame
		err error
	}
	next := make(chan res, 1)
	read := func() { f, err := r.Next(); next <- res{f, err} }
	go read()
	const prefix = `{"jsonrpc":"2.0","id":7,"method":"checkpoint/save","params":{"state":"`
	go func() { _, _ = pw.Write([]byte("Content-Length: 5000\r\n\r\n" + prefix)) }()
	var got res
	select {
	case got = <-next:
	case <-time.After(5 * time.Second):
		t.Fatal("the oversized frame was not reported before its body arrived")
	}
	var tl *TooLargeError
	if !errors.As(got.err, &tl) || tl.Field != "body" || tl.Abandoned || tl.Discard != 5000-int64(len(tl.Prefix)) {
		t.Fatalf("got %v %+v", got.err, tl)
	}
	if len(tl.Prefix) > 0 && !strings.HasPrefix(prefix, string(tl.Prefix)) {
		t.Fatalf("prefix %q", tl.Prefix)
	}
	// The rest of the body trickles in, then a good frame.
	go read()
	for sent := len(prefix); sent < 5000; sent += 1000 {
		_, _ = pw.Write([]byte(strings.Repeat("s", min(1000, 5000-sent))))
		select {
		case got = <-next:
			t.Fatalf("Next returned %v before the oversized body was skipped", got.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	go func() { _, _ = pw.Write([]byte(frame("{}"))); _ = pw.Close() }()
	got = <-next
	if got.err != nil || string(got.f.Body) != "{}" {
		t.Fatalf("after the skip: %v %q", got.err, got.f.Body)
	}
}

// A frame that announces a large length and then stops must not make the reader allocate that
// length up front, and a skipped oversized frame must not be buffered.
func TestReaderMemoryBounded(t *testing.T) {
	measure := func(in io.Reader, lim Limits) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := NewReader(in, lim)
		for {
			if _, err := r.Next(); err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	big := Limits{MaxBody: 200 << 20, MaxAttachment: 200 << 20}
	if n := measure(strings.NewReader("Content-Length: 150000000\r\nCkptd-Attachment-Length: 150000000\r\n\r\n{}"), big); n > 4<<20 {
		t.Errorf("truncated 150 MB frame allocated %d bytes", n)
	}
	// 64 MiB of oversized body streamed through a small limit.
	huge := io.MultiReader(strings.NewReader("Content-Length: 67108864\r\n\r\n"), io.LimitReader(zeros{}, 64<<20), strings.NewReader(frame("{}")))
	if n := measure(huge, Limits{MaxBody: 1 << 10, MaxAttachment: 1 << 10}); n > 1<<20 {
		t.Errorf("skipping a 64 MiB body allocated %d bytes", n)
	}
	// 64 MiB of garbage without any header: resync keeps constant memory.
	if n := measure(io.MultiReader(strings.NewReader("x"), io.LimitReader(zeros{}, 64<<20)), testLimits); n > 1<<20 {
		t.Errorf("skipping 64 MiB of garbage allocated %d bytes", n)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestReaderEOFAtEveryOffset(t *testing.T) {
	frames := []string{
		frame(`{"a":1}`),
		frame(`{"b":2}`, "\x00att\r\n\r\n"),
		"content-length: 2\nX-Y: z\n\n[]",
	}
	for fi, fr := range frames {
		for cut := 0; cut <= len(fr); cut++ {
			r := NewReader(strings.NewReader(fr[:cut]), testLimits)
			f, err := r.Next()
			switch {
			case cut == 0:
				if err != io.EOF {
					t.Fatalf("frame %d cut at 0: %v, want io.EOF", fi, err)
				}
			case cut < len(fr):
				if err != io.ErrUnexpectedEOF {
					t.Fatalf("frame %d cut at %d: %v (%q), want io.ErrUnexpectedEOF", fi, cut, err, f.Body)
				}
			default:
				if err != nil {
					t.Fatalf("frame %d whole: %v", fi, err)
				}
				if _, err := r.Next(); err != io.EOF {
					t.Fatalf("frame %d whole, then: %v, want io.EOF", fi, err)
				}
			}
		}
	}
	// A complete frame followed by a partial one: the first is read, then eof.
	two := frames[0] + frames[1]
	for cut := len(frames[0]) + 1; cut < len(two); cut++ {
		r := NewReader(strings.NewReader(two[:cut]), testLimits)
		if f, err := r.Next(); err != nil || string(f.Body) != `{"a":1}` {
			t.Fatalf("cut %d: %v %q", cut, err, f.Body)
		}
		if _, err := r.Next(); err != io.ErrUnexpectedEOF {
			t.Fatalf("cut %d: %v", cut, err)
		}
	}
}

func TestAppendFrame(t *testing.T) {
	got := string(AppendFrame([]byte("x"), []byte("{}"), nil, false))
	if got != "xContent-Length: 2\r\n\r\n{}" {
		t.Errorf("%q", got)
	}
	got = string(AppendFrame(nil, []byte("{}"), nil, true))
	if got != "Content-Length: 2\r\nCkptd-Attachment-Length: 0\r\n\r\n{}" {
		t.Errorf("%q", got)
	}
	got = string(AppendFrame(nil, []byte("{}"), []byte("ab"), false))
	if got != "Content-Length: 2\r\nCkptd-Attachment-Length: 2\r\n\r\n{}ab" {
		t.Errorf("%q", got)
	}
}

// --- fuzzing ---

// fuzzLimits are small so that the fuzzer reaches the too-large paths.
var fuzzLimits = Limits{MaxBody: 1 << 10, MaxAttachment: 512}

// seedDir holds the FuzzReader seed corpus in the repository's testdata (go test -fuzz only
// looks in the package's own testdata, so the seeds are added with f.Add).
const seedDir = "../testdata/fuzz/FuzzReader"

// loadCorpus reads files in the "go test fuzz v1" format holding one []byte value.
func loadCorpus(tb testing.TB, dir string) [][]byte {
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

func FuzzReader(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add(v.input(f))
	}
	for _, s := range loadCorpus(f, seedDir) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// 1. Arbitrary input: no panic, bounded allocations, guaranteed progress.
		r := NewReader(bytes.NewReader(in), fuzzLimits)
		var frames []Frame
		abandoned := false
		for calls := 0; ; calls++ {
			if calls > len(in)+1 {
				t.Fatalf("no progress after %d calls on %d bytes", calls, len(in))
			}
			fr, err := r.Next()
			if int64(cap(fr.Body)) > fuzzLimits.MaxBody || int64(cap(fr.Attachment)) > fuzzLimits.MaxAttachment {
				t.Fatalf("allocation beyond limits: body cap %d, attachment cap %d", cap(fr.Body), cap(fr.Attachment))
			}
			if len(r.carry) > MaxHeaderBlock || len(r.line) > MaxHeaderBlock+maxTokenLen || len(r.window) > 2*maxTokenLen+32<<10 {
				t.Fatalf("scratch grew: carry %d line %d window %d", len(r.carry), len(r.line), len(r.window))
			}
			if fr.HasAttachment != (fr.Attachment != nil) && err == nil {
				t.Fatalf("HasAttachment %v with attachment %v", fr.HasAttachment, fr.Attachment)
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
			if err == ErrAbandoned {
				if !abandoned {
					t.Fatal("ErrAbandoned without a TooLargeError that abandoned the stream")
				}
				break
			}
			var he *HeaderError
			var tl *TooLargeError
			switch {
			case err == nil:
				frames = append(frames, fr)
			case errors.As(err, &he):
			case errors.As(err, &tl):
				if int64(len(tl.Prefix)) > PrefixSize || tl.Size <= tl.Limit || tl.Abandoned != (tl.Discard > DefaultMaxDiscard) || tl.Discard < 0 {
					t.Fatalf("bad TooLargeError %+v", tl)
				}
				abandoned = tl.Abandoned
			default:
				t.Fatalf("unexpected error %T %v", err, err)
			}
		}
		// 2. Round trip: the frames read, written back with AppendFrame, read identically.
		var out []byte
		for _, fr := range frames {
			out = AppendFrame(out, fr.Body, fr.Attachment, fr.HasAttachment)
		}
		r = NewReader(iotest.OneByteReader(bytes.NewReader(out)), fuzzLimits)
		for i, want := range frames {
			got, err := r.Next()
			if err != nil || !bytes.Equal(got.Body, want.Body) || !bytes.Equal(got.Attachment, want.Attachment) || got.HasAttachment != want.HasAttachment {
				t.Fatalf("round trip frame %d: %v %+v, want %+v", i, err, got, want)
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("round trip: trailing %v", err)
		}
		// 3. The input as a payload: any body and attachment bytes survive AppendFrame.
		k := len(in) / 2
		if len(in) > 0 {
			k = int(in[0]) % (len(in) + 1)
		}
		body, att := in[:k], in[k:]
		r = NewReader(bytes.NewReader(AppendFrame(nil, body, att, len(in)%2 == 0)), Limits{MaxBody: 1 << 20, MaxAttachment: 1 << 20})
		got, err := r.Next()
		if err != nil || !bytes.Equal(got.Body, body) || !bytes.Equal(got.Attachment, att) {
			t.Fatalf("payload round trip: %v %q %q", err, got.Body, got.Attachment)
		}
	})
}

// --- benchmarks ---

func BenchmarkReadFrame(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"checkpoint/save","params":{"workflowId":"w","stateAttachment":true}}`)
	for _, size := range []int{1 << 10, 100 << 10} {
		att := bytes.Repeat([]byte{'a'}, size)
		in := AppendFrame(nil, body, att, true)
		b.Run(fmt.Sprintf("%dKB_attachment", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			src := bytes.NewReader(in)
			br := bufio.NewReader(src)
			r := NewReader(br, Limits{})
			for b.Loop() {
				src.Reset(in)
				br.Reset(src)
				f, err := r.Next()
				if err != nil || len(f.Attachment) != size {
					b.Fatal(err)
				}
			}
		})
	}
}
