package drift

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Benchmark trees are expensive to build (copy + git commit), so they are cached under
// os.TempDir() keyed by Go version and reused across runs; a "ready" marker is written last.

func benchCacheDir() string {
	return filepath.Join(os.TempDir(), "ckptd-drift-bench-"+runtime.Version())
}

func gitCmd(dir string, args ...string) *exec.Cmd {
	full := append([]string{"-c", "user.name=ckptd", "-c", "user.email=ckptd@example.invalid",
		"-c", "core.fileMode=true", "-c", "commit.gpgsign=false", "-c", "gc.auto=0"}, args...)
	cmd := exec.Command("git", full...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C")
	return cmd
}

func mustGit(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	out, err := gitCmd(dir, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// gorootTree returns a git repository holding a copy of $(go env GOROOT)/src.
func gorootTree(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(benchCacheDir(), "goroot")
	tree := filepath.Join(dir, "src")
	if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
		return tree
	}
	_ = os.RemoveAll(dir)
	src := filepath.Join(runtime.GOROOT(), "src")
	if err := copyTree(src, tree); err != nil {
		tb.Fatalf("copy GOROOT/src: %v", err)
	}
	mustGit(tb, tree, "init", "-q")
	mustGit(tb, tree, "add", "-A")
	mustGit(tb, tree, "commit", "-q", "-m", "goroot src")
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	return tree
}

// genTree returns a git repository of n generated files (10 per directory, 3 levels).
func genTree(tb testing.TB, n int) string {
	tb.Helper()
	dir := filepath.Join(benchCacheDir(), fmt.Sprintf("gen%d", n))
	tree := filepath.Join(dir, "tree")
	if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
		return tree
	}
	_ = os.RemoveAll(dir)
	payload := strings.Repeat("generated content line for drift benchmarks\n", 60) // ~2.6 KB
	for i := range n {
		d := filepath.Join(tree, fmt.Sprintf("d%02d", i/1000), fmt.Sprintf("e%02d", i/10%100))
		if i%10 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				tb.Fatal(err)
			}
		}
		body := fmt.Sprintf("file %d\n%s", i, payload)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d.txt", i)), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	mustGit(tb, tree, "init", "-q")
	mustGit(tb, tree, "add", "-A")
	mustGit(tb, tree, "commit", "-q", "-m", "generated")
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	return tree
}

// copyTree copies regular files, directories and symlinks, keeping permission bits.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, info.Mode().Perm()|0o600)
		}
		return nil
	})
}

func TestBuildBenchTrees(t *testing.T) {
	if os.Getenv("DRIFT_BUILD_BENCH_TREES") == "" {
		t.Skip("set DRIFT_BUILD_BENCH_TREES=1 to pre-build the cached benchmark trees")
	}
	t.Log(gorootTree(t))
	t.Log(genTree(t, 20000))
}
