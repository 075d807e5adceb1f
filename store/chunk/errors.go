package chunk

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrCorrupt is matched (errors.Is) by every error that says stored data is damaged: a missing
// chunk or run, one whose bytes do not hash to its address, an undecodable run or an
// inconsistent recipe, a value whose SHA-256 is not the recorded one. A backend maps it to its
// corrupt error.
var ErrCorrupt = errors.New("chunked value damaged")

// ErrNotFound is what a FetchFunc returns (or wraps) when nothing is stored under an address.
// Reassemble and Expand turn it into a *MissingError.
var ErrNotFound = errors.New("not stored")

// Kind says what a damaged piece is.
type Kind uint8

// Kinds of pieces.
const (
	KindValue Kind = iota // the value as a whole (its recipe or index)
	KindChunk             // a chunk of the value's bytes
	KindRun               // a run: a stored slice of a recipe (see Runs)
)

func (k Kind) String() string {
	switch k {
	case KindValue:
		return "value"
	case KindChunk:
		return "chunk"
	case KindRun:
		return "run"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MissingError says a chunk or run that a recipe lists is not stored.
type MissingError struct {
	Kind  Kind
	Index int // position in the recipe (chunks) or the index (runs)
	Addr  Address
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s %d (%s) is missing: %v", e.Kind, e.Index, e.Addr, ErrCorrupt)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *MissingError) Is(target error) bool { return target == ErrCorrupt }

// MismatchError says the bytes stored under an address are not what the recipe expects: another
// size, or another SHA-256 (Got).
type MismatchError struct {
	Kind    Kind
	Index   int
	Addr    Address
	Size    int // expected size (chunks; 0 for runs, whose size is not recorded)
	GotSize int
	Got     Address // SHA-256 of the bytes found
}

func (e *MismatchError) Error() string {
	if e.Size != 0 && e.Size != e.GotSize {
		return fmt.Sprintf("%s %d (%s) is damaged: %d bytes stored, %d expected: %v",
			e.Kind, e.Index, e.Addr, e.GotSize, e.Size, ErrCorrupt)
	}
	return fmt.Sprintf("%s %d (%s) is damaged: its %d bytes hash to %s: %v",
		e.Kind, e.Index, e.Addr, e.GotSize, e.Got, ErrCorrupt)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *MismatchError) Is(target error) bool { return target == ErrCorrupt }

// ValueMismatchError says the reassembled value is not the recorded one. Every chunk matched its
// address, so the recipe itself (or the recorded size or hash) is damaged.
type ValueMismatchError struct {
	Size    int64
	SHA256  [32]byte
	GotSize int64
	Got     [32]byte
}

func (e *ValueMismatchError) Error() string {
	return fmt.Sprintf("reassembled value has %d bytes and SHA-256 %s, recorded %d bytes and %s: %v",
		e.GotSize, hex.EncodeToString(e.Got[:]), e.Size, hex.EncodeToString(e.SHA256[:]), ErrCorrupt)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *ValueMismatchError) Is(target error) bool { return target == ErrCorrupt }

// FormatError says a stored recipe, index or run cannot be read or is inconsistent.
type FormatError struct {
	Kind   Kind
	Index  int // -1: the value as a whole
	Reason string
}

func (e *FormatError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("bad %s recipe: %s: %v", e.Kind, e.Reason, ErrCorrupt)
	}
	return fmt.Sprintf("bad %s %d: %s: %v", e.Kind, e.Index, e.Reason, ErrCorrupt)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *FormatError) Is(target error) bool { return target == ErrCorrupt }
