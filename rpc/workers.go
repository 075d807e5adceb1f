package rpc

import (
	"sync/atomic"
	"time"
)

// workers runs each request's handler on a goroutine, reusing idle ones. A fresh goroutine
// starts with a small stack that SQLite (modernc) calls grow by copying, several times per
// request; a reused goroutine keeps its grown stack. There is no upper bound: a task that finds
// no idle worker gets a new goroutine, so a slow handler never holds up others (handlers wait on
// earlier requests, never later ones, so nothing can deadlock on a full pool either).
type workers struct {
	tasks   chan func() // unbuffered: a send succeeds only when a worker is idle
	started atomic.Int64
}

// workerIdle is how long an idle worker waits for another task before it exits.
const workerIdle = 10 * time.Second

// run runs f on an idle worker or a new goroutine. The zero workers (nil tasks) always start a
// new goroutine.
func (w *workers) run(f func()) {
	select {
	case w.tasks <- f:
	default:
		w.started.Add(1)
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(workerIdle)
		select {
		case f = <-w.tasks:
		case <-t.C:
			return
		}
	}
}
