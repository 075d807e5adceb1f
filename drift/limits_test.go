//go:build linux

package drift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/blake3"
)

// sparse writes a file of size bytes holding data at the given offsets, holes elsewhere.
func sparse(t testing.TB, path string, size int64, data map[int64]string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	for off, s := range data {
		_, err = f.WriteAt([]byte(s), off)
		require.NoError(t, err)
	}
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
}

func TestScanLimits(t *testing.T) {
	files := map[string]string{}
	for i := range 300 {
		files[fmt.Sprintf("d%02d/f%03d", i/20, i)] = strings.Repeat("x", 1000)
	}
	root := mkTree(t, files)
	huge := t.TempDir()
	sparse(t, filepath.Join(huge, "a.img"), 1<<40, map[int64]string{0: "start", 1 << 39: "middle"})

	for _, tc := range []struct {
		name   string
		root   string
		limits *Limits
		bound  string
	}{
		{"files", root, &Limits{MaxFiles: 100}, "maxFiles"},
		{"bytes", root, &Limits{MaxBytes: 100_000}, "maxBytes"},
		{"bytes default, one huge file", huge, nil, "maxBytes"},
		{"time while one file is hashed", huge, &Limits{MaxBytes: 1 << 41, TimeoutMs: 200}, "timeoutMs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := Spec{Root: tc.root, Limits: tc.limits}
			t0 := time.Now()
			_, err := Scan(context.Background(), spec, nil, ScanOptions{})
			took := time.Since(t0)
			var le *LimitError
			require.ErrorAs(t, err, &le)
			assert.ErrorIs(t, err, ErrLimit)
			assert.Equal(t, tc.bound, le.Limit)
			assert.Contains(t, err.Error(), "limits."+tc.bound)
			t.Logf("%s after %v: %v", tc.bound, took, err)
			assert.Less(t, took, 5*time.Second)

			// Check is bounded the same way (from a manifest of part of the tree).
			base := scanT(t, Spec{Root: tc.root, Include: []string{"d00"}}, nil)
			_, _, err = Check(context.Background(), spec, base, CheckOptions{})
			require.ErrorAs(t, err, &le)
			assert.Equal(t, tc.bound, le.Limit)
		})
	}
	// a directory listing more names than the bound reaches it, even if few are selected:
	// its listing alone would be held in memory
	wide := map[string]string{}
	for i := range 50 {
		wide[fmt.Sprintf("w/f%02d", i)] = "x"
	}
	m, err := Scan(context.Background(), Spec{Root: mkTree(t, wide), Include: []string{"w/f0*"}, Limits: &Limits{MaxFiles: 20}}, nil, ScanOptions{})
	var le *LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "maxFiles", le.Limit)
	assert.Contains(t, err.Error(), "directory w/ lists more than 20 names")

	// within the bounds: fine, and the bounds are not recorded in the manifest
	m, err = Scan(context.Background(), Spec{Root: root, Limits: &Limits{MaxFiles: 400, MaxBytes: 400_000}}, nil, ScanOptions{})
	require.NoError(t, err)
	assert.Len(t, m.Entries, 300)
	assert.Nil(t, m.Spec.Limits)
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		json  string
		field string // "" = valid
	}{
		{`{}`, ""},
		{`{"maxFiles":1,"maxBytes":1,"timeoutMs":1}`, ""},
		{`{"maxFiles":100000000,"maxBytes":1125899906842624,"timeoutMs":3600000}`, ""},
		{`{"maxFiles":0}`, "limits.maxFiles"},
		{`{"maxFiles":100000001}`, "limits.maxFiles"},
		{`{"maxBytes":-1}`, "limits.maxBytes"},
		{`{"timeoutMs":3600001}`, "limits.timeoutMs"},
	} {
		var s Spec
		require.NoError(t, json.Unmarshal([]byte(`{"root":"/x","limits":`+tc.json+`}`), &s), tc.json)
		err := s.Limits.Validate()
		if tc.field == "" {
			assert.NoError(t, err, tc.json)
			continue
		}
		assert.ErrorIs(t, err, ErrInvalidSpec, tc.json)
		assert.Contains(t, fmt.Sprint(err), tc.field+" must be between 1 and", tc.json)
	}
	// Go callers: zero means the default
	assert.NoError(t, (&Limits{}).Validate())
	assert.Equal(t, Limits{MaxFiles: DefaultMaxFiles, MaxBytes: DefaultMaxBytes, TimeoutMs: 120_000}, (*Limits)(nil).resolved())
}

// TestSpecJSONFieldNames: a type error names the field as Validate's errors do, with the
// index of a bad include/exclude element.
func TestSpecJSONFieldNames(t *testing.T) {
	for _, tc := range []struct{ json, field string }{
		{`{"root":"/x","include":["ok",1]}`, "include[1]"},
		{`{"root":"/x","exclude":[{}]}`, "exclude[0]"},
		{`{"root":"/x","include":"*.go"}`, "include"},
		{`{"root":"/x","limits":{"maxFiles":"many"}}`, "limits.maxFiles"},
		{`{"root":"/x","limits":"fast"}`, "limits"},
	} {
		var s Spec
		err := json.Unmarshal([]byte(tc.json), &s)
		var te *json.UnmarshalTypeError
		require.ErrorAs(t, err, &te, tc.json)
		assert.Equal(t, tc.field, te.Field, tc.json)
	}
}

func TestScanCancelledMidFile(t *testing.T) {
	root := t.TempDir()
	sparse(t, filepath.Join(root, "a.img"), 1<<40, map[int64]string{0: "x"})
	ctx, cancel := context.WithCancel(context.Background())
	spec := Spec{Root: root, Limits: &Limits{MaxBytes: 1 << 41}}
	done := make(chan error, 1)
	go func() {
		_, err := Scan(ctx, spec, nil, ScanOptions{})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // well into the 1 TiB file
	t0 := time.Now()
	cancel()
	select {
	case err := <-done:
		t.Logf("scan ended %v after its context was cancelled", time.Since(t0))
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrLimit)
	case <-time.After(5 * time.Second):
		t.Fatal("the scan did not end after its context was cancelled")
	}
}

// TestSparseFileHash: a sparse file hashes as its content (blake3 of the bytes it reads as),
// equal to a dense file of the same content, whatever the layout of its holes.
func TestSparseFileHash(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name string
		size int64
		data map[int64]string
	}{
		{"all hole", 8 * mb, nil},
		{"data at the start", 8 * mb, map[int64]string{0: "head"}},
		{"data at the end", 8 * mb, map[int64]string{8*mb - 4: "tail"}},
		{"data in the middle, unaligned", 9*mb + 17, map[int64]string{3*mb + 5: strings.Repeat("m", 70000)}},
		{"extents", 16 * mb, map[int64]string{0: "a", 4 * mb: strings.Repeat("b", 3*mb), 12*mb + 1: "c", 16*mb - 1: "z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sparse(t, filepath.Join(dir, "sparse"), tc.size, tc.data)
			content, err := os.ReadFile(filepath.Join(dir, "sparse"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "dense"), content, 0o644))
			fi, _ := os.Stat(filepath.Join(dir, "sparse"))
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				t.Logf("%d bytes, %d allocated", tc.size, st.Blocks*512)
			}
			m := scanT(t, Spec{Root: dir}, nil)
			require.Len(t, m.Entries, 2)
			want := blake3.Sum256(content)
			assert.Equal(t, Digest(want[:]), m.Entries[0].Hash, "dense")
			assert.Equal(t, Digest(want[:]), m.Entries[1].Hash, "sparse")
		})
	}
}

// TestPseudoFileSystems: /proc, /sys and /dev are refused as roots, and a pseudo file system
// mounted inside a tree is not walked into.
func TestPseudoFileSystems(t *testing.T) {
	for _, root := range []string{"/proc", "/proc/self", "/sys", "/dev", "/dev/shm"} {
		if _, err := os.Stat(root); err != nil {
			continue
		}
		err := Spec{Root: root}.Validate()
		assert.ErrorIs(t, err, ErrRootPseudoFS, root)
		_, err = Scan(context.Background(), Spec{Root: root}, nil, ScanOptions{})
		assert.ErrorIs(t, err, ErrRootPseudoFS, root)
	}
	assert.NoError(t, Spec{Root: t.TempDir()}.Validate())

	root := mkTree(t, map[string]string{"a": "1", "mnt/.keep": ""})
	if err := syscall.Mount("proc", filepath.Join(root, "mnt"), "proc", 0, ""); err != nil {
		if os.Geteuid() == 0 {
			t.Fatalf("mount proc: %v", err)
		}
		t.Logf("not root: the mount part is left out (%v)", err)
		return
	}
	t.Cleanup(func() { _ = syscall.Unmount(filepath.Join(root, "mnt"), syscall.MNT_DETACH) })
	t0 := time.Now()
	m := scanT(t, Spec{Root: root}, nil)
	assert.Less(t, time.Since(t0), 5*time.Second)
	require.Len(t, m.Entries, 1)
	assert.Equal(t, "a", m.Entries[0].Path)
	assert.Contains(t, strings.Join(m.Warnings, "\n"), "mnt/: a proc pseudo file system, not fingerprinted")
}

// TestUnreadableIsDrift: what could not be read now is never "no drift": a directory that
// cannot be opened (a permission error, injected: tests run as root) is listed in
// Unreadable and makes the report Drifted, in the quick check and in a full scan; its files
// are not reported deleted. What the base could not read either does not count.
func TestUnreadableIsDrift(t *testing.T) {
	root := mkTree(t, map[string]string{"a": "1", "sub/b": "2", "sub/deep/c": "3", "other/d": "4"})
	age(t, root)
	spec := Spec{Root: root, Gitignore: true}
	base := scanT(t, spec, nil)
	// deny is what chmod 000 on dir does to a user other than root: dir cannot be listed,
	// nothing below it can be opened or stat'ed.
	deny := func(dir string) ScanOptions {
		return ScanOptions{fault: func(op, path string) error {
			below := dir == "" || strings.HasPrefix(path, dir+"/")
			if below || (op == opOpenDir || op == opReadDir) && path == dir {
				return syscall.EACCES
			}
			return nil
		}}
	}
	for _, full := range []bool{false, true} {
		s := spec
		if full {
			s.Exclude = []string{"nothing"} // other rules than the manifest's: a full scan
		}
		rep, _, err := Check(context.Background(), s, base, CheckOptions{ScanOptions: deny("sub")})
		require.NoError(t, err)
		assert.Equal(t, full, rep.FullScan)
		assert.True(t, rep.Drifted, "full=%v %+v", full, rep)
		assert.Equal(t, []string{"sub/"}, rep.Unreadable, "full=%v", full)
		assert.Empty(t, rep.Deleted, "full=%v: unknown is not deleted", full)
	}
	// the root itself
	rep, _, err := Check(context.Background(), spec, base, CheckOptions{ScanOptions: deny("")})
	require.NoError(t, err)
	assert.True(t, rep.Drifted)
	assert.Contains(t, rep.Unreadable, "./")

	// a base that could not read sub either: nothing to compare there, no drift
	blind, err := Scan(context.Background(), spec, nil, deny("sub"))
	require.NoError(t, err)
	rep, _, err = Check(context.Background(), spec, blind, CheckOptions{ScanOptions: deny("sub")})
	require.NoError(t, err)
	assert.False(t, rep.Drifted, "%+v", rep)
	assert.Empty(t, rep.Unreadable)
}

// TestScanResourceErrors: running out of file descriptors fails a scan (a partial walk is
// not a fingerprint), with the limit named.
func TestScanResourceErrors(t *testing.T) {
	root := mkTree(t, map[string]string{"a": "1", "sub/b": "2"})
	for _, op := range []string{opOpenDir, opReadDir, opOpenFile, opRead} {
		opt := ScanOptions{fault: func(o, _ string) error {
			if o == op {
				return syscall.EMFILE
			}
			return nil
		}}
		_, err := Scan(context.Background(), Spec{Root: root}, nil, opt)
		assert.ErrorIs(t, err, ErrResource, op)
		assert.ErrorIs(t, err, syscall.EMFILE, op)
		assert.Contains(t, fmt.Sprint(err), "RLIMIT_NOFILE", op)
	}
}

func TestInotifyInitHint(t *testing.T) {
	// EMFILE from inotify_init1 is either limit: a file that can still be opened says which.
	assert.Contains(t, inotifyInitHintProbe(syscall.EMFILE, func() error { return nil }), "fs.inotify.max_user_instances")
	fdHint := inotifyInitHintProbe(syscall.EMFILE, func() error { return syscall.EMFILE })
	assert.Contains(t, fdHint, "RLIMIT_NOFILE")
	assert.NotContains(t, fdHint, "max_user_instances")
	assert.Contains(t, inotifyInitHint(syscall.ENFILE), "system-wide")
	assert.True(t, errors.Is(newResourceError("x", syscall.EMFILE), ErrResource))
}
