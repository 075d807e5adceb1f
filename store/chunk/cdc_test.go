package chunk

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ckptd/ckptd/internal/testgen"
)

// -update rewrites testdata/boundaries.golden. Only for a deliberate change of the storage
// format: every value stored before would stop sharing chunks with the values stored after.
var update = flag.Bool("update", false, "rewrite testdata/boundaries.golden")

func TestGearTableDerivation(t *testing.T) {
	for i := range gear {
		s := sha256.Sum256(append([]byte("ckptd chunk gear v1\x00"), byte(i)))
		if want := binary.LittleEndian.Uint64(s[:8]); gear[i] != want {
			t.Fatalf("gear[%d] = %#x, the derivation rule gives %#x", i, gear[i], want)
		}
	}
}

// spreadMask returns a mask of ones one-bits spread evenly from bit 63 down, 64/ones apart.
func spreadMask(ones int) uint64 {
	step := 64 / ones
	var m uint64
	for i := 0; i < ones; i++ {
		m |= 1 << (63 - i*step)
	}
	return m
}

func TestMask(t *testing.T) {
	if cutMask != spreadMask(10) {
		t.Fatalf("cutMask = %#x, spreadMask(10) = %#x", uint64(cutMask), spreadMask(10))
	}
	if AvgSize != MinSize+1<<10 || MinSize < window || MaxSize <= MinSize || InlineMax < MinSize {
		t.Fatalf("inconsistent constants: min %d avg %d max %d inline %d", MinSize, AvgSize, MaxSize, InlineMax)
	}
}

// checkEnds checks the invariants of Boundaries: increasing, ending at n, every chunk but the
// last within [MinSize, MaxSize], the last within [1, MaxSize].
func checkEnds(t *testing.T, ends []int, n int) {
	t.Helper()
	if n == 0 {
		if ends != nil {
			t.Fatalf("empty value: ends %v", ends)
		}
		return
	}
	if len(ends) == 0 || ends[len(ends)-1] != n {
		t.Fatalf("ends %v do not end at %d", ends, n)
	}
	prev := 0
	for i, e := range ends {
		size := e - prev
		lo := MinSize
		if i == len(ends)-1 {
			lo = 1
		}
		if size < lo || size > MaxSize {
			t.Fatalf("chunk %d of %d has %d bytes (ends %d..%d)", i, len(ends), size, prev, e)
		}
		prev = e
	}
}

func TestBoundariesInvariants(t *testing.T) {
	r := testgen.New(1)
	inputs := map[string][]byte{
		"empty":        nil,
		"one byte":     {7},
		"min":          r.Bytes(MinSize),
		"min+1":        r.Bytes(MinSize + 1),
		"max":          r.Bytes(MaxSize),
		"max+1":        r.Bytes(MaxSize + 1),
		"zeros 100K":   make([]byte, 100<<10),
		"pattern 100K": bytes.Repeat([]byte("abcdefg"), 100<<10/7),
		"json 300K":    r.JSON(300 << 10),
		"binary 300K":  r.Binary(300 << 10),
		"text 300K":    r.Text(300 << 10),
		"random 300K":  r.Bytes(300 << 10),
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			ends := Boundaries(in)
			checkEnds(t, ends, len(in))
			if again := Boundaries(bytes.Clone(in)); fmt.Sprint(again) != fmt.Sprint(ends) {
				t.Fatal("two runs over the same bytes cut differently")
			}
		})
	}
	// Runs of one byte have no cut point: MaxSize chunks, all the same chunk.
	ends := Boundaries(make([]byte, 100<<10))
	for i, e := range ends[:len(ends)-1] {
		if e != (i+1)*MaxSize {
			t.Fatalf("zeros: chunk %d ends at %d, want %d", i, e, (i+1)*MaxSize)
		}
	}
}

// refBoundaries is the specification of Boundaries, written plainly: from each chunk start s, the
// chunk ends after the first byte i >= s+MinSize whose 64-byte window data[i-63..i] hashes
// (sum of gear[data[i-k]] << k) to a value with no bit of cutMask set, or at s+MaxSize, or at the
// end. Nothing depends on where the chunk started but the skipped MinSize bytes.
func refBoundaries(data []byte) []int {
	var ends []int
	for s := 0; s < len(data); {
		e := min(s+MaxSize, len(data))
		for i := s + MinSize; i < min(s+MaxSize, len(data)); i++ {
			var h uint64
			for k := 0; k < window; k++ {
				h += gear[data[i-k]] << k
			}
			if h&cutMask == 0 {
				e = i + 1
				break
			}
		}
		ends = append(ends, e)
		s = e
	}
	return ends
}

func TestBoundariesMatchSpecification(t *testing.T) {
	r := testgen.New(2)
	for name, in := range map[string][]byte{
		"text":    r.Text(96 << 10),
		"json":    r.JSON(96 << 10),
		"binary":  r.Binary(96 << 10),
		"random":  r.Bytes(96 << 10),
		"zeros":   make([]byte, 40<<10),
		"pattern": bytes.Repeat([]byte("abcdefg"), 5000),
	} {
		if got, want := Boundaries(in), refBoundaries(in); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: Boundaries\n%v\nspecification\n%v", name, got, want)
		}
	}
}

type goldenInput struct {
	name string
	data []byte
}

// goldenInputs are built from testgen's splitmix64 only: stable on every platform and Go version.
func goldenInputs() []goldenInput {
	r := testgen.New(0x636b707464) // "ckptd"
	return []goldenInput{
		{"random-256K", r.Bytes(256 << 10)},
		{"json-256K", r.JSON(256 << 10)},
		{"text-64K", r.Text(64 << 10)},
		{"binary-128K", r.Binary(128 << 10)},
		{"zeros-40K", make([]byte, 40<<10)},
		{"pattern-50K", bytes.Repeat([]byte("abcdefg"), 50000/7)},
		{"short-1000", r.Bytes(1000)},
		{"short-1025", r.Bytes(MinSize + 1)},
		{"short-1089", r.Bytes(MinSize + window + 1)},
	}
}

// goldenText is the golden file's content: per input its size and SHA-256 (to tell a changed
// generator from a changed chunker), its cut offsets, and the addresses of its runs (which pin
// the chunk addresses, the run cuts and the run encoding as well).
func goldenText() string {
	var b strings.Builder
	b.WriteString("# Chunk boundaries of store/chunk. A storage format: never change (see cdc.go).\n")
	for _, in := range goldenInputs() {
		r, _ := Split(in.data)
		idx, _ := r.Runs()
		fmt.Fprintf(&b, "input %s %d %x\n", in.name, len(in.data), sha256.Sum256(in.data))
		b.WriteString("ends")
		for _, e := range Boundaries(in.data) {
			b.WriteString(" " + strconv.Itoa(e))
		}
		b.WriteString("\nruns")
		for _, a := range idx.Runs {
			b.WriteString(" " + a.String())
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestGoldenBoundaries(t *testing.T) {
	path := filepath.Join("testdata", "boundaries.golden")
	got := goldenText()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got == string(want) {
		return
	}
	gl := bufio.NewScanner(strings.NewReader(got))
	wl := bufio.NewScanner(bytes.NewReader(want))
	for line := 1; ; line++ {
		g, w := gl.Scan(), wl.Scan()
		if !g || !w || gl.Text() != wl.Text() {
			t.Fatalf("chunk boundaries changed (%s line %d):\n got %.200s\nwant %.200s\n"+
				"This is a storage format: values stored before would no longer share chunks with "+
				"new ones. Restore the scheme, or rerun with -update for a deliberate format change.",
				path, line, gl.Text(), wl.Text())
		}
	}
}
