package chunk

import (
	"bytes"
	"slices"
)

// Count is an address with a number of references: how often a value lists a run, or a run a
// chunk.
type Count struct {
	Addr Address
	N    int64
}

// Tally counts references by address: the reference-count changes a transaction makes,
// collected before they are applied, so that each stored row is touched once however often it
// is listed.
type Tally map[Address]int64

// Add counts n references to each of addrs.
func (t Tally) Add(n int64, addrs ...Address) {
	for _, a := range addrs {
		t[a] += n
	}
}

// AddRefs counts n references to the chunk of each ref.
func (t Tally) AddRefs(n int64, refs []Ref) {
	for _, r := range refs {
		t[r.Addr] += n
	}
}

// Sorted returns the non-zero counts in address order: the order in which backends touch rows,
// so that two transactions changing the same rows take their locks in the same order and cannot
// deadlock.
func (t Tally) Sorted() []Count {
	out := make([]Count, 0, len(t))
	for a, n := range t {
		if n != 0 {
			out = append(out, Count{Addr: a, N: n})
		}
	}
	slices.SortFunc(out, func(x, y Count) int { return bytes.Compare(x.Addr[:], y.Addr[:]) })
	return out
}
