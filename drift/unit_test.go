package drift

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGitignoreMatching(t *testing.T) {
	root := parseIgnore("", []byte(`
# comment
*.o
!keep.o
/anchored.txt
build/
docs/**/*.pdf
logs/**
!logs/important
\#literal
trailing   
a[!b]c
**/deep/x
`))
	sub := parseIgnore("sub", []byte("*.tmp\n/only-here\nnested/file\n!*.o\n"))
	chain := (*ignoreChain)(nil).with(root).with(sub)
	cases := []struct {
		path  string
		isDir bool
		want  bool
	}{
		{"x.o", false, true},
		{"a/b/x.o", false, true},
		{"keep.o", false, false},
		{"anchored.txt", false, true},
		{"a/anchored.txt", false, false},
		{"build", true, true},
		{"build", false, false}, // dir-only pattern
		{"a/build", true, true},
		{"docs/x.pdf", false, true},
		{"docs/a/b/x.pdf", false, true},
		{"docs/x.txt", false, false},
		{"logs", true, false}, // "logs/**" matches what is inside, not logs itself
		{"logs/a", false, true},
		{"logs/important", false, false},
		{"#literal", false, true},
		{"trailing", false, true},
		{"abc", false, false},
		{"axc", false, true},
		{"deep/x", false, true},
		{"q/deep/x", false, true},
		{"sub/a.tmp", false, true},
		{"a.tmp", false, false}, // sub's rules apply below sub only
		{"sub/only-here", false, true},
		{"sub/z/only-here", false, false},
		{"sub/nested/file", false, true},
		{"sub/x.o", false, false}, // deeper file's negation wins
	}
	for _, c := range cases {
		ch := chain
		if !(len(c.path) > 4 && c.path[:4] == "sub/") {
			ch = (*ignoreChain)(nil).with(root)
		}
		assert.Equal(t, c.want, ch.ignored(c.path, c.isDir), "%s (dir=%v)", c.path, c.isDir)
	}
}

func TestEditorFiles(t *testing.T) {
	for _, n := range []string{".a.go.swp", ".a.go.swo", "a.go~", "4913", ".#a.go", "#a.go#", "a.go___jb_tmp___", "a.go___jb_old___"} {
		assert.True(t, isEditorFile(n), n)
	}
	for _, n := range []string{"a.go", ".swp", "main.swp.go", "#", "a#", ".gitignore"} {
		assert.False(t, isEditorFile(n), n)
	}
}

func TestDiffTable(t *testing.T) {
	h := func(s string) Digest { return Digest(s) }
	f := func(p string, size int64, hash string, mode uint32) Entry {
		return Entry{Path: p, Type: TypeFile, Size: size, Hash: h(hash), Mode: mode, MtimeNs: 1, Ino: 7}
	}
	l := func(p, target string) Entry { return Entry{Path: p, Type: TypeSymlink, Target: target, Mode: 0o777} }
	man := func(es ...Entry) *Manifest { return &Manifest{Entries: es} }
	cases := []struct {
		name      string
		base, cur *Manifest
		want      summary
	}{
		{"equal", man(f("a", 1, "h1", 0o644)), man(f("a", 1, "h1", 0o644)), summary{}},
		{"mtime/ino moved, same bytes", man(f("a", 1, "h1", 0o644)),
			man(Entry{Path: "a", Type: TypeFile, Size: 1, Hash: h("h1"), Mode: 0o644, MtimeNs: 99, CtimeNs: 99, Ino: 8}), summary{}},
		{"content", man(f("a", 1, "h1", 0o644)), man(f("a", 1, "h2", 0o644)), summary{Changed: paths("a")}},
		{"chmod +x", man(f("a", 1, "h1", 0o644)), man(f("a", 1, "h1", 0o755)), summary{Changed: paths("a")}},
		{"symlink target", man(l("s", "x")), man(l("s", "y")), summary{Changed: paths("s")}},
		{"file to symlink", man(f("s", 1, "h1", 0o777)), man(l("s", "x")), summary{Changed: paths("s")}},
		{"added and deleted", man(f("a", 1, "h", 0o644), f("c", 1, "h", 0o644)), man(f("b", 1, "h", 0o644), f("c", 1, "h", 0o644)),
			summary{Added: paths("b"), Deleted: paths("a")}},
		{"unreadable unchanged", man(f("u", 1, "", 0)), man(f("u", 1, "", 0)), summary{}},
		{"unreadable became readable", man(f("u", 1, "", 0o644)), man(f("u", 1, "h", 0o644)), summary{Changed: paths("u")}},
		{"empty base", man(), man(f("a", 1, "h", 0o644)), summary{Added: paths("a")}},
		{"nil cur", man(f("a", 1, "h", 0o644)), nil, summary{Deleted: paths("a")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i := range c.base.Entries {
				if len(c.base.Entries[i].Hash) == 0 {
					c.base.Entries[i].Hash = nil
				}
			}
			if c.cur != nil {
				for i := range c.cur.Entries {
					if len(c.cur.Entries[i].Hash) == 0 {
						c.cur.Entries[i].Hash = nil
					}
				}
			}
			r := Diff(c.base, c.cur)
			assert.Equal(t, c.want, summarize(r))
			assert.Equal(t, c.want.Changed != nil || c.want.Added != nil || c.want.Deleted != nil, r.Drifted)
		})
	}
	r := Diff(man(f("a", 1, "h1", 0o644)), man(f("a", 2, "h2", 0o755)))
	require.Len(t, r.Changed, 1)
	assert.Equal(t, FileChange{Path: "a", OldType: TypeFile, NewType: TypeFile, OldSize: 1, NewSize: 2,
		OldHash: h("h1"), NewHash: h("h2"), OldMode: 0o644, NewMode: 0o755}, r.Changed[0])
}

func TestManifestRoundTrip(t *testing.T) {
	root := mkTree(t, map[string]string{"a/b/c.go": "c", "a/b/d.go": "d", "x": "x", ".gitignore": "*.o\n"})
	m := scanT(t, Spec{Root: root, Include: []string{"**"}, Exclude: []string{"*.tmp"}, Gitignore: true}, nil)
	m.Warnings = []string{"w1"}
	b, err := MarshalManifest(m)
	require.NoError(t, err)
	got, err := UnmarshalManifest(b)
	require.NoError(t, err)
	assert.Equal(t, m, got)

	for _, e := range m.Entries {
		enc := EncodeEntry(e)
		dec, err := DecodeEntry(enc)
		require.NoError(t, err)
		assert.Equal(t, e, dec)
		assert.Len(t, EntryKey(e), 16)
		assert.Equal(t, EntryKey(e), EntryKey(dec))
	}
	e := m.Entries[0]
	e2 := e
	e2.MtimeNs++
	assert.NotEqual(t, EntryKey(e), EntryKey(e2))

	for i := range b {
		if _, err := UnmarshalManifest(b[:i]); err == nil {
			t.Fatalf("truncated manifest (%d of %d bytes) decoded", i, len(b))
		}
	}
	_, err = UnmarshalManifest([]byte("nope"))
	assert.Error(t, err)
	_, err = DecodeEntry([]byte{9})
	assert.Error(t, err)
}

func TestManifestValidate(t *testing.T) {
	root := mkTree(t, map[string]string{"a/b/c.go": "c", "a/d.go": "d", "x": "x", ".gitignore": "*.o\n"})
	m := scanT(t, Spec{Root: root, Gitignore: true}, nil)
	require.NoError(t, m.Validate(), "a scanned manifest is valid")
	require.GreaterOrEqual(t, len(m.Entries), 3)
	for _, tc := range []struct {
		name   string
		mutate func(m *Manifest)
		want   string
	}{
		{"relative root", func(m *Manifest) { m.Spec.Root = "src" }, `root "src" is not an absolute path`},
		{"version", func(m *Manifest) { m.Version = 2 }, "manifest version 2"},
		{"algorithm", func(m *Manifest) { m.Algorithm = "md5" }, `hash algorithm "md5"`},
		{"dot-dot entry", func(m *Manifest) { m.Entries[0].Path = "../etc/passwd" }, `path "../etc/passwd" is not a clean relative path`},
		{"absolute entry", func(m *Manifest) { m.Entries[0].Path = "/etc/passwd" }, "is not a clean relative path"},
		{"empty element", func(m *Manifest) { m.Entries[0].Path = "a//b" }, "is not a clean relative path"},
		{"unsorted", func(m *Manifest) { m.Entries[0], m.Entries[1] = m.Entries[1], m.Entries[0] }, "entries are sorted by path"},
		{"duplicate", func(m *Manifest) { m.Entries[1] = m.Entries[0] }, "entries are sorted by path, once each"},
		{"type", func(m *Manifest) { m.Entries[0].Type = 9 }, "unknown type 9"},
		{"dir", func(m *Manifest) { m.Dirs = append(m.Dirs, Dir{Path: "a/../.."}) }, `directory`},
		{"rule", func(m *Manifest) { m.Rules = append(m.Rules, Entry{Path: "../.gitignore"}) }, `ignore file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *m
			c.Entries = slices.Clone(m.Entries)
			c.Dirs = slices.Clone(m.Dirs)
			c.Rules = slices.Clone(m.Rules)
			tc.mutate(&c)
			err := c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestCheckRacyRule(t *testing.T) {
	root := mkTree(t, map[string]string{"a": "1"})
	age(t, root)
	spec := Spec{Root: root}
	m := scanT(t, spec, nil)
	poisoned := *m
	poisoned.Entries = []Entry{m.Entries[0]}
	poisoned.Entries[0].Hash = Digest("poisoned")
	// Not racy: Check trusts the stat data and keeps the (poisoned) hash: no drift.
	rep, _, err := Check(context.Background(), spec, &poisoned, CheckOptions{})
	require.NoError(t, err)
	assert.False(t, rep.Drifted)
	// Racy (mtime not before the scan start): Check must re-hash, and sees the difference.
	poisoned.ScanStartNs = m.Entries[0].MtimeNs
	rep, _, err = Check(context.Background(), spec, &poisoned, CheckOptions{})
	require.NoError(t, err)
	assert.Equal(t, summary{Changed: paths("a")}, summarize(rep))
}
