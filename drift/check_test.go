package drift

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Editor save styles, shared with the watcher tests. Each leaves rel with content.

func saveSed(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	tmp := filepath.Join(filepath.Dir(p), "sedAb12Cd")
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, p))
}

func saveVim(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	dir := filepath.Dir(p)
	swp := filepath.Join(dir, "."+filepath.Base(p)+".swp")
	require.NoError(t, os.WriteFile(swp, []byte("vim swap"), 0o600))
	probe := filepath.Join(dir, "4913")
	require.NoError(t, os.WriteFile(probe, nil, 0o644))
	require.NoError(t, os.Remove(probe))
	require.NoError(t, os.Rename(p, p+"~"))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	require.NoError(t, os.Remove(p+"~"))
	require.NoError(t, os.WriteFile(swp, []byte("vim swap 2"), 0o600)) // swap stays while vim runs
}

func saveJetBrains(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	require.NoError(t, os.WriteFile(p+"___jb_tmp___", []byte(content), 0o644))
	require.NoError(t, os.Rename(p, p+"___jb_old___"))
	require.NoError(t, os.Rename(p+"___jb_tmp___", p))
	require.NoError(t, os.Remove(p+"___jb_old___"))
}

func saveVSCode(t testing.TB, root, rel, content string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, rel), os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = f.WriteString(content)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestCheckScenarios(t *testing.T) {
	base := map[string]string{
		"a.txt":         "alpha\n",
		"b.txt":         "bravo\n",
		"sub/c.go":      "package sub\n",
		"sub/d.go":      "package sub // d\n",
		"sub/deep/e.md": "# e\n",
	}
	type scenario struct {
		name     string
		extra    map[string]string
		setup    func(t *testing.T, root string)
		spec     func(root string) Spec
		noAge    bool
		mutate   func(t *testing.T, root string)
		want     summary
		fullScan bool
	}
	cases := []scenario{
		{name: "no change", mutate: func(*testing.T, string) {}},
		{name: "edit", mutate: func(t *testing.T, r string) { write(t, r, "a.txt", "alpha edited\n") },
			want: summary{Changed: paths("a.txt")}},
		{name: "add", mutate: func(t *testing.T, r string) { write(t, r, "new.txt", "new\n") },
			want: summary{Added: paths("new.txt")}},
		{name: "delete", mutate: func(t *testing.T, r string) { require.NoError(t, os.Remove(filepath.Join(r, "b.txt"))) },
			want: summary{Deleted: paths("b.txt")}},
		{name: "rename", mutate: func(t *testing.T, r string) {
			require.NoError(t, os.Rename(filepath.Join(r, "b.txt"), filepath.Join(r, "sub/b2.txt")))
		}, want: summary{Added: paths("sub/b2.txt"), Deleted: paths("b.txt")}},
		{name: "chmod +x", mutate: func(t *testing.T, r string) { require.NoError(t, os.Chmod(filepath.Join(r, "sub/c.go"), 0o755)) },
			want: summary{Changed: paths("sub/c.go")}},
		{name: "sed -i", mutate: func(t *testing.T, r string) { saveSed(t, r, "a.txt", "alpha sed\n") },
			want: summary{Changed: paths("a.txt")}},
		{name: "vim", mutate: func(t *testing.T, r string) { saveVim(t, r, "sub/c.go", "package sub // vim\n") },
			want: summary{Changed: paths("sub/c.go")}},
		{name: "jetbrains", mutate: func(t *testing.T, r string) { saveJetBrains(t, r, "sub/d.go", "package sub // jb\n") },
			want: summary{Changed: paths("sub/d.go")}},
		{name: "vscode truncate+rewrite", mutate: func(t *testing.T, r string) { saveVSCode(t, r, "a.txt", "alpha vscode\n") },
			want: summary{Changed: paths("a.txt")}},
		{name: "vim save of identical bytes", mutate: func(t *testing.T, r string) { saveVim(t, r, "a.txt", "alpha\n") }},
		{name: "restore to original", mutate: func(t *testing.T, r string) {
			write(t, r, "a.txt", "something else\n")
			write(t, r, "a.txt", "alpha\n")
		}},
		{name: "mkdir -p a/b/c + write", mutate: func(t *testing.T, r string) { write(t, r, "x/y/z/f.txt", "deep\n") },
			want: summary{Added: paths("x/y/z/f.txt")}},
		{name: "symlink out of root recorded, not followed", setup: func(t *testing.T, r string) {
			require.NoError(t, os.Symlink("/etc", filepath.Join(r, "etc-link")))
			require.NoError(t, os.Symlink("loop", filepath.Join(r, "loop")))
			require.NoError(t, os.Symlink("..", filepath.Join(r, "sub/up")))
		}, mutate: func(t *testing.T, r string) {
			require.NoError(t, os.Remove(filepath.Join(r, "etc-link")))
			require.NoError(t, os.Symlink("/usr", filepath.Join(r, "etc-link")))
		}, want: summary{Changed: paths("etc-link")}},
		{name: "gitignore nested with negation", extra: map[string]string{
			".gitignore":     "*.log\nbuild/\n!keep.log\n",
			"sub/.gitignore": "*.tmp\n!important.tmp\n/local.txt\n",
		}, mutate: func(t *testing.T, r string) {
			write(t, r, "x.log", "ignored\n")
			write(t, r, "keep.log", "kept\n")
			write(t, r, "build/out.bin", "ignored\n")
			write(t, r, "sub/build/out.bin", "ignored\n")
			write(t, r, "sub/a.tmp", "ignored\n")
			write(t, r, "sub/important.tmp", "kept\n")
			write(t, r, "sub/local.txt", "ignored (anchored)\n")
			write(t, r, "sub/deep/local.txt", "kept (anchor is sub/)\n")
		}, want: summary{Added: paths("keep.log", "sub/deep/local.txt", "sub/important.tmp")}},
		{name: "gitignore disabled", extra: map[string]string{".gitignore": "*.log\n"},
			spec: func(r string) Spec { return Spec{Root: r} },
			mutate: func(t *testing.T, r string) {
				write(t, r, "x.log", "not ignored now\n")
				write(t, r, ".git/HEAD", "never fingerprinted\n")
			}, want: summary{Added: paths("x.log")}},
		{name: "gitignore edited re-includes", extra: map[string]string{".gitignore": "*.log\n", "old.log": "log\n"},
			mutate: func(t *testing.T, r string) { write(t, r, ".gitignore", "*.tmp\n") },
			want:   summary{Changed: paths(".gitignore"), Added: paths("old.log")}, fullScan: true},
		{name: "racy same-size edit, mtime put back", noAge: true, mutate: func(t *testing.T, r string) {
			p := filepath.Join(r, "a.txt")
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, []byte("ALPHA\n"), 0o644))
			require.NoError(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		}, want: summary{Changed: paths("a.txt")}},
		{name: "same-size edit, mtime put back (ctime moves)", mutate: func(t *testing.T, r string) {
			p := filepath.Join(r, "b.txt")
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, []byte("BRAVO\n"), 0o644))
			require.NoError(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		}, want: summary{Changed: paths("b.txt")}},
		{name: "inode reuse after unlink+create", mutate: func(t *testing.T, r string) {
			p := filepath.Join(r, "b.txt")
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.WriteFile(p, []byte("bravO\n"), 0o644))
			require.NoError(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		}, want: summary{Changed: paths("b.txt")}},
		{name: "directory rename", mutate: func(t *testing.T, r string) {
			require.NoError(t, os.Rename(filepath.Join(r, "sub/deep"), filepath.Join(r, "deep2")))
		}, want: summary{Added: paths("deep2/e.md"), Deleted: paths("sub/deep/e.md")}},
		{name: "directory removed", mutate: func(t *testing.T, r string) { require.NoError(t, os.RemoveAll(filepath.Join(r, "sub"))) },
			want: summary{Deleted: paths("sub/c.go", "sub/d.go", "sub/deep/e.md")}},
		{name: "file replaced by directory", mutate: func(t *testing.T, r string) {
			require.NoError(t, os.Remove(filepath.Join(r, "a.txt")))
			write(t, r, "a.txt/inner", "x\n")
		}, want: summary{Added: paths("a.txt/inner"), Deleted: paths("a.txt")}},
		{name: "file replaced by symlink", mutate: func(t *testing.T, r string) {
			require.NoError(t, os.Remove(filepath.Join(r, "a.txt")))
			require.NoError(t, os.Symlink("b.txt", filepath.Join(r, "a.txt")))
		}, want: summary{Changed: paths("a.txt")}},
		{name: "directory replaced by symlink to a directory", mutate: func(t *testing.T, r string) {
			require.NoError(t, os.RemoveAll(filepath.Join(r, "sub/deep")))
			require.NoError(t, os.Symlink("..", filepath.Join(r, "sub/deep")))
		}, want: summary{Added: paths("sub/deep"), Deleted: paths("sub/deep/e.md")}},
		{name: "directory moved out of the root and a symlink to it left behind", mutate: func(t *testing.T, r string) {
			// the same inodes stay reachable through the symlink: its subtree must not be
			// looked at through it
			out := filepath.Join(t.TempDir(), "moved")
			require.NoError(t, os.Rename(filepath.Join(r, "sub"), out))
			require.NoError(t, os.Symlink(out, filepath.Join(r, "sub")))
		}, want: summary{Added: paths("sub"), Deleted: paths("sub/c.go", "sub/d.go", "sub/deep/e.md")}},
		{name: "editor leftovers are not drift", mutate: func(t *testing.T, r string) {
			write(t, r, ".a.txt.swp", "swap")
			write(t, r, "a.txt~", "backup")
			write(t, r, "#a.txt#", "autosave")
			write(t, r, "sub/c.go___jb_old___", "jb")
		}},
		{name: "include and exclude", extra: map[string]string{"src/x.go": "x\n", "src/x.gen.go": "gen\n", "docs/r.md": "r\n"},
			spec: func(r string) Spec {
				return Spec{Root: r, Include: []string{"src/**"}, Exclude: []string{"**/*.gen.go"}, Gitignore: true}
			},
			mutate: func(t *testing.T, r string) {
				write(t, r, "docs/r.md", "edited\n")
				write(t, r, "src/x.gen.go", "edited\n")
				write(t, r, "src/new.go", "new\n")
				write(t, r, "src/y/z.go", "new\n")
				write(t, r, "src/y/z.gen.go", "new\n")
			}, want: summary{Added: paths("src/new.go", "src/y/z.go")}},
		{name: "exclude prunes a directory", extra: map[string]string{"node_modules/m/i.js": "m\n"},
			spec: func(r string) Spec { return Spec{Root: r, Exclude: []string{"**/node_modules"}, Gitignore: true} },
			mutate: func(t *testing.T, r string) {
				write(t, r, "node_modules/m/i.js", "edited\n")
				write(t, r, "sub/node_modules/n.js", "new\n")
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range base {
				files[k] = v
			}
			for k, v := range tc.extra {
				files[k] = v
			}
			root := mkTree(t, files)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			spec := Spec{Root: root, Gitignore: true}
			if tc.spec != nil {
				spec = tc.spec(root)
			}
			if !tc.noAge {
				age(t, root)
			}
			baseM := scanT(t, spec, nil)
			for _, e := range baseM.Entries {
				assert.False(t, strings.HasPrefix(e.Path, "etc-link/") || strings.Contains(e.Path, "/up/"), "followed a symlink: %s", e.Path)
			}
			tc.mutate(t, root)

			rep, cur, err := Check(context.Background(), spec, baseM, CheckOptions{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, summarize(rep), "Check")
			assert.Equal(t, rep.Drifted, tc.want.Changed != nil || tc.want.Added != nil || tc.want.Deleted != nil)
			assert.Equal(t, tc.fullScan, rep.FullScan, "fullScan (%s)", rep.Reason)
			assert.Equal(t, len(cur.Entries), rep.FilesChecked)

			// A full scan agrees, entry for entry.
			full := scanT(t, spec, nil)
			assert.Equal(t, tc.want, summarize(Diff(baseM, full)), "Scan+Diff")
			assert.Equal(t, entryPaths(full), entryPaths(cur))
			assert.Equal(t, dirPaths(full), dirPaths(cur))

			// Checking again from the fresh manifest (Last) gives the same report.
			rep2, _, err := Check(context.Background(), spec, baseM, CheckOptions{Last: cur})
			require.NoError(t, err)
			assert.Equal(t, tc.want, summarize(rep2), "Check with Last")
		})
	}
}

func entryPaths(m *Manifest) []string {
	var out []string
	for _, e := range m.Entries {
		out = append(out, e.Path+":"+e.Type.String()+":"+e.Hash.String()+":"+e.Target)
	}
	return out
}

func dirPaths(m *Manifest) []string {
	var out []string
	for _, d := range m.Dirs {
		out = append(out, d.Path)
	}
	return out
}

func TestScanRecordsSymlinksAndModes(t *testing.T) {
	root := mkTree(t, map[string]string{"f.sh": "#!/bin/sh\n", "d/g": "g"})
	require.NoError(t, os.Chmod(filepath.Join(root, "f.sh"), 0o755))
	require.NoError(t, os.Symlink("../../../../etc/passwd", filepath.Join(root, "d/out")))
	require.NoError(t, os.Symlink("d", filepath.Join(root, "dirlink")))
	require.NoError(t, os.Symlink("a", filepath.Join(root, "b")))
	require.NoError(t, os.Symlink("b", filepath.Join(root, "a"))) // a loop
	m := scanT(t, Spec{Root: root, Gitignore: true}, nil)
	got := map[string]Entry{}
	for _, e := range m.Entries {
		got[e.Path] = e
	}
	require.Len(t, got, 6)
	assert.Equal(t, TypeSymlink, got["d/out"].Type)
	assert.Equal(t, "../../../../etc/passwd", got["d/out"].Target)
	assert.Nil(t, got["d/out"].Hash)
	assert.Equal(t, "d", got["dirlink"].Target)
	assert.Equal(t, "b", got["a"].Target)
	assert.Equal(t, uint32(0o755), got["f.sh"].Mode)
	assert.Equal(t, AlgorithmBLAKE3, m.Algorithm)
	assert.Len(t, got["f.sh"].Hash, 32)
	assert.Equal(t, []string{"", "d"}, dirPaths(m))
}

func TestScanIncrementalReuse(t *testing.T) {
	root := mkTree(t, map[string]string{"a": "1", "b": "2"})
	age(t, root)
	spec := Spec{Root: root}
	m1 := scanT(t, spec, nil)
	// Poison the previous hash of a: a stat-identical, non-racy entry keeps prev's hash.
	prev := *m1
	prev.Entries = append([]Entry(nil), m1.Entries...)
	prev.Entries[0].Hash = Digest("poisoned")
	m2 := scanT(t, spec, &prev)
	assert.Equal(t, Digest("poisoned"), m2.Entries[0].Hash)
	// But a racy one (mtime not before prev's scan start) is re-hashed.
	prev.ScanStartNs = m1.Entries[0].MtimeNs
	m3 := scanT(t, spec, &prev)
	assert.Equal(t, m1.Entries[0].Hash, m3.Entries[0].Hash)
}

func TestUnreadableFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	root := mkTree(t, map[string]string{"ok": "1", "secret": "2"})
	require.NoError(t, os.Chmod(filepath.Join(root, "secret"), 0))
	m := scanT(t, Spec{Root: root}, nil)
	require.Len(t, m.Entries, 2)
	assert.Nil(t, m.Entries[1].Hash)
	assert.NotEmpty(t, m.Warnings)
}

func TestRootErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	ctx := context.Background()
	_, err := Scan(ctx, Spec{Root: filepath.Join(dir, "missing")}, nil, ScanOptions{})
	assert.True(t, errors.Is(err, ErrRootNotFound), "%v", err)
	_, err = Scan(ctx, Spec{Root: file}, nil, ScanOptions{})
	assert.True(t, errors.Is(err, ErrRootNotDir), "%v", err)
	assert.ErrorIs(t, Spec{Root: ""}.Validate(), ErrInvalidSpec)
	assert.ErrorIs(t, Spec{Root: dir, Include: []string{"a/[b"}}.Validate(), ErrInvalidSpec)
	assert.ErrorIs(t, Spec{Root: dir, Exclude: []string{"/abs"}}.Validate(), ErrInvalidSpec)
	assert.NoError(t, Spec{Root: dir, Include: []string{"**/*.go"}}.Validate())
	_, _, err = Check(ctx, Spec{Root: dir}, nil, CheckOptions{})
	assert.ErrorIs(t, err, ErrInvalidSpec)
	_, err = Watch(ctx, Spec{Root: file}, nil, WatchOptions{}, nil)
	assert.ErrorIs(t, err, ErrRootNotDir)

	// The root itself may be a symlink to a directory.
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	m, err := Scan(ctx, Spec{Root: link}, nil, ScanOptions{})
	require.NoError(t, err)
	assert.Len(t, m.Entries, 1)
}

func TestScanCancelled(t *testing.T) {
	root := mkTree(t, map[string]string{"a/b": "1"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Scan(ctx, Spec{Root: root}, nil, ScanOptions{})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestCheckSpecChangeFallsBack(t *testing.T) {
	root := mkTree(t, map[string]string{"a.go": "a", "b.md": "b"})
	m := scanT(t, Spec{Root: root, Include: []string{"*.go"}}, nil)
	rep, _, err := Check(context.Background(), Spec{Root: root}, m, CheckOptions{})
	require.NoError(t, err)
	assert.True(t, rep.FullScan)
	assert.Equal(t, summary{Added: paths("b.md")}, summarize(rep))
}

func TestSpecJSONDefaultsGitignore(t *testing.T) {
	var s Spec
	require.NoError(t, s.UnmarshalJSON([]byte(`{"root":"/x","include":["**/*.go"]}`)))
	assert.True(t, s.Gitignore)
	require.NoError(t, s.UnmarshalJSON([]byte(`{"root":"/x","gitignore":false}`)))
	assert.False(t, s.Gitignore)
}

func TestRacyDirectoryIsReread(t *testing.T) {
	// A file created in the same mtime tick as the directory's recorded mtime does not move
	// it; Check must re-read racy directories.
	root := t.TempDir()
	write(t, root, "a", "1")
	m := scanT(t, Spec{Root: root}, nil)
	write(t, root, "b", "2")
	// Put the directory mtime back to what the manifest recorded.
	ts := time.Unix(0, m.Dirs[0].MtimeNs)
	require.NoError(t, os.Chtimes(root, ts, ts))
	rep, _, err := Check(context.Background(), Spec{Root: root}, m, CheckOptions{})
	require.NoError(t, err)
	assert.Equal(t, summary{Added: paths("b")}, summarize(rep))
}
