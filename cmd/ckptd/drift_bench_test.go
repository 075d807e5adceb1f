package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ckptd/ckptd/framing"
)

// benchCall sends one request and waits for its reply (notifications skipped), failing on errors.
func (d *daemon) benchCall(b *testing.B, id int, method string, params any) json.RawMessage {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		b.Fatal(err)
	}
	d.rawB(b, framing.AppendFrame(nil, body, nil, false))
	for {
		f, err := d.r.Next()
		if err != nil {
			b.Fatal(err)
		}
		var m msg
		if err := json.Unmarshal(f.Body, &m); err != nil {
			b.Fatal(err)
		}
		if m.Method != "" {
			continue
		}
		if m.Error != nil {
			b.Fatalf("%s: %+v", method, m.Error)
		}
		return m.Result
	}
}

// BenchmarkDriftSave: checkpoint/save round trips through the binary without sources and with a
// 100-file tree as sources (unchanged between saves: the incremental case), in the same daemon.
func BenchmarkDriftSave(b *testing.B) {
	for _, dur := range []string{"full", "normal"} {
		dir := b.TempDir()
		src := filepath.Join(dir, "src")
		for i := range 100 {
			p := filepath.Join(src, fmt.Sprintf("pkg%d", i%10), fmt.Sprintf("mod%03d.py", i))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(fmt.Sprintf("def f():\n    return %d\n", i)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		d := startDaemonB(b, filepath.Join(dir, "b.db"), "--durability", dur, "--keep-last", "10")
		state := checkpointState(4<<10, 1)
		id := 0
		for _, mode := range []string{"plain", "sources100"} {
			b.Run(dur+"/"+mode, func(b *testing.B) {
				params := func(i int) map[string]any {
					p := map[string]any{"workflowId": "bench-" + mode, "step": i, "state": json.RawMessage(state)}
					if mode == "sources100" {
						p["sources"] = map[string]any{"root": src}
					}
					return p
				}
				for i := range 5 { // warm up (first scan, caches)
					id++
					d.benchCall(b, id, "checkpoint/save", params(i))
				}
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					id++
					t0 := time.Now()
					d.benchCall(b, id, "checkpoint/save", params(i))
					lat = append(lat, time.Since(t0))
				}
				b.StopTimer()
				reportPercentiles(b, lat)
			})
		}
	}
}

// BenchmarkDriftStatusTree: drift/status with nothing changed on a big tree (a copy of
// $(go env GOROOT)/src, or $CKPTD_DRIFT_TREE), checking vs answered from a watch, next to
// `git status` on the same tree when it is a git repository. Reports p50 ms.
func BenchmarkDriftStatusTree(b *testing.B) {
	tree := os.Getenv("CKPTD_DRIFT_TREE")
	if tree == "" {
		tree = filepath.Join(b.TempDir(), "src")
		if err := copyDir(filepath.Join(runtime.GOROOT(), "src"), tree); err != nil {
			b.Fatal(err)
		}
	}
	dbDir := b.TempDir()
	d := startDaemonB(b, filepath.Join(dbDir, "b.db"), "--durability", "normal")
	id := 1
	t0 := time.Now()
	var saved struct{ Sources struct{ Files int } }
	if err := json.Unmarshal(d.benchCall(b, id, "checkpoint/save", map[string]any{"workflowId": "tree", "sources": map[string]any{"root": tree}}), &saved); err != nil {
		b.Fatal(err)
	}
	b.Logf("tree %s: %d files; first save with sources %v", tree, saved.Sources.Files, time.Since(t0))
	id++
	t0 = time.Now()
	d.benchCall(b, id, "checkpoint/save", map[string]any{"workflowId": "tree", "sources": map[string]any{"root": tree}})
	b.Logf("second save with sources (incremental, nothing changed): %v", time.Since(t0))
	// a second process on the database: its first status reads the manifest from the database
	d2 := startDaemonB(b, filepath.Join(dbDir, "b.db"), "--durability", "normal")
	for i := range 3 {
		t0 = time.Now()
		d2.benchCall(b, 1+i, "drift/status", map[string]any{"workflowId": "tree"})
		b.Logf("second process, drift/status #%d: %v", i+1, time.Since(t0))
	}

	if _, err := os.Stat(filepath.Join(tree, ".git")); err == nil {
		b.Run("git-status", func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				cmd := exec.Command("git", "status", "--porcelain")
				cmd.Dir = tree
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("git status: %v %s", err, out)
				}
				lat = append(lat, time.Since(t0))
			}
			reportPercentiles(b, lat)
		})
	}
	for _, mode := range []string{"check", "watched"} {
		b.Run("drift-status/"+mode, func(b *testing.B) {
			if mode == "watched" {
				id++
				var w struct{ WatchID string }
				if err := json.Unmarshal(d.benchCall(b, id, "drift/watch", map[string]any{"workflowId": "tree"}), &w); err != nil {
					b.Fatal(err)
				}
				defer func() { id++; d.benchCall(b, id, "drift/unwatch", map[string]any{"watchId": w.WatchID}) }()
			}
			lat := make([]time.Duration, 0, b.N)
			var server []float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id++
				t0 := time.Now()
				var st struct {
					Drifted   bool
					ElapsedMs float64
					Watched   bool
				}
				if err := json.Unmarshal(d.benchCall(b, id, "drift/status", map[string]any{"workflowId": "tree"}), &st); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				server = append(server, st.ElapsedMs)
				if st.Drifted || st.Watched != (mode == "watched") {
					b.Fatalf("unexpected status %+v", st)
				}
			}
			b.StopTimer()
			reportPercentiles(b, lat)
			if len(server) > 0 {
				b.ReportMetric(server[len(server)/2], "server-ms")
			}
		})
	}
}

// copyDir copies regular files, directories and symlinks.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := de.Info()
		if err != nil {
			return err
		}
		switch {
		case de.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case de.Type()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case de.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, info.Mode().Perm()|0o600)
		}
		return nil
	})
}
