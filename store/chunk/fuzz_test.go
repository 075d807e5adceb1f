package chunk

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzRoundTrip: any value splits into chunks within the size bounds, and the chunks and runs
// stored and loaded back give the value byte for byte. Seeds: testdata/fuzz/FuzzRoundTrip.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0}, MaxSize+MinSize+3))
	f.Fuzz(func(t *testing.T, value []byte) {
		m := newMemStore()
		roundTrip(t, m, value, "fuzz value")
	})
}

// FuzzDamage: one flipped bit anywhere in the stored chunks or runs of a value is reported as
// damage (ErrCorrupt), never returned as other bytes. Seeds: testdata/fuzz/FuzzDamage.
func FuzzDamage(f *testing.F) {
	f.Add(bytes.Repeat([]byte("fuzz the damage "), 2000), uint(12345), false)
	f.Fuzz(func(t *testing.T, value []byte, bit uint, inRun bool) {
		if len(value) == 0 {
			return
		}
		m := newMemStore()
		idx, _, _ := m.put(value)
		target := m.chunks
		if inRun {
			target = m.runs
		}
		var total uint
		for _, b := range target {
			total += uint(len(b)) * 8
		}
		bit %= total
		for _, b := range target { // map order does not matter: every stored byte is checked
			if bit < uint(len(b))*8 {
				b[bit/8] ^= 1 << (bit % 8)
				break
			}
			bit -= uint(len(b)) * 8
		}
		got, err := m.get(idx)
		if err == nil {
			// A flipped bit in a chunk the value does not use cannot happen (every stored
			// chunk is one of its own), so success means the check missed damage.
			t.Fatalf("damage not detected; got %d bytes (equal: %v)", len(got), bytes.Equal(got, value))
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("damage reported as %v, not ErrCorrupt", err)
		}
	})
}

// FuzzDecodeRun: arbitrary bytes never panic DecodeRun, and what it accepts is exactly what
// EncodeRun writes. Seeds: testdata/fuzz/FuzzDecodeRun.
func FuzzDecodeRun(f *testing.F) {
	a := AddressOf([]byte("seed"))
	f.Add(EncodeRun([]Ref{{a, 1}, {a, 70000}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		refs, err := DecodeRun(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeRun error %v is not ErrCorrupt", err)
			}
			return
		}
		if !bytes.Equal(EncodeRun(refs), b) {
			t.Fatalf("DecodeRun accepted a non-canonical encoding %x", b)
		}
	})
}
