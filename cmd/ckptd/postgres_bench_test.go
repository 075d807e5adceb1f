package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ckptd/ckptd/framing"
)

// BenchmarkProcesses8 measures 8 ckptd processes saving at once into one database, each with
// one save in flight (an agent waiting for its acknowledgement), on SQLite (one file) and on
// PostgreSQL (the test cluster, over its Unix socket), with 1 KB and 100 KB states. b.N is the
// total number of saves. It reports saves/s (all processes together) and the p50/p95 latency
// of one save in ms; compare the backends as ratios of one run (the machine's load moves the
// absolute figures):
//
//	go test ./cmd/ckptd -run '^$' -bench Processes8 -benchtime 2000x
func BenchmarkProcesses8(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, size := range []int{1 << 10, 100 << 10} {
			b.Run(backend+"/"+sizeName(size), func(b *testing.B) {
				db := filepath.Join(b.TempDir(), "b.db")
				if backend == "postgres" {
					db = pgURL(b)
				}
				benchProcesses(b, db, 8, size)
			})
		}
	}
}

func benchProcesses(b *testing.B, db string, procs, size int) {
	ds := make([]*daemon, procs)
	for i := range ds {
		ds[i] = startDaemonB(b, db, "--keep-last", "10")
	}
	states := make([][]byte, 16)
	for i := range states {
		states[i] = checkpointState(size, int64(i))
	}
	per := max(1, b.N/procs)
	lat := make([][]time.Duration, procs)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for p, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":"proc-%d","step":%d,"stateAttachment":true,"stateType":"json"}}`, i+1, p, i)
				t0 := time.Now()
				d.rawB(b, framing.AppendFrame(nil, []byte(body), states[(p+i)%len(states)], true))
				d.readB(b)
				lat[p] = append(lat[p], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	q := func(f float64) float64 { return float64(all[int(f*float64(len(all)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "saves/s")
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.95), "p95-ms")
	b.ReportMetric(0, "ns/op")
}
