package drift

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zeebo/blake3"
)

// ScanOptions tune Scan and Check.
type ScanOptions struct {
	Workers int          // parallel walkers/hashers; 0 = GOMAXPROCS
	Logger  *slog.Logger // nil = discard

	fault faultFunc // tests: fault injection
}

func (o ScanOptions) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}

func (o ScanOptions) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// maxWarnings caps the per-path warnings kept in a manifest or report.
const maxWarnings = 200

// Scan fingerprints the tree spec selects. With prev (an earlier manifest of the same
// root) it is incremental like git's index: a file whose type, size, mtime, ctime, inode
// and mode equal prev's entry, and that was not racy in prev (mtime/ctime before prev's
// ScanStartNs), keeps prev's hash; every other file is hashed. Directories are walked
// and files hashed in parallel; symlinks are recorded, never followed; mounts of pseudo
// file systems below the root (proc, sysfs...) are skipped with a warning.
//
// The scan is bounded by spec.Limits (files, bytes hashed, time; checked while a file is
// hashed too): past one it fails with a *LimitError (errors.Is ErrLimit). It ends within
// milliseconds of ctx's cancellation. Running out of file descriptors or memory fails it
// with an error matching ErrResource: a partial walk is not a fingerprint.
func Scan(ctx context.Context, spec Spec, prev *Manifest, opt ScanOptions) (*Manifest, error) {
	nspec, err := spec.normalized()
	if err != nil {
		return nil, err
	}
	ctl := newScanCtl(ctx, nspec.Root, nspec.Limits, opt.fault)
	m, err := scanNormalized(ctl, nspec, prev, opt)
	if ferr := ctl.finish(); ferr != nil {
		return nil, ferr
	}
	return m, err
}

func scanNormalized(ctl *scanCtl, spec Spec, prev *Manifest, opt ScanOptions) (*Manifest, error) {
	start := coarseNow()
	m := newMatcher(spec)
	w := newWalker(ctl, spec.Root, m, opt)
	if prev != nil && prev.Spec.Root == spec.Root && prev.Algorithm == AlgorithmBLAKE3 {
		w.reuse = prevReuse(prev)
	}
	rootCtx := m.rootCtx()
	var rules []Entry
	if spec.Gitignore {
		rootCtx.chain, rules = loadInfoExclude(spec.Root, &w.warn)
	}
	res, err := w.run([]walkStart{{ctx: rootCtx}})
	if err != nil {
		return nil, err
	}
	spec.Limits = nil // bounds are not rules: the manifest does not record them
	man := &Manifest{
		Version:     ManifestVersion,
		Algorithm:   AlgorithmBLAKE3,
		Spec:        spec,
		ScanStartNs: start,
		Entries:     res.entries,
		Dirs:        dirsOf(res.dirs),
		Rules:       append(rules, res.rules...),
		Warnings:    res.warnings,
	}
	sortEntries(man.Rules)
	return man, nil
}

// prevReuse returns a lookup that hands back prev's entry when its stat data still
// matches and it was not racy.
func prevReuse(prev *Manifest) func(rel string, st fileStat) (Entry, bool) {
	idx := make(map[string]int32, len(prev.Entries))
	for i := range prev.Entries {
		idx[prev.Entries[i].Path] = int32(i)
	}
	return func(rel string, st fileStat) (Entry, bool) {
		i, ok := idx[rel]
		if !ok {
			return Entry{}, false
		}
		e := &prev.Entries[i]
		if e.reusable(st, prev.ScanStartNs) {
			return *e, true
		}
		return Entry{}, false
	}
}

// loadInfoExclude reads <root>/.git/info/exclude, git's per-repository ignore file, which
// ranks below every .gitignore.
func loadInfoExclude(root string, warn *warnings) (*ignoreChain, []Entry) {
	d, err := openRoot(root + "/.git/info")
	if err != nil {
		return nil, nil
	}
	defer d.close()
	e, data, err := readRuleFile(d, "exclude", ".git/info/exclude")
	if err != nil {
		if !isNotExist(err) {
			warn.add(fmt.Sprintf(".git/info/exclude: %v", err))
		}
		return nil, nil
	}
	var chain *ignoreChain
	return chain.with(parseIgnore("", data)), []Entry{e}
}

const maxRuleFile = 4 << 20

// readRuleFile reads an ignore file (never through a symlink, like git) and returns its
// entry for the manifest's Rules.
func readRuleFile(d *dirHandle, name, rel string) (Entry, []byte, error) {
	f, err := d.openFile(name)
	if err != nil {
		return Entry{}, nil, err
	}
	defer f.close()
	st, err := f.stat()
	if err != nil {
		return Entry{}, nil, err
	}
	if !st.isReg() {
		return Entry{}, nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRuleFile))
	if err != nil {
		return Entry{}, nil, err
	}
	sum := blake3.Sum256(data)
	return entryFromStat(rel, st, Digest(sum[:]), ""), data, nil
}

func entryFromStat(rel string, st fileStat, hash Digest, target string) Entry {
	t := TypeFile
	if st.isLink() {
		t = TypeSymlink
	}
	return Entry{Path: rel, Type: t, Size: st.size, MtimeNs: st.mtime, CtimeNs: st.ctime,
		Ino: st.ino, Mode: st.mode & 0o7777, Hash: hash, Target: target}
}

func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
}

func dirsOf(recs []dirRec) []Dir {
	out := make([]Dir, len(recs))
	for i := range recs {
		out[i] = recs[i].Dir
	}
	return out
}

// warnings collects per-path problems, capped at maxWarnings.
type warnings struct {
	mu   sync.Mutex
	list []string
	more int
}

func (w *warnings) add(s string) {
	w.mu.Lock()
	if len(w.list) < maxWarnings {
		w.list = append(w.list, s)
	} else {
		w.more++
	}
	w.mu.Unlock()
}

func (w *warnings) result() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.list)
	if w.more > 0 {
		out = append(out, fmt.Sprintf("... and %d more", w.more))
	}
	return out
}

// --- parallel walker ---------------------------------------------------------------------

// walkStart is a directory to walk; ctx describes the directory itself.
type walkStart struct {
	ctx *dirCtx
}

// dirRec is a walked directory with the matching context of its children.
type dirRec struct {
	Dir
	ctx *dirCtx
}

type walkResult struct {
	entries  []Entry // sorted
	dirs     []dirRec
	rules    []Entry
	warnings []string
}

type walker struct {
	ctl     *scanCtl
	root    string
	rootDev uint64
	m       *matcher
	log     *slog.Logger
	reuse   func(rel string, st fileStat) (Entry, bool)
	onDir   func(rel string) // called before a directory is read (the watcher adds its watch)
	workers int

	states chan *workerState // pool of per-worker scratch; also the concurrency limit
	all    []*workerState
	wg     sync.WaitGroup
	warn   warnings
}

type workerState struct {
	nameBuf []byte
	dirBuf  []byte
	hashBuf []byte
	hasher  *blake3.Hasher
	entries []Entry
	dirs    []dirRec
	rules   []Entry
}

func newWalker(ctl *scanCtl, root string, m *matcher, opt ScanOptions) *walker {
	w := &walker{ctl: ctl, root: root, m: m, log: opt.logger(), workers: opt.workers()}
	if d, err := openRoot(root); err == nil {
		if st, err := d.stat(); err == nil {
			w.rootDev = st.dev
		}
		d.close()
	}
	w.states = make(chan *workerState, w.workers)
	for range w.workers {
		s := &workerState{dirBuf: make([]byte, 32<<10), hashBuf: make([]byte, 128<<10), hasher: blake3.New()}
		w.all = append(w.all, s)
		w.states <- s
	}
	return w
}

func (w *walker) abs(rel string) string {
	if rel == "" {
		return w.root
	}
	return w.root + "/" + rel
}

// run walks every start directory and returns the merged, sorted result.
func (w *walker) run(starts []walkStart) (walkResult, error) {
	for _, s := range starts {
		w.spawn(func(ws *workerState) { w.walkDir(ws, s.ctx) })
	}
	w.wg.Wait()
	if err := w.ctl.errNow(); err != nil {
		return walkResult{}, err
	}
	var res walkResult
	n := 0
	for _, s := range w.all {
		n += len(s.entries)
	}
	res.entries = make([]Entry, 0, n)
	for _, s := range w.all {
		res.entries = append(res.entries, s.entries...)
		res.dirs = append(res.dirs, s.dirs...)
		res.rules = append(res.rules, s.rules...)
	}
	sortEntries(res.entries)
	slices.SortFunc(res.dirs, func(a, b dirRec) int { return strings.Compare(a.Path, b.Path) })
	sortEntries(res.rules)
	res.warnings = w.warn.result()
	return res, nil
}

// spawn runs f on a pooled worker state in a new goroutine.
func (w *walker) spawn(f func(ws *workerState)) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ws := <-w.states
		defer func() { w.states <- ws }()
		if w.ctl.stopped() {
			return
		}
		f(ws)
	}()
}

type pendingFile struct {
	name string
	st   fileStat
}

// sharedDir is a directory handle shared by the hash batches of one directory.
type sharedDir struct {
	d    *dirHandle
	refs atomic.Int32
}

func (s *sharedDir) release() {
	if s.refs.Add(-1) == 0 {
		s.d.close()
	}
}

const hashBatchBytes = 1 << 20

func (w *walker) walkDir(ws *workerState, dc *dirCtx) {
	rel := dc.rel
	if w.onDir != nil {
		w.onDir(rel)
	}
	ctl := w.ctl
	// unreadable records a directory that could not be read as always-changed, so Check
	// retries it, and as unreadable, so no one takes its absence for a deletion.
	unreadable := func(err error) {
		if ctl.pathErr(rel, err) {
			return
		}
		w.warn.add(fmt.Sprintf("%s/: %v", rel, err))
		ctl.noteUnreadable(dirKey(rel))
		ws.dirs = append(ws.dirs, dirRec{Dir: Dir{Path: rel, MtimeNs: -1}, ctx: dc})
	}
	var d *dirHandle
	err := ctl.inject(opOpenDir, rel)
	switch {
	case err != nil:
	case rel == "":
		d, err = openRoot(w.root)
	default:
		d, err = openDir(w.abs(rel))
	}
	if err != nil {
		if !isNotExist(err) && !isNotDirOrLink(err) {
			unreadable(err)
		}
		return
	}
	sd := &sharedDir{d: d}
	sd.refs.Store(1)
	defer sd.release()
	st, err := d.stat()
	if err != nil {
		unreadable(err)
		return
	}
	if st.dev != w.rootDev {
		if fs := d.pseudoFS(); fs != "" {
			w.warn.add(fmt.Sprintf("%s/: a %s pseudo file system, not fingerprinted", rel, fs))
			return
		}
	}
	if !ctl.addFiles(1) {
		return
	}
	type dent struct {
		name string
		typ  uint8
	}
	var list []dent
	hasIgnore := false
	maxList := int(min(ctl.lim.MaxFiles, 1<<30))
	err = ctl.inject(opReadDir, rel)
	if err == nil {
		err = d.readDir(ws.dirBuf, func(name string, typ uint8) bool {
			if name == ".gitignore" {
				hasIgnore = true
			}
			list = append(list, dent{name, typ})
			// Stop listing when the scan ends, and a directory with more names than the
			// whole bound: its listing alone would hold them all in memory.
			return len(list) <= maxList && !ctl.stopped()
		})
	}
	if err != nil {
		unreadable(err)
		return
	}
	if len(list) > maxList {
		ctl.fail(&LimitError{Root: w.root, Limit: "maxFiles", Value: ctl.lim.MaxFiles, Path: dirKey(rel)})
		return
	}
	if hasIgnore && w.m.spec.Gitignore {
		e, data, err := readRuleFile(d, ".gitignore", joinRel(rel, ".gitignore"))
		if err == nil {
			ws.rules = append(ws.rules, e)
			nc := *dc
			nc.chain = dc.chain.with(parseIgnore(rel, data))
			dc = &nc
		} else if !isNotExist(err) && !isNotDirOrLink(err) {
			w.warn.add(fmt.Sprintf("%s: %v", joinRel(rel, ".gitignore"), err))
		}
	}
	ws.dirs = append(ws.dirs, dirRec{Dir: Dir{Path: rel, MtimeNs: st.mtime, Ino: st.ino}, ctx: dc})

	var batch []pendingFile
	batchBytes := int64(0)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		b := batch
		batch, batchBytes = nil, 0
		sd.refs.Add(1)
		w.spawn(func(ws *workerState) {
			defer sd.release()
			for _, f := range b {
				w.hashInto(ws, sd.d, rel, f)
			}
		})
	}
	for _, de := range list {
		if ctl.stopped() {
			return
		}
		typ := de.typ
		var fst fileStat
		haveStat := false
		if typ != dtDir && typ != dtReg && typ != dtLnk {
			if typ != dtUnknown {
				continue // fifo, socket, device
			}
			fst, err = d.lstat(de.name)
			if err != nil {
				continue
			}
			haveStat = true
			switch {
			case fst.isDir():
				typ = dtDir
			case fst.isReg():
				typ = dtReg
			case fst.isLink():
				typ = dtLnk
			default:
				continue
			}
		}
		if typ == dtDir {
			ok, inclAll := w.m.child(dc, de.name, true)
			if ok {
				child := &dirCtx{rel: joinRel(rel, de.name), inclAll: inclAll, chain: dc.chain}
				w.spawn(func(ws *workerState) { w.walkDir(ws, child) })
			}
			continue
		}
		if ok, _ := w.m.child(dc, de.name, false); !ok {
			continue
		}
		if !ctl.addFiles(1) {
			return
		}
		if typ == dtReg && !haveStat && w.reuse == nil {
			// Nothing to reuse: skip the lstat, hashEntry's fstat of the open file is the stat.
			batch = append(batch, pendingFile{name: de.name})
			batchBytes += hashBatchBytes / 32
			if batchBytes >= hashBatchBytes {
				flush()
			}
			continue
		}
		if !haveStat {
			fst, err = d.lstat(de.name)
			if err != nil {
				if !isNotExist(err) && !ctl.pathErr(joinRel(rel, de.name), err) {
					w.warn.add(fmt.Sprintf("%s: %v", joinRel(rel, de.name), err))
					ctl.noteUnreadable(joinRel(rel, de.name))
				}
				continue
			}
		}
		crel := joinRel(rel, de.name)
		switch {
		case fst.isLink():
			if e, ok := w.reused(crel, fst); ok {
				ws.entries = append(ws.entries, e)
				continue
			}
			target, err := d.readlink(de.name)
			if err != nil {
				if !isNotExist(err) && !ctl.pathErr(crel, err) {
					w.warn.add(fmt.Sprintf("%s: %v", crel, err))
					ctl.noteUnreadable(crel)
				}
				continue
			}
			ws.entries = append(ws.entries, entryFromStat(crel, fst, nil, target))
		case fst.isReg():
			if e, ok := w.reused(crel, fst); ok {
				ws.entries = append(ws.entries, e)
				continue
			}
			batch = append(batch, pendingFile{de.name, fst})
			batchBytes += fst.size
			if batchBytes >= hashBatchBytes {
				flush()
			}
		case fst.isDir():
			// A directory that getdents reported as something else: it was replaced.
			ok, inclAll := w.m.child(dc, de.name, true)
			if ok {
				child := &dirCtx{rel: crel, inclAll: inclAll, chain: dc.chain}
				w.spawn(func(ws *workerState) { w.walkDir(ws, child) })
			}
		}
	}
	// The last batch is hashed here, on this worker.
	for _, f := range batch {
		w.hashInto(ws, d, rel, f)
	}
}

func (w *walker) reused(rel string, st fileStat) (Entry, bool) {
	if w.reuse == nil {
		return Entry{}, false
	}
	return w.reuse(rel, st)
}

func (w *walker) hashInto(ws *workerState, d *dirHandle, dirRel string, f pendingFile) {
	if w.ctl.stopped() {
		return
	}
	crel := joinRel(dirRel, f.name)
	e, err := hashEntry(d, f.name, crel, ws, w.ctl)
	if err != nil {
		if isNotExist(err) || isNotDirOrLink(err) || errors.Is(err, errNotRegular) || errors.Is(err, errScanStopped) {
			return // deleted or replaced since it was listed; the directory's mtime moved
		}
		if w.ctl.pathErr(crel, err) {
			return
		}
		w.warn.add(fmt.Sprintf("%s: %v", crel, err))
		st := f.st
		if st.mode == 0 {
			if st, err = d.lstat(f.name); err != nil {
				return
			}
		}
		e = entryFromStat(crel, st, nil, "")
	}
	ws.entries = append(ws.entries, e)
}

// errNotRegular says a path we meant to hash is no longer a regular file.
var errNotRegular = errors.New("not a regular file")

// errScanStopped: hashing stopped because the scan is ending (its ctl says why).
var errScanStopped = errors.New("scan stopped")

// sparseMin is the smallest file worth the SEEK_DATA/SEEK_HOLE walk when it has holes.
const sparseMin = 1 << 20

// hashEntry opens name in d, fstats it and hashes its content: the st_size bytes the fstat
// promised (a file that grows while it is hashed has moved its mtime, so the next check sees
// it as changed). The stat recorded is the one taken before reading. The bytes are counted
// against ctl's MaxBytes before the first read, and ctl is polled between reads.
func hashEntry(d *dirHandle, name, rel string, ws *workerState, ctl *scanCtl) (Entry, error) {
	if err := ctl.inject(opOpenFile, rel); err != nil {
		return Entry{}, err
	}
	f, err := d.openFile(name)
	if err != nil {
		return Entry{}, err
	}
	defer f.close()
	st, err := f.stat()
	if err != nil {
		return Entry{}, err
	}
	if !st.isReg() {
		return Entry{}, errNotRegular
	}
	if !ctl.reserveBytes(st.size, rel) {
		return Entry{}, errScanStopped
	}
	h := ws.hasher
	h.Reset()
	if err := hashContent(f, st, rel, ws, ctl); err != nil {
		return Entry{}, err
	}
	return entryFromStat(rel, st, Digest(h.Sum(make([]byte, 0, 32))), ""), nil
}

// hashContent writes f's first st.size bytes to ws.hasher.
func hashContent(f *fileHandle, st fileStat, rel string, ws *workerState, ctl *scanCtl) error {
	if st.size >= sparseMin && st.sparse() {
		done, err := hashSparse(f, st.size, rel, ws, ctl)
		if done || err != nil {
			return err
		}
	}
	h, buf := ws.hasher, ws.hashBuf
	for total := int64(0); total < st.size; {
		if ctl.stopped() {
			return errScanStopped
		}
		if err := ctl.inject(opRead, rel); err != nil {
			return err
		}
		n, err := f.Read(buf[:min(int64(len(buf)), st.size-total)])
		if n > 0 {
			_, _ = h.Write(buf[:n])
			total += int64(n)
		}
		if err == io.EOF {
			break // it shrank since the fstat; so did its mtime move
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// hashSparse hashes a file with holes: the data extents are read (pread), the holes are
// hashed as the zeros they read as without reading them, so the hash is that of the content
// whatever is allocated. done=false: SEEK_DATA is not supported, nothing was hashed.
func hashSparse(f *fileHandle, size int64, rel string, ws *workerState, ctl *scanCtl) (done bool, err error) {
	h, buf := ws.hasher, ws.hashBuf
	zeros := func(n int64) error {
		clear(buf)
		for n > 0 {
			if ctl.stopped() {
				return errScanStopped
			}
			k := min(int64(len(buf)), n)
			_, _ = h.Write(buf[:k])
			n -= k
		}
		return nil
	}
	for off := int64(0); off < size; {
		data, err := f.seekData(off)
		switch {
		case err == nil:
			data = min(data, size)
		case isNoData(err):
			data = size
		case off == 0:
			return false, nil
		default:
			return true, err
		}
		if err := zeros(data - off); err != nil {
			return true, err
		}
		if data >= size {
			break
		}
		hole, err := f.seekHole(data)
		if err != nil {
			return true, err
		}
		hole = min(max(hole, data+1), size)
		for p := data; p < hole; {
			if ctl.stopped() {
				return true, errScanStopped
			}
			if err := ctl.inject(opRead, rel); err != nil {
				return true, err
			}
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-p)], p)
			if n > 0 {
				_, _ = h.Write(buf[:n])
				p += int64(n)
			}
			if err == io.EOF {
				return true, nil // it shrank since the fstat; so did its mtime move
			}
			if err != nil {
				return true, err
			}
		}
		off = hole
	}
	return true, nil
}
