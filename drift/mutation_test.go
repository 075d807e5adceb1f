package drift

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMutationAgainstGit applies seeded random edits to a committed git repository and
// checks that Check's report is exactly what `git status --porcelain -uall` says.
func TestMutationAgainstGit(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { mutationRound(t, seed) })
	}
}

func mutationRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xd81f7))
	root := t.TempDir()
	content := func() string {
		n := rng.IntN(3000)
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	}
	var files []string
	write(t, root, ".gitignore", "*.log\nbuild/\n!keep.log\n")
	write(t, root, "pkg/.gitignore", "*.tmp\n/local\n")
	for i := range 300 {
		rel := fmt.Sprintf("d%d/s%d/f%03d.txt", i%7, i%5, i)
		if i%11 == 0 {
			rel = fmt.Sprintf("pkg/p%d/f%03d.go", i%3, i)
		}
		if i%37 == 0 {
			rel = fmt.Sprintf("top%03d.md", i)
		}
		write(t, root, rel, content())
		if i%13 == 0 {
			require.NoError(t, os.Chmod(filepath.Join(root, rel), 0o755))
		}
		files = append(files, rel)
	}
	require.NoError(t, os.Symlink("d0/s0/f000.txt", filepath.Join(root, "link0")))
	mustGit(t, root, "init", "-q")
	mustGit(t, root, "add", "-A")
	mustGit(t, root, "commit", "-q", "-m", "base")
	age(t, root)
	mustGit(t, root, "update-index", "--refresh") // git's own index must not be racy either

	spec := Spec{Root: root, Gitignore: true}
	base := scanT(t, spec, nil)
	require.Len(t, base.Entries, 300+3)
	// A watcher follows the same edits live; its Status must agree with git as well.
	w, err := Watch(context.Background(), spec, base, WatchOptions{}, nil)
	require.NoError(t, err)
	defer w.Close()

	pick := func() (string, int) {
		i := rng.IntN(len(files))
		return files[i], i
	}
	drop := func(i int) { files = slices.Delete(files, i, i+1) }
	var log []string
	for op := range 40 {
		if len(files) < 10 {
			break
		}
		switch k := rng.IntN(10); k {
		case 0, 1: // edit
			f, _ := pick()
			write(t, root, f, content())
			log = append(log, "edit "+f)
		case 2: // same-size edit
			f, _ := pick()
			old, err := os.ReadFile(filepath.Join(root, f))
			require.NoError(t, err)
			nb := []byte(strings.ToUpper(string(old)))
			if len(nb) > 0 {
				nb[0] = '#'
			}
			require.NoError(t, os.WriteFile(filepath.Join(root, f), nb, 0o644))
			log = append(log, "same-size edit "+f)
		case 3: // add
			rel := fmt.Sprintf("d%d/new%d/n%02d.txt", rng.IntN(9), rng.IntN(3), op)
			write(t, root, rel, content())
			files = append(files, rel)
			log = append(log, "add "+rel)
		case 4: // delete
			f, i := pick()
			require.NoError(t, os.Remove(filepath.Join(root, f)))
			drop(i)
			log = append(log, "delete "+f)
		case 5: // rename
			f, i := pick()
			to := fmt.Sprintf("d%d/ren%02d.txt", rng.IntN(8), op)
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, to)), 0o755))
			require.NoError(t, os.Rename(filepath.Join(root, f), filepath.Join(root, to)))
			drop(i)
			files = append(files, to)
			log = append(log, "rename "+f+" -> "+to)
		case 6: // chmod
			f, _ := pick()
			p := filepath.Join(root, f)
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Chmod(p, fi.Mode().Perm()^0o111))
			log = append(log, "chmod "+f)
		case 7: // edit and restore
			f, _ := pick()
			p := filepath.Join(root, f)
			old, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, []byte("temporary"), 0o644))
			require.NoError(t, os.WriteFile(p, old, 0o644))
			log = append(log, "edit+restore "+f)
		case 8: // ignored and re-included files
			write(t, root, fmt.Sprintf("d1/x%02d.log", op), "ignored")
			write(t, root, fmt.Sprintf("build/o%02d", op), "ignored")
			write(t, root, fmt.Sprintf("pkg/p1/t%02d.tmp", op), "ignored")
			write(t, root, fmt.Sprintf("pkg/local/z%02d", op), "not ignored: /local is anchored to pkg/local only")
			files = append(files, fmt.Sprintf("pkg/local/z%02d", op))
			log = append(log, "ignored files")
		case 9: // remove a whole directory
			f, _ := pick()
			dir := filepath.Dir(f)
			require.NoError(t, os.RemoveAll(filepath.Join(root, dir)))
			files = slices.DeleteFunc(files, func(p string) bool { return strings.HasPrefix(p, dir+"/") })
			log = append(log, "rm -r "+dir)
		}
	}
	// A symlink retargeted.
	require.NoError(t, os.Remove(filepath.Join(root, "link0")))
	require.NoError(t, os.Symlink("elsewhere", filepath.Join(root, "link0")))

	rep, _, err := Check(context.Background(), spec, base, CheckOptions{})
	require.NoError(t, err)
	got := summarize(rep)

	var want summary
	out := mustGit(t, root, "status", "--porcelain", "-uall", "--no-renames")
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		code, p := line[:2], line[3:]
		switch {
		case code == "??":
			want.Added = append(want.Added, p)
		case strings.Contains(code, "D"):
			want.Deleted = append(want.Deleted, p)
		case strings.ContainsAny(code, "MT"):
			want.Changed = append(want.Changed, p)
		case strings.Contains(code, "R"):
			parts := strings.SplitN(p, " -> ", 2)
			want.Deleted = append(want.Deleted, parts[0])
			want.Added = append(want.Added, parts[1])
		default:
			t.Fatalf("unexpected git status line %q", line)
		}
	}
	slices.Sort(want.Added)
	slices.Sort(want.Deleted)
	slices.Sort(want.Changed)
	if !assert.Equal(t, want, got) {
		t.Logf("operations:\n%s", strings.Join(log, "\n"))
	}
	assert.NotEmpty(t, want.Changed)
	assert.NotEmpty(t, want.Added)
	assert.NotEmpty(t, want.Deleted)
	t.Logf("changed=%d added=%d deleted=%d (git agrees)", len(got.Changed), len(got.Added), len(got.Deleted))
	// A cold scan agrees too, and so does the watcher.
	assert.Equal(t, want, summarize(Diff(base, scanT(t, spec, nil))))
	wrep, err := w.Status(context.Background())
	require.NoError(t, err)
	assert.Equal(t, want, summarize(wrep), "watcher")
	assert.False(t, wrep.FullScan, wrep.Reason)
}
