package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"

	"sync"
	"testing"
	"time"

	"github.com/ckptd/ckptd/framing"
)

// BenchmarkMultiProcessSave measures save latency (request written -> reply read) when several
// ckptd processes save to one database, each from a client pipelining up to 32 saves of ~2 KB
// into its own and shared workflows, like TestContention. One process is the baseline, measured
// in the same run. It reports p50/p99/max per configuration, the worst process's p99 (a process
// starved by the others shows there), saves per second overall, and p99 against the baseline.
// CKPTD_BENCH_SECONDS sets each configuration's duration (default 3); CKPTD_BENCH_BIN runs another
// ckptd binary instead of this tree's (a build without a change, to compare).
//
//	go test ./cmd/ckptd -run '^$' -bench MultiProcessSave -benchtime 1x
func BenchmarkMultiProcessSave(b *testing.B) {
	secs := envInt("CKPTD_BENCH_SECONDS", 3)
	var baseP99 float64
	for _, procs := range []int{1, 2, 4} {
		for _, dur := range []string{"full", "normal"} {
			b.Run(fmt.Sprintf("procs=%d/%s", procs, dur), func(b *testing.B) {
				var all []time.Duration
				worst := 0.0
				saves := 0
				for i := 0; i < b.N; i++ {
					db := filepath.Join(b.TempDir(), "shared.db")
					lats := make([][]time.Duration, procs)
					var wg, ready sync.WaitGroup
					ready.Add(procs) // every process answering before any saves
					for p := 0; p < procs; p++ {
						wg.Add(1)
						go func(p int) {
							defer wg.Done()
							lats[p] = saveLatencies(b, db, p, dur, time.Duration(secs)*time.Second, &ready)
						}(p)
					}
					wg.Wait()
					for _, l := range lats {
						all = append(all, l...)
						saves += len(l)
						if q := quantileMs(l, 0.99); q > worst {
							worst = q
						}
					}
				}
				p99 := quantileMs(all, 0.99)
				b.ReportMetric(quantileMs(all, 0.50), "p50-ms")
				b.ReportMetric(p99, "p99-ms")
				b.ReportMetric(quantileMs(all, 1), "max-ms")
				b.ReportMetric(worst, "worst-proc-p99-ms")
				b.ReportMetric(float64(saves)/float64(secs*b.N), "saves/s")
				if procs == 1 && dur == "full" {
					baseP99 = p99
				}
				if baseP99 > 0 && dur == "full" {
					b.ReportMetric(p99/baseP99, "p99-vs-1proc")
				}
			})
		}
	}
}

func quantileMs(lat []time.Duration, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
}

// saveLatencies runs one ckptd on db and a client pipelining saves (window 32) for d; it
// returns every save's latency.
func saveLatencies(tb testing.TB, db string, p int, durability string, d time.Duration, ready *sync.WaitGroup) []time.Duration {
	bin := binPath
	if alt := os.Getenv("CKPTD_BENCH_BIN"); alt != "" { // another build, to compare in one run
		bin = alt
	}
	cmd := exec.Command(bin, "--db", db, "--keep-last", "0", "--log-level", "error", "--durability", durability)
	if os.Getenv("CKPTD_BENCH_LOG") != "" {
		cmd.Args[len(cmd.Args)-3] = "debug"
		cmd.Stderr = os.Stderr
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	sent := map[int]time.Time{}
	var lats []time.Duration
	window := make(chan struct{}, 32)
	done := make(chan struct{})
	// the clock starts once the daemon answers (its start-up is not a save's latency)
	r := framing.NewReader(stdout, framing.Limits{})
	if _, err := stdin.Write(framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`), nil, false)); err != nil {
		tb.Fatal(err)
	}
	if _, err := r.Next(); err != nil {
		tb.Fatalf("process %d: no reply to initialize: %v", p, err)
	}
	ready.Done()
	ready.Wait()
	go func() {
		defer close(done)
		for {
			f, err := r.Next()
			if err != nil {
				return
			}
			var m struct {
				ID    json.RawMessage `json:"id"`
				Error *rpcErr         `json:"error"`
			}
			if json.Unmarshal(f.Body, &m) != nil {
				continue
			}
			id, _ := strconv.Atoi(string(m.ID))
			now := time.Now()
			mu.Lock()
			if t0, ok := sent[id]; ok {
				lats = append(lats, now.Sub(t0))
				delete(sent, id)
			}
			mu.Unlock()
			if m.Error != nil {
				tb.Errorf("process %d: save %d: %d %s", p, id, m.Error.Code, m.Error.Message)
			}
			<-window
		}
	}()
	deadline := time.Now().Add(d)
	for i := 1; time.Now().Before(deadline); i++ {
		window <- struct{}{}
		wf := fmt.Sprintf("shared-%d", i%2)
		if i%3 == 0 {
			wf = fmt.Sprintf("own-%d", p)
		}
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":%q,"step":%d,"stateAttachment":true}}`, i, wf, i)
		frame := framing.AppendFrame(nil, []byte(body), checkpointState(2000+i%3000, int64(p*1_000_000+i)), true)
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
		if _, err := stdin.Write(frame); err != nil {
			tb.Fatalf("process %d: %v", p, err)
		}
	}
	_ = stdin.Close()
	if err := waitExit(cmd, 60*time.Second); err != nil {
		tb.Errorf("process %d exit: %v", p, err)
	}
	<-done
	return lats
}
