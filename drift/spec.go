package drift

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Errors returned by this package; test them with errors.Is.
var (
	// ErrInvalidSpec: a Spec field is malformed (bad glob, empty root).
	ErrInvalidSpec = errors.New("invalid sources spec")
	// ErrRootNotFound: the root does not exist.
	ErrRootNotFound = errors.New("source root does not exist")
	// ErrRootNotDir: the root exists but is not a directory.
	ErrRootNotDir = errors.New("source root is not a directory")
	// ErrClosed: the Watcher was closed.
	ErrClosed = errors.New("drift watcher closed")
)

// Spec says which files of a tree are fingerprinted.
//
// A path (relative to Root, '/'-separated) is fingerprinted when it matches an Include
// pattern (none = everything), matches no Exclude pattern, and is not ignored by git rules
// (when Gitignore). Patterns use doublestar syntax ("**" spans directories). A pattern that
// matches a directory applies to everything below it: Exclude "node_modules" prunes that
// directory, Include "src" takes all of src. ".git" is always excluded; so are editor
// swap/backup/temp files (vim .*.swp and foo~, emacs #foo# and .#foo, JetBrains
// *___jb_tmp___ / *___jb_old___) unless EditorFiles is set.
//
// The zero value of Gitignore is false; JSON decoding (UnmarshalJSON) defaults it to true,
// as the protocol does.
type Spec struct {
	Root        string   `json:"root"`
	Include     []string `json:"include,omitempty"`
	Exclude     []string `json:"exclude,omitempty"`
	Gitignore   bool     `json:"gitignore"`
	EditorFiles bool     `json:"editorFiles,omitempty"`
}

// UnmarshalJSON decodes a spec, defaulting "gitignore" to true when absent.
func (s *Spec) UnmarshalJSON(b []byte) error {
	type plain Spec
	p := plain{Gitignore: true}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = Spec(p)
	return nil
}

// Validate checks the patterns and that Root is an existing directory (a symlink to one is
// accepted for the root only). Errors wrap ErrInvalidSpec, ErrRootNotFound or ErrRootNotDir.
func (s Spec) Validate() error {
	if err := s.validatePatterns(); err != nil {
		return err
	}
	_, err := s.resolveRoot()
	return err
}

func (s Spec) validatePatterns() error {
	if strings.TrimSpace(s.Root) == "" {
		return fmt.Errorf("%w: root is empty", ErrInvalidSpec)
	}
	check := func(field string, pats []string) error {
		for i, p := range pats {
			if p == "" {
				return fmt.Errorf("%w: %s[%d] is empty", ErrInvalidSpec, field, i)
			}
			if strings.HasPrefix(p, "/") {
				return fmt.Errorf("%w: %s[%d] %q must be relative to the root", ErrInvalidSpec, field, i, p)
			}
			if !doublestar.ValidatePattern(p) {
				return fmt.Errorf("%w: %s[%d] %q is not a valid glob", ErrInvalidSpec, field, i, p)
			}
		}
		return nil
	}
	if err := check("include", s.Include); err != nil {
		return err
	}
	return check("exclude", s.Exclude)
}

// resolveRoot returns the absolute, cleaned root and checks it is a directory.
func (s Spec) resolveRoot() (string, error) {
	abs, err := filepath.Abs(s.Root)
	if err != nil {
		return "", fmt.Errorf("%w: root %q: %w", ErrInvalidSpec, s.Root, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: %s", ErrRootNotFound, abs)
		}
		return "", fmt.Errorf("source root %s: %w", abs, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s", ErrRootNotDir, abs)
	}
	return abs, nil
}

// normalized returns the spec with an absolute root, as recorded in a manifest.
func (s Spec) normalized() (Spec, error) {
	if err := s.validatePatterns(); err != nil {
		return Spec{}, err
	}
	root, err := s.resolveRoot()
	if err != nil {
		return Spec{}, err
	}
	n := s
	n.Root = root
	n.Include = slices.Clone(s.Include)
	n.Exclude = slices.Clone(s.Exclude)
	return n, nil
}

// sameRules reports whether two normalized specs select the same files.
func sameRules(a, b Spec) bool {
	return a.Root == b.Root && a.Gitignore == b.Gitignore && a.EditorFiles == b.EditorFiles &&
		slices.Equal(a.Include, b.Include) && slices.Equal(a.Exclude, b.Exclude)
}
