package store

import (
	"context"
	"sync/atomic"
	"time"
)

// Maintenance in bites: prune, retention sweeps, workflow deletion and completion, and import
// change any number of rows. Each runs as a series of bounded write transactions ("bites"),
// so that other writers interleave with it: a bite does BiteUnits units of work (a checkpoint
// examined, deleted or imported; a workflow visited; a page vacuumed), and then more only
// while it has held its transaction for less than the budget. Counting before timing makes a
// small job one bite however loaded the machine, and a test can set a budget of 1ns to cut a
// job into bites of BiteUnits units. Every bite leaves the database consistent on its own (a
// crash between two bites loses nothing of the job's effect so far); running the job again
// finishes it.
const (
	BiteUnits         = 128
	DefaultBiteBudget = 4 * time.Millisecond
)

// Bites sizes a backend's bites and counts them (Options.BiteBudget, Options.AfterBite).
type Bites struct {
	budget time.Duration
	after  func(int)
	n      atomic.Int64
}

// NewBites returns the bite sizing of o.
func NewBites(o Options) *Bites {
	b := &Bites{budget: o.BiteBudget, after: o.AfterBite}
	if b.budget <= 0 {
		b.budget = DefaultBiteBudget
	}
	return b
}

// Start begins a bite (at the start of its transaction; again when the transaction is retried).
func (b *Bites) Start() *Bite {
	return &Bite{budget: b.budget, start: time.Now()}
}

// Committed counts a committed bite and runs the AfterBite hook.
func (b *Bites) Committed() {
	n := b.n.Add(1)
	if b.after != nil {
		b.after(int(n))
	}
}

// Count is the number of bites committed so far.
func (b *Bites) Count() int64 { return b.n.Load() }

// Bite measures the work of one bounded transaction.
type Bite struct {
	budget     time.Duration
	start      time.Time
	units      int
	sinceClock int
	full       bool
}

// Spend counts n units of work and reports whether the bite is full: the caller finishes the
// unit under way and commits. The clock is read once every BiteUnits units.
func (b *Bite) Spend(n int) bool {
	b.units += n
	b.sinceClock += n
	if b.sinceClock >= BiteUnits {
		b.sinceClock = 0
		if time.Since(b.start) >= b.budget {
			b.full = true
		}
	}
	return b.full
}

// Full reports whether the bite is full.
func (b *Bite) Full() bool { return b.full }

// Units is the work counted so far.
func (b *Bite) Units() int { return b.units }

// PaceFactor is how long paced maintenance leaves the database to others after each bite, as a
// multiple of the time the bite took (3: a quarter of the time at most).
const PaceFactor = 3

type pacedKey struct{}

// Paced marks ctx as background maintenance (an idle sweep, a retention catching up after a
// put): its bites are paced (Pace) so that the writers it runs beside keep their latency.
func Paced(ctx context.Context) context.Context { return context.WithValue(ctx, pacedKey{}, true) }

// Pace waits PaceFactor times took after a bite of paced maintenance (see Paced); it returns at
// once otherwise, and ctx's error when ctx ends while it waits.
func Pace(ctx context.Context, took time.Duration) error {
	if paced, _ := ctx.Value(pacedKey{}).(bool); !paced || took <= 0 {
		return nil
	}
	t := time.NewTimer(PaceFactor * took)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
