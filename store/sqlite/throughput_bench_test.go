package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckptd/ckptd/store"
)

// concurrentSavers is the number of callers of #18's throughput target (32 asyncio tasks).
const concurrentSavers = 32

// BenchmarkConcurrentSaves is the in-process side of #18's throughput target: 32 goroutines
// saving 1 KB states, each to a workflow of its own, through one store at --durability full, so
// that the writer commits them in groups. Beside it, in the same run, the floors of that work in
// this SQLite build (the same driver, the same file system):
//
//	store          the store: saves/s, process CPU per save (prepare, writer, checkpointer),
//	               saves per commit; at the default retention (keep the last 10: every save
//	               past them prunes one, as in bench_throughput.py)
//	store-keep-all the same without retention (nothing pruned)
//	one-table      the Python baseline's one-table schema (bench_throughput.py: id TEXT PRIMARY
//	               KEY, workflow, seq, state BLOB), as many rows per transaction as the store
//	               put in a commit: what SQLite costs for the rows alone
//	one-table-1    the same, one row per transaction (each caller its own commit, as the
//	               baseline's threads do, here one after the other)
//
// The store's CPU per save over one-table's is what the store's schema and work add per save
// (b-trees, counters, retention); wall time per save over CPU per save is what waits (fsync).
func BenchmarkConcurrentSaves(b *testing.B) {
	base := checkpointJSON(rand.New(rand.NewPCG(7, 1<<10)), 1<<10)
	perCommit := 0.0
	for _, name := range []string{"store", "store-keep-all"} {
		b.Run(name, func(b *testing.B) {
			benchConcurrentSaves(b, base, name == "store-keep-all", &perCommit)
		})
	}
	for _, name := range []string{"one-table", "one-table-1"} {
		b.Run(name, func(b *testing.B) {
			rows := 1
			if name == "one-table" {
				rows = max(int(perCommit+0.5), 1)
			}
			benchOneTable(b, base, rows)
		})
	}
}

// benchOneTable is the floor: the one-table schema, rows inserts per transaction, at FULL.
func benchOneTable(b *testing.B, base []byte, rows int) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "floor.db")+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE checkpoints (id TEXT PRIMARY KEY, workflow TEXT NOT NULL, seq INTEGER NOT NULL, state BLOB)`); err != nil {
		b.Fatal(err)
	}
	ins, err := db.Prepare(`INSERT INTO checkpoints (id, workflow, seq, state) VALUES (?, ?, ?, ?)`)
	if err != nil {
		b.Fatal(err)
	}
	defer ins.Close()
	b.ResetTimer()
	startCPU(b)
	t0 := time.Now()
	for i := 0; i < b.N; {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		st := tx.Stmt(ins) // once per transaction, not per row
		for r := 0; r < rows && i < b.N; r, i = r+1, i+1 {
			wf := fmt.Sprintf("wf-%d", i%concurrentSavers)
			if _, err := st.Exec(fmt.Sprintf("%s-%d", wf, i), wf, i, uniqueState(base, i)); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, time.Since(t0))
	b.ReportMetric(float64(rows), "saves/commit")
}

// benchConcurrentSaves runs the store's side: the default retention (keep the last
// store.DefaultKeepLast: every save past it prunes one) or, with keepAll, none.
func benchConcurrentSaves(b *testing.B, base []byte, keepAll bool, perCommit *float64) {
	s := benchStore(b, store.DurabilityFull, func(o *Options) {
		if keepAll {
			o.DefaultRetention = store.Retention{}
		}
	})
	ctx := context.Background()
	for k := range concurrentSavers { // the workflows exist, as in a steady run
		if _, err := s.Save(ctx, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", k), State: uniqueState(base, -k)}); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	commits := s.writes.Load()
	b.ResetTimer()
	startCPU(b)
	t0 := time.Now()
	for k := range concurrentSavers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if _, err := s.Save(ctx, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", k), Step: i,
					State: uniqueState(base, int(i)), StateType: store.StateJSON}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	reportRate(b, time.Since(t0))
	n := float64(b.N) / float64(max(s.writes.Load()-commits, 1))
	if !keepAll {
		*perCommit = n
	}
	b.ReportMetric(n, "saves/commit")
}

// reportRate reports saves/s and the process's CPU per save over b.N saves that took elapsed.
func reportRate(b *testing.B, elapsed time.Duration) {
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "saves/s")
	if v, ok := benchCPU[b.Name()]; ok {
		b.ReportMetric(float64((cpuTime()-v).Microseconds())/float64(b.N), "cpu-µs/save")
	}
	b.ReportMetric(elapsed.Seconds()*1e6/float64(b.N), "wall-µs/save")
}
