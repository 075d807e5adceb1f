//go:build linux

package drift

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// Benchmarks. The GOROOT/src copy and the 20,000-file tree are built once and cached
// (benchsetup_test.go). Each benchmark that compares with git runs `git status --porcelain`
// on the same tree in the same run and reports both figures and their ratio.
//
//	go test -run '^$' -bench . -benchtime 20x ./drift/

type benchTree struct {
	name string
	root func(testing.TB) string
}

var benchTrees = []benchTree{
	{"goroot", gorootTree},
	{"gen20k", func(tb testing.TB) string { return genTree(tb, 20000) }},
}

// cpuTime is the process's user+system CPU time: divided by 2 it is what a run would take
// on two otherwise idle cores, whatever else the machine is doing.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func childCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gitStatusTime runs `git status --porcelain` n times and returns the median wall time
// and the median CPU time (user+system of the git process).
func gitStatusTime(tb testing.TB, root string, n int) (wall, cpu time.Duration) {
	tb.Helper()
	mustGit(tb, root, "status", "--porcelain") // refresh git's index first, as a user's would be
	var ds, cs []time.Duration
	for range n {
		t0, c0 := time.Now(), childCPU()
		mustGit(tb, root, "status", "--porcelain")
		ds = append(ds, time.Since(t0))
		cs = append(cs, childCPU()-c0)
	}
	return median(ds), median(cs)
}

func treeBytes(m *Manifest) int64 {
	var n int64
	for _, e := range m.Entries {
		n += e.Size
	}
	return n
}

func BenchmarkFirstScan(b *testing.B) {
	for _, bt := range benchTrees {
		b.Run(bt.name, func(b *testing.B) {
			root := bt.root(b)
			spec := Spec{Root: root, Gitignore: true}
			m := scanT(b, spec, nil)
			b.SetBytes(treeBytes(m))
			var ds, cs []time.Duration
			for b.Loop() {
				t0, c0 := time.Now(), cpuTime()
				if _, err := Scan(context.Background(), spec, nil, ScanOptions{}); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
				cs = append(cs, cpuTime()-c0)
			}
			b.ReportMetric(float64(len(m.Entries)), "files")
			b.ReportMetric(msOf(median(ds)), "scan-ms")
			b.ReportMetric(msOf(median(cs)), "cpu-ms")
		})
	}
}

func BenchmarkCheckNoChange(b *testing.B) {
	for _, bt := range benchTrees {
		b.Run(bt.name, func(b *testing.B) {
			root := bt.root(b)
			spec := Spec{Root: root, Gitignore: true}
			gw, gc := gitStatusTime(b, root, 5)
			time.Sleep(20 * time.Millisecond)
			base := scanT(b, spec, nil)
			var ds, cs []time.Duration
			for b.Loop() {
				t0, c0 := time.Now(), cpuTime()
				rep, _, err := Check(context.Background(), spec, base, CheckOptions{})
				if err != nil || rep.Drifted || rep.FullScan {
					b.Fatalf("check: %v drifted=%v full=%v %s", err, rep.Drifted, rep.FullScan, rep.Reason)
				}
				ds = append(ds, time.Since(t0))
				cs = append(cs, cpuTime()-c0)
			}
			checkMs, checkCPU := msOf(median(ds)), msOf(median(cs))
			gw2, gc2 := gitStatusTime(b, root, 5)
			gitMs, gitCPU := msOf(min(gw, gw2)), msOf(min(gc, gc2))
			b.ReportMetric(float64(len(base.Entries)), "files")
			b.ReportMetric(checkMs, "check-ms")
			b.ReportMetric(gitMs, "git-status-ms")
			b.ReportMetric(checkMs/gitMs, "ratio")
			b.ReportMetric(checkCPU, "cpu-ms")
			b.ReportMetric(gitCPU, "git-cpu-ms")
			b.ReportMetric(checkCPU/gitCPU, "cpu-ratio")
		})
	}
}

// BenchmarkCheckAfterEdits edits 5 files, adds 3 and deletes 2 before each timed Check
// (undoing them afterwards, untimed).
func BenchmarkCheckAfterEdits(b *testing.B) {
	for _, bt := range benchTrees {
		b.Run(bt.name, func(b *testing.B) {
			root := bt.root(b)
			spec := Spec{Root: root, Gitignore: true}
			mustGit(b, root, "status", "--porcelain")
			base := scanT(b, spec, nil)
			files := base.Entries
			var ds, gs []time.Duration
			round := 0
			for b.Loop() {
				b.StopTimer()
				round++
				type saved struct {
					rel  string
					data []byte
					mode os.FileMode
				}
				var undo []saved
				var added []string
				for k := range 7 {
					e := files[(round*7919+k*104729)%len(files)]
					if e.Type != TypeFile || slices.ContainsFunc(undo, func(s saved) bool { return s.rel == e.Path }) {
						continue
					}
					p := filepath.Join(root, e.Path)
					data, err := os.ReadFile(p)
					if err != nil {
						b.Fatal(err)
					}
					undo = append(undo, saved{e.Path, data, os.FileMode(e.Mode)})
					if k < 5 {
						_ = os.WriteFile(p, append(slices.Clone(data), "// edited\n"...), 0o644)
					} else {
						_ = os.Remove(p)
					}
				}
				for k := range 3 {
					rel := fmt.Sprintf("drift-bench-added-%d.txt", k)
					write(b, root, rel, "added\n")
					added = append(added, rel)
				}
				b.StartTimer()
				t0 := time.Now()
				rep, _, err := Check(context.Background(), spec, base, CheckOptions{})
				ds = append(ds, time.Since(t0))
				b.StopTimer()
				if err != nil || !rep.Drifted || len(rep.Added) != 3 {
					b.Fatalf("check: %v %+v", err, summarize(rep))
				}
				t0 = time.Now()
				mustGit(b, root, "status", "--porcelain")
				gs = append(gs, time.Since(t0))
				for _, s := range undo {
					_ = os.WriteFile(filepath.Join(root, s.rel), s.data, s.mode)
					_ = os.Chmod(filepath.Join(root, s.rel), s.mode)
				}
				for _, a := range added {
					_ = os.Remove(filepath.Join(root, a))
				}
				b.StartTimer()
			}
			checkMs, gitMs := msOf(median(ds)), msOf(median(gs))
			b.ReportMetric(checkMs, "check-ms")
			b.ReportMetric(gitMs, "git-status-ms")
			b.ReportMetric(checkMs/gitMs, "ratio")
		})
	}
}

// BenchmarkWatchLatency measures, for a single-file edit, the time from the write to the
// emit callback, minus the debounce window.
func BenchmarkWatchLatency(b *testing.B) {
	root := genTree(b, 20000)
	scratch := filepath.Join(root, "d00", "e00", "latency-probe.txt")
	_ = os.Remove(scratch)
	spec := Spec{Root: root, Gitignore: true}
	base := scanT(b, spec, nil)
	got := make(chan time.Time, 16)
	opt := WatchOptions{Debounce: 20 * time.Millisecond}
	w, err := Watch(context.Background(), spec, base, opt, func(bt Batch) {
		if len(bt.Changes) > 0 {
			got <- time.Now()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = w.Close()
		_ = os.Remove(scratch)
	}()
	var ds []time.Duration
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		if err := os.WriteFile(scratch, fmt.Appendf(nil, "edit %d\n", i), 0o644); err != nil {
			b.Fatal(err)
		}
		select {
		case t1 := <-got:
			ds = append(ds, t1.Sub(t0)-opt.Debounce)
		case <-time.After(5 * time.Second):
			b.Fatal("no batch")
		}
	}
	b.ReportMetric(msOf(percentile(ds, 0.5)), "p50-ms-after-debounce")
	b.ReportMetric(msOf(percentile(ds, 0.95)), "p95-ms-after-debounce")
}

// BenchmarkWatchSetup3000Dirs measures Watch (inotify watches for 3,000 directories plus
// the incremental scan against the base) until it returns.
func BenchmarkWatchSetup3000Dirs(b *testing.B) {
	root := b.TempDir()
	for i := range 3000 {
		write(b, root, fmt.Sprintf("p%02d/q%03d/f.txt", i/100, i%100), "x\n")
	}
	age(b, root)
	spec := Spec{Root: root, Gitignore: true}
	base := scanT(b, spec, nil)
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		w, err := Watch(context.Background(), spec, base, WatchOptions{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		_ = w.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(len(base.Dirs)), "dirs")
	b.ReportMetric(msOf(median(ds)), "setup-ms")
}

// BenchmarkStatusWatching measures Status on a quiet watch (cookie sync included).
func BenchmarkStatusWatching(b *testing.B) {
	root := genTree(b, 20000)
	spec := Spec{Root: root, Gitignore: true}
	base := scanT(b, spec, nil)
	w, err := Watch(context.Background(), spec, base, WatchOptions{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := w.Status(context.Background()); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.ReportMetric(msOf(percentile(ds, 0.5))*1000, "p50-us")
	b.ReportMetric(msOf(percentile(ds, 0.95))*1000, "p95-us")
}
