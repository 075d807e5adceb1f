//go:build unix

package rpc

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// BenchmarkServe measures requests through a Server over OS pipes in this process, one at a
// time, the way a client waits for each reply: allocations per request (-benchmem) and the
// process's CPU time per request ("cpu-µs/op", user + system, read from getrusage: less
// disturbed by a busy machine than the wall time). Profiles of it (-cpuprofile, -memprofile)
// show the daemon's request path without a subprocess.
func BenchmarkServe(b *testing.B) {
	state1k := []byte(`{"s":"` + strings.Repeat("abcdefghijklmnopqrstuvwxyz", 39) + `"}`)
	state100k := []byte(`{"s":"` + strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 2844) + `"}`)
	for _, bc := range []struct {
		name  string
		state []byte
		run   func(c *benchConn, i int, state []byte)
	}{
		{"unknown", nil, func(c *benchConn, i int, _ []byte) { c.call("no/such", `{}`, nil, "error") }},
		{"workflowList", nil, func(c *benchConn, i int, _ []byte) { c.call("workflow/list", `{}`, nil, "result") }},
		{"save1k", state1k, func(c *benchConn, i int, st []byte) { c.save(i, st) }},
		{"saveLoad1k", state1k, func(c *benchConn, i int, st []byte) { c.load(c.save(i, st)) }},
		{"saveLoad100k", state100k, func(c *benchConn, i int, st []byte) { c.load(c.save(i, st)) }},
		// 32 saves in flight on one connection, each of its own workflow (32 asyncio tasks on
		// one AsyncClient): the group-commit path.
		{"save1kInFlight32", state1k, func(c *benchConn, i int, st []byte) { c.pipelined(i, st, 32) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newBenchConn(b)
			state := append([]byte(nil), bc.state...)
			step := func(i int) {
				if len(state) > 8 { // a new state every time: no dedup
					k := 6 + i%(len(state)-8)
					state[k] = 'a' + byte((int(state[k])-'a'+1)%26)
				}
				bc.run(c, i, state)
			}
			for i := 0; i < 50; i++ {
				step(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				step(100 + i)
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type benchConn struct {
	b   *testing.B
	in  *os.File
	fr  *framing.Reader
	id  int
	buf []byte

	inFlight int
}

func newBenchConn(b *testing.B) *benchConn {
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(b.TempDir(), "b.db"), Durability: "full"})
	if err != nil {
		b.Fatal(err)
	}
	srv := New(st, Options{Version: "bench", DefaultRetention: store.Retention{}})
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(context.Background(), inR, outW)
		_ = outW.Close()
	}()
	b.Cleanup(func() {
		_ = inW.Close()
		<-done
		_ = outR.Close()
		_ = st.Close()
	})
	c := &benchConn{b: b, in: inW, fr: framing.NewReader(outR, framing.Limits{MaxBody: 1 << 30, MaxAttachment: 1 << 30})}
	c.call("initialize", `{"clientName":"bench"}`, nil, "result")
	return c
}

// call sends one request and reads its reply, which must carry member.
func (c *benchConn) call(method, params string, att []byte, member string) framing.Frame {
	c.id++
	c.buf = append(c.buf[:0], `{"jsonrpc":"2.0","id":`...)
	c.buf = strconv.AppendInt(c.buf, int64(c.id), 10)
	c.buf = append(c.buf, `,"method":"`...)
	c.buf = append(c.buf, method...)
	c.buf = append(c.buf, `","params":`...)
	c.buf = append(c.buf, params...)
	c.buf = append(c.buf, '}')
	if _, err := c.in.Write(framing.AppendFrame(nil, c.buf, att, att != nil)); err != nil {
		c.b.Fatal(err)
	}
	f, err := c.fr.Next()
	if err != nil {
		c.b.Fatal(err)
	}
	if !strings.Contains(string(f.Body[:min(len(f.Body), 64)]), `"`+member+`"`) {
		c.b.Fatalf("%s: want %s, got %.300s", method, member, f.Body)
	}
	return f
}

func (c *benchConn) save(i int, state []byte) string {
	f := c.call("checkpoint/save", `{"workflowId":"bench","step":`+strconv.Itoa(i)+`,"stateAttachment":true,"stateType":"json"}`, state, "result")
	var r struct {
		Result struct {
			CheckpointID string `json:"checkpointId"`
		} `json:"result"`
	}
	if err := json.Unmarshal(f.Body, &r); err != nil {
		c.b.Fatal(err)
	}
	return r.Result.CheckpointID
}

// pipelined keeps n saves in flight: it sends save i (of workflow i%n) and, once n are in
// flight, reads one reply.
func (c *benchConn) pipelined(i int, state []byte, n int) {
	c.id++
	c.buf = append(c.buf[:0], `{"jsonrpc":"2.0","id":`...)
	c.buf = strconv.AppendInt(c.buf, int64(c.id), 10)
	c.buf = append(c.buf, `,"method":"checkpoint/save","params":{"workflowId":"bench-`...)
	c.buf = strconv.AppendInt(c.buf, int64(i%n), 10)
	c.buf = append(c.buf, `","step":`...)
	c.buf = strconv.AppendInt(c.buf, int64(i), 10)
	c.buf = append(c.buf, `,"stateAttachment":true,"stateType":"json"}}`...)
	if _, err := c.in.Write(framing.AppendFrame(nil, c.buf, state, true)); err != nil {
		c.b.Fatal(err)
	}
	c.inFlight++
	for c.inFlight >= n {
		f, err := c.fr.Next()
		if err != nil {
			c.b.Fatal(err)
		}
		if !strings.Contains(string(f.Body[:min(len(f.Body), 64)]), `"result"`) {
			c.b.Fatalf("save: %.300s", f.Body)
		}
		c.inFlight--
	}
}

func (c *benchConn) load(id string) {
	f := c.call("checkpoint/load", `{"checkpointId":"`+id+`","attachment":true}`, nil, "result")
	if !f.HasAttachment || len(f.Attachment) == 0 {
		c.b.Fatalf("load: no state attachment: %.300s", f.Body)
	}
}
