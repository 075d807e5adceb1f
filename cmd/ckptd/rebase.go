package main

import (
	"encoding/json"
	"fmt"
	"iter"
	"path/filepath"
	"strings"

	"github.com/ckptd/ckptd/engine"
)

// rootRebase is import's --sources-root OLD=NEW: source manifests (and configured sources)
// rooted at OLD or below it are moved to NEW, keeping the part below OLD.
type rootRebase struct {
	old, new string // absolute and clean
}

// parseRootRebase parses OLD=NEW; both must be absolute paths.
func parseRootRebase(s string) (*rootRebase, error) {
	o, n, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return nil, fmt.Errorf("%q: want OLD=NEW", s)
	case !filepath.IsAbs(o):
		return nil, fmt.Errorf("OLD %q is not an absolute path", o)
	case !filepath.IsAbs(n):
		return nil, fmt.Errorf("NEW %q is not an absolute path", n)
	}
	return &rootRebase{old: filepath.Clean(o), new: filepath.Clean(n)}, nil
}

// apply returns root moved to r.new when it is r.old or below it; otherwise root and false.
func (r *rootRebase) apply(root string) (string, bool) {
	if root == r.old {
		return r.new, true
	}
	prefix := r.old
	if !strings.HasSuffix(prefix, "/") { // "/" is the only clean path ending in a slash
		prefix += "/"
	}
	rest, ok := strings.CutPrefix(root, prefix)
	if !ok {
		return root, false
	}
	return filepath.Join(r.new, rest), true
}

func (r *rootRebase) matches(root string) bool {
	_, ok := r.apply(root)
	return ok
}

// manifests moves the manifests of the checkpoints cps yields, adding the ids of those it moved
// to moved.
func (r *rootRebase) manifests(cps iter.Seq2[engine.Sourced, error], moved map[string]bool) iter.Seq2[engine.Sourced, error] {
	return func(yield func(engine.Sourced, error) bool) {
		for cp, err := range cps {
			if err == nil && cp.Sources != nil {
				if root, ok := r.apply(cp.Sources.Spec.Root); ok {
					m := *cp.Sources
					m.Spec.Root = root
					cp.Sources = &m
					moved[cp.CheckpointID] = true
				}
			}
			if !yield(cp, err) {
				return
			}
		}
	}
}

// config moves the root of the sources configured in a workflow's config JSON (used when the
// import creates the workflow). Other members are kept as they are; the JSON is re-encoded only
// when the root moves.
func (r *rootRebase) config(cfg []byte) ([]byte, error) {
	if len(cfg) == 0 {
		return cfg, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(cfg, &top); err != nil {
		return cfg, nil // not an object: the store ignores it the same way
	}
	raw, ok := top["sources"]
	if !ok {
		return cfg, nil
	}
	var sources map[string]json.RawMessage
	if err := json.Unmarshal(raw, &sources); err != nil || sources == nil {
		return cfg, nil
	}
	var root string
	if err := json.Unmarshal(sources["root"], &root); err != nil {
		return cfg, nil
	}
	moved, ok := r.apply(root)
	if !ok {
		return cfg, nil
	}
	// Marshalling strings and maps of valid raw JSON cannot fail.
	sources["root"], _ = json.Marshal(moved)
	top["sources"], _ = json.Marshal(sources)
	return json.Marshal(top)
}
