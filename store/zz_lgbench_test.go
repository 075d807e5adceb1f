package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkLGPutGet(b *testing.B) {
	for _, dur := range []string{DurabilityFull, DurabilityNormal} {
		s := openTest(b, func(o *Options) { o.Durability = dur })
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(7, 7))
		base := checkpointJSON(rng, 120<<10)
		i := 0
		put := func() {
			blob := append([]byte(fmt.Sprintf("%06d", i)), base...)
			req := LGPutRequest{ThreadID: "big", CheckpointID: fmt.Sprintf("1f0%06d", i), Type: "msgpack", Checkpoint: make([]byte, 300),
				ChannelVersions: json.RawMessage(fmt.Sprintf(`{"messages":%d,"step":%d,"status":1,"config":1,"branch:to:agent":%d}`, i+1, i+1, i+1)),
				Metadata:        json.RawMessage(fmt.Sprintf(`{"source":"loop","step":%d,"parents":{}}`, i)),
				Blobs: []LGBlob{{Channel: "messages", Version: fmt.Sprint(i + 1), Type: "msgpack", Data: blob},
					{Channel: "step", Version: fmt.Sprint(i + 1), Type: "msgpack", Data: []byte("12")},
					{Channel: "branch:to:agent", Version: fmt.Sprint(i + 1), Type: "null", Data: nil}}}
			if i == 0 {
				req.Blobs = append(req.Blobs, LGBlob{Channel: "status", Version: "1", Type: "msgpack", Data: []byte("x")}, LGBlob{Channel: "config", Version: "1", Type: "msgpack", Data: []byte("y")})
			}
			p, _ := s.LGPut(req)
			if err := p.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.Run("put-"+dur, func(b *testing.B) {
			for n := 0; n < b.N; n++ {
				put()
			}
		})
		b.Run("get-"+dur, func(b *testing.B) {
			for n := 0; n < b.N; n++ {
				if _, err := s.LGGet(ctx, "big", "", ""); err != nil {
					b.Fatal(err)
				}
			}
		})
		root := ""
		b.Run("list10-"+dur, func(b *testing.B) {
			for n := 0; n < b.N; n++ {
				if _, err := s.LGList(ctx, LGListFilter{ThreadID: "big", Namespace: &root, Limit: 10}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
