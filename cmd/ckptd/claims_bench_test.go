package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/protocol"
)

// BenchmarkClaimedSaves measures what fencing costs a save: 8 ckptd processes on one database,
// each saving 1 KB checkpoints of its own workflow with one save in flight, once as today
// ("unclaimed": no claim, no token) and once under a claim ("claimed": every save carries the
// fencing token and is checked against the claim in its transaction), on SQLite and on
// PostgreSQL. b.N is the total number of saves. Compare claimed with unclaimed as ratios of one
// run (saves/s, p95 of one save in ms):
//
//	go test ./cmd/ckptd -run '^$' -bench ClaimedSaves -benchtime 2000x
func BenchmarkClaimedSaves(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, claimed := range []bool{false, true} {
			name := backend + "/unclaimed"
			if claimed {
				name = backend + "/claimed"
			}
			b.Run(name, func(b *testing.B) {
				db := filepath.Join(b.TempDir(), "b.db")
				if backend == "postgres" {
					db = pgURL(b)
				}
				benchClaimedSaves(b, db, 8, 1<<10, claimed)
			})
		}
	}
}

func benchClaimedSaves(b *testing.B, db string, procs, size int, claimed bool) {
	ds := make([]*daemon, procs)
	tokens := make([]string, procs)
	for i := range ds {
		ds[i] = startDaemonB(b, db, "--keep-last", "10")
		if claimed {
			var c protocol.ClaimResult
			ds[i].call(protocol.MethodClaim, map[string]any{"workflowId": fmt.Sprintf("proc-%d", i), "owner": fmt.Sprintf("w%d", i),
				"leaseSeconds": 3600}, nil, &c)
			tokens[i] = fmt.Sprintf(`,"fencingToken":%d`, c.FencingToken)
		}
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
				body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":"proc-%d","step":%d,"stateAttachment":true,"stateType":"json"%s}}`,
					1000+i, p, i, tokens[p])
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
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "saves/s")
	b.ReportMetric(float64(all[int(0.95*float64(len(all)-1))].Microseconds())/1000, "p95-ms")
	b.ReportMetric(0, "ns/op")
}
