package drift

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tree helpers -----------------------------------------------------------------------------

func write(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

func mkTree(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, c := range files {
		write(t, root, rel, c)
	}
	return root
}

// age sets every file's and directory's mtime one hour back, so nothing in the tree is
// racy against a scan taken now (as with a real tree edited minutes before a checkpoint).
func age(t testing.TB, root string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	var dirs []string
	require.NoError(t, filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		if info.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		return os.Chtimes(p, old, old)
	}))
	slices.Reverse(dirs)
	for _, d := range dirs {
		require.NoError(t, os.Chtimes(d, old, old))
	}
	// Chtimes moved the ctimes to now: let the clock pass them so a scan taken next does
	// not see the entries as racy.
	time.Sleep(15 * time.Millisecond)
}

func scanT(t testing.TB, spec Spec, prev *Manifest) *Manifest {
	t.Helper()
	m, err := Scan(context.Background(), spec, prev, ScanOptions{})
	require.NoError(t, err)
	return m
}

// summary is a report reduced to sorted path lists.
type summary struct {
	Changed, Added, Deleted []string
}

func summarize(r Report) summary {
	var s summary
	for _, c := range r.Changed {
		s.Changed = append(s.Changed, c.Path)
	}
	for _, c := range r.Added {
		s.Added = append(s.Added, c.Path)
	}
	for _, c := range r.Deleted {
		s.Deleted = append(s.Deleted, c.Path)
	}
	return s
}

func paths(ps ...string) []string {
	if len(ps) == 0 {
		return nil
	}
	return ps
}
