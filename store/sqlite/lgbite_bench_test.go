package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ckptd/ckptd/store"
)

// BenchmarkLGDeleteThread measures deleting a thread of 2000 checkpoints (a value, a write and a
// metadata row each) in bites: the time per checkpoint and per bite.
func BenchmarkLGDeleteThread(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := openTest(b, func(o *Options) { o.Durability = store.DurabilityNormal })
		parent := ""
		for k := 0; k < 2000; k++ {
			id := fmt.Sprintf("c%06d", k)
			vj, _ := json.Marshal(map[string]any{"m": fmt.Sprint(k + 1)})
			p, _ := s.LGPut(store.LGPutRequest{ThreadID: "big", CheckpointID: id, ParentID: parent, Type: "json", Checkpoint: []byte(`{}`),
				ChannelVersions: vj, Metadata: json.RawMessage(fmt.Sprintf(`{"step":%d}`, k)),
				Blobs: []store.LGBlob{{Channel: "m", Version: fmt.Sprintf("%q", fmt.Sprint(k+1)), Type: "json", Data: make([]byte, 1000)}}})
			if err := p.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			w, _ := s.LGPutWrites("big", "", id, []store.LGWrite{{TaskID: "t", Channel: "m", Type: "json", Data: []byte(`"w"`)}})
			if err := w.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			parent = id
		}
		before := s.writes.Load()
		b.StartTimer()
		start := time.Now()
		n, err := s.LGDeleteThread(ctx, "big")
		if err != nil || n != 2000 {
			b.Fatal(n, err)
		}
		el := time.Since(start)
		bites := s.writes.Load() - before
		b.ReportMetric(float64(el.Microseconds())/2000, "µs/checkpoint")
		b.ReportMetric(float64(el.Milliseconds())/float64(bites), "ms/transaction")
		b.StopTimer()
		_ = s.Close()
	}
}
