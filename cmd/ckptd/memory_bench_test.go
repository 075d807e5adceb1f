package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptd/ckptd/framing"
)

// Memory benchmarks (issue #20): the resident set of a real ckptd subprocess while a client
// pipelines requests over its pipes, and after the burst. Each benchmark iteration starts a
// fresh daemon; run them with -benchtime=1x on a quiet machine:
//
//	go test ./cmd/ckptd -run '^$' -bench 'Memory' -benchtime=1x
//
// CKPTD_BENCH_BIN runs them against another ckptd build (a baseline). Reported metrics (MB = 2^20
// bytes): peak-MB is the kernel's high-water mark (VmHWM) of the
// daemon over the whole run, stalled-MB its RSS when the client's writes stopped making
// progress because it was not reading replies (backpressure), after-MB its RSS 2 s after the
// last reply, base-MB its RSS after initialize. Targets: peak and after ≤ 64 MB for 20,000
// stats; peak ≤ 64 MB + 4 × the state for 10,000 pipelined 100 KB saves.

// memDaemon is a ckptd subprocess driven with raw frames by a benchmark.
type memDaemon struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *bytes.Buffer
}

func startMemDaemon(tb testing.TB, args ...string) *memDaemon {
	tb.Helper()
	db := filepath.Join(tb.TempDir(), "mem.db")
	bin := binPath
	if b := os.Getenv("CKPTD_BENCH_BIN"); b != "" {
		bin = b // another build, e.g. the baseline to compare with
	}
	cmd := exec.Command(bin, append([]string{"--db", db}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	d := &memDaemon{cmd: cmd, stdin: stdin, stdout: bufio.NewReaderSize(stdout, 1<<20), stderr: &stderr}
	tb.Cleanup(func() {
		_ = d.stdin.Close()
		if err := waitExit(cmd, 20*time.Second); err != nil {
			tb.Errorf("ckptd: %v; stderr:\n%s", err, d.stderr.String())
		}
		if os.Getenv("CKPTD_BENCH_STDERR") != "" { // e.g. with GODEBUG=gctrace=1
			tb.Logf("ckptd stderr:\n%s", d.stderr.String())
		}
	})
	return d
}

// procStatus reads a "kB" field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return -1
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// readReplies reads n frames, checking each is a reply without error.
func (d *memDaemon) readReplies(tb testing.TB, n int) {
	r := framing.NewReader(d.stdout, framing.Limits{MaxBody: 1 << 30, MaxAttachment: 1 << 30})
	for i := 0; i < n; i++ {
		f, err := r.Next()
		if err != nil {
			tb.Errorf("reply %d of %d: %v; stderr:\n%s", i+1, n, err, d.stderr.String())
			return
		}
		if bytes.Contains(f.Body[:min(len(f.Body), 200)], []byte(`"error":{`)) {
			tb.Errorf("error reply: %.300s", f.Body)
			return
		}
	}
}

// pipelineResult is what one pipelined burst measured.
type pipelineResult struct {
	base, stalled, peak, after int64
	elapsed                    time.Duration
}

// pipeline writes frames (each built by frame(i)) as fast as the pipe takes them. With
// readLate the replies are read only once the writer has finished or has made no progress for
// 500 ms (the daemon stopped reading: backpressure); otherwise they are read as they come.
func pipeline(tb testing.TB, d *memDaemon, n int, frame func(i int) []byte, readLate bool) pipelineResult {
	pid := d.cmd.Process.Pid
	// initialize and wait for the reply: the daemon is up.
	_, _ = d.stdin.Write(framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{}}`), nil, false))
	d.readReplies(tb, 1)
	time.Sleep(200 * time.Millisecond)
	res := pipelineResult{base: procStatus(pid, "VmRSS")}

	var written atomic.Int64
	writerDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(writerDone)
		w := bufio.NewWriterSize(d.stdin, 256<<10)
		for i := 0; i < n; i++ {
			if _, err := w.Write(frame(i)); err != nil {
				tb.Errorf("write: %v", err)
				return
			}
			written.Add(1)
		}
		if err := w.Flush(); err != nil {
			tb.Errorf("flush: %v", err)
		}
	}()
	if readLate {
		last, since := int64(-1), time.Now()
	wait:
		for {
			select {
			case <-writerDone:
				break wait
			case <-time.After(50 * time.Millisecond):
			}
			if w := written.Load(); w != last {
				last, since = w, time.Now()
			} else if time.Since(since) > 500*time.Millisecond {
				break wait
			}
		}
		res.stalled = procStatus(pid, "VmRSS")
		tb.Logf("client stopped reading: %d of %d requests written, daemon RSS %.1f MB", written.Load(), n, mb(res.stalled))
	}
	d.readReplies(tb, n)
	<-writerDone
	res.elapsed = time.Since(start)
	time.Sleep(2 * time.Second)
	res.after = procStatus(pid, "VmRSS")
	res.peak = procStatus(pid, "VmHWM")
	return res
}

func reportPipeline(b *testing.B, r pipelineResult) {
	b.ReportMetric(mb(r.base), "base-MB")
	b.ReportMetric(mb(r.peak), "peak-MB")
	if r.stalled > 0 {
		b.ReportMetric(mb(r.stalled), "stalled-MB")
	}
	b.ReportMetric(mb(r.after), "after-MB")
	b.ReportMetric(r.elapsed.Seconds(), "burst-s")
	b.Logf("| base %.1f MB | stalled %.1f MB | peak %.1f MB | after %.1f MB | burst %.2f s |",
		mb(r.base), mb(r.stalled), mb(r.peak), mb(r.after), r.elapsed.Seconds())
}

// BenchmarkMemoryPipelinedStats: 20,000 pipelined stats requests whose replies the client reads
// only once its writes stop making progress. Target: peak-MB and after-MB ≤ 64.
func BenchmarkMemoryPipelinedStats(b *testing.B) {
	const n = 20000
	for i := 0; i < b.N; i++ {
		d := startMemDaemon(b)
		r := pipeline(b, d, n, func(i int) []byte {
			return framing.AppendFrame(nil, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"stats"}`, i), nil, false)
		}, true)
		reportPipeline(b, r)
	}
}

// BenchmarkMemoryPipelinedSaves: 10,000 pipelined saves of 100 KB states (attachments), replies
// read late (late) or as they come (reading). Target: peak-MB ≤ 64 + 4 × 0.1.
func BenchmarkMemoryPipelinedSaves(b *testing.B) {
	const n, size = 10000, 100 << 10
	states := make([][]byte, 16)
	for i := range states {
		states[i] = checkpointState(size, int64(i))
	}
	for _, late := range []bool{true, false} {
		name := "reading"
		if late {
			name = "late"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				d := startMemDaemon(b)
				r := pipeline(b, d, n, func(i int) []byte {
					body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":"wf-%d","step":%d,"stateAttachment":true}}`, i, i%8, i)
					return framing.AppendFrame(nil, body, states[i%len(states)], true)
				}, late)
				reportPipeline(b, r)
			}
		})
	}
}

// BenchmarkMemorySave64MiB: the peak RSS of one 64 MiB save (the default --max-state-size
// minus the frame's JSON), as an attachment, as inline JSON and as base64, then of three such
// saves and a load of the latest. Reports peak-MB and (peak - base) / state as x-state.
func BenchmarkMemorySave64MiB(b *testing.B) {
	const size = 64<<20 - 4<<10
	// Incompressible bytes inside a JSON string: the worst case for the compressor.
	raw := make([]byte, size*3/4-64)
	_, _ = rand.Read(raw)
	jsonState := append(append([]byte(`{"blob":"`), base64.StdEncoding.EncodeToString(raw)...), `"}`...)
	b64 := base64.StdEncoding.EncodeToString(jsonState[:size*3/4-1024])
	for _, mode := range []string{"attachment", "json", "base64", "3-saves-and-load"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				d := startMemDaemon(b)
				pid := d.cmd.Process.Pid
				_, _ = d.stdin.Write(framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize"}`), nil, false))
				d.readReplies(b, 1)
				time.Sleep(200 * time.Millisecond)
				base := procStatus(pid, "VmRSS")
				var wg sync.WaitGroup
				send := func(id int, f []byte) {
					if _, err := d.stdin.Write(f); err != nil {
						b.Fatal(err)
					}
					d.readReplies(b, 1)
				}
				state := int64(len(jsonState))
				start := time.Now()
				switch mode {
				case "attachment":
					send(1, framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":1,"method":"checkpoint/save","params":{"workflowId":"w","stateAttachment":true}}`), jsonState, true))
				case "json":
					send(1, framing.AppendFrame(nil, append(append([]byte(`{"jsonrpc":"2.0","id":1,"method":"checkpoint/save","params":{"workflowId":"w","state":`), jsonState...), `}}`...), nil, false))
				case "base64":
					state = int64(len(b64) * 3 / 4)
					send(1, framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":1,"method":"checkpoint/save","params":{"workflowId":"w","stateBase64":"`+b64+`"}}`), nil, false))
				case "3-saves-and-load":
					for j := 1; j <= 3; j++ {
						st := bytes.Clone(jsonState)
						st[len(st)-3] = byte('A' + j)
						send(j, framing.AppendFrame(nil, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":"w","stateAttachment":true}}`, j), st, true))
					}
					send(4, framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":4,"method":"checkpoint/load","params":{"workflowId":"w","attachment":true}}`), nil, false))
				}
				wg.Wait()
				elapsed := time.Since(start)
				time.Sleep(2 * time.Second)
				after := procStatus(pid, "VmRSS")
				peak := procStatus(pid, "VmHWM")
				b.ReportMetric(mb(base), "base-MB")
				b.ReportMetric(mb(peak), "peak-MB")
				b.ReportMetric(mb(after), "after-MB")
				b.ReportMetric(float64(peak-base)/float64(state), "x-state")
				b.ReportMetric(elapsed.Seconds(), "s")
				b.Logf("| %s | state %.1f MB | base %.1f MB | peak %.1f MB | (peak-base)/state %.2f | after %.1f MB | %.2f s |",
					mode, mb(state), mb(base), mb(peak), float64(peak-base)/float64(state), mb(after), elapsed.Seconds())
			}
		})
	}
}
