// Command fill writes a large ckptd database quickly, for the scale benchmark
// (clients/python/bench/bench_scale.py): W workflows with K checkpoints each (small distinct
// JSON states, one namespace), and T LangGraph threads with K checkpoints each (a JSON
// checkpoint plus one "messages" channel value, as CkptdSaver stores them), through the SQLite
// backend in process, saves queued many at a time so that they group-commit.
//
//	go run ./bench/fill -db big.db -workflows 10000 -threads 10000 -per 100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

func main() {
	db := flag.String("db", "", "database file (created)")
	workflows := flag.Int("workflows", 100, "workflows")
	threads := flag.Int("threads", 100, "LangGraph threads")
	per := flag.Int("per", 10, "checkpoints per workflow and per thread")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the fill here")
	flag.Parse()
	if *db == "" {
		fmt.Fprintln(os.Stderr, "fill: -db is required")
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fill:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*db, *workflows, *threads, *per); err != nil {
		fmt.Fprintln(os.Stderr, "fill:", err)
		os.Exit(1)
	}
}

func run(path string, workflows, threads, per int) error {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, store.Options{Path: path, Durability: store.DurabilityNormal, CompressInline: true,
		DefaultRetention: store.Retention{KeepLast: 0}})
	if err != nil {
		return err
	}
	defer s.Close()
	t0 := time.Now()
	const window = 512 // saves in flight
	var pend []*store.Pending
	flush := func(all bool) error {
		for len(pend) > 0 && (all || len(pend) >= window) {
			if _, err := pend[0].Wait(ctx); err != nil {
				return err
			}
			pend = pend[1:]
		}
		return nil
	}
	// Step-major order: every workflow gets its step k before any gets k+1, as a fleet of agents
	// would write them (checkpoints of one workflow spread over the whole file).
	for k := 0; k < per; k++ {
		for w := 0; w < workflows; w++ {
			state := fmt.Sprintf(`{"step":%d,"workflow":%d,"messages":[{"role":"user","content":"step %d of workflow %d: the agent calls a tool and reads the result"}],"scratch":{"plan":["search","answer"]}}`, k, w, k, w)
			pend = append(pend, s.Enqueue(store.SaveRequest{WorkflowID: "wf-" + strconv.Itoa(w), Step: int64(k),
				State: []byte(state), StateType: store.StateJSON, Metadata: []byte(`{"source":"loop"}`)}))
			if err := flush(false); err != nil {
				return err
			}
		}
	}
	if err := flush(true); err != nil {
		return err
	}
	fmt.Printf("fill: %d checkpoints over %d workflows in %s\n", workflows*per, workflows, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	var lpend []*store.LGPending
	lflush := func(all bool) error {
		for len(lpend) > 0 && (all || len(lpend) >= window) {
			if err := lpend[0].Wait(ctx); err != nil {
				return err
			}
			lpend = lpend[1:]
		}
		return nil
	}
	parents := make([]string, threads)
	for k := 0; k < per; k++ {
		for th := 0; th < threads; th++ {
			// A time-ordered id like LangGraph's uuid6: sorts by (step, thread).
			id := fmt.Sprintf("1f0%05x-%04x-6000-8000-%012x", k, th>>16, th&0xffff)
			ver := fmt.Sprintf("%032d.%016d", k+1, 0)
			cp := fmt.Sprintf(`{"v":4,"id":%q,"ts":"2026-11-27T00:00:00+00:00","channel_versions":{"messages":%q},"versions_seen":{},"updated_channels":["messages"]}`, id, ver)
			msgs := fmt.Sprintf(`[{"role":"user","content":"step %d of thread %d"}]`, k, th)
			req := store.LGPutRequest{ThreadID: "thread-" + strconv.Itoa(th), CheckpointID: id, ParentID: parents[th],
				Type: "json", Checkpoint: []byte(cp), ChannelVersions: []byte(fmt.Sprintf(`{"messages":%q}`, ver)),
				Metadata: []byte(fmt.Sprintf(`{"source":"loop","step":%d}`, k)),
				Blobs:    []store.LGBlob{{Channel: "messages", Version: strconv.Quote(ver), Type: "json", Data: []byte(msgs)}}}
			p, _ := s.LGPut(req)
			lpend = append(lpend, p)
			parents[th] = id
			if err := lflush(false); err != nil {
				return err
			}
		}
	}
	if err := lflush(true); err != nil {
		return err
	}
	fmt.Printf("fill: %d LangGraph checkpoints over %d threads in %s\n", threads*per, threads, time.Since(t0).Round(time.Millisecond))
	return nil
}
