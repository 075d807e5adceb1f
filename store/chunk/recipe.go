package chunk

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Address names a chunk (or a run, see runs.go): the SHA-256 of its raw bytes. SHA-256 rather
// than BLAKE3 because the whole value is hashed with SHA-256 anyway (the state's sha256 of the
// protocol), Go's implementation uses the CPU's SHA instructions, and PostgreSQL can compute it in
// SQL (sha256(bytea)) to check stored chunks without a client.
type Address [32]byte

// AddressOf returns the address of b.
func AddressOf(b []byte) Address { return sha256.Sum256(b) }

// String returns the address in lowercase hex.
func (a Address) String() string { return hex.EncodeToString(a[:]) }

// ParseAddress reads an address written by String.
func ParseAddress(s string) (Address, error) {
	var a Address
	if len(s) != 2*len(a) {
		return a, fmt.Errorf("chunk address %q: want %d hex digits", s, 2*len(a))
	}
	if _, err := hex.Decode(a[:], []byte(s)); err != nil {
		return a, fmt.Errorf("chunk address %q: %w", s, err)
	}
	return a, nil
}

// Ref is one chunk of a recipe: its address and its raw size.
type Ref struct {
	Addr Address
	Size int
}

// Chunk is a chunk cut from a value: its Ref and its raw bytes, which alias the value.
type Chunk struct {
	Ref
	Data []byte
}

// Recipe says how to rebuild a value from chunks: the value's size and SHA-256 and its chunks
// in order. A chunk may appear more than once. The empty value has no chunks.
type Recipe struct {
	Size   int64
	SHA256 [32]byte
	Chunks []Ref
}

// Split cuts value into content-defined chunks (see Boundaries) and returns its recipe and the
// chunks, in order, duplicates included. The chunks' Data alias value.
func Split(value []byte) (Recipe, []Chunk) { return SplitSum(value, sha256.Sum256(value)) }

// SplitSum is Split for a caller that has just computed the value's SHA-256 itself (sum): the
// recipe records sum without hashing the value again.
func SplitSum(value []byte, sum [32]byte) (Recipe, []Chunk) {
	ends := Boundaries(value)
	r := Recipe{Size: int64(len(value)), SHA256: sum, Chunks: make([]Ref, len(ends))}
	chunks := make([]Chunk, len(ends))
	start := 0
	for i, end := range ends {
		data := value[start:end:end]
		ref := Ref{Addr: AddressOf(data), Size: len(data)}
		r.Chunks[i] = ref
		chunks[i] = Chunk{Ref: ref, Data: data}
		start = end
	}
	return r, chunks
}

// Validate checks that the recipe is consistent: every chunk has at least one byte and the
// chunks' sizes add up to Size. A recipe read from storage that fails it is a *FormatError.
func (r Recipe) Validate() error {
	if r.Size < 0 {
		return &FormatError{Kind: KindValue, Index: -1, Reason: fmt.Sprintf("negative size %d", r.Size)}
	}
	var sum int64
	for i, c := range r.Chunks {
		if c.Size < 1 || int64(c.Size) > r.Size-sum {
			return &FormatError{Kind: KindChunk, Index: i,
				Reason: fmt.Sprintf("size %d does not fit the value's %d bytes after %d", c.Size, r.Size, sum)}
		}
		sum += int64(c.Size)
	}
	if sum != r.Size {
		return &FormatError{Kind: KindValue, Index: -1,
			Reason: fmt.Sprintf("chunks hold %d bytes, the value has %d", sum, r.Size)}
	}
	return nil
}

// Distinct returns the addresses of the recipe's chunks, each once, in order of first use: what
// a backend fetches in one batch before Reassemble.
func (r Recipe) Distinct() []Address {
	seen := make(map[Address]struct{}, len(r.Chunks))
	out := make([]Address, 0, len(r.Chunks))
	for _, c := range r.Chunks {
		if _, ok := seen[c.Addr]; !ok {
			seen[c.Addr] = struct{}{}
			out = append(out, c.Addr)
		}
	}
	return out
}

// FetchFunc returns the raw bytes stored under an address (decompressed: compression is the
// backend's business), or an error matching ErrNotFound when nothing is stored under it. Other
// errors (I/O, a cancelled context) are passed on, wrapped. The returned bytes are only read.
type FetchFunc func(Address) ([]byte, error)

// reassembleCap bounds what Reassemble reserves up front, so that a damaged recipe claiming a
// huge size cannot allocate more than the chunks actually fetched.
const reassembleCap = 64 << 20

// Reassemble rebuilds the value of r from its chunks, byte for byte. It checks every chunk (its
// size and its SHA-256 against its address) and then the whole value's size and SHA-256. Damage
// is reported as *FormatError, *MissingError, *MismatchError or *ValueMismatchError, all matching
// ErrCorrupt, so a backend can map them to its corrupt error with one errors.Is.
func Reassemble(r Recipe, fetch FetchFunc) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	out := make([]byte, 0, min(r.Size, reassembleCap))
	for i, ref := range r.Chunks {
		b, err := fetch(ref.Addr)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, &MissingError{Kind: KindChunk, Index: i, Addr: ref.Addr}
			}
			return nil, fmt.Errorf("fetch chunk %d (%s): %w", i, ref.Addr, err)
		}
		if len(b) != ref.Size {
			return nil, &MismatchError{Kind: KindChunk, Index: i, Addr: ref.Addr, Size: ref.Size,
				GotSize: len(b), Got: AddressOf(b)}
		}
		if got := AddressOf(b); got != ref.Addr {
			return nil, &MismatchError{Kind: KindChunk, Index: i, Addr: ref.Addr, Size: ref.Size,
				GotSize: len(b), Got: got}
		}
		out = append(out, b...)
	}
	if got := sha256.Sum256(out); int64(len(out)) != r.Size || got != r.SHA256 {
		return nil, &ValueMismatchError{Size: r.Size, SHA256: r.SHA256, GotSize: int64(len(out)), Got: got}
	}
	return out, nil
}
