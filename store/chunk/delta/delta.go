// Package delta computes and applies the wire deltas of issue #17: a value sent as "the base
// value with its middle replaced", the base being the previous value the sender sent (the state
// of checkpoint stateDelta.baseCheckpointId, or the previous version of a LangGraph channel), so
// that a save carries the changed bytes only. The delta keeps keepPrefix bytes from the start of
// the base and keepSuffix bytes from its end, with the middle (the frame's attachment) in
// between, and names the SHA-256 of the result so the receiver can check it rebuilt the value the
// sender meant. Format-agnostic: JSON, msgpack, raw bytes.
//
// Pure functions only: finding the base (and answering -32001 when it is gone) is the caller's.
package delta

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
)

// The rule a sender follows to decide whether a delta pays (see Pays).
const (
	// MinSize: values up to this size are always sent whole; a delta would save little and
	// costs the receiver a load of the base.
	MinSize = 4 << 10
	// A delta pays when its middle is less than half the value (MaxMiddlePercent of it).
	MaxMiddlePercent = 50
)

// Pays reports whether sending a value of nextLen bytes as a delta with a middle of middleLen
// bytes is worth it: the value is larger than MinSize and the middle less than half of it.
// Otherwise the sender sends the value whole, as without deltas.
func Pays(nextLen, middleLen int) bool {
	return nextLen > MinSize && int64(middleLen)*100 < int64(nextLen)*MaxMiddlePercent
}

// Compute returns the delta that turns prev into next: the longest common prefix, then the
// longest common suffix of the rest (keepPrefix+keepSuffix <= min(len(prev), len(next))), and
// the middle of next between them, which aliases next. It reads 256-byte blocks with
// bytes.Equal and then 8-byte words, so a 1 MB value costs tens of microseconds.
func Compute(prev, next []byte) (keepPrefix, keepSuffix int, middle []byte) {
	keepPrefix = commonPrefix(prev, next)
	keepSuffix = commonSuffix(prev[keepPrefix:], next[keepPrefix:])
	return keepPrefix, keepSuffix, next[keepPrefix : len(next)-keepSuffix]
}

// block is the stride of the first, coarse pass of commonPrefix and commonSuffix.
const block = 256

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i+block <= n && bytes.Equal(a[i:i+block], b[i:i+block]) {
		i += block
	}
	for ; i+8 <= n; i += 8 {
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)/8 // the lowest byte of a little-endian word comes first
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// commonSuffix returns the length of the longest common suffix of a and b.
func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	la, lb := len(a), len(b)
	i := 0 // bytes known equal at the end
	for i+block <= n && bytes.Equal(a[la-i-block:la-i], b[lb-i-block:lb-i]) {
		i += block
	}
	for ; i+8 <= n; i += 8 {
		if x := binary.LittleEndian.Uint64(a[la-i-8:]) ^ binary.LittleEndian.Uint64(b[lb-i-8:]); x != 0 {
			return i + bits.LeadingZeros64(x)/8 // the highest byte of the word is the last in memory
		}
	}
	for i < n && a[la-1-i] == b[lb-1-i] {
		i++
	}
	return i
}

// Error says a delta cannot be applied, naming the field at fault. Object is the delta's name on
// the wire ("stateDelta" for checkpoint/save); a caller applying the deltas of other objects (a
// LangGraph channel value's) renames it with In. The RPC layer answers -32602 with Path() as
// the field.
type Error struct {
	Object string // "stateDelta"
	Field  string // "keepPrefix", "keepSuffix" or "sha256"
	Reason string
}

// Path is the field's full name: Object.Field.
func (e *Error) Path() string { return e.Object + "." + e.Field }

func (e *Error) Error() string { return "invalid " + e.Path() + ": " + e.Reason }

// In returns the error for a delta object named object on the wire (e.g. "blobs[2].delta").
func (e *Error) In(object string) *Error {
	c := *e
	c.Object = object
	return &c
}

// Check checks a delta against a base of baseLen bytes without applying it: keepPrefix, then
// keepSuffix (in 0…baseLen, not overlapping), then that wantSHA256 is 64 hex digits. Errors are
// *Error naming stateDelta.keepPrefix, stateDelta.keepSuffix or stateDelta.sha256, in that
// order. The value rebuilt has keepPrefix + len(middle) + keepSuffix bytes: a caller with a size
// limit checks it after Check and before Apply.
func Check(baseLen, keepPrefix, keepSuffix int, wantSHA256 string) error {
	_, err := check(baseLen, keepPrefix, keepSuffix, wantSHA256)
	return err
}

func check(baseLen, keepPrefix, keepSuffix int, wantSHA256 string) ([sha256.Size]byte, error) {
	bad := func(field, format string, args ...any) error {
		return &Error{Object: "stateDelta", Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	var want [sha256.Size]byte
	switch {
	case keepPrefix < 0:
		return want, bad("keepPrefix", "%d is negative", keepPrefix)
	case keepPrefix > baseLen:
		return want, bad("keepPrefix", "%d exceeds the base's %d bytes", keepPrefix, baseLen)
	case keepSuffix < 0:
		return want, bad("keepSuffix", "%d is negative", keepSuffix)
	case keepSuffix > baseLen:
		return want, bad("keepSuffix", "%d exceeds the base's %d bytes", keepSuffix, baseLen)
	case keepPrefix+keepSuffix > baseLen:
		return want, bad("keepSuffix", "keepPrefix %d + keepSuffix %d exceed the base's %d bytes (prefix and suffix overlap)",
			keepPrefix, keepSuffix, baseLen)
	case len(wantSHA256) != 2*len(want):
		return want, bad("sha256", "want %d hex digits, got %d characters", 2*len(want), len(wantSHA256))
	}
	if _, err := hex.Decode(want[:], []byte(wantSHA256)); err != nil {
		return want, bad("sha256", "not hex: %v", err)
	}
	return want, nil
}

// Apply rebuilds a value from base and a delta: base[:keepPrefix] + middle +
// base[len(base)-keepSuffix:], and checks that its SHA-256 is wantSHA256 (64 hex digits). The
// result is a new slice; base and middle are only read. Errors are *Error naming
// stateDelta.keepPrefix, stateDelta.keepSuffix or stateDelta.sha256; they are checked in that
// order (Check), and the hash only once the others are valid. The result has at most
// len(base)+len(middle) bytes: a caller with a size limit checks that first.
func Apply(base []byte, keepPrefix, keepSuffix int, middle []byte, wantSHA256 string) ([]byte, error) {
	out, _, err := ApplyMarked(base, nil, keepPrefix, keepSuffix, middle, wantSHA256)
	return out, err
}

// hashEvery is the distance between two HashMarks (a multiple of SHA-256's 64-byte block; a
// variable for the tests only).
var hashEvery = 64 << 10

// HashMarks are the SHA-256 states of one value after its first hashEvery, 2*hashEvery, ...
// bytes: a value that keeps a prefix of it hashes from the last state inside the prefix on,
// instead of from the start. They describe that value only (its length is checked).
type HashMarks struct {
	n      int
	states [][]byte // encoding.BinaryMarshaler states of crypto/sha256
}

// ApplyMarked is Apply that hashes the rebuilt value from baseMarks' last state inside
// keepPrefix (baseMarks nil or not base's: from the start) and returns the rebuilt value's marks.
func ApplyMarked(base []byte, baseMarks *HashMarks, keepPrefix, keepSuffix int, middle []byte, wantSHA256 string) ([]byte, *HashMarks, error) {
	out, verify, err := Rebuild(base, baseMarks, keepPrefix, keepSuffix, middle, wantSHA256)
	if err != nil {
		return nil, nil, err
	}
	marks, err := verify()
	if err != nil {
		return nil, nil, err
	}
	return out, marks, nil
}

// Rebuild is ApplyMarked in two steps: it checks the delta's form (Check) and rebuilds the
// value, and returns verify, which hashes it (from baseMarks' last state inside keepPrefix)
// and returns its marks, or the *Error naming stateDelta.sha256 when its SHA-256 is not
// wantSHA256. Until verify has passed, the value is only what the sender claims: a caller that
// hashes concurrently with other work must not keep or answer with it before then.
func Rebuild(base []byte, baseMarks *HashMarks, keepPrefix, keepSuffix int, middle []byte, wantSHA256 string) (out []byte, verify func() (*HashMarks, error), err error) {
	want, err := check(len(base), keepPrefix, keepSuffix, wantSHA256)
	if err != nil {
		return nil, nil, err
	}
	// One allocation that is never zeroed: bytes.Join allocates without clearing what it then
	// fills (clearing a megabyte costs as much as copying it).
	out = bytes.Join([][]byte{base[:keepPrefix], middle, base[len(base)-keepSuffix:]}, nil)
	var from [][]byte
	if baseMarks != nil && baseMarks.n == len(base) {
		from = baseMarks.states[:min(keepPrefix/hashEvery, len(baseMarks.states))]
	}
	verify = func() (*HashMarks, error) {
		got, marks := hashFrom(out, from)
		if got != want {
			return nil, &Error{Object: "stateDelta", Field: "sha256", Reason: fmt.Sprintf("the rebuilt value (%d bytes) has SHA-256 %x, not %s: "+
				"the base is not the value the delta was computed from", len(out), got, wantSHA256)}
		}
		return marks, nil
	}
	return out, verify, nil
}

// MarkHash returns b's SHA-256 and its HashMarks.
func MarkHash(b []byte) ([32]byte, *HashMarks) { return hashFrom(b, nil) }

// hashFrom hashes b whose first len(states) marks are states (the states of a value with the
// same bytes up to there), recording the marks of the rest.
func hashFrom(b []byte, states [][]byte) ([32]byte, *HashMarks) {
	h := sha256.New()
	off := len(states) * hashEvery
	if off > 0 {
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(states[len(states)-1]); err != nil {
			h.Reset() // never: the state is one crypto/sha256 marshalled
			off, states = 0, nil
		}
	}
	marks := &HashMarks{n: len(b), states: append(states[:len(states):len(states)], make([][]byte, 0, len(b)/hashEvery-len(states)+1)...)}
	for ; off+hashEvery <= len(b); off += hashEvery {
		h.Write(b[off : off+hashEvery])
		st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			break // never (crypto/sha256 marshals); the marks end here
		}
		marks.states = append(marks.states, st)
	}
	h.Write(b[off:])
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, marks
}
