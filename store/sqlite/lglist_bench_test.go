package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ckptd/ckptd/store"
)

// lgBenchThread stores n checkpoints shaped like bench_langgraph.py's: a growing message list
// (chunked once past chunk.InlineMax), a step counter, a trigger, a status every 10 steps, a
// constant config, and two pending writes per checkpoint.
func lgBenchThread(b *testing.B, s *Store, n int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 5))
	var msgs []byte
	parent := ""
	vs := map[string]int{}
	for i := 0; i < n; i++ {
		msg := fmt.Sprintf(`{"id":"m-%06d","role":"user","content":%q}`, i, checkpointJSON(rng, 80))
		if len(msgs) == 0 {
			msgs = []byte("[" + msg + "]")
		} else {
			msgs = append(append(msgs[:len(msgs)-1:len(msgs)-1], ","+msg...), ']')
		}
		changed := []string{"messages", "step", "branch:to:agent"}
		if i%10 == 0 {
			changed = append(changed, "status")
		}
		if i == 0 {
			changed = append(changed, "config")
		}
		var blobs []store.LGBlob
		for _, ch := range changed {
			vs[ch]++
			v := fmt.Sprintf(`"%032d.%016d"`, vs[ch], rng.Int64N(1e16))
			var data []byte
			typ := "json"
			switch ch {
			case "messages":
				data = msgs
			case "step":
				data = []byte(fmt.Sprint(i))
			case "branch:to:agent":
				typ = store.LGEmptyType
			case "status":
				data = []byte(fmt.Sprintf(`"phase-%d"`, i/10))
			case "config":
				data = []byte(`{"model":"gpt-x","temperature":0.2}`)
			}
			blobs = append(blobs, store.LGBlob{Channel: ch, Version: v, Type: typ, Data: data})
		}
		versions := "{"
		first := true
		for _, ch := range []string{"messages", "step", "branch:to:agent", "status", "config"} {
			if _, ok := vs[ch]; !ok {
				continue
			}
			ver := ""
			for _, bl := range blobs {
				if bl.Channel == ch {
					ver = bl.Version
				}
			}
			if ver == "" {
				ver = lgBenchLast[ch]
			}
			lgBenchLast[ch] = ver
			if !first {
				versions += ","
			}
			first = false
			versions += fmt.Sprintf("%q:%s", ch, ver)
		}
		versions += "}"
		id := fmt.Sprintf("1f0%08d", i)
		req := store.LGPutRequest{ThreadID: "bench-thread", CheckpointID: id, ParentID: parent, Type: "json",
			Checkpoint:      []byte(fmt.Sprintf(`{"v":4,"id":%q,"ts":"2026-11-24T00:00:00Z"}`, id)),
			ChannelVersions: json.RawMessage(versions),
			Metadata:        json.RawMessage(fmt.Sprintf(`{"source":"loop","step":%d,"parents":{}}`, i)),
			Blobs:           blobs}
		p, _ := s.LGPut(req)
		if err := p.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		pw, _ := s.LGPutWrites("bench-thread", "", id, []store.LGWrite{
			{TaskID: fmt.Sprintf("task-%d", i), TaskPath: "~pull, agent", Idx: 0, Channel: "messages", Type: "json", Data: []byte("[" + msg + "]")},
			{TaskID: fmt.Sprintf("task-%d", i), TaskPath: "~pull, agent", Idx: 1, Channel: "branch:to:agent", Type: "json", Data: []byte("null")},
		})
		if err := pw.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		parent = id
	}
}

var lgBenchLast = map[string]string{}

// BenchmarkLGReadWorkload: lg/list limit 10 and lg/get of the latest, on bench_langgraph.py's
// thread after 500 steps.
func BenchmarkLGReadWorkload(b *testing.B) {
	s := benchStore(b, store.DurabilityNormal)
	lgBenchThread(b, s, 500)
	ctx := context.Background()
	root := ""
	b.Run("list10", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			res, err := s.LGList(ctx, store.LGListFilter{ThreadID: "bench-thread", Namespace: &root, Limit: 10})
			if err != nil || len(res.Tuples) != 10 || len(res.Tuples[1].Writes) != 2 {
				b.Fatal(err, len(res.Tuples))
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			t, err := s.LGGet(ctx, "bench-thread", "", "")
			if err != nil || t == nil {
				b.Fatal(err)
			}
		}
	})
}
