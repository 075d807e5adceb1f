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
	// ErrRootPseudoFS: the root is on a pseudo file system (/proc, /sys, /dev...), whose
	// files are generated, endless or devices: not sources.
	ErrRootPseudoFS = errors.New("source root is on a pseudo file system")
	// ErrClosed: the Watcher was closed.
	ErrClosed = errors.New("drift watcher closed")
	// ErrStopped: the Watcher stopped by itself (a resource ran out, a bound was reached);
	// the error wraps the reason.
	ErrStopped = errors.New("drift watch stopped")
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
	// Limits bound the scans of this spec (nil: the defaults). They are not part of the rules:
	// manifests do not record them.
	Limits *Limits `json:"limits,omitempty"`
}

// UnmarshalJSON decodes a spec, defaulting "gitignore" to true when absent. A type error in
// an element of include or exclude names it with its index ("include[1]"), as Validate does.
func (s *Spec) UnmarshalJSON(b []byte) error {
	type plain Spec
	p := plain{Gitignore: true}
	if err := json.Unmarshal(b, &p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && (te.Field == "include" || te.Field == "exclude") {
			if f := elementAtFault(b, te.Field); f != "" {
				te.Field = f
			}
		}
		return err
	}
	*s = Spec(p)
	return nil
}

// elementAtFault returns "field[i]" for the first element of b's array field that is not a
// string ("" if the field is not an array).
func elementAtFault(b []byte, field string) string {
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) != nil {
		return ""
	}
	var elems []json.RawMessage
	if json.Unmarshal(raw[field], &elems) != nil {
		return ""
	}
	for i, e := range elems {
		var str string
		if json.Unmarshal(e, &str) != nil {
			return fmt.Sprintf("%s[%d]", field, i)
		}
	}
	return ""
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
	if err := check("exclude", s.Exclude); err != nil {
		return err
	}
	return s.Limits.Validate()
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
	if err := checkNotPseudo(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// checkNotPseudo refuses a root on a pseudo file system: by its statfs magic (Linux), and by
// its real path for /proc, /sys and /dev, whatever is mounted there (in a container /dev is
// often a tmpfs, which statfs cannot tell from a real one).
func checkNotPseudo(abs string) error {
	if name := pseudoFSName(abs); name != "" {
		return fmt.Errorf("%w (%s): %s is not a source tree", ErrRootPseudoFS, name, abs)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		real = abs
	}
	for _, p := range [...]string{"/proc", "/sys", "/dev"} {
		if real == p || strings.HasPrefix(real, p+"/") {
			return fmt.Errorf("%w (%s): %s is not a source tree", ErrRootPseudoFS, p, abs)
		}
	}
	return nil
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
	if s.Limits != nil {
		l := *s.Limits
		n.Limits = &l
	}
	return n, nil
}

// sameRules reports whether two normalized specs select the same files.
func sameRules(a, b Spec) bool {
	return a.Root == b.Root && a.Gitignore == b.Gitignore && a.EditorFiles == b.EditorFiles &&
		slices.Equal(a.Include, b.Include) && slices.Equal(a.Exclude, b.Exclude)
}
