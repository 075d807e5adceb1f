package drift

import (
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// matcher decides which paths a Spec selects.
type matcher struct {
	spec     Spec
	incBases []string // literal directory prefix of each include pattern ("" = any)
	skip     string   // a directory never selected (the watcher's private sync directory)
}

func newMatcher(spec Spec) *matcher {
	m := &matcher{spec: spec}
	for _, p := range spec.Include {
		base, _ := doublestar.SplitPattern(p)
		if base == "." {
			base = ""
		}
		m.incBases = append(m.incBases, base)
	}
	return m
}

// dirCtx is what matching a directory's children needs to know about the directory.
type dirCtx struct {
	rel     string       // "" for the root
	inclAll bool         // an include pattern matched this directory or an ancestor
	chain   *ignoreChain // git ignore rules in force here (nil: none)
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// child decides whether the entry name of directory parent is selected. For a directory
// it also returns the inclAll flag of the child.
func (m *matcher) child(parent *dirCtx, name string, isDir bool) (ok, inclAll bool) {
	if name == ".git" {
		return false, false
	}
	if !isDir && !m.spec.EditorFiles && isEditorFile(name) {
		return false, false
	}
	rel := joinRel(parent.rel, name)
	if m.skip != "" && rel == m.skip {
		return false, false
	}
	for _, p := range m.spec.Exclude {
		if doublestar.MatchUnvalidated(p, rel) {
			return false, false
		}
	}
	if m.spec.Gitignore && parent.chain.ignored(rel, isDir) {
		return false, false
	}
	if parent.inclAll || len(m.spec.Include) == 0 {
		return true, true
	}
	for _, p := range m.spec.Include {
		if doublestar.MatchUnvalidated(p, rel) {
			return true, true
		}
	}
	if !isDir {
		return false, false
	}
	for _, b := range m.incBases {
		if b == "" || b == rel || strings.HasPrefix(b, rel+"/") || strings.HasPrefix(rel, b+"/") {
			return true, false
		}
	}
	return false, false
}

// rootCtx is the context of the root directory.
func (m *matcher) rootCtx() *dirCtx {
	return &dirCtx{rel: "", inclAll: len(m.spec.Include) == 0}
}

// isEditorFile reports names that editors create transiently or next to the file being
// edited: vim swap files and backups, emacs autosaves and locks, JetBrains safe-write temps.
func isEditorFile(name string) bool {
	n := len(name)
	switch {
	case n == 0:
		return false
	case name[n-1] == '~': // vim / emacs backup
		return true
	case name == "4913": // vim's "can I write here" probe
		return true
	case name[0] == '.' && n >= 5 && name[n-4:n-1] == ".sw": // vim swap .foo.swp/.swo/.swx...
		return true
	case strings.HasPrefix(name, ".#"): // emacs lock
		return true
	case n > 1 && name[0] == '#' && name[n-1] == '#': // emacs autosave
		return true
	case strings.HasSuffix(name, "___jb_tmp___"), strings.HasSuffix(name, "___jb_old___"):
		return true
	case strings.HasPrefix(name, ".goutputstream-"): // gedit/GIO
		return true
	}
	return false
}

// --- git ignore rules -------------------------------------------------------------------

type ruleKind uint8

const (
	ruleGlob    ruleKind = iota // generic wildmatch
	ruleLiteral                 // no meta characters
	ruleSuffix                  // "*" followed by a literal, e.g. "*.o"
)

type gitRule struct {
	pat      string   // pattern without '!', leading '/' and trailing '/'
	segs     []string // pat split on '/', for patterns containing a slash
	lit      string   // literal / suffix for the fast kinds
	kind     ruleKind
	negate   bool
	dirOnly  bool
	hasSlash bool // anchored to the directory of the ignore file
}

// ruleSet is one ignore file's rules; base is the directory they are relative to.
type ruleSet struct {
	base  string
	rules []gitRule
}

// ignoreChain links the rule sets in force in a directory, innermost first; a nil chain
// ignores nothing.
type ignoreChain struct {
	parent *ignoreChain
	set    *ruleSet
}

func (c *ignoreChain) with(set *ruleSet) *ignoreChain {
	if set == nil || len(set.rules) == 0 {
		return c
	}
	return &ignoreChain{parent: c, set: set}
}

// ignored applies git's precedence: the deepest ignore file first, within a file the last
// matching line wins, "!" re-includes.
func (c *ignoreChain) ignored(rel string, isDir bool) bool {
	var segs []string
	base := rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		base = rel[i+1:]
	}
	for ; c != nil; c = c.parent {
		sub := rel
		if c.set.base != "" {
			sub = strings.TrimPrefix(rel, c.set.base+"/")
		}
		rules := c.set.rules
		for i := len(rules) - 1; i >= 0; i-- {
			r := &rules[i]
			if r.dirOnly && !isDir {
				continue
			}
			var hit bool
			if !r.hasSlash {
				switch r.kind {
				case ruleLiteral:
					hit = base == r.lit
				case ruleSuffix:
					hit = strings.HasSuffix(base, r.lit)
				default:
					hit = globSeg(r.pat, base)
				}
			} else {
				if c.set.base == "" && segs == nil {
					segs = strings.Split(rel, "/")
				}
				s := segs
				if c.set.base != "" {
					s = strings.Split(sub, "/")
				}
				hit = matchSegs(r.segs, s)
			}
			if hit {
				return !r.negate
			}
		}
	}
	return false
}

// matchSegs is git's wildmatch with WM_PATHNAME over path segments: a leading or inner
// "**" matches zero or more directories, a trailing "**" one or more path components.
func matchSegs(pat, p []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			if len(pat) == 1 {
				return len(p) >= 1
			}
			for i := 0; i <= len(p); i++ {
				if matchSegs(pat[1:], p[i:]) {
					return true
				}
			}
			return false
		}
		if len(p) == 0 || !globSeg(pat[0], p[0]) {
			return false
		}
		pat, p = pat[1:], p[1:]
	}
	return len(p) == 0
}

// globSeg matches one path component against one pattern component.
func globSeg(pat, s string) bool {
	if !strings.ContainsAny(pat, `*?[\`) {
		return pat == s
	}
	ok, err := path.Match(pat, s)
	return ok && err == nil
}

// parseIgnore parses a .gitignore (or info/exclude) file whose rules are relative to base.
func parseIgnore(base string, data []byte) *ruleSet {
	set := &ruleSet{base: base}
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		// Trailing spaces are ignored unless escaped with a backslash.
		for strings.HasSuffix(line, " ") && !strings.HasSuffix(line, `\ `) {
			line = line[:len(line)-1]
		}
		var r gitRule
		if line != "" && line[0] == '!' {
			r.negate = true
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly = true
			line = strings.TrimRight(line, "/")
		}
		if strings.HasPrefix(line, "/") {
			r.hasSlash = true
			line = strings.TrimLeft(line, "/")
		}
		if line == "" {
			continue
		}
		if strings.Contains(line, "/") {
			r.hasSlash = true
		}
		line = gitToGoGlob(line)
		r.pat = line
		if r.hasSlash {
			r.segs = strings.Split(line, "/")
		} else if !strings.ContainsAny(line, `*?[\`) {
			r.kind, r.lit = ruleLiteral, line
		} else if line[0] == '*' && !strings.ContainsAny(line[1:], `*?[\`) {
			r.kind, r.lit = ruleSuffix, line[1:]
		}
		set.rules = append(set.rules, r)
	}
	return set
}

// gitToGoGlob rewrites git's "[!...]" negated class to path.Match's "[^...]" and collapses
// runs of '*' that are not a whole component (git treats them as a single '*').
func gitToGoGlob(p string) string {
	if !strings.ContainsAny(p, "[*") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			b.WriteByte(c)
			i++
			b.WriteByte(p[i])
		case c == '[' && i+1 < len(p) && p[i+1] == '!':
			b.WriteString("[^")
			i++
		case c == '*':
			j := i
			for j < len(p) && p[j] == '*' {
				j++
			}
			whole := (i == 0 || p[i-1] == '/') && (j == len(p) || p[j] == '/')
			if whole && j-i >= 2 {
				b.WriteString("**")
			} else {
				b.WriteByte('*')
			}
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
