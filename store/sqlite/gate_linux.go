//go:build linux

package sqlite

import (
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// writeGate makes the ckptd processes that share a database take turns at writing.
//
// SQLite's own write lock has no queue: a process that finds it taken sleeps in its busy handler
// (1, 2, 5, 10 ... 100 ms) and tries again, while the process that just committed, with more saves
// queued, takes the lock again within microseconds. With four processes saving, a process could
// lose that race for seconds (p99 save latency 1.5-3.8 s, BEGIN IMMEDIATE waiting up to 3.8 s,
// BenchmarkMultiProcessSave). The gate is two open-file-description locks on bytes of the
// database file far past anything SQLite locks: a writer takes the turnstile, then the write
// lock, then lets go of the turnstile, and holds the write lock for its transaction. Waiters
// block in the kernel and are woken at once; and a process that just committed must queue at
// the turnstile behind the one already waiting there for the write lock, so the lock changes
// hands at every commit instead of staying with whoever is running.
//
// The gate only orders writers: SQLite's lock still guarantees their exclusion, so a writer that
// cannot get the gate in time (another process stuck in a long transaction) goes on without it.
//
// A store alone on its database has no one to take turns with: every store holds a shared lock
// on a third byte for its lifetime, and a writer asks the kernel (one F_OFD_GETLK) whether anyone
// else does before it bothers with the gate's four calls. One that starts meanwhile is seen at
// the next commit (until then SQLite's busy handler orders the two, as without a gate).
type writeGate struct {
	f *os.File
	// seen: this store holds its presence lock, so other stores know it is there. One that could
	// not take it (no lock left in the kernel's table) never counts itself alone: it cannot know
	// whether the others count it, so it keeps taking turns.
	seen bool
}

const (
	gateTurnstile = int64(1) << 62 // SQLite locks bytes 0x40000000-0x400001ff only
	gateWrite     = gateTurnstile + 1
	gatePresence  = gateTurnstile + 2 // held shared by every open store
	gateWait      = 10 * time.Second  // then write without the gate
)

// openGate opens the database file for its gate locks; nil when it cannot (no gate then).
func openGate(path string) *writeGate {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil
	}
	g := &writeGate{f: f}
	// never contended (no one holds it exclusively), but it could fail (ENOLCK)
	g.seen = g.flock(unix.F_OFD_SETLK, unix.F_RDLCK, gatePresence) == nil
	return g
}

// alone reports whether no other open store (in this process or another) shares the database.
func (g *writeGate) alone() bool {
	if !g.seen {
		return false
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: gatePresence, Len: 1}
	if err := unix.FcntlFlock(g.f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return false
	}
	return lk.Type == unix.F_UNLCK
}

// enter takes the write turn; false when it could not within gateWait, or when the store is
// alone on its database (no turns to take).
func (g *writeGate) enter() bool {
	if g == nil || g.alone() {
		return false
	}
	if !g.lock(gateTurnstile) {
		return false
	}
	ok := g.lock(gateWrite)
	g.unlock(gateTurnstile)
	return ok
}

// leave gives the write turn back.
func (g *writeGate) leave() {
	if g != nil {
		g.unlock(gateWrite)
	}
}

func (g *writeGate) close() {
	if g != nil {
		_ = g.f.Close() // drops the locks (they belong to this open file description)
	}
}

func (g *writeGate) flock(cmd int, typ int16, off int64) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: off, Len: 1}
	for {
		err := unix.FcntlFlock(g.f.Fd(), cmd, &lk)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func (g *writeGate) unlock(off int64) { _ = g.flock(unix.F_OFD_SETLK, unix.F_UNLCK, off) }

// lock takes the byte at off, waiting in the kernel up to gateWait.
func (g *writeGate) lock(off int64) bool {
	if err := g.flock(unix.F_OFD_SETLK, unix.F_WRLCK, off); err == nil {
		return true
	} else if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
		return false
	}
	// A blocked fcntl cannot be interrupted: wait on another goroutine, and if the wait is given
	// up, that goroutine lets go of the lock as soon as it gets it.
	var mu sync.Mutex
	gaveUp, got := false, false
	done := make(chan bool, 1)
	go func() {
		err := g.flock(unix.F_OFD_SETLKW, unix.F_WRLCK, off)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && gaveUp {
			g.unlock(off)
			return
		}
		got = err == nil
		done <- got
	}()
	t := time.NewTimer(gateWait)
	defer t.Stop()
	select {
	case ok := <-done:
		return ok
	case <-t.C:
		mu.Lock()
		defer mu.Unlock()
		if got {
			return true
		}
		gaveUp = true
		return false
	}
}
