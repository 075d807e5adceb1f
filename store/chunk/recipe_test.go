package chunk

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/ckptd/ckptd/internal/testgen"
)

// memStore is the smallest backend: chunks and runs by address, stored once.
type memStore struct {
	chunks map[Address][]byte
	runs   map[Address][]byte
}

func newMemStore() *memStore {
	return &memStore{chunks: map[Address][]byte{}, runs: map[Address][]byte{}}
}

// put stores value as a backend would (every chunked value, whatever its size) and returns
// its index and how many chunk and run bytes were new.
func (m *memStore) put(value []byte) (idx Index, newChunk, newRun int) {
	r, chunks := Split(value)
	for _, c := range chunks {
		if _, ok := m.chunks[c.Addr]; !ok {
			m.chunks[c.Addr] = bytes.Clone(c.Data)
			newChunk += c.Size
		}
	}
	idx, runs := r.Runs()
	for _, run := range runs {
		if _, ok := m.runs[run.Addr]; !ok {
			m.runs[run.Addr] = run.Data
			newRun += len(run.Data)
		}
	}
	return idx, newChunk, newRun
}

func fetchFrom(m map[Address][]byte) FetchFunc {
	return func(a Address) ([]byte, error) {
		b, ok := m[a]
		if !ok {
			return nil, fmt.Errorf("address %s: %w", a, ErrNotFound)
		}
		return b, nil
	}
}

func (m *memStore) get(idx Index) ([]byte, error) {
	r, err := Expand(idx, fetchFrom(m.runs))
	if err != nil {
		return nil, err
	}
	return Reassemble(r, fetchFrom(m.chunks))
}

// roundTrip stores value and loads it back through runs, and through the flat recipe.
func roundTrip(t *testing.T, m *memStore, value []byte, what string) {
	t.Helper()
	idx, _, _ := m.put(value)
	if idx.Size != int64(len(value)) || idx.SHA256 != sha256.Sum256(value) {
		t.Fatalf("%s: index size %d sha %x for %d bytes", what, idx.Size, idx.SHA256, len(value))
	}
	got, err := m.get(idx)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !bytes.Equal(got, value) {
		t.Fatalf("%s: reassembled %d bytes differ from the %d stored", what, len(got), len(value))
	}
	r, _ := Split(value)
	checkEnds(t, Boundaries(value), len(value))
	if got, err := Reassemble(r, fetchFrom(m.chunks)); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("%s: flat recipe: %v", what, err)
	}
}

// TestRoundTripRandomEdits: random appends, insertions, deletions and replacements anywhere in
// random JSON, text and binary values, small and large, each version stored and reassembled byte
// for byte, in one store shared by all (so chunks are shared across values).
func TestRoundTripRandomEdits(t *testing.T) {
	m := newMemStore()
	r := testgen.New(3)
	kinds := []struct {
		name string
		gen  func(int) []byte
		text bool
	}{
		{"json", r.JSON, true},
		{"text", r.Text, true},
		{"binary", r.Binary, false},
		{"random", r.Bytes, false},
	}
	sizes := []int{0, 1, MinSize - 1, MinSize + window, InlineMax + 1, 40 << 10, 300 << 10}
	edits := 0
	for _, k := range kinds {
		for _, size := range sizes {
			v := k.gen(size)
			roundTrip(t, m, v, fmt.Sprintf("%s %d", k.name, size))
			steps := 25
			if size > 100<<10 {
				steps = 10
			}
			for i := 0; i < steps; i++ {
				maxLen := []int{1, 16, 2000, 20000}[r.Intn(4)]
				e := r.Edit(v, maxLen, k.text)
				v = e.Apply(v)
				roundTrip(t, m, v, fmt.Sprintf("%s %d after edit %d (%s)", k.name, size, i, e))
				edits++
			}
		}
	}
	if edits < 500 {
		t.Fatalf("only %d edits", edits)
	}
}

// TestSharingAfterSmallEdit: after a small edit (at most 64 bytes inserted, deleted or replaced
// anywhere) of a 256 KiB value, the new chunks are the few around the edit. Measured over 200
// edits per kind: mean 1.0-2.3 × AvgSize of new bytes (binary, with long runs of one byte and so
// larger chunks, is the high end); the bounds leave room for the spread but
// would catch a chunker that loses its cut points after an edit (a shifted, position-dependent
// cut rule rewrites everything after the edit).
func TestSharingAfterSmallEdit(t *testing.T) {
	const size, trials = 256 << 10, 200
	r := testgen.New(4)
	for _, k := range []struct {
		name string
		gen  func(int) []byte
		text bool
	}{{"json", r.JSON, true}, {"text", r.Text, true}, {"binary", r.Binary, false}, {"random", r.Bytes, false}} {
		t.Run(k.name, func(t *testing.T) {
			var sumNew, sumRuns, worst int
			var v []byte
			var base *memStore
			for i := 0; i < trials; i++ {
				if i%50 == 0 { // 4 values, 50 edits of each
					v = k.gen(size)
					base = newMemStore()
					base.put(v)
				}
				m := &memStore{chunks: maps.Clone(base.chunks), runs: maps.Clone(base.runs)}
				e := r.Edit(v, 64, k.text)
				_, newChunk, newRun := m.put(e.Apply(v))
				sumNew += newChunk
				sumRuns += newRun
				worst = max(worst, newChunk)
				if newChunk > 6*MaxSize {
					t.Errorf("%s: %d new chunk bytes", e, newChunk)
				}
			}
			mean := float64(sumNew) / trials
			t.Logf("new chunk bytes per edit: mean %.0f (%.2f × AvgSize, %.2f%% of the value), worst %d; new run bytes: mean %.0f",
				mean, mean/AvgSize, 100*mean/size, worst, float64(sumRuns)/trials)
			if mean > 3*AvgSize {
				t.Errorf("mean new chunk bytes %.0f > 3 × AvgSize", mean)
			}
			if runMean := float64(sumRuns) / trials; runMean > 3*16*40 {
				t.Errorf("mean new run bytes %.0f: more than 3 runs of ~16 refs per edit", runMean)
			}
		})
	}
}

// TestSharingAcrossValues: chunks are shared between different values (workflows, threads) that
// contain the same content at different offsets: cuts depend on content, not position.
func TestSharingAcrossValues(t *testing.T) {
	r := testgen.New(5)
	for i := 0; i < 20; i++ {
		common := r.JSON(100 << 10)
		a := append(r.Text(r.Intn(50<<10)), common...)
		b := append(append(r.Bytes(r.Intn(50<<10)), common...), r.Binary(r.Intn(20<<10))...)
		m := newMemStore()
		m.put(a)
		_, newChunk, _ := m.put(b)
		shared := len(b) - newChunk
		if shared < len(common)-2*MaxSize {
			t.Errorf("values with %d bytes in common share only %d bytes of chunks", len(common), shared)
		}
	}
}

func TestWorkloadSharing(t *testing.T) {
	for _, far := range []bool{false, true} {
		w := testgen.NewWorkload(6, 256<<10)
		w.FieldFirst = far
		m := newMemStore()
		m.put(w.State())
		var total int
		const steps = 30
		for s := 0; s < steps; s++ {
			w.Advance()
			v := w.State()
			_, newChunk, _ := m.put(v)
			total += newChunk
			roundTrip(t, m, v, fmt.Sprintf("step %d", s))
		}
		// One ~1 KB message and one field per step: the chunks around the two edits.
		if mean := total / steps; mean > 4*AvgSize+1100 {
			t.Errorf("field first %v: %d new chunk bytes per step", far, mean)
		}
	}
}

func TestRunsCoverRecipe(t *testing.T) {
	r := testgen.New(7)
	for _, v := range [][]byte{nil, r.Bytes(10), r.JSON(500 << 10), make([]byte, 2<<20)} {
		rec, _ := Split(v)
		idx, runs := rec.Runs()
		if len(idx.Runs) != len(runs) || idx.Size != rec.Size || idx.SHA256 != rec.SHA256 {
			t.Fatalf("index %d runs for %d", len(idx.Runs), len(runs))
		}
		var all []Ref
		for i, run := range runs {
			if len(run.Refs) == 0 || len(run.Refs) > MaxRunLen {
				t.Fatalf("run %d has %d refs", i, len(run.Refs))
			}
			if !bytes.Equal(run.Data, EncodeRun(run.Refs)) || run.Addr != AddressOf(run.Data) || idx.Runs[i] != run.Addr {
				t.Fatalf("run %d: data or address inconsistent", i)
			}
			last := run.Refs[len(run.Refs)-1]
			if i < len(runs)-1 && last.Addr[31]&runMask != 0 && len(run.Refs) != MaxRunLen {
				t.Fatalf("run %d ends after a chunk that does not end runs", i)
			}
			for _, ref := range run.Refs[:len(run.Refs)-1] {
				if ref.Addr[31]&runMask == 0 {
					t.Fatalf("run %d goes on after a chunk that ends runs", i)
				}
			}
			all = append(all, run.Refs...)
		}
		if fmt.Sprint(all) != fmt.Sprint(rec.Chunks) {
			t.Fatal("runs do not list the recipe's chunks in order")
		}
	}
}

func TestReassembleDamage(t *testing.T) {
	r := testgen.New(8)
	value := r.JSON(60 << 10)
	rec, chunks := Split(value)
	if len(chunks) < 4 {
		t.Fatalf("only %d chunks", len(chunks))
	}
	good := map[Address][]byte{}
	for _, c := range chunks {
		good[c.Addr] = c.Data
	}
	with := func(edit func(m map[Address][]byte)) FetchFunc {
		m := map[Address][]byte{}
		for a, b := range good {
			m[a] = bytes.Clone(b)
		}
		edit(m)
		return fetchFrom(m)
	}
	c2 := chunks[2].Addr
	ioErr := errors.New("disk on fire")
	swapped := rec
	swapped.Chunks = append([]Ref{}, rec.Chunks...)
	swapped.Chunks[0], swapped.Chunks[1] = swapped.Chunks[1], swapped.Chunks[0]
	otherSHA := rec
	otherSHA.SHA256[0] ^= 1
	short := rec
	short.Chunks = rec.Chunks[:len(rec.Chunks)-1]
	zero := rec
	zero.Chunks = append([]Ref{{Addr: c2}}, rec.Chunks...)
	negative := Recipe{Size: -1}
	tests := []struct {
		name    string
		rec     Recipe
		fetch   FetchFunc
		corrupt bool
		want    string
		check   func(t *testing.T, err error)
	}{
		{"missing chunk", rec, with(func(m map[Address][]byte) { delete(m, c2) }), true,
			"chunk 2 (" + c2.String() + ") is missing", func(t *testing.T, err error) {
				var me *MissingError
				if !errors.As(err, &me) || me.Index != 2 || me.Addr != c2 || me.Kind != KindChunk {
					t.Fatalf("%#v", err)
				}
			}},
		{"flipped byte", rec, with(func(m map[Address][]byte) { m[c2][7] ^= 0x20 }), true,
			"chunk 2 (" + c2.String() + ") is damaged: its", func(t *testing.T, err error) {
				var me *MismatchError
				if !errors.As(err, &me) || me.Got == c2 || me.Got != AddressOf(func() []byte {
					b := bytes.Clone(good[c2])
					b[7] ^= 0x20
					return b
				}()) {
					t.Fatalf("%#v", err)
				}
			}},
		{"truncated chunk", rec, with(func(m map[Address][]byte) { m[c2] = m[c2][:10] }), true,
			"10 bytes stored", nil},
		{"chunks out of order", swapped, fetchFrom(good), true, "reassembled value has", func(t *testing.T, err error) {
			var ve *ValueMismatchError
			if !errors.As(err, &ve) || ve.Got != sha256.Sum256(append(append(bytes.Clone(chunks[1].Data), chunks[0].Data...), value[chunks[0].Size+chunks[1].Size:]...)) {
				t.Fatalf("%#v", err)
			}
		}},
		{"other recorded sha", otherSHA, fetchFrom(good), true, "reassembled value has", nil},
		{"sizes short of the value", short, fetchFrom(good), true, "bad value recipe", nil},
		{"empty chunk", zero, fetchFrom(good), true, "bad chunk 0", nil},
		{"negative size", negative, fetchFrom(good), true, "negative size", nil},
		{"fetch fails", rec, func(Address) ([]byte, error) { return nil, ioErr }, false, "disk on fire",
			func(t *testing.T, err error) {
				if !errors.Is(err, ioErr) {
					t.Fatalf("%v does not wrap the fetch error", err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Reassemble(tc.rec, tc.fetch)
			if err == nil {
				t.Fatalf("no error, %d bytes", len(got))
			}
			if got != nil {
				t.Fatal("bytes returned with an error")
			}
			if errors.Is(err, ErrCorrupt) != tc.corrupt {
				t.Fatalf("errors.Is(%v, ErrCorrupt) = %v", err, !tc.corrupt)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if tc.check != nil {
				tc.check(t, err)
			}
		})
	}
	if got, err := Reassemble(rec, fetchFrom(good)); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("intact: %v", err)
	}
}

func TestExpandDamage(t *testing.T) {
	r := testgen.New(9)
	m := newMemStore()
	idx, _, _ := m.put(r.Bytes(300 << 10))
	if len(idx.Runs) < 3 {
		t.Fatalf("only %d runs", len(idx.Runs))
	}
	run1 := idx.Runs[1]
	garbage := []byte{runFormat, 1, 0xff}
	badRun := idx
	badRun.Runs = append([]Address{}, idx.Runs...)
	badRun.Runs[1] = AddressOf(garbage)
	otherSize := idx
	otherSize.Size++
	tests := []struct {
		name string
		idx  Index
		edit func(runs map[Address][]byte)
		want string
	}{
		{"missing run", idx, func(runs map[Address][]byte) { delete(runs, run1) }, "run 1 (" + run1.String() + ") is missing"},
		{"damaged run", idx, func(runs map[Address][]byte) { runs[run1] = append(bytes.Clone(runs[run1]), 0) }, "run 1 (" + run1.String() + ") is damaged"},
		{"undecodable run", badRun, func(runs map[Address][]byte) { runs[AddressOf(garbage)] = garbage }, "bad run 1: truncated at ref 0"},
		{"index size differs", otherSize, func(map[Address][]byte) {}, "bad value recipe: chunks hold"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runs := map[Address][]byte{}
			for a, b := range m.runs {
				runs[a] = b
			}
			tc.edit(runs)
			_, err := Expand(tc.idx, fetchFrom(runs))
			if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a corrupt error saying %q", err, tc.want)
			}
		})
	}
	ioErr := errors.New("connection reset")
	if _, err := Expand(idx, func(Address) ([]byte, error) { return nil, ioErr }); !errors.Is(err, ioErr) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("fetch error: %v", err)
	}
}

func TestDecodeRun(t *testing.T) {
	a := AddressOf([]byte("x"))
	good := EncodeRun([]Ref{{a, 1}, {a, 300}})
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "unknown format"},
		{"format 2", append([]byte{2}, good[1:]...), "unknown format"},
		{"no count", []byte{runFormat}, "bad ref count"},
		{"zero refs", []byte{runFormat, 0}, "bad ref count"},
		{"too many refs", []byte{runFormat, MaxRunLen + 1}, "bad ref count"},
		{"count not minimal", append([]byte{runFormat, 0x82, 0x00}, good[2:]...), "bad ref count"},
		{"truncated address", good[:20], "truncated at ref 0"},
		{"missing size", good[:2+32], "bad size of ref 0"},
		{"size 0", append(append([]byte{runFormat, 1}, a[:]...), 0), "bad size of ref 0"},
		{"size not minimal", append(append([]byte{runFormat, 1}, a[:]...), 0x81, 0x00), "bad size of ref 0"},
		{"size too large", append(append([]byte{runFormat, 1}, a[:]...), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), "bad size of ref 0"},
		{"trailing byte", append(bytes.Clone(good), 0), "1 trailing bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			refs, err := DecodeRun(tc.b)
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Kind != KindRun || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeRun = %v, %v; want a run format error saying %q", refs, err, tc.want)
			}
		})
	}
	refs, err := DecodeRun(good)
	if err != nil || fmt.Sprint(refs) != fmt.Sprint([]Ref{{a, 1}, {a, 300}}) {
		t.Fatalf("good run: %v %v", refs, err)
	}
}

func TestAddresses(t *testing.T) {
	a, b := AddressOf([]byte("a")), AddressOf([]byte("b"))
	if got, err := ParseAddress(a.String()); err != nil || got != a {
		t.Fatalf("ParseAddress(String()) = %v, %v", got, err)
	}
	for _, s := range []string{"", "ab", strings.Repeat("g", 64), a.String() + "00"} {
		if _, err := ParseAddress(s); err == nil {
			t.Errorf("ParseAddress(%q) accepted", s)
		}
	}
	enc := AppendAddresses(nil, []Address{a, b, a})
	if got, err := DecodeAddresses(enc); err != nil || fmt.Sprint(got) != fmt.Sprint([]Address{a, b, a}) {
		t.Fatalf("DecodeAddresses = %v, %v", got, err)
	}
	if _, err := DecodeAddresses(enc[:40]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("40 bytes: %v", err)
	}
	rec := Recipe{Chunks: []Ref{{a, 1}, {b, 1}, {a, 1}}, Size: 3}
	if got := rec.Distinct(); fmt.Sprint(got) != fmt.Sprint([]Address{a, b}) {
		t.Fatalf("Distinct = %v", got)
	}
	if !Inline(InlineMax) || Inline(InlineMax+1) {
		t.Fatal("Inline threshold")
	}
}
