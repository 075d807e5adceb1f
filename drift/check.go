package drift

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/blake3"
)

// CheckOptions tune Check.
type CheckOptions struct {
	ScanOptions
	// Last, if set, is a newer manifest of the same spec (say the one the previous Check
	// returned). The disk is compared with it instead of base, so files that drifted long
	// ago are not re-hashed on every check; the report is still relative to base.
	Last *Manifest
}

// Check answers "has the tree drifted from base?" without a full walk: it lstats the
// reference manifest's files and directories in parallel, re-hashes only files whose stat
// data changed (or that were racy), and re-reads only directories whose mtime or inode
// moved (or that were racy) to find added paths. It falls back to a full incremental Scan
// when the rules may select different files (an ignore file changed, the spec differs from
// the manifest's). It returns the report against base and the fresh manifest.
//
// It is bounded like Scan (spec.Limits, ctx). Paths whose current state could not be read (a
// directory that cannot be searched or listed, a file that cannot be stat'ed) are listed in
// the report's Unreadable, unless base could not read them either, and make it Drifted: a tree
// that could not be read is never reported as unchanged.
func Check(ctx context.Context, spec Spec, base *Manifest, opt CheckOptions) (Report, *Manifest, error) {
	t0 := time.Now()
	if base == nil {
		return Report{}, nil, fmt.Errorf("%w: no base manifest", ErrInvalidSpec)
	}
	nspec, err := spec.normalized()
	if err != nil {
		return Report{}, nil, err
	}
	ref := base
	if opt.Last != nil {
		ref = opt.Last
	}
	ctl := newScanCtl(ctx, nspec.Root, nspec.Limits, opt.fault)
	var reason string
	var cur *Manifest
	switch {
	case ref.Algorithm != AlgorithmBLAKE3:
		reason = fmt.Sprintf("manifest hash algorithm %q", ref.Algorithm)
	case !sameRules(ref.Spec, nspec):
		reason = "sources spec differs from the manifest's"
	default:
		cur, reason, err = quickCheck(ctl, nspec, ref, opt.ScanOptions)
	}
	if err == nil && reason != "" {
		opt.logger().Debug("drift check falls back to a full scan", "root", nspec.Root, "reason", reason)
		ctl.restart()
		cur, err = scanNormalized(ctl, nspec, ref, opt.ScanOptions)
	}
	if ferr := ctl.finish(); ferr != nil {
		return Report{}, nil, ferr
	}
	if err != nil {
		return Report{}, nil, err
	}
	rep := Diff(base, cur)
	rep.FullScan = reason != ""
	rep.Reason = reason
	markUnreadable(&rep, base, ctl.unreadablePaths())
	rep.Elapsed = time.Since(t0)
	return rep, cur, nil
}

// markUnreadable adds to rep the paths that could not be read now, except those base could
// not read either (a directory it recorded as unreadable, a file it recorded without a hash):
// about them the checkpoint knows nothing that could have drifted. Base files below an
// unreadable directory are not "deleted": their state is unknown. Anything unreadable left
// makes the report Drifted.
func markUnreadable(rep *Report, base *Manifest, paths []string) {
	if len(paths) == 0 {
		return
	}
	baseDir := make(map[string]int64, len(base.Dirs))
	for _, d := range base.Dirs {
		baseDir[d.Path] = d.MtimeNs
	}
	baseEntry := func(p string) *Entry {
		i, ok := slices.BinarySearchFunc(base.Entries, p, func(e Entry, p string) int { return strings.Compare(e.Path, p) })
		if !ok {
			return nil
		}
		return &base.Entries[i]
	}
	var dirs []string // "x/" prefixes; "" for the root
	below := func(p string) bool {
		for _, d := range dirs {
			if strings.HasPrefix(p, d) {
				return true
			}
		}
		return false
	}
	if i := slices.Index(paths, "./"); i > 0 { // the root first: it covers everything
		paths = append([]string{"./"}, slices.Delete(slices.Clone(paths), i, i+1)...)
	}
	for _, p := range paths { // sorted: a directory comes before what is below it
		if below(p) {
			continue
		}
		if strings.HasSuffix(p, "/") {
			rel := strings.TrimSuffix(p, "/")
			if rel == "." {
				rel = ""
			}
			if mt, ok := baseDir[rel]; ok && mt < 0 {
				continue
			}
			dirs = append(dirs, strings.TrimPrefix(p, "./"))
		} else if e := baseEntry(p); e != nil && e.Type == TypeFile && e.Hash == nil {
			continue
		}
		rep.Unreadable = append(rep.Unreadable, p)
	}
	if len(dirs) > 0 {
		rep.Deleted = slices.DeleteFunc(rep.Deleted, func(fc FileChange) bool { return below(fc.Path) })
	}
	if len(rep.Unreadable) > 0 {
		rep.Drifted = true
	}
}

type checker struct {
	ctl  *scanCtl
	spec Spec
	m    *matcher
	ref  *Manifest
	opt  ScanOptions

	// CSR indexes: entries and subdirectories of ref.Dirs[i].
	entStart, entIdx []int32
	subStart, subIdx []int32

	// root is the root directory, open for the whole check: unchanged directories are
	// checked with stats relative to it (quickDir); nil if it could not be opened.
	root *dirHandle

	mu    sync.Mutex
	ctxs  map[string]*dirCtx
	rules map[string]bool // paths of ref.Rules
	warn  warnings
}

type updEntry struct {
	j int32
	e Entry
}

type dirUpd struct {
	i    int32
	d    Dir
	gone bool
}

type checkWorker struct {
	ws       *workerState
	missing  []int32
	updated  []updEntry
	added    []Entry
	newDirs  []walkStart
	dirUpds  []dirUpd
	fallback string
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// buildIndex groups ref's entries under their parent directory; it returns the
// directory index, or nil when an entry has no directory (an inconsistent manifest).
func (c *checker) buildIndex() map[string]int32 {
	ref := c.ref
	dirOf := make(map[string]int32, len(ref.Dirs))
	for i := range ref.Dirs {
		dirOf[ref.Dirs[i].Path] = int32(i)
	}
	if _, ok := dirOf[""]; !ok {
		return nil
	}
	n := len(ref.Entries)
	par := make([]int32, n)
	start := make([]int32, len(ref.Dirs)+1)
	for k := range n {
		i, found := dirOf[parentOf(ref.Entries[k].Path)]
		if !found {
			return nil
		}
		par[k] = i
		start[i+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	idx := make([]int32, n)
	fill := slices.Clone(start[:len(ref.Dirs)])
	for k := range n {
		idx[fill[par[k]]] = int32(k)
		fill[par[k]]++
	}
	c.entStart, c.entIdx = start, idx
	return dirOf
}

// dirCSR indexes subdirectories under their parents, skipping the root.
func (c *checker) dirCSR(dirOf map[string]int32) (start, idx []int32) {
	ref := c.ref
	start = make([]int32, len(ref.Dirs)+1)
	par := make([]int32, len(ref.Dirs))
	for k := range ref.Dirs {
		par[k] = -1
		if ref.Dirs[k].Path == "" {
			continue
		}
		i, ok := dirOf[parentOf(ref.Dirs[k].Path)]
		if !ok || i < 0 {
			continue
		}
		par[k] = i
		start[i+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	idx = make([]int32, start[len(ref.Dirs)])
	fill := slices.Clone(start[:len(ref.Dirs)])
	for k := range ref.Dirs {
		if par[k] < 0 {
			continue
		}
		idx[fill[par[k]]] = int32(k)
		fill[par[k]]++
	}
	return start, idx
}

func (c *checker) abs(rel string) string {
	if rel == "" {
		return c.spec.Root
	}
	return c.spec.Root + "/" + rel
}

// quickCheck compares the disk with ref. A non-empty fallback means the caller must do a
// full scan instead.
func quickCheck(ctl *scanCtl, spec Spec, ref *Manifest, opt ScanOptions) (cur *Manifest, fallback string, err error) {
	start := coarseNow()
	c := &checker{ctl: ctl, spec: spec, m: newMatcher(spec), ref: ref, opt: opt, ctxs: map[string]*dirCtx{}}
	if !ctl.addFiles(int64(len(ref.Entries) + len(ref.Dirs))) {
		return nil, "", ctl.errNow()
	}
	dirOf := c.buildIndex()
	if dirOf == nil {
		return nil, "manifest has entries outside its directories", nil
	}
	c.subStart, c.subIdx = c.dirCSR(dirOf)
	newRules, reason := c.verifyRules()
	if reason != "" {
		return nil, reason, nil
	}
	if root, err := openRoot(spec.Root); err == nil {
		c.root = root
		defer root.close()
	}

	nw := opt.workers()
	workers := make([]*checkWorker, nw)
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := range nw {
		cw := &checkWorker{ws: &workerState{dirBuf: make([]byte, 32<<10), hashBuf: make([]byte, 128<<10), hasher: blake3.New()}}
		workers[k] = cw
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ref.Dirs) || ctl.stopped() || cw.fallback != "" {
					return
				}
				c.checkDir(cw, i)
			}
		}()
	}
	wg.Wait()
	if err := ctl.errNow(); err != nil {
		return nil, "", err
	}
	var missing []int32
	var updated []updEntry
	var added []Entry
	var starts []walkStart
	var dirUpds []dirUpd
	for _, cw := range workers {
		if cw.fallback != "" {
			return nil, cw.fallback, nil
		}
		missing = append(missing, cw.missing...)
		updated = append(updated, cw.updated...)
		added = append(added, cw.added...)
		starts = append(starts, cw.newDirs...)
		dirUpds = append(dirUpds, cw.dirUpds...)
	}
	missing, updated, added, starts, dirUpds = c.pruneBelowGone(missing, updated, added, starts, dirUpds)

	var newDirs []dirRec
	if len(starts) > 0 {
		w := newWalker(ctl, spec.Root, c.m, opt)
		w.reuse = c.subtreeReuse(missing)
		res, err := w.run(starts)
		if err != nil {
			return nil, "", err
		}
		if len(res.rules) > 0 {
			newRules = append(slices.Clone(newRules), res.rules...)
			sortEntries(newRules)
		}
		added = append(added, res.entries...)
		newDirs = res.dirs
		for _, s := range res.warnings {
			c.warn.add(s)
		}
	}

	cur = &Manifest{
		Version:     ManifestVersion,
		Algorithm:   AlgorithmBLAKE3,
		Spec:        spec,
		ScanStartNs: start,
		Entries:     mergeEntries(ref.Entries, missing, updated, added),
		Dirs:        mergeDirs(ref.Dirs, dirUpds, newDirs),
		Rules:       newRules,
	}
	for i := range cur.Entries {
		if e := &cur.Entries[i]; e.Type == TypeFile && e.Hash == nil {
			c.warn.add(fmt.Sprintf("%s: unreadable, content not hashed", e.Path))
		}
	}
	cur.Warnings = c.warn.result()
	return cur, "", nil
}

// subtreeReuse lets files of a directory that moved keep their hashes: a rename does not
// change the children's stat data, so a missing entry with identical stat (inode
// included) and not racy is the same file.
func (c *checker) subtreeReuse(missing []int32) func(rel string, st fileStat) (Entry, bool) {
	byIno := make(map[uint64]*Entry, len(missing))
	for _, j := range missing {
		e := &c.ref.Entries[j]
		byIno[e.Ino] = e
	}
	return func(rel string, st fileStat) (Entry, bool) {
		e := byIno[st.ino]
		if e == nil || !e.reusable(st, c.ref.ScanStartNs) {
			return Entry{}, false
		}
		ne := *e
		ne.Path = rel
		return ne, true
	}
}

// verifyRules checks the ignore files the manifest was built with. Any change means a
// different selection of files, hence a full scan.
func (c *checker) verifyRules() ([]Entry, string) {
	ref := c.ref
	rules := ref.Rules
	c.rules = make(map[string]bool, len(rules))
	var out []Entry
	sawInfo := false
	for k := range rules {
		r := &rules[k]
		c.rules[r.Path] = true
		if r.Path == ".git/info/exclude" {
			sawInfo = true
		}
		st, err := lstatPath(c.abs(r.Path))
		if err != nil {
			return nil, "ignore file removed or unreadable: " + r.Path
		}
		if r.sameStat(st) && !r.racy(ref.ScanStartNs) {
			continue
		}
		d, err := openRoot(c.abs(parentOf(r.Path)))
		if err != nil {
			return nil, "ignore file unreadable: " + r.Path
		}
		e, _, err := readRuleFile(d, baseName(r.Path), r.Path)
		d.close()
		if err != nil || string(e.Hash) != string(r.Hash) {
			return nil, "ignore file changed: " + r.Path
		}
		if out == nil {
			out = slices.Clone(rules)
		}
		out[k] = e
	}
	if c.spec.Gitignore && !sawInfo {
		if _, err := lstatPath(c.abs(".git/info/exclude")); err == nil {
			return nil, "ignore file added: .git/info/exclude"
		}
	}
	if out == nil {
		out = rules
	}
	return out, ""
}

// dirCtx returns the matching context of a directory of ref (rules re-read lazily).
func (c *checker) dirCtx(rel string) *dirCtx {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirCtxLocked(rel)
}

func (c *checker) dirCtxLocked(rel string) *dirCtx {
	if dc, ok := c.ctxs[rel]; ok {
		return dc
	}
	var dc *dirCtx
	if rel == "" {
		dc = c.m.rootCtx()
		if c.spec.Gitignore {
			var w warnings
			dc.chain, _ = loadInfoExclude(c.spec.Root, &w)
		}
	} else {
		parent := c.dirCtxLocked(parentOf(rel))
		_, inclAll := c.m.child(parent, baseName(rel), true)
		dc = &dirCtx{rel: rel, inclAll: inclAll, chain: parent.chain}
	}
	if c.spec.Gitignore {
		if p := joinRel(rel, ".gitignore"); c.rules[p] {
			if d, err := openRoot(c.abs(rel)); err == nil {
				if _, data, err := readRuleFile(d, ".gitignore", p); err == nil {
					dc.chain = dc.chain.with(parseIgnore(rel, data))
				}
				d.close()
			}
		}
	}
	c.ctxs[rel] = dc
	return dc
}

func (c *checker) checkDir(cw *checkWorker, i int) {
	ref := c.ref
	rec := &ref.Dirs[i]
	ents := c.entIdx[c.entStart[i]:c.entStart[i+1]]
	if rec.Path != "" && c.quickDir(cw, rec, ents) {
		return
	}
	ctl := c.ctl
	unreadable := func(rel string, err error) {
		if ctl.pathErr(rel, err) {
			return
		}
		c.warn.add(fmt.Sprintf("%s: %v", rel, err))
		ctl.noteUnreadable(rel)
	}
	var d *dirHandle
	err := ctl.inject(opOpenDir, rec.Path)
	switch {
	case err != nil:
	case rec.Path == "":
		d, err = openRoot(c.spec.Root)
	default:
		d, err = openDirPath(c.abs(rec.Path))
	}
	if err != nil {
		if isNotExist(err) || isNotDirOrLink(err) {
			cw.dirUpds = append(cw.dirUpds, dirUpd{i: int32(i), gone: true})
			cw.missing = append(cw.missing, ents...)
			return
		}
		unreadable(dirKey(rec.Path), err)
		return
	}
	defer d.close()
	st, err := d.stat()
	if err != nil {
		unreadable(dirKey(rec.Path), err)
		return
	}
	changed := rec.MtimeNs < 0 || st.mtime != rec.MtimeNs || st.ino != rec.Ino || rec.MtimeNs >= ref.ScanStartNs
	if st.mtime != rec.MtimeNs || st.ino != rec.Ino {
		cw.dirUpds = append(cw.dirUpds, dirUpd{i: int32(i), d: Dir{Path: rec.Path, MtimeNs: st.mtime, Ino: st.ino}})
	}
	prefix := len(rec.Path) + 1
	if rec.Path == "" {
		prefix = 0
	}
	for _, j := range ents {
		if ctl.stopped() {
			return
		}
		e := &ref.Entries[j]
		name := e.Path[prefix:]
		err := ctl.inject(opStat, e.Path)
		var est fileStat
		if err == nil {
			est, err = d.lstatBuf(name, &cw.ws.nameBuf)
		}
		if err != nil {
			switch {
			case isNotExist(err):
				cw.missing = append(cw.missing, j)
			case errors.Is(err, fs.ErrPermission):
				// The directory cannot be searched: none of its entries can be checked.
				unreadable(dirKey(rec.Path), err)
				return
			default:
				unreadable(e.Path, err)
			}
			continue
		}
		if e.reusable(est, ref.ScanStartNs) {
			continue
		}
		ne, ok := c.fingerprint(cw, d, name, e.Path, est)
		if !ok {
			cw.missing = append(cw.missing, j)
			continue
		}
		cw.updated = append(cw.updated, updEntry{j: j, e: ne})
	}
	if !changed {
		return
	}
	// New names can only have appeared in a directory whose mtime moved.
	subs := c.subIdx[c.subStart[i]:c.subStart[i+1]]
	isEntry := func(name string) bool {
		k := sort.Search(len(ents), func(k int) bool { return ref.Entries[ents[k]].Path[prefix:] >= name })
		return k < len(ents) && ref.Entries[ents[k]].Path[prefix:] == name
	}
	isSub := func(name string) bool {
		k := sort.Search(len(subs), func(k int) bool { return ref.Dirs[subs[k]].Path[prefix:] >= name })
		return k < len(subs) && ref.Dirs[subs[k]].Path[prefix:] == name
	}
	var dc *dirCtx
	visit := func(name string, typ uint8) {
		if cw.fallback != "" {
			return
		}
		if typ == dtUnknown {
			st, err := d.lstat(name)
			if err != nil {
				return
			}
			switch {
			case st.isDir():
				typ = dtDir
			case st.isReg():
				typ = dtReg
			case st.isLink():
				typ = dtLnk
			}
		}
		if dc == nil {
			dc = c.dirCtx(rec.Path)
		}
		switch typ {
		case dtDir:
			if isSub(name) {
				return
			}
			if ok, inclAll := c.m.child(dc, name, true); ok {
				cw.newDirs = append(cw.newDirs, walkStart{ctx: &dirCtx{rel: joinRel(rec.Path, name), inclAll: inclAll, chain: dc.chain}})
			}
		case dtReg, dtLnk:
			if isEntry(name) {
				return
			}
			rel := joinRel(rec.Path, name)
			if name == ".gitignore" && c.spec.Gitignore {
				cw.fallback = "ignore file added: " + rel
				return
			}
			if ok, _ := c.m.child(dc, name, false); !ok {
				return
			}
			est, err := d.lstat(name)
			if err != nil {
				return
			}
			if est.isDir() {
				if ok, inclAll := c.m.child(dc, name, true); ok {
					cw.newDirs = append(cw.newDirs, walkStart{ctx: &dirCtx{rel: rel, inclAll: inclAll, chain: dc.chain}})
				}
				return
			}
			if !ctl.addFiles(1) {
				return
			}
			if ne, ok := c.fingerprint(cw, d, name, rel, est); ok {
				cw.added = append(cw.added, ne)
			}
		}
	}
	err = ctl.inject(opReadDir, rec.Path)
	if err == nil {
		err = d.readDir(cw.ws.dirBuf, func(name string, typ uint8) bool {
			visit(name, typ)
			return cw.fallback == "" && !ctl.stopped()
		})
	}
	if err != nil && !isNotExist(err) {
		unreadable(dirKey(rec.Path), err)
	}
}

// pruneBelowGone makes everything below a directory that is gone (deleted, or now a symlink
// or a file) gone too. Directories are checked in parallel, each by its path from the root,
// and a path through a directory replaced by a symlink would otherwise reach that subtree
// through the link, even outside the root (a directory moved away and linked back).
func (c *checker) pruneBelowGone(missing []int32, updated []updEntry, added []Entry, starts []walkStart,
	dirUpds []dirUpd) ([]int32, []updEntry, []Entry, []walkStart, []dirUpd) {
	gone := map[string]bool{}
	for _, u := range dirUpds {
		if u.gone {
			gone[c.ref.Dirs[u.i].Path] = true
		}
	}
	if len(gone) == 0 {
		return missing, updated, added, starts, dirUpds
	}
	below := func(p string) bool { // some proper ancestor directory of p is gone
		for p != "" {
			p = parentOf(p)
			if gone[p] && p != "" {
				return true
			}
		}
		return false
	}
	isMissing := make(map[int32]bool, len(missing))
	for _, j := range missing {
		isMissing[j] = true
	}
	upds := dirUpds[:0:0]
	seen := map[int32]bool{}
	for _, u := range dirUpds {
		if below(c.ref.Dirs[u.i].Path) {
			continue
		}
		seen[u.i] = true
		upds = append(upds, u)
	}
	for i := range c.ref.Dirs {
		if !below(c.ref.Dirs[i].Path) {
			continue
		}
		if !seen[int32(i)] {
			upds = append(upds, dirUpd{i: int32(i), gone: true})
		}
		for _, j := range c.entIdx[c.entStart[i]:c.entStart[i+1]] {
			if !isMissing[j] {
				isMissing[j] = true
				missing = append(missing, j)
			}
		}
	}
	upd := updated[:0:0]
	for _, u := range updated {
		if !isMissing[u.j] {
			upd = append(upd, u)
		}
	}
	add := added[:0:0]
	for _, e := range added {
		if !below(e.Path) {
			add = append(add, e)
		}
	}
	st := starts[:0:0]
	for _, w := range starts {
		if !below(w.ctx.rel) {
			st = append(st, w)
		}
	}
	return missing, upd, add, st, upds
}

// quickDir reports whether directory rec and its entries are exactly as in the manifest,
// using only stats relative to the open root: one per directory and one per entry, where
// opening the directory would cost an open, an fstat and a close more. Anything else (a
// changed or racy directory or entry, an error) answers false, and checkDir looks again the
// careful way, so this is only ever a shortcut for the common "nothing changed here".
func (c *checker) quickDir(cw *checkWorker, rec *Dir, ents []int32) bool {
	if c.root == nil || rec.MtimeNs < 0 || rec.MtimeNs >= c.ref.ScanStartNs {
		return false
	}
	st, err := c.root.lstatBuf(rec.Path, &cw.ws.nameBuf)
	if err != nil || !st.isDir() || st.mtime != rec.MtimeNs || st.ino != rec.Ino {
		return false
	}
	for _, j := range ents {
		e := &c.ref.Entries[j]
		if c.ctl.fault != nil && c.ctl.inject(opStat, e.Path) != nil {
			return false
		}
		est, err := c.root.lstatBuf(e.Path, &cw.ws.nameBuf)
		if err != nil || !e.reusable(est, c.ref.ScanStartNs) {
			return false
		}
	}
	return true
}

// fingerprint builds the entry for name (stat st) in d; ok=false means it is gone or is
// not a file or symlink any more.
func (c *checker) fingerprint(cw *checkWorker, d *dirHandle, name, rel string, st fileStat) (Entry, bool) {
	switch {
	case st.isReg():
		e, err := hashEntry(d, name, rel, cw.ws, c.ctl)
		if err != nil {
			if isNotExist(err) || isNotDirOrLink(err) || errors.Is(err, errNotRegular) ||
				errors.Is(err, errScanStopped) || c.ctl.pathErr(rel, err) {
				return Entry{}, false
			}
			c.warn.add(fmt.Sprintf("%s: %v", rel, err))
			return entryFromStat(rel, st, nil, ""), true
		}
		return e, true
	case st.isLink():
		t, err := d.readlink(name)
		if err != nil {
			if !isNotExist(err) && !c.ctl.pathErr(rel, err) {
				c.warn.add(fmt.Sprintf("%s: %v", rel, err))
				c.ctl.noteUnreadable(rel)
			}
			return Entry{}, false
		}
		return entryFromStat(rel, st, nil, t), true
	}
	return Entry{}, false
}

// mergeEntries applies a check's results to ref's sorted entries. With nothing to apply
// it returns ref's slice itself.
func mergeEntries(ref []Entry, missing []int32, updated []updEntry, added []Entry) []Entry {
	if len(missing) == 0 && len(updated) == 0 && len(added) == 0 {
		return ref
	}
	const (
		keep = iota
		drop
		repl
	)
	status := make([]uint8, len(ref))
	for _, j := range missing {
		status[j] = drop
	}
	repls := make(map[int32]*Entry, len(updated))
	for k := range updated {
		status[updated[k].j] = repl
		repls[updated[k].j] = &updated[k].e
	}
	sortEntries(added)
	out := make([]Entry, 0, len(ref)-len(missing)+len(added))
	a := 0
	for j := range ref {
		if status[j] == drop {
			continue
		}
		e := &ref[j]
		if status[j] == repl {
			e = repls[int32(j)]
		}
		for a < len(added) && added[a].Path < e.Path {
			out = append(out, added[a])
			a++
		}
		out = append(out, *e)
	}
	out = append(out, added[a:]...)
	return out
}

func mergeDirs(ref []Dir, upds []dirUpd, added []dirRec) []Dir {
	if len(upds) == 0 && len(added) == 0 {
		return ref
	}
	out := slices.Clone(ref)
	gone := false
	for _, u := range upds {
		if u.gone {
			out[u.i].MtimeNs = -2 // marker, removed below
			gone = true
		} else {
			out[u.i] = u.d
		}
	}
	if gone {
		out = slices.DeleteFunc(out, func(d Dir) bool { return d.MtimeNs == -2 })
	}
	for _, r := range added {
		out = append(out, r.Dir)
	}
	if len(added) > 0 {
		slices.SortFunc(out, func(a, b Dir) int { return strings.Compare(a.Path, b.Path) })
	}
	return out
}
