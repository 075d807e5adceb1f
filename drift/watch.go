package drift

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/zeebo/blake3"
)

// ChangeKind says how a path now stands against the base manifest.
type ChangeKind string

const (
	KindChanged  ChangeKind = "changed"  // in base, content/mode/target now differ
	KindAdded    ChangeKind = "added"    // not in base, exists now
	KindDeleted  ChangeKind = "deleted"  // in base, gone now
	KindRenamed  ChangeKind = "renamed"  // not in base, has the content of From, a base path now gone
	KindRestored ChangeKind = "restored" // equal to base again (or gone again, if base lacks it): no longer drift
)

// Change is one path whose state against the base changed since the previous batch.
type Change struct {
	Path string     `json:"path"`
	Kind ChangeKind `json:"kind"`
	From string     `json:"from,omitempty"` // KindRenamed: the base path it came from
}

// Batch is what a Watcher emits after a settle window (or a rescan).
type Batch struct {
	Changes []Change `json:"changes"`
	Drifted bool     `json:"drifted"` // anything differs from the base now
	// Rescan: the batch comes from a full cold check rather than events (initial scan,
	// inotify overflow, watch limit, ignore rules changed); Reason says which.
	Rescan bool   `json:"rescan,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Stopped: the watch could not go on (file descriptors or memory ran out, inotify failed,
	// the tree grew past its Limits; Reason says which) and this is its last batch. Status
	// and Manifest answer an error matching ErrStopped from then on.
	Stopped bool `json:"stopped,omitempty"`
}

// WatchOptions tune Watch.
type WatchOptions struct {
	// Debounce is the settle window: a batch is processed once no event arrived for this
	// long (and at the latest 10 windows after the first event). Default 20 ms.
	Debounce time.Duration
	// PollInterval is how often a degraded watch (directories that could not be watched,
	// e.g. the inotify watch limit was hit) re-checks the whole tree. Default 2 s.
	PollInterval time.Duration
	Logger       *slog.Logger
	Workers      int // 0 = GOMAXPROCS

	addWatch func(path string) error // tests: replaces fsnotify's Add (to simulate ENOSPC)
	fault    faultFunc               // tests: fault injection at every resource-using step
}

// Watcher keeps a tree's drift against a base manifest up to date from inotify events.
type Watcher struct {
	spec  Spec
	m     *matcher
	base  *Manifest
	opt   WatchOptions
	log   *slog.Logger
	emit  func(Batch)
	fsw   *fsnotify.Watcher
	grace time.Duration

	// ctx bounds the watch's own scans: Close cancels it, so a rescan in progress ends
	// within milliseconds.
	ctx    context.Context
	cancel context.CancelFunc
	// stopped is closed when the watch stopped by itself (stopErr says why).
	stopped  chan struct{}
	stopOnce sync.Once
	stopErr  error

	cookieDir string
	cookieSeq atomic.Uint64
	cookieMu  sync.Mutex
	cookies   map[string]chan struct{}

	// Shared between the event loop and the processor.
	dmu   sync.Mutex
	dirty map[string]int64 // rel path -> time of its last event (unix ns)
	// gone holds the paths an event said were removed or renamed away: a directory found at
	// such a path is another one, even when it got the same inode number back (ext4 and tmpfs
	// reuse them at once), so it must be watched and listed anew.
	gone         map[string]bool
	lastEvent    int64
	firstPending int64
	rescanWhy    string
	fatal        error // the event loop cannot go on: stop the watch
	kick         chan struct{}

	inject chan error // tests: errors injected into the event loop
	reqs   chan request
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once

	// Owned by the processor goroutine.
	st        *wstate
	baseIdx   map[string]*Entry
	drift     map[string]bool
	unwatched map[string]error // directories whose watch could not be added
	warn      []string
	// retry holds paths that could not be read (a directory that could not be listed, a file
	// that could not be hashed): they are looked at again at every Status and poll, so the
	// state catches up once they are readable.
	retry map[string]bool
}

type wentry struct {
	Entry
	verified int64 // coarse time before it was last stat'ed/hashed
}

type wdir struct {
	ctx   *dirCtx
	mtime int64
	ino   uint64
}

type wstate struct {
	entries map[string]*wentry
	dirs    map[string]*wdir
	rules   map[string]Entry
}

type request struct {
	manifest bool
	resp     chan response
}

type response struct {
	rep Report
	man *Manifest
}

// Watch starts watching spec's tree, reporting drift against base (nil: against the tree
// as first scanned). It adds one inotify watch per selected directory (ignore rules are
// applied first, so ignored trees cost no watch), scans the tree incrementally against
// base, emits an initial batch (Rescan true, Reason "initial scan"), then emits a batch
// for every settled burst of changes. ctx bounds only the setup; the watch runs until
// Close. emit is called from one goroutine, one batch at a time; it must not block for
// long nor call the Watcher's methods.
func Watch(ctx context.Context, spec Spec, base *Manifest, opt WatchOptions, emit func(Batch)) (*Watcher, error) {
	nspec, err := spec.normalized()
	if err != nil {
		return nil, err
	}
	if opt.Debounce <= 0 {
		opt.Debounce = 20 * time.Millisecond
	}
	if opt.PollInterval <= 0 {
		opt.PollInterval = 2 * time.Second
	}
	if emit == nil {
		emit = func(Batch) {}
	}
	w := &Watcher{
		spec:    nspec,
		m:       newMatcher(nspec),
		base:    base,
		opt:     opt,
		log:     opt.Logger,
		emit:    emit,
		cookies: map[string]chan struct{}{},
		dirty:   map[string]int64{},
		gone:    map[string]bool{},
		kick:    make(chan struct{}, 1),
		inject:  make(chan error, 1),
		reqs:    make(chan request),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
		drift:   map[string]bool{},
		retry:   map[string]bool{},
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.grace = min(max(3*opt.Debounce, 30*time.Millisecond), 250*time.Millisecond)
	err = w.injectFault(opInotifyInit, nspec.Root)
	if err == nil {
		w.fsw, err = fsnotify.NewBufferedWatcher(4096)
	}
	if err != nil {
		if isResource(err) {
			return nil, &resourceError{op: "drift watch " + nspec.Root, err: err, hint: inotifyInitHint(err)}
		}
		return nil, fmt.Errorf("drift watch %s: %w", nspec.Root, err)
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	err = w.injectFault(opSync, "")
	if err == nil {
		w.cookieDir, err = os.MkdirTemp("", "ckptd-drift-sync-")
	}
	if err == nil {
		err = w.fsw.Add(w.cookieDir)
		if rel, rerr := filepath.Rel(nspec.Root, w.cookieDir); rerr == nil && filepath.IsLocal(rel) {
			w.m.skip = filepath.ToSlash(rel) // the root contains the temp dir: keep our cookies out
		}
	}
	if err != nil {
		w.cancel()
		_ = w.fsw.Close()
		if w.cookieDir != "" {
			_ = os.RemoveAll(w.cookieDir)
		}
		if isResource(err) {
			return nil, newResourceError("drift watch "+nspec.Root+": sync directory", err)
		}
		return nil, fmt.Errorf("drift watch %s: sync directory: %w", nspec.Root, err)
	}
	w.wg.Add(1)
	go w.loop()

	st, warn, err := w.scanAll(ctx, base)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.st = st
	w.warn = warn
	w.noteRetries(st)
	if w.base == nil {
		w.base = w.snapshot(coarseNow())
	}
	w.baseIdx = make(map[string]*Entry, len(w.base.Entries))
	for i := range w.base.Entries {
		w.baseIdx[w.base.Entries[i].Path] = &w.base.Entries[i]
	}
	initial := map[string]*Entry{}
	for p, e := range w.baseIdx {
		initial[p] = e
	}
	for p := range st.entries {
		if _, ok := initial[p]; !ok {
			initial[p] = nil
		}
	}
	changes := w.settle(initial)
	w.wg.Add(1)
	go w.process(Batch{Changes: changes, Drifted: len(w.drift) > 0, Rescan: true, Reason: w.degradedReason("initial scan")})
	return w, nil
}

// injectFault consults the fault-injection hook of tests.
func (w *Watcher) injectFault(op, path string) error {
	if w.opt.fault == nil {
		return nil
	}
	return w.opt.fault(op, path)
}

func (w *Watcher) scanOptions() ScanOptions {
	return ScanOptions{Workers: w.opt.Workers, Logger: w.log, fault: w.opt.fault}
}

// add adds the inotify watch of directory rel.
func (w *Watcher) add(rel string) error {
	if err := w.injectFault(opInotifyAdd, rel); err != nil {
		return err
	}
	if w.opt.addWatch != nil {
		if err := w.opt.addWatch(w.abs(rel)); err != nil {
			return err
		}
	}
	return w.fsw.Add(w.abs(rel))
}

func (w *Watcher) abs(rel string) string {
	if rel == "" {
		return w.spec.Root
	}
	return w.spec.Root + "/" + rel
}

// Close stops the watch. It is safe to call more than once.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		w.cancel() // a scan in progress ends now
		close(w.done)
		err = w.fsw.Close()
		w.wg.Wait()
		_ = os.RemoveAll(w.cookieDir)
	})
	return err
}

// halt stops the watch by itself (the processor goroutine only): its last batch says why,
// and the inotify instance is released at once (file descriptors may be what ran out).
func (w *Watcher) halt(err error) {
	w.stopOnce.Do(func() {
		w.stopErr = fmt.Errorf("%w: %w", ErrStopped, err)
		w.log.Warn("drift: watch stopped", "root", w.spec.Root, "err", err)
		w.send(Batch{Drifted: len(w.drift) > 0, Rescan: true, Stopped: true,
			Reason: "watch stopped: " + err.Error() + "; drift/status checks the disk instead"})
		close(w.stopped)
		w.cancel()
		_ = w.fsw.Close()
	})
}

// fatalErr tells the processor the watch cannot go on (from the event loop).
func (w *Watcher) fatalErr(err error) {
	w.dmu.Lock()
	if w.fatal == nil {
		w.fatal = err
	}
	w.dmu.Unlock()
	w.poke()
}

// --- event loop: no I/O, only bookkeeping -----------------------------------------------

func (w *Watcher) loop() {
	defer w.wg.Done()
	root := w.spec.Root
	cookiePrefix := w.cookieDir + "/"
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				w.fatalErr(errors.New("the inotify event stream ended"))
				return
			}
			if err := w.injectFault(opInotifyRead, ev.Name); err != nil {
				w.fatalErr(fmt.Errorf("reading inotify events: %w", err))
				return
			}
			if strings.HasPrefix(ev.Name, cookiePrefix) {
				if ev.Has(fsnotify.Create) {
					w.cookieMu.Lock()
					if ch := w.cookies[ev.Name[len(cookiePrefix):]]; ch != nil {
						close(ch)
						delete(w.cookies, ev.Name[len(cookiePrefix):])
					}
					w.cookieMu.Unlock()
				}
				continue
			}
			var rel string
			switch {
			case ev.Name == root:
				rel = ""
			case strings.HasPrefix(ev.Name, root+"/"):
				rel = ev.Name[len(root)+1:]
			default:
				continue
			}
			now := time.Now().UnixNano()
			w.dmu.Lock()
			if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				w.gone[rel] = true
			}
			w.dirty[rel] = now
			w.lastEvent = now
			if w.firstPending == 0 {
				w.firstPending = now
			}
			w.dmu.Unlock()
			w.poke()
		case err, ok := <-w.fsw.Errors:
			if !ok {
				w.fatalErr(errors.New("the inotify event stream ended"))
				return
			}
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				// A failed read of the inotify descriptor: events are lost for good.
				w.fatalErr(fmt.Errorf("reading inotify events: %w", err))
				return
			}
			w.noteError(err)
		case err := <-w.inject:
			w.noteError(err)
		}
	}
}

func (w *Watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Watcher) noteError(err error) {
	reason := "inotify event queue overflowed"
	if !errors.Is(err, fsnotify.ErrEventOverflow) {
		reason = "watch error: " + err.Error()
	}
	w.dmu.Lock()
	if w.rescanWhy == "" {
		w.rescanWhy = reason
	}
	w.lastEvent = time.Now().UnixNano()
	if w.firstPending == 0 {
		w.firstPending = w.lastEvent
	}
	w.dmu.Unlock()
	w.poke()
}

// --- processor ---------------------------------------------------------------------------

func (w *Watcher) process(initial Batch) {
	defer w.wg.Done()
	w.send(initial)
	debounce := w.opt.Debounce
	maxDelay := 10 * debounce
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	var poll <-chan time.Time
	var ticker *time.Ticker
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		select {
		case <-w.stopped:
			return
		default:
		}
		if polling := len(w.unwatched) > 0 || len(w.retry) > 0; polling && ticker == nil {
			ticker = time.NewTicker(w.opt.PollInterval)
			poll = ticker.C
		} else if !polling && ticker != nil {
			ticker.Stop()
			ticker, poll = nil, nil
		}
		select {
		case <-w.done:
			return
		case <-w.kick:
			if !armed {
				timer.Reset(debounce)
				armed = true
			}
		case <-timer.C:
			armed = false
			w.dmu.Lock()
			last, first := w.lastEvent, w.firstPending
			w.dmu.Unlock()
			now := time.Now().UnixNano()
			if first != 0 && now-last < int64(debounce) && now-first < int64(maxDelay) {
				timer.Reset(time.Duration(int64(debounce) - (now - last)))
				armed = true
				continue
			}
			if again := w.flush(false, false); again > 0 {
				timer.Reset(again)
				armed = true
			}
		case <-poll:
			if len(w.unwatched) > 0 {
				w.rescanQuiet("polling")
			} else if again := w.flush(false, true); again > 0 && !armed {
				timer.Reset(again)
				armed = true
			}
		case r := <-w.reqs:
			if len(w.unwatched) > 0 {
				w.rescanQuiet("status requested")
			}
			w.flush(true, true)
			select {
			case <-w.stopped:
				close(r.resp) // the caller answers ErrStopped
			default:
				r.resp <- w.answer(r)
			}
		}
	}
}

func (w *Watcher) degradedReason(what string) string {
	if len(w.unwatched) == 0 {
		return what
	}
	var one string
	var why error
	for p, err := range w.unwatched {
		one, why = p, err
		break
	}
	hint := ""
	if isNoSpace(why) {
		hint = " (inotify watch limit, fs.inotify.max_user_watches)"
	}
	return fmt.Sprintf("%s; %d directories unwatched (e.g. %q: %v%s), polling every %v", what,
		len(w.unwatched), "/"+one, why, hint, w.opt.PollInterval)
}

func (w *Watcher) send(b Batch) {
	if len(b.Changes) == 0 && !b.Rescan {
		return
	}
	w.emit(b)
}

// flush processes the dirty paths (or a pending rescan), with retry the paths that could not
// be read before. Not forced (timer, poll), a tracked file that vanished only moments ago is
// given a grace period (an editor may be mid-save); the returned duration, if positive, is
// when to look again.
func (w *Watcher) flush(forced, retry bool) time.Duration {
	w.dmu.Lock()
	dirty := w.dirty
	why := w.rescanWhy
	fatal := w.fatal
	w.dirty = map[string]int64{}
	w.rescanWhy = ""
	w.firstPending = 0
	w.dmu.Unlock()
	if fatal != nil {
		w.halt(fatal)
		return 0
	}
	if why != "" {
		w.rescan(why)
		return 0
	}
	if retry && len(w.retry) > 0 {
		now := time.Now().UnixNano()
		for p := range w.retry {
			if _, ok := dirty[p]; !ok {
				dirty[p] = now - int64(w.grace)
			}
		}
	}
	if len(dirty) == 0 {
		return 0
	}
	changes, why, again, err := w.applyDirty(dirty, forced)
	if err != nil {
		w.halt(err)
		return 0
	}
	if why != "" {
		w.rescan(why)
		return 0
	}
	w.send(Batch{Changes: changes, Drifted: len(w.drift) > 0})
	return again
}

// Status answers from the watch's state: it first syncs (a cookie file created in a
// private directory watched by the same inotify instance; once its event has passed the
// loop, every earlier event has too) and processes what is still dirty.
func (w *Watcher) Status(ctx context.Context) (Report, error) {
	r, err := w.call(ctx, false)
	return r.rep, err
}

// Manifest returns the current state as a manifest (after the same sync as Status), e.g.
// to record it with a checkpoint without a new scan.
func (w *Watcher) Manifest(ctx context.Context) (*Manifest, error) {
	r, err := w.call(ctx, true)
	return r.man, err
}

func (w *Watcher) call(ctx context.Context, manifest bool) (response, error) {
	t0 := time.Now()
	select {
	case <-w.done:
		return response{}, ErrClosed
	case <-w.stopped:
		return response{}, w.stopErr
	default:
	}
	if err := w.sync(ctx); err != nil {
		return response{}, err
	}
	req := request{manifest: manifest, resp: make(chan response, 1)}
	select {
	case w.reqs <- req:
	case <-w.done:
		return response{}, ErrClosed
	case <-w.stopped:
		return response{}, w.stopErr
	case <-ctx.Done():
		return response{}, ctx.Err()
	}
	select {
	case r, ok := <-req.resp:
		if !ok {
			return response{}, w.stopErr
		}
		r.rep.Elapsed = time.Since(t0)
		return r, nil
	case <-w.done:
		return response{}, ErrClosed
	}
}

func (w *Watcher) sync(ctx context.Context) error {
	name := strconv.FormatUint(w.cookieSeq.Add(1), 10)
	ch := make(chan struct{})
	w.cookieMu.Lock()
	w.cookies[name] = ch
	w.cookieMu.Unlock()
	defer func() {
		w.cookieMu.Lock()
		delete(w.cookies, name)
		w.cookieMu.Unlock()
	}()
	p := filepath.Join(w.cookieDir, name)
	err := w.injectFault(opSync, p)
	var f *os.File
	if err == nil {
		f, err = os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	}
	if err != nil {
		if isResource(err) {
			return newResourceError("drift watch sync", err)
		}
		return fmt.Errorf("drift watch sync: %w", err)
	}
	_ = f.Close()
	defer os.Remove(p)
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	select {
	case <-ch:
		return nil
	case <-w.done:
		return ErrClosed
	case <-w.stopped:
		return w.stopErr
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout.C:
		// The cookie never came back: events are being lost. Force a rescan.
		w.noteError(errors.New("sync cookie event not delivered"))
		return nil
	}
}

func (w *Watcher) answer(r request) response {
	if r.manifest {
		return response{man: w.snapshot(coarseNow())}
	}
	return response{rep: w.report()}
}

func (w *Watcher) report() Report {
	var rep Report
	paths := make([]string, 0, len(w.drift))
	for p := range w.drift {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		b := w.baseIdx[p]
		var c *Entry
		if e := w.st.entries[p]; e != nil {
			c = &e.Entry
		}
		switch {
		case b != nil && c != nil:
			rep.Changed = append(rep.Changed, change(b, c))
		case b != nil:
			rep.Deleted = append(rep.Deleted, change(b, nil))
		case c != nil:
			rep.Added = append(rep.Added, change(nil, c))
		}
	}
	rep.Drifted = len(paths) > 0
	rep.FilesChecked = len(w.st.entries)
	rep.Warnings = slices.Clone(w.warn)
	if len(w.unwatched) > 0 {
		rep.FullScan, rep.Reason = true, w.degradedReason("watch degraded")
	}
	return rep
}

// snapshot builds a manifest of the current state. Its ScanStartNs is the sync time,
// lowered to the verification time of any entry that was racy when last hashed, so a
// later Check re-hashes exactly the entries that could hide a same-tick change.
func (w *Watcher) snapshot(now int64) *Manifest {
	m := &Manifest{Version: ManifestVersion, Algorithm: AlgorithmBLAKE3, Spec: w.spec, ScanStartNs: now}
	m.Entries = make([]Entry, 0, len(w.st.entries))
	for _, e := range w.st.entries {
		m.Entries = append(m.Entries, e.Entry)
		if e.racy(e.verified) && e.verified < m.ScanStartNs {
			m.ScanStartNs = e.verified
		}
	}
	sortEntries(m.Entries)
	for p, d := range w.st.dirs {
		m.Dirs = append(m.Dirs, Dir{Path: p, MtimeNs: d.mtime, Ino: d.ino})
		if _, unw := w.unwatched[p]; unw {
			m.Dirs[len(m.Dirs)-1].MtimeNs = -1
		}
	}
	slices.SortFunc(m.Dirs, func(a, b Dir) int { return strings.Compare(a.Path, b.Path) })
	for _, r := range w.st.rules {
		m.Rules = append(m.Rules, r)
	}
	sortEntries(m.Rules)
	m.Warnings = slices.Clone(w.warn)
	return m
}

// --- scanning and applying changes -------------------------------------------------------

// scanAll walks the whole tree, adding a watch to each directory before reading it. It is
// bounded by the spec's Limits and by ctx.
func (w *Watcher) scanAll(ctx context.Context, prev *Manifest) (*wstate, []string, error) {
	verified := coarseNow()
	ctl := newScanCtl(ctx, w.spec.Root, w.spec.Limits, w.opt.fault)
	wk := newWalker(ctl, w.spec.Root, w.m, w.scanOptions())
	if prev != nil && prev.Spec.Root == w.spec.Root && prev.Algorithm == AlgorithmBLAKE3 {
		wk.reuse = prevReuse(prev)
	} else if w.st != nil {
		wk.reuse = w.stateReuse(nil)
	}
	unwatched := map[string]error{}
	var umu sync.Mutex
	wk.onDir = func(rel string) {
		if err := w.add(rel); err != nil && !isNotExist(err) {
			umu.Lock()
			unwatched[rel] = err
			umu.Unlock()
		}
	}
	rootCtx := w.m.rootCtx()
	var rules []Entry
	if w.spec.Gitignore {
		rootCtx.chain, rules = loadInfoExclude(w.spec.Root, &wk.warn)
	}
	res, err := wk.run([]walkStart{{ctx: rootCtx}})
	if ferr := ctl.finish(); ferr != nil {
		err = ferr
	}
	if err != nil {
		return nil, nil, err
	}
	if _, err := lstatPath(w.spec.Root); err != nil {
		unwatched[""] = fmt.Errorf("%w: %s", ErrRootNotFound, w.spec.Root) // poll until it is back
	}
	st := &wstate{entries: make(map[string]*wentry, len(res.entries)), dirs: make(map[string]*wdir, len(res.dirs)), rules: map[string]Entry{}}
	for _, e := range res.entries {
		st.entries[e.Path] = &wentry{Entry: e, verified: verified}
	}
	for _, d := range res.dirs {
		st.dirs[d.Path] = &wdir{ctx: d.ctx, mtime: d.MtimeNs, ino: d.Ino}
	}
	for _, r := range append(rules, res.rules...) {
		st.rules[r.Path] = r
	}
	w.unwatched = unwatched
	for p, err := range unwatched {
		w.log.Warn("drift: directory not watched", "dir", w.abs(p), "err", err)
	}
	return st, res.warnings, nil
}

// noteRetries starts over the set of paths to look at again: the directories of st that
// could not be read, and its files that could not be hashed.
func (w *Watcher) noteRetries(st *wstate) {
	clear(w.retry)
	for p, d := range st.dirs {
		if d.mtime < 0 {
			w.retry[p] = true
		}
	}
	for p, e := range st.entries {
		if e.Type == TypeFile && e.Hash == nil {
			w.retry[p] = true
		}
	}
}

// stateReuse looks up the current state (and, for moved directories, the removed
// entries by inode) for a file whose stat data is unchanged and that was not racy.
func (w *Watcher) stateReuse(removed map[uint64]*wentry) func(rel string, st fileStat) (Entry, bool) {
	return func(rel string, st fileStat) (Entry, bool) {
		e := w.st.entries[rel]
		if e == nil && removed != nil {
			e = removed[st.ino]
		}
		if e == nil || !e.reusable(st, e.verified) {
			return Entry{}, false
		}
		ne := e.Entry
		ne.Path = rel
		return ne, true
	}
}

// rescan replaces the state by a cold scan (re-adding every watch) and emits the
// difference as a Rescan batch, even an empty one: the client learns events were lost.
func (w *Watcher) rescan(reason string) { w.doRescan(reason, true) }

// rescanQuiet is a degraded watch's routine poll: a batch only if something changed.
func (w *Watcher) rescanQuiet(reason string) { w.doRescan(reason, false) }

func (w *Watcher) doRescan(reason string, always bool) {
	if always {
		w.log.Info("drift: rescanning", "root", w.spec.Root, "reason", reason)
	}
	old := w.st
	st, warn, err := w.scanAll(w.ctx, nil)
	if err != nil {
		if w.ctx.Err() == nil { // not closing: the watch's state cannot be kept current
			w.halt(fmt.Errorf("%s: rescan failed: %w", reason, err))
		}
		return
	}
	w.noteRetries(st)
	for p := range old.dirs {
		if _, ok := st.dirs[p]; !ok {
			_ = w.fsw.Remove(w.abs(p))
		}
	}
	touched := make(map[string]*Entry, len(old.entries))
	for p, e := range old.entries {
		touched[p] = &e.Entry
	}
	for p := range st.entries {
		if _, ok := touched[p]; !ok {
			touched[p] = nil
		}
	}
	w.st = st
	w.warn = warn
	changes := w.settle(touched)
	if always || len(changes) > 0 {
		w.send(Batch{Changes: changes, Drifted: len(w.drift) > 0, Rescan: true, Reason: w.degradedReason(reason)})
	}
}

// applyDirty brings the state up to date for the dirty paths. It returns the changes, or a
// reason to rescan instead (ignore rules changed), and when to look again at vanished
// files still in their grace period; or an error that stops the watch (a resource ran out,
// a bound was reached). A path that cannot be read now is recorded as unreadable (a file
// without a hash: a change, never "no drift") and retried later.
func (w *Watcher) applyDirty(dirty map[string]int64, forced bool) ([]Change, string, time.Duration, error) {
	verified := coarseNow()
	now := time.Now().UnixNano()
	ctl := newScanCtl(w.ctx, w.spec.Root, w.spec.Limits, w.opt.fault)
	defer ctl.finish()
	// fatal turns an error into the watch's end, unless the watch is closing anyway.
	fatal := func(err error) error {
		if w.ctx.Err() != nil {
			return nil
		}
		if ferr := ctl.errNow(); ferr != nil {
			return ferr
		}
		return err
	}
	if !ctl.addFiles(int64(len(w.st.entries) + len(w.st.dirs))) {
		return nil, "", 0, fatal(nil)
	}
	paths := make([]string, 0, len(dirty))
	for p := range dirty {
		paths = append(paths, p)
	}
	slices.Sort(paths) // parents before children
	gone := map[string]bool{}
	w.dmu.Lock()
	for _, p := range paths {
		if w.gone[p] {
			gone[p] = true
			delete(w.gone, p)
		}
	}
	w.dmu.Unlock()
	touched := map[string]*Entry{}
	touch := func(p string) {
		if _, ok := touched[p]; ok {
			return
		}
		if e := w.st.entries[p]; e != nil {
			old := e.Entry
			touched[p] = &old
		} else {
			touched[p] = nil
		}
	}
	// unknown records that tracked path p could not be read now: its content is unknown.
	unknown := func(p string, err error) {
		w.log.Debug("drift: cannot read", "path", p, "err", err)
		w.retry[p] = true
		if e := w.st.entries[p]; e != nil && (e.Hash != nil || e.Target != "") {
			touch(p)
			ne := e.Entry
			ne.Hash, ne.Target = nil, ""
			w.st.entries[p] = &wentry{Entry: ne, verified: verified}
		}
	}
	var removeDirs []string
	var starts []walkStart
	var again time.Duration
	type handle struct {
		d   *dirHandle
		err error
	}
	handles := map[string]handle{}
	defer func() {
		for _, h := range handles {
			if h.d != nil {
				h.d.close()
			}
		}
	}()
	dirHandleFor := func(rel string) (*dirHandle, error) {
		if h, ok := handles[rel]; ok {
			return h.d, h.err
		}
		var h handle
		h.err = w.injectFault(opOpenDir, rel)
		switch {
		case h.err != nil:
		case rel == "":
			h.d, h.err = openRoot(w.spec.Root)
		default:
			h.d, h.err = openDir(w.abs(rel))
		}
		handles[rel] = h
		return h.d, h.err
	}
	ws := &workerState{hashBuf: make([]byte, 128<<10), hasher: blake3.New()}
	removing := func(p string) bool {
		for _, r := range removeDirs {
			if r == "" || p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
	type lst struct {
		st  fileStat
		err error
	}
	stats := make([]lst, len(paths))
	for i, p := range paths {
		err := w.injectFault(opStat, p)
		var st fileStat
		if err == nil {
			st, err = lstatPath(w.abs(p))
		}
		if err != nil && isResource(err) {
			return nil, "", 0, fatal(newResourceError("drift watch of "+w.spec.Root+": "+displayRel(p), err))
		}
		stats[i] = lst{st, err}
		if err != nil && isNotExist(err) && !forced && w.st.entries[p] != nil && now-dirty[p] < int64(w.grace) {
			// A tracked file vanished moments ago: maybe an editor's rename-away before it
			// writes the new file. Hold the whole batch (keeping renames paired) a little.
			again = max(again, time.Duration(int64(w.grace)-(now-dirty[p])))
		}
	}
	if again > 0 {
		w.dmu.Lock()
		for p, ts := range dirty {
			if cur, ok := w.dirty[p]; !ok || cur < ts {
				w.dirty[p] = ts
			}
		}
		for p := range gone {
			w.gone[p] = true
		}
		w.dmu.Unlock()
		return nil, "", again, nil
	}
	for i, p := range paths {
		if removing(p) {
			continue
		}
		if _, isRule := w.st.rules[p]; isRule {
			return nil, "ignore file changed: " + p, 0, nil
		}
		st, err := stats[i].st, stats[i].err
		exists := err == nil
		if err != nil && !isNotExist(err) {
			// It exists, but what it is now cannot be told (its directory cannot be searched).
			unknown(p, err)
			if gone[p] { // still to be resolved when it is read again
				w.dmu.Lock()
				w.gone[p] = true
				w.dmu.Unlock()
			}
			continue
		}
		delete(w.retry, p)
		if d := w.st.dirs[p]; d != nil {
			// The same directory is up to date, unless it could not be read last time: then
			// it is walked again, like a replaced one. One removed since is replaced, whatever
			// its inode number.
			if exists && st.isDir() && st.ino == d.ino && d.mtime >= 0 && !gone[p] {
				d.mtime = st.mtime
				continue
			}
			removeDirs = append(removeDirs, p)
		}
		if p == "" {
			if exists && st.isDir() {
				starts = append(starts, walkStart{ctx: w.rootCtx()})
			}
			continue // the root itself is gone or replaced; removal handled above
		}
		parent := w.st.dirs[parentOf(p)]
		if parent == nil || removing(parentOf(p)) {
			// Not in a tracked directory (an ignored tree, or a directory being removed).
			if w.st.entries[p] != nil {
				touch(p)
				delete(w.st.entries, p)
			}
			continue
		}
		name := baseName(p)
		switch {
		case !exists || !(st.isDir() || st.isReg() || st.isLink()):
			if e := w.st.entries[p]; e != nil {
				touch(p)
				delete(w.st.entries, p)
			}
		case st.isDir():
			if w.st.entries[p] != nil {
				touch(p)
				delete(w.st.entries, p)
			}
			if ok, inclAll := w.m.child(parent.ctx, name, true); ok {
				starts = append(starts, walkStart{ctx: &dirCtx{rel: p, inclAll: inclAll, chain: parent.ctx.chain}})
			}
		default:
			if ok, _ := w.m.child(parent.ctx, name, false); !ok {
				if w.st.entries[p] != nil { // cannot happen while rules are unchanged
					touch(p)
					delete(w.st.entries, p)
				}
				continue
			}
			if name == ".gitignore" && w.spec.Gitignore {
				return nil, "ignore file added: " + p, 0, nil
			}
			e := w.st.entries[p]
			if e != nil && e.reusable(st, e.verified) {
				continue
			}
			h, err := dirHandleFor(parentOf(p))
			if err != nil {
				if isResource(err) {
					return nil, "", 0, fatal(newResourceError("drift watch of "+w.spec.Root+": "+displayRel(parentOf(p)), err))
				}
				if isNotExist(err) || isNotDirOrLink(err) {
					continue // gone or replaced again: a later event covers it
				}
				w.retry[p] = true
				touch(p)
				ne := entryFromStat(p, st, nil, "")
				w.st.entries[p] = &wentry{Entry: ne, verified: verified}
				continue
			}
			var ne Entry
			if st.isLink() {
				t, err := h.readlink(name)
				if err != nil {
					if isResource(err) {
						return nil, "", 0, fatal(newResourceError("drift watch of "+w.spec.Root+": "+p, err))
					}
					if !isNotExist(err) {
						unknown(p, err)
					}
					continue
				}
				ne = entryFromStat(p, st, nil, t)
			} else {
				ne, err = hashEntry(h, name, p, ws, ctl)
				switch {
				case err == nil:
				case errors.Is(err, errScanStopped):
					return nil, "", 0, fatal(ctl.errNow())
				case isResource(err):
					return nil, "", 0, fatal(newResourceError("drift watch of "+w.spec.Root+": "+p, err))
				case isNotExist(err) || isNotDirOrLink(err) || errors.Is(err, errNotRegular):
					continue // gone or changed type again: a later event covers it
				default:
					w.log.Debug("drift: cannot hash", "path", p, "err", err)
					w.retry[p] = true
					ne = entryFromStat(p, st, nil, "")
				}
			}
			touch(p)
			w.st.entries[p] = &wentry{Entry: ne, verified: verified}
		}
	}

	// Removals first: a moved directory keeps its inotify watch descriptor, which must be
	// dropped before the directory is watched under its new name.
	removed := map[uint64]*wentry{}
	if len(removeDirs) > 0 {
		for p, e := range w.st.entries {
			if removing(p) {
				touch(p)
				removed[e.Ino] = e
				delete(w.st.entries, p)
			}
		}
		for p := range w.st.dirs {
			if removing(p) {
				_ = w.fsw.Remove(w.abs(p))
				delete(w.st.dirs, p)
				delete(w.unwatched, p)
			}
		}
		for p := range w.st.rules {
			if removing(p) {
				return nil, "ignore file removed: " + p, 0, nil
			}
		}
	}
	if len(starts) > 0 {
		// A directory also listed as dirty under a removed parent is covered by the walk.
		starts = slices.DeleteFunc(starts, func(s walkStart) bool {
			for _, o := range starts {
				if o.ctx.rel != s.ctx.rel && (o.ctx.rel == "" || strings.HasPrefix(s.ctx.rel, o.ctx.rel+"/")) {
					return true
				}
			}
			return false
		})
		wk := newWalker(ctl, w.spec.Root, w.m, w.scanOptions())
		wk.reuse = w.stateReuse(removed)
		var umu sync.Mutex
		wk.onDir = func(rel string) { // watch first, then read: nothing created meanwhile is missed
			if err := w.add(rel); err != nil && !isNotExist(err) {
				umu.Lock()
				w.unwatched[rel] = err
				umu.Unlock()
				w.log.Warn("drift: directory not watched", "dir", w.abs(rel), "err", err)
			}
		}
		res, err := wk.run(starts)
		if err != nil {
			return nil, "", 0, fatal(err)
		}
		for _, r := range res.rules {
			w.st.rules[r.Path] = r
		}
		for _, d := range res.dirs {
			w.st.dirs[d.Path] = &wdir{ctx: d.ctx, mtime: d.MtimeNs, ino: d.Ino}
			if d.MtimeNs < 0 {
				w.retry[d.Path] = true
			}
		}
		for _, e := range res.entries {
			touch(e.Path)
			w.st.entries[e.Path] = &wentry{Entry: e, verified: verified}
			if e.Type == TypeFile && e.Hash == nil {
				w.retry[e.Path] = true
			}
		}
	}
	if n := int64(len(w.st.entries) + len(w.st.dirs)); n > ctl.lim.MaxFiles {
		return nil, "", 0, fatal(&LimitError{Root: w.spec.Root, Limit: "maxFiles", Value: ctl.lim.MaxFiles})
	}
	return w.settle(touched), "", again, nil
}

// rootCtx is the matching context of the root directory.
func (w *Watcher) rootCtx() *dirCtx {
	if d := w.st.dirs[""]; d != nil {
		return d.ctx
	}
	return w.m.rootCtx()
}

// settle updates the drift set for the touched paths (old content given, nil = absent)
// and returns the resulting changes, renames paired.
func (w *Watcher) settle(touched map[string]*Entry) []Change {
	var changes []Change
	var deleted, added []int
	for p, old := range touched {
		var cur *Entry
		if e := w.st.entries[p]; e != nil {
			cur = &e.Entry
		}
		if (old == nil) == (cur == nil) && (old == nil || sameContent(old, cur)) {
			continue // nothing a client would see (a touch, a same-bytes save)
		}
		b := w.baseIdx[p]
		var kind ChangeKind
		switch {
		case b != nil && cur != nil && sameContent(b, cur), b == nil && cur == nil:
			kind = KindRestored
			delete(w.drift, p)
		case b != nil && cur != nil:
			kind = KindChanged
			w.drift[p] = true
		case b != nil:
			kind = KindDeleted
			w.drift[p] = true
			deleted = append(deleted, len(changes))
		default:
			kind = KindAdded
			w.drift[p] = true
			added = append(added, len(changes))
		}
		changes = append(changes, Change{Path: p, Kind: kind})
	}
	// A base file that vanished while a new path with its exact content appeared: a rename.
	if len(deleted) > 0 && len(added) > 0 {
		byContent := map[string][]int{}
		for _, i := range deleted {
			b := w.baseIdx[changes[i].Path]
			byContent[contentKey(b)] = append(byContent[contentKey(b)], i)
		}
		drop := map[int]bool{}
		for _, i := range added {
			cur := &w.st.entries[changes[i].Path].Entry
			k := contentKey(cur)
			if c := byContent[k]; len(c) > 0 {
				from := changes[c[0]].Path
				byContent[k] = c[1:]
				changes[i].Kind, changes[i].From = KindRenamed, from
				drop[c[0]] = true
			}
		}
		if len(drop) > 0 {
			out := changes[:0]
			for i, c := range changes {
				if !drop[i] {
					out = append(out, c)
				}
			}
			changes = out
		}
	}
	slices.SortFunc(changes, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return changes
}

func contentKey(e *Entry) string {
	if e.Type == TypeSymlink {
		return "l" + strconv.FormatUint(uint64(e.Mode), 8) + ":" + e.Target
	}
	if e.Hash == nil {
		return "u" + e.Path // unreadable: never paired
	}
	return "f" + strconv.FormatUint(uint64(e.Mode), 8) + ":" + string(e.Hash)
}
