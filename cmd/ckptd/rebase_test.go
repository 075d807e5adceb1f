package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRootRebase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flag, root, want string
		moved            bool
	}{
		{"/home/ci/agent=/srv/agent", "/home/ci/agent", "/srv/agent", true},
		{"/home/ci/agent=/srv/agent", "/home/ci/agent/src/pkg", "/srv/agent/src/pkg", true},
		{"/home/ci/agent/=/srv/agent/", "/home/ci/agent/src", "/srv/agent/src", true}, // cleaned
		{"/home/ci/agent=/srv/agent", "/home/ci/agent2", "/home/ci/agent2", false},    // not a path prefix
		{"/home/ci/agent=/srv/agent", "/home/ci", "/home/ci", false},
		{"/=/mnt/old", "/home/x", "/mnt/old/home/x", true},
		{"/a=/", "/a/b", "/b", true},
		{"/a=/b=c", "/a/d", "/b=c/d", true}, // only the first "=" splits
	} {
		r, err := parseRootRebase(tc.flag)
		require.NoError(t, err, tc.flag)
		got, moved := r.apply(tc.root)
		assert.Equal(t, tc.want, got, "%s on %s", tc.flag, tc.root)
		assert.Equal(t, tc.moved, moved, "%s on %s", tc.flag, tc.root)
	}
	for flag, want := range map[string]string{
		"/a":   `"/a": want OLD=NEW`,
		"a=/b": `OLD "a" is not an absolute path`,
		"/a=b": `NEW "b" is not an absolute path`,
		"=/b":  `OLD "" is not an absolute path`,
		"/a=":  `NEW "" is not an absolute path`,
	} {
		_, err := parseRootRebase(flag)
		require.Error(t, err, flag)
		assert.Equal(t, want, err.Error(), flag)
	}
}

func TestRootRebaseConfig(t *testing.T) {
	t.Parallel()
	r, err := parseRootRebase("/old=/new")
	require.NoError(t, err)
	for _, tc := range []struct{ in, want string }{
		{`{"sources":{"root":"/old/src","gitignore":false},"x":[1, 2]}`, `{"sources":{"gitignore":false,"root":"/new/src"},"x":[1,2]}`},
		{`{"sources":{"root":"/elsewhere"},"x":1}`, `{"sources":{"root":"/elsewhere"},"x":1}`}, // untouched, byte for byte
		{`{"x": 1}`, `{"x": 1}`},
		{`{"sources": null}`, `{"sources": null}`},
		{`{"sources": {"root": 5}}`, `{"sources": {"root": 5}}`},
		{`[1]`, `[1]`},
		{``, ``},
	} {
		got, err := r.config([]byte(tc.in))
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, string(got), tc.in)
	}
}
