package main

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ckptd/ckptd/framing"
)

// checkpointState builds a realistic agent state of about n bytes: a message list with words and
// ids (compresses roughly 3x, like real checkpoints).
func checkpointState(n int, seed int64) []byte {
	rng := rand.New(rand.NewSource(seed))
	words := strings.Fields("the agent called tool search returned results about weather in paris user asked for summary of documents plan step retry observation thought action final answer")
	type message struct {
		ID      string `json:"id"`
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []message
	size := 0
	for size < n {
		var sb strings.Builder
		for i := 0; i < 20+rng.Intn(40); i++ {
			sb.WriteString(words[rng.Intn(len(words))])
			sb.WriteByte(' ')
		}
		m := message{ID: fmt.Sprintf("%016x", rng.Uint64()), Role: []string{"user", "assistant", "tool"}[rng.Intn(3)], Content: sb.String()}
		msgs = append(msgs, m)
		size += len(m.Content) + 60
	}
	b, _ := json.Marshal(map[string]any{"messages": msgs, "step": 3})
	return b
}

// BenchmarkStdioRoundTrip measures one save or load round trip through the real binary over
// pipes, state inline as JSON vs as a frame attachment, at both durability levels. It reports
// p50/p95/p99 in ms.
func BenchmarkStdioRoundTrip(b *testing.B) {
	for _, dur := range []string{"full", "normal"} {
		for _, size := range []int{1 << 10, 100 << 10, 1 << 20} {
			for _, mode := range []string{"json", "attachment"} {
				name := fmt.Sprintf("%s/%s/%s", dur, sizeName(size), mode)
				b.Run("save/"+name, func(b *testing.B) { benchStdio(b, dur, size, mode, false) })
				b.Run("load/"+name, func(b *testing.B) { benchStdio(b, dur, size, mode, true) })
			}
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMB", n>>20)
	}
	return fmt.Sprintf("%dKB", n>>10)
}

func benchStdio(b *testing.B, durability string, size int, mode string, load bool) {
	d := startDaemonB(b, filepath.Join(b.TempDir(), "b.db"), "--durability", durability, "--keep-last", "0")
	states := make([][]byte, 8)
	for i := range states {
		states[i] = checkpointState(size, int64(i))
	}
	save := func(i int) {
		st := states[i%len(states)]
		var frame []byte
		if mode == "attachment" {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":"bench","step":%d,"stateAttachment":true,"stateType":"json"}}`, i+1, i)
			frame = framing.AppendFrame(nil, []byte(body), st, true)
		} else {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":"bench","step":%d,"state":%s}}`, i+1, i, st)
			frame = framing.AppendFrame(nil, []byte(body), nil, false)
		}
		d.rawB(b, frame)
		d.readB(b)
	}
	if load {
		for i := 0; i < 20; i++ {
			save(i)
		}
	}
	loadReq := func(i int) []byte {
		att := mode == "attachment"
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/load","params":{"workflowId":"bench","attachment":%t}}`, 1000000+i, att)
		return framing.AppendFrame(nil, []byte(body), nil, false)
	}
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if load {
			d.rawB(b, loadReq(i))
			d.readB(b)
		} else {
			save(100 + i)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(p(0.50), "p50-ms")
	b.ReportMetric(p(0.95), "p95-ms")
	b.ReportMetric(p(0.99), "p99-ms")
}
