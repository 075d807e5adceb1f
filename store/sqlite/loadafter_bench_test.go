package sqlite

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ckptd/ckptd/store"
)

// BenchmarkLoadAfterSave measures the load of a checkpoint just saved (the round trip of a
// client that saves and reads back), timing the load alone: "after-commit" loads right after the
// save's commit, "again" loads the same checkpoint a second time (no commit in between: the
// read connection's page cache is still valid).
func BenchmarkLoadAfterSave(b *testing.B) {
	for _, sz := range benchSizes[:2] {
		for _, again := range []bool{false, true} {
			name := sz.name + "/after-commit"
			if again {
				name = sz.name + "/again"
			}
			b.Run(name, func(b *testing.B) {
				s := benchStore(b, store.DurabilityNormal, func(o *Options) { o.DefaultRetention = store.Retention{} })
				ctx := context.Background()
				base := checkpointJSON(rand.New(rand.NewPCG(5, uint64(sz.n))), sz.n)
				lat := make(latencies, 0, b.N)
				var cpu time.Duration
				for i := 0; i < b.N; i++ {
					res, err := s.Save(ctx, store.SaveRequest{WorkflowID: "wf", State: uniqueState(base, i)})
					if err != nil {
						b.Fatal(err)
					}
					if again {
						if _, err := s.Load(ctx, res.CheckpointID); err != nil {
							b.Fatal(err)
						}
					}
					c0, t0 := cpuTime(), time.Now()
					if _, err := s.Load(ctx, res.CheckpointID); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
					cpu += cpuTime() - c0
				}
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "load-cpu-µs/op")
				lat.report(b)
			})
		}
	}
}
