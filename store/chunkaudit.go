package store

import (
	"fmt"
	"slices"

	"github.com/ckptd/ckptd/store/chunk"
)

// RefAudit recounts the references of chunked values (docs/storage.md, "References and garbage
// collection") for a backend's Verify: the backend feeds it every stored value index, every
// stored run and every stored chunk with their recorded counts, and Problems compares. The
// invariants: every listed run and chunk is stored (no dangling reference), every stored one is
// listed (no orphan: a sweep would have to collect it), and each recorded count equals the
// number of listings.
type RefAudit struct {
	runsListed   chunk.Tally // by value indexes
	chunksListed chunk.Tally // by stored runs
	runs         map[chunk.Address]int64
	chunks       map[chunk.Address]int64
	problems     []string
}

// NewRefAudit returns an empty audit.
func NewRefAudit() *RefAudit {
	return &RefAudit{runsListed: chunk.Tally{}, chunksListed: chunk.Tally{}, runs: map[chunk.Address]int64{}, chunks: map[chunk.Address]int64{}}
}

// Value counts the listings of a stored value's index (its row's data); what names the value in
// a problem.
func (a *RefAudit) Value(what string, indexData []byte) {
	addrs, err := chunk.DecodeAddresses(indexData)
	if err != nil {
		a.problems = append(a.problems, fmt.Sprintf("%s: index does not decode: %v", what, err))
		return
	}
	a.runsListed.Add(1, addrs...)
}

// Run records a stored run, its recorded count and its bytes (whose chunks it lists; nil: the
// run's row has lost them).
func (a *RefAudit) Run(addr chunk.Address, refs int64, data []byte) {
	a.runs[addr] = refs
	if data == nil {
		a.problems = append(a.problems, fmt.Sprintf("run %s has no bytes: the chunks it lists cannot be counted", addr))
		return
	}
	if got := chunk.AddressOf(data); got != addr {
		a.problems = append(a.problems, fmt.Sprintf("run %s: its bytes hash to %s", addr, got))
	}
	refsOf, err := chunk.DecodeRun(data)
	if err != nil {
		a.problems = append(a.problems, fmt.Sprintf("run %s does not decode (%v): the chunks it lists cannot be counted", addr, err))
		return
	}
	a.chunksListed.AddRefs(1, refsOf)
}

// Chunk records a stored chunk and its recorded count.
func (a *RefAudit) Chunk(addr chunk.Address, refs int64) { a.chunks[addr] = refs }

// Problem records a problem the backend found itself (a row without its count, …).
func (a *RefAudit) Problem(p string) { a.problems = append(a.problems, p) }

// maxAuditProblems bounds what Problems lists per kind; the rest is summed up.
const maxAuditProblems = 50

// Problems compares the recorded counts with the recount: one line per problem, in a stable
// order, at most maxAuditProblems per kind plus a line saying how many more there are.
func (a *RefAudit) Problems() []string {
	out := slices.Clone(a.problems)
	check := func(kind string, listed chunk.Tally, stored map[chunk.Address]int64) {
		var lines []string
		for _, c := range listed.Sorted() {
			refs, ok := stored[c.Addr]
			switch {
			case !ok:
				lines = append(lines, fmt.Sprintf("%s %s is listed %d times but not stored (dangling reference)", kind, c.Addr, c.N))
			case refs != c.N:
				lines = append(lines, fmt.Sprintf("%s %s has reference count %d but is listed %d times", kind, c.Addr, refs, c.N))
			}
		}
		var orphans []chunk.Address
		for addr := range stored {
			if listed[addr] == 0 {
				orphans = append(orphans, addr)
			}
		}
		slices.SortFunc(orphans, func(x, y chunk.Address) int { return slices.Compare(x[:], y[:]) })
		for _, addr := range orphans {
			lines = append(lines, fmt.Sprintf("%s %s is stored (reference count %d) but listed nowhere (orphan)", kind, addr, stored[addr]))
		}
		if len(lines) > maxAuditProblems {
			n := len(lines) - maxAuditProblems
			lines = append(lines[:maxAuditProblems], fmt.Sprintf("… and %d more %s problems", n, kind))
		}
		out = append(out, lines...)
	}
	check("run", a.runsListed, a.runs)
	check("chunk", a.chunksListed, a.chunks)
	return out
}

// Counts reports how many runs and chunks are stored.
func (a *RefAudit) Counts() (runs, chunks int) { return len(a.runs), len(a.chunks) }
