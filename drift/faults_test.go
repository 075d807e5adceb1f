//go:build linux

package drift

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faults is a fault-injection hook for the watcher: while on, each operation fails with
// probability p, with one of errs.
type faults struct {
	mu    sync.Mutex
	rng   *rand.Rand
	on    atomic.Bool
	p     float64
	errs  []error
	match func(op, path string) bool // nil: every operation
	count map[string]int
}

func newFaults(seed uint64, p float64, errs ...error) *faults {
	return &faults{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), p: p, errs: errs, count: map[string]int{}}
}

func (f *faults) hook(op, path string) error {
	if !f.on.Load() || (f.match != nil && !f.match(op, path)) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng.Float64() >= f.p {
		return nil
	}
	f.count[op]++
	return f.errs[f.rng.IntN(len(f.errs))]
}

func (f *faults) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprint(f.count)
}

func startFaultyWatch(t *testing.T, f *faults) (string, *Watcher, *batchLog, *Manifest) {
	t.Helper()
	root := mkTree(t, watchBase)
	age(t, root)
	spec := Spec{Root: root, Gitignore: true}
	base := scanT(t, spec, nil)
	log := &batchLog{signal: make(chan struct{}, 1)}
	w, err := Watch(context.Background(), spec, base, WatchOptions{PollInterval: 50 * time.Millisecond, fault: f.hook}, log.emit)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	log.waitFor(t, 0, func(Batch) bool { return true }) // the initial batch
	return root, w, log, base
}

// TestWatchStopsWhenResourcesRunOut: a watch that runs out of file descriptors or memory,
// whichever step it is at, stops with a last batch saying why (Stopped), never crashes;
// Status then answers ErrStopped; Close still works. (At ulimit -n 32 the daemon used to die
// of a nil-pointer panic closing a directory handle it never had.)
func TestWatchStopsWhenResourcesRunOut(t *testing.T) {
	for _, tc := range []struct {
		op  string
		err error
	}{
		{opOpenDir, syscall.EMFILE},
		{opOpenFile, syscall.EMFILE},
		{opRead, syscall.ENOMEM},
		{opStat, syscall.ENOMEM},
		{opInotifyRead, syscall.EIO},
	} {
		t.Run(tc.op, func(t *testing.T) {
			f := newFaults(1, 1, tc.err)
			f.match = func(op, _ string) bool { return op == tc.op }
			root, w, log, _ := startFaultyWatch(t, f)
			n := len(log.snapshot())
			f.on.Store(true)
			write(t, root, "sub/c.go", "package sub // edited\n")
			b := log.waitFor(t, n, func(b Batch) bool { return b.Stopped })
			t.Logf("%s: %s", tc.op, b.Reason)
			assert.Contains(t, b.Reason, "watch stopped")
			if tc.op != opInotifyRead {
				assert.Contains(t, b.Reason, tc.err.Error())
			}
			_, err := w.Status(context.Background())
			assert.ErrorIs(t, err, ErrStopped)
			_, err = w.Manifest(context.Background())
			assert.ErrorIs(t, err, ErrStopped)
			write(t, root, "a.txt", "more edits after the stop\n")
			time.Sleep(100 * time.Millisecond)
			bs := log.snapshot()
			assert.True(t, bs[len(bs)-1].Stopped, "nothing after the last batch")
			require.NoError(t, w.Close())
		})
	}
}

// TestWatchStopsAtItsLimits: a watched tree that grows past its Limits stops the watch.
func TestWatchStopsAtItsLimits(t *testing.T) {
	root := mkTree(t, watchBase)
	spec := Spec{Root: root, Gitignore: true, Limits: &Limits{MaxFiles: 20}}
	log := &batchLog{signal: make(chan struct{}, 1)}
	w, err := Watch(context.Background(), spec, nil, WatchOptions{}, log.emit)
	require.NoError(t, err)
	defer w.Close()
	for i := range 30 {
		write(t, root, fmt.Sprintf("new/f%02d", i), "x")
	}
	b := log.waitFor(t, 0, func(b Batch) bool { return b.Stopped })
	assert.Contains(t, b.Reason, "limits.maxFiles")
	_, err = w.Status(context.Background())
	assert.ErrorIs(t, err, ErrStopped)
	assert.ErrorIs(t, err, ErrLimit)

	// and one that is past them from the start does not start
	_, err = Watch(context.Background(), spec, nil, WatchOptions{}, nil)
	assert.ErrorIs(t, err, ErrLimit)
}

// TestWatchUnreadableThenReadable: a file or directory that cannot be read is recorded as
// unreadable (a change: never "no drift"), and looked at again until it can be.
func TestWatchUnreadableThenReadable(t *testing.T) {
	f := newFaults(1, 1, syscall.EACCES)
	f.match = func(op, path string) bool {
		return (op == opOpenFile && path == "a.txt") || (op == opOpenDir && strings.HasSuffix(path, "/newdir"))
	}
	root, w, log, _ := startFaultyWatch(t, f)
	f.on.Store(true)
	n := len(log.snapshot())
	write(t, root, "a.txt", "edited behind a closed door\n")
	log.waitFor(t, n, func(b Batch) bool { return len(b.Changes) > 0 })
	write(t, root, "a.txt", watchBase["a.txt"]) // back to the base content, still unreadable
	write(t, root, "newdir/x", "x")
	rep := status(t, w)
	assert.True(t, rep.Drifted)
	assert.Equal(t, []string{"a.txt"}, summarize(rep).Changed)
	assert.Empty(t, rep.Changed[0].NewHash, "content unknown")

	f.on.Store(false) // readable again: the next Status looks again
	rep = status(t, w)
	assert.Equal(t, summary{Added: paths("newdir/x")}, summarize(rep))
}

// TestWatchUnderRandomFaults runs watches while open, read, stat, readdir, inotify and sync
// operations fail at random, the tree being edited meanwhile. Whatever fails, the watcher
// never crashes or hangs: Status answers (a report or an error), a watch that stops says so
// in its last batch and nothing follows it, Close returns. A watch that survived agrees, once
// the faults end, with a fresh check of the tree.
func TestWatchUnderRandomFaults(t *testing.T) {
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	survived, stopped := 0, 0
	for seed := range uint64(rounds) {
		errs := []error{syscall.EACCES, syscall.EIO, syscall.EPERM}
		if seed%3 == 2 { // a third of the runs also run out of descriptors or memory (stop)
			errs = append(errs, syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM)
		}
		f := newFaults(seed, 0.08, errs...)
		fatal := seed%3 == 2
		// A failed read of the inotify descriptor always stops a watch: only in the runs
		// that test stopping.
		f.match = func(op, _ string) bool { return fatal || op != opInotifyRead }
		root := mkTree(t, watchBase)
		age(t, root)
		spec := Spec{Root: root, Gitignore: true}
		base := scanT(t, spec, nil)
		log := &batchLog{signal: make(chan struct{}, 1)}
		if seed%4 == 3 {
			f.on.Store(true) // faults from the setup on
		}
		w, err := Watch(context.Background(), spec, base, WatchOptions{Debounce: 5 * time.Millisecond,
			PollInterval: 30 * time.Millisecond, fault: f.hook}, log.emit)
		if err != nil {
			require.True(t, errors.Is(err, ErrResource) || errors.Is(err, syscall.EACCES) ||
				errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EPERM), "seed %d: %v", seed, err)
			continue
		}
		f.on.Store(true)
		rng := rand.New(rand.NewPCG(seed, 7))
		for i := range 60 {
			switch rng.IntN(6) {
			case 0:
				write(t, root, fmt.Sprintf("sub/n%d.go", rng.IntN(8)), fmt.Sprint(i))
			case 1:
				write(t, root, "a.txt", fmt.Sprintf("a %d\n", rng.IntN(3)))
			case 2:
				_ = os.Remove(filepath.Join(root, fmt.Sprintf("sub/n%d.go", rng.IntN(8))))
			case 3:
				write(t, root, fmt.Sprintf("dir%d/f", rng.IntN(3)), fmt.Sprint(i))
			case 4:
				_ = os.RemoveAll(filepath.Join(root, fmt.Sprintf("dir%d", rng.IntN(3))))
			case 5:
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := w.Status(ctx)
				cancel()
				require.NotErrorIs(t, err, context.DeadlineExceeded, "seed %d: Status hung", seed)
			}
			if i%10 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		f.on.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rep, err := w.Status(ctx)
		cancel()
		bs := log.snapshot()
		var stop *Batch
		for i := range bs {
			if bs[i].Stopped {
				require.Nil(t, stop, "seed %d: two stopped batches", seed)
				require.Equal(t, len(bs)-1, i, "seed %d: a batch after the stopped one", seed)
				stop = &bs[i]
			}
		}
		if stop != nil {
			stopped++
			assert.ErrorIs(t, err, ErrStopped, "seed %d", seed)
			assert.Contains(t, stop.Reason, "watch stopped", "seed %d", seed)
			t.Logf("seed %d: stopped (%s): %s", seed, f.summary(), stop.Reason)
		} else {
			survived++
			require.NoError(t, err, "seed %d", seed)
			want, _, err := Check(context.Background(), spec, base, CheckOptions{})
			require.NoError(t, err)
			assert.Equal(t, summarize(want), summarize(rep), "seed %d: the watch disagrees with a check once the faults are over (%s)", seed, f.summary())
			assert.Empty(t, rep.Unreadable, "seed %d", seed)
			t.Logf("seed %d: survived %s", seed, f.summary())
		}
		done := make(chan error, 1)
		go func() { done <- w.Close() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("seed %d: Close hung", seed)
		}
	}
	t.Logf("%d watches survived the faults, %d stopped", survived, stopped)
	assert.NotZero(t, survived)
	assert.NotZero(t, stopped)
}
