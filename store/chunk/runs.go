package chunk

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Recipes are stored in two levels. A flat recipe costs 32 bytes per chunk, and one value of a
// workflow differs from the previous one in a few chunks only: a 1 MB state has ~530 chunks, so
// a flat recipe per checkpoint would store ~18 KB to record a 1 KB change (and make ~530
// reference updates). Instead a recipe is cut into runs of consecutive chunk refs, stored once
// per content like chunks; a value keeps the addresses of its runs only (its Index). A run ends
// after a chunk whose address ends in four zero bits (so ~16 refs per run), or after MaxRunLen
// refs: the cut depends on the chunk itself, so an edit changes the run around it and leaves the
// others identical (as content-defined chunking does one level down). For that 1 MB state a
// checkpoint then stores an index of ~34 addresses (1.1 KB) plus the one or two runs the change
// touched (~0.6 KB each).
const (
	// runMask selects the address bits that end a run when zero: 1 chunk in 16.
	runMask = 0x0f
	// MaxRunLen is the most refs in one run.
	MaxRunLen = 64
	// runFormat is the first byte of an encoded run.
	runFormat = 1
	// maxRunRefSize bounds a decoded ref's size: far above MaxSize (the chunker never makes such
	// chunks), and within an int on every platform.
	maxRunRefSize = 1<<31 - 1
)

// Run is a stored slice of a recipe: consecutive refs, their encoding and its address
// (SHA-256 of Data).
type Run struct {
	Addr Address
	Refs []Ref
	Data []byte // EncodeRun(Refs)
}

// Index is what a backend keeps with a chunked value: its size and SHA-256 and the addresses of
// its runs, in order.
type Index struct {
	Size   int64
	SHA256 [32]byte
	Runs   []Address
}

// Runs cuts the recipe into runs and returns its index and the runs in order, duplicates
// included. The runs' Refs alias r.Chunks.
func (r Recipe) Runs() (Index, []Run) {
	var runs []Run
	start := 0
	for i, c := range r.Chunks {
		if c.Addr[len(c.Addr)-1]&runMask != 0 && i+1-start < MaxRunLen && i+1 < len(r.Chunks) {
			continue
		}
		refs := r.Chunks[start : i+1 : i+1]
		data := EncodeRun(refs)
		runs = append(runs, Run{Addr: sha256.Sum256(data), Refs: refs, Data: data})
		start = i + 1
	}
	idx := Index{Size: r.Size, SHA256: r.SHA256, Runs: make([]Address, len(runs))}
	for i, run := range runs {
		idx.Runs[i] = run.Addr
	}
	return idx, runs
}

// EncodeRun returns the stored form of a run: a format byte (1), the number of refs (uvarint),
// then each ref's 32-byte address and size (uvarint).
func EncodeRun(refs []Ref) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(refs)*(len(Address{})+3))
	b = append(b, runFormat)
	b = binary.AppendUvarint(b, uint64(len(refs)))
	for _, r := range refs {
		b = append(b, r.Addr[:]...)
		b = binary.AppendUvarint(b, uint64(r.Size))
	}
	return b
}

// DecodeRun reads a run written by EncodeRun, and only that: any other bytes (a non-minimal
// varint, trailing bytes, ...) are refused, so EncodeRun(DecodeRun(b)) == b. Errors are *FormatError (Index -1: the caller
// knows which run it read).
func DecodeRun(b []byte) ([]Ref, error) {
	bad := func(format string, args ...any) error {
		return &FormatError{Kind: KindRun, Index: -1, Reason: fmt.Sprintf(format, args...)}
	}
	if len(b) == 0 || b[0] != runFormat {
		return nil, bad("unknown format")
	}
	p := 1
	n, k := binary.Uvarint(b[p:])
	if !minimal(b[p:], k) || n == 0 || n > MaxRunLen {
		return nil, bad("bad ref count")
	}
	p += k
	refs := make([]Ref, n)
	for i := range refs {
		if len(b)-p < len(Address{}) {
			return nil, bad("truncated at ref %d", i)
		}
		copy(refs[i].Addr[:], b[p:])
		p += len(Address{})
		size, k := binary.Uvarint(b[p:])
		if !minimal(b[p:], k) || size == 0 || size > maxRunRefSize {
			return nil, bad("bad size of ref %d", i)
		}
		p += k
		refs[i].Size = int(size)
	}
	if p != len(b) {
		return nil, bad("%d trailing bytes", len(b)-p)
	}
	return refs, nil
}

// minimal reports whether binary.Uvarint read a varint of k bytes at the start of b in its
// shortest form, so that a run has one encoding only (its refs and its address correspond).
func minimal(b []byte, k int) bool { return k == 1 || k > 1 && b[k-1] != 0 }

// Expand rebuilds the recipe of an index from its runs, checking each run's bytes against its
// address. fetch returns the stored bytes of a run (see FetchFunc). The recipe is validated
// (Recipe.Validate); Reassemble then checks the chunks and the value.
func Expand(idx Index, fetch FetchFunc) (Recipe, error) {
	r := Recipe{Size: idx.Size, SHA256: idx.SHA256, Chunks: make([]Ref, 0, len(idx.Runs)*16)}
	for i, addr := range idx.Runs {
		b, err := fetch(addr)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return Recipe{}, &MissingError{Kind: KindRun, Index: i, Addr: addr}
			}
			return Recipe{}, fmt.Errorf("fetch run %d (%s): %w", i, addr, err)
		}
		if got := AddressOf(b); got != addr {
			return Recipe{}, &MismatchError{Kind: KindRun, Index: i, Addr: addr, GotSize: len(b), Got: got}
		}
		refs, err := DecodeRun(b)
		if err != nil {
			err.(*FormatError).Index = i
			return Recipe{}, err
		}
		r.Chunks = append(r.Chunks, refs...)
	}
	if err := r.Validate(); err != nil {
		return Recipe{}, err
	}
	return r, nil
}

// AppendAddresses appends the 32 bytes of each address to b: the stored form of Index.Runs.
func AppendAddresses(b []byte, addrs []Address) []byte {
	for _, a := range addrs {
		b = append(b, a[:]...)
	}
	return b
}

// DecodeAddresses reads addresses written by AppendAddresses.
func DecodeAddresses(b []byte) ([]Address, error) {
	if len(b)%len(Address{}) != 0 {
		return nil, &FormatError{Kind: KindValue, Index: -1,
			Reason: fmt.Sprintf("address list of %d bytes is not a multiple of %d", len(b), len(Address{}))}
	}
	out := make([]Address, len(b)/len(Address{}))
	for i := range out {
		copy(out[i][:], b[i*len(Address{}):])
	}
	return out, nil
}
