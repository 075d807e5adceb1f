package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
)

func TestCheckSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		name          string
		spec          drift.Spec
		field, reason string
	}{
		{"missing root", drift.Spec{Root: filepath.Join(dir, "nope")}, "sources.root", `directory "` + filepath.Join(dir, "nope") + `" does not exist`},
		{"root is a file", drift.Spec{Root: file}, "sources.root", `"` + file + `" is not a directory`},
		{"empty root", drift.Spec{}, "sources.root", "required"},
		{"blank root", drift.Spec{Root: "  "}, "sources.root", "required"},
		{"empty include", drift.Spec{Root: dir, Include: []string{"a", ""}}, "sources.include[1]", ""},
		{"bad exclude glob", drift.Spec{Root: dir, Exclude: []string{"[x"}}, "sources.exclude[0]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CheckSources("sources", tc.spec)
			var se *SourcesError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.field, se.Field)
			if tc.reason != "" {
				assert.Equal(t, tc.reason, se.Reason)
			}
			assert.Equal(t, "invalid params: "+se.Field+": "+se.Reason, err.Error())
		})
	}

	// a relative root comes back absolute
	wd, err := os.Getwd()
	require.NoError(t, err)
	spec, err := CheckSources("sources", drift.Spec{Root: "."})
	require.NoError(t, err)
	assert.Equal(t, wd, spec.Root)
}

// TestParseStoredSources: sources stored with workflow/configure are decoded and checked again
// (the tree may be gone since).
func TestParseStoredSources(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, raw, field, reason string
	}{
		{"not an object", `["x"]`, "sources", "must be an object {root, include?, exclude?, gitignore?}"},
		{"empty", ``, "sources", "must be an object {root, include?, exclude?, gitignore?}"},
		{"bad JSON", `{"root": }`, "sources", ""},
		{"root gone", `{"root": "` + filepath.Join(dir, "gone") + `"}`, "sources.root", `directory "` + filepath.Join(dir, "gone") + `" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := parseSources("sources", json.RawMessage(tc.raw))
			var se *SourcesError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.field, se.Field)
			if tc.reason != "" {
				assert.Equal(t, tc.reason, se.Reason)
			}
			assert.Empty(t, spec.Root)
		})
	}
	spec, err := parseSources("sources", json.RawMessage(`{"root": "`+dir+`", "gitignore": false, "include": ["**/*.go"]}`))
	require.NoError(t, err)
	assert.Equal(t, drift.Spec{Root: dir, Include: []string{"**/*.go"}}, spec)
}

func TestFingerprintError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		field string // a *SourcesError naming this field, else an *UnavailableError
		msg   string
	}{
		{"root gone", fmt.Errorf("scan: %w", drift.ErrRootNotFound), "sources.root", `invalid params: sources.root: directory "/src" does not exist`},
		{"root not a directory", drift.ErrRootNotDir, "sources.root", `invalid params: sources.root: "/src" is not a directory`},
		{"pseudo file system", fmt.Errorf("scan: %w", drift.ErrRootPseudoFS), "sources.root", ""},
		{"bound", fmt.Errorf("walk: %w", &drift.LimitError{Root: "/src", Limit: "maxFiles", Value: 10}), "",
			"fingerprinting /src stopped at sources.limits.maxFiles = 10 (raise it, or narrow include/exclude): walk: " +
				(&drift.LimitError{Root: "/src", Limit: "maxFiles", Value: 10}).Error()},
		{"I/O", errors.New("read a.txt: input/output error"), "", "fingerprinting /src: read a.txt: input/output error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fingerprintError("sources", "sources.limits", "/src", tc.err)
			if tc.msg != "" {
				assert.Equal(t, tc.msg, err.Error())
			}
			if tc.field != "" {
				var se *SourcesError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, tc.field, se.Field)
				return
			}
			var ue *UnavailableError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, tc.err, ue.Err, "the cause travels as the error's reason")
			assert.ErrorIs(t, err, tc.err)
		})
	}
}
