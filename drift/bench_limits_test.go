//go:build linux

package drift

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeebo/blake3"
)

// BenchmarkHashSparse hashes a 1 GiB file with two 4 KiB extents and holes elsewhere, once
// the sparse way (holes fed to BLAKE3 as zeros, not read) and once read like a dense file,
// in the same run, and reports both and their ratio.
//
//	go test -run '^$' -bench HashSparse -benchtime 3x ./drift/
func BenchmarkHashSparse(b *testing.B) {
	dir := b.TempDir()
	const size = 1 << 30
	sparse(b, filepath.Join(dir, "img"), size, map[int64]string{0: "head", size / 2: "middle"})
	ws := &workerState{hashBuf: make([]byte, 128<<10), hasher: blake3.New()}
	hash := func(holes bool) time.Duration {
		d, err := openRoot(dir)
		if err != nil {
			b.Fatal(err)
		}
		defer d.close()
		f, err := d.openFile("img")
		if err != nil {
			b.Fatal(err)
		}
		defer f.close()
		st, err := f.stat()
		if err != nil {
			b.Fatal(err)
		}
		if !holes {
			st.blocks = st.size/512 + 1 // as if dense: read every byte
		}
		ws.hasher.Reset()
		t0 := time.Now()
		if err := hashContent(f, st, "img", ws, nil); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var sp, rd []time.Duration
	for b.Loop() {
		sp = append(sp, hash(true))
		rd = append(rd, hash(false))
	}
	s, r := msOf(median(sp)), msOf(median(rd))
	b.ReportMetric(s, "sparse-ms/GiB")
	b.ReportMetric(r, "read-ms/GiB")
	b.ReportMetric(r/s, "speedup")
	b.ReportMetric(10*s/1000, "sparse-s/10GiB")
}

// BenchmarkScanCancelLatency: how long a scan takes to return once its context is cancelled
// while it hashes a 1 TiB sparse file.
func BenchmarkScanCancelLatency(b *testing.B) {
	root := b.TempDir()
	sparse(b, filepath.Join(root, "a.img"), 1<<40, map[int64]string{0: "x"})
	spec := Spec{Root: root, Limits: &Limits{MaxBytes: 1 << 41}}
	var ds []time.Duration
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan time.Time, 1)
		go func() {
			_, _ = Scan(ctx, spec, nil, ScanOptions{})
			done <- time.Now()
		}()
		time.Sleep(50 * time.Millisecond)
		t0 := time.Now()
		cancel()
		ds = append(ds, (<-done).Sub(t0))
	}
	b.ReportMetric(msOf(median(ds)), "p50-ms")
	b.ReportMetric(msOf(percentile(ds, 1)), "max-ms")
}
