package chunk

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ckptd/ckptd/internal/testgen"
)

// sameSplit checks SplitFrom(base, Split(base), next) against Split(next): recipe and chunks.
func sameSplit(t *testing.T, base, next []byte, what string) {
	t.Helper()
	br, _ := Split(base)
	want, wantChunks := Split(next)
	got, gotChunks := SplitFrom(base, br, next)
	if got.Size != want.Size || got.SHA256 != want.SHA256 || len(got.Chunks) != len(want.Chunks) {
		t.Fatalf("%s: SplitFrom gives %d bytes in %d chunks, Split %d in %d", what, got.Size, len(got.Chunks), want.Size, len(want.Chunks))
	}
	for i := range want.Chunks {
		if got.Chunks[i] != want.Chunks[i] {
			t.Fatalf("%s: chunk %d: SplitFrom %v, Split %v", what, i, got.Chunks[i], want.Chunks[i])
		}
		if !bytes.Equal(gotChunks[i].Data, wantChunks[i].Data) || gotChunks[i].Ref != wantChunks[i].Ref {
			t.Fatalf("%s: chunk %d data differs", what, i)
		}
	}
}

func TestSplitFromMatchesSplit(t *testing.T) {
	r := testgen.New(77)
	inputs := []struct {
		name string
		v    []byte
		text bool
	}{
		{"json", r.JSON(300 << 10), true},
		{"random", r.Bytes(200 << 10), false},
		{"binary", r.Binary(300 << 10), false},
		{"one byte", bytes.Repeat([]byte{'a'}, 100<<10), false},
		{"small", r.Bytes(3000), false},
	}
	for _, in := range inputs {
		v := in.v
		for i := 0; i < 150; i++ {
			maxLen := []int{1, 16, 1000, 40 << 10}[i%4]
			e := r.Edit(v, maxLen, in.text)
			next := e.Apply(v)
			sameSplit(t, v, next, fmt.Sprintf("%s step %d (%s)", in.name, i, e))
			if len(next) > 0 {
				v = next
			}
		}
	}
	// Edges: identical, empty, prefix of the other, unrelated, wrong recipe.
	a := r.JSON(100 << 10)
	for _, c := range []struct {
		name       string
		base, next []byte
	}{
		{"identical", a, a},
		{"empty base", nil, a},
		{"empty next", a, nil},
		{"next extends base", a[:50<<10], a},
		{"next is a prefix", a, a[:50<<10]},
		{"next is a suffix", a, a[30<<10:]},
		{"base is a suffix", a[30<<10:], a},
		{"unrelated", a, r.Bytes(90 << 10)},
		{"tiny", []byte("x"), []byte("y")},
	} {
		sameSplit(t, c.base, c.next, c.name)
	}
	wrong, _ := Split(a[:1000])
	got, _ := SplitFrom(a, wrong, a)
	want, _ := Split(a)
	if len(got.Chunks) != len(want.Chunks) || got.SHA256 != want.SHA256 {
		t.Fatalf("a recipe of another value: SplitFrom must fall back to Split")
	}
}

// The workload's steps cut only around the change.
func TestSplitFromWorkload(t *testing.T) {
	w := testgen.NewWorkload(5, 1<<20)
	prev := w.State()
	pr, _ := Split(prev)
	for step := 0; step < 20; step++ {
		w.Advance()
		next := w.State()
		got, _ := SplitFrom(prev, pr, next)
		want, _ := Split(next)
		if len(got.Chunks) != len(want.Chunks) {
			t.Fatalf("step %d: %d chunks, want %d", step, len(got.Chunks), len(want.Chunks))
		}
		for i := range want.Chunks {
			if got.Chunks[i] != want.Chunks[i] {
				t.Fatalf("step %d chunk %d differs", step, i)
			}
		}
		prev, pr = next, got
	}
}

func BenchmarkSplitFrom(b *testing.B) {
	w := testgen.NewWorkload(5, 1<<20)
	prev := w.State()
	pr, _ := Split(prev)
	w.Advance()
	next := w.State()
	b.Run("split", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		for b.Loop() {
			Split(next)
		}
	})
	b.Run("splitFrom", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		for b.Loop() {
			SplitFrom(prev, pr, next)
		}
	})
}

// listGrowth returns a msgpack-like list of n items (a count header, then the items) and the
// same list with one more item: the count changes at the start, the item is appended.
func listGrowth(r *testgen.Rand, n int) (base, next []byte) {
	var items [][]byte
	for i := 0; i <= n; i++ {
		items = append(items, r.Bytes(100+i%300))
	}
	enc := func(k int) []byte {
		var b []byte
		switch {
		case k < 16:
			b = append(b, 0x90|byte(k))
		case k < 1<<16:
			b = append(b, 0xdc, byte(k>>8), byte(k))
		default:
			b = append(b, 0xdd, byte(k>>24), byte(k>>16), byte(k>>8), byte(k))
		}
		for _, it := range items[:k] {
			b = append(b, it...)
		}
		return b
	}
	return enc(n), enc(n + 1)
}

// Two changes: one short near the start (a count), one elsewhere (an append, an insertion, a
// replacement), and counts whose header grows: SplitFrom still gives Split's chunks.
func TestSplitFromTwoChanges(t *testing.T) {
	r := testgen.New(91)
	for _, n := range []int{14, 15, 16, 300, 65535} {
		base, next := listGrowth(r, n)
		sameSplit(t, base, next, fmt.Sprintf("list of %d grows", n))
	}
	v := r.JSON(200 << 10)
	for i := 0; i < 200; i++ {
		a := r.Edit(v, []int{1, 4, 16, 20}[i%4], true)
		mid := a.Apply(v)
		b := r.Edit(mid, []int{1, 16, 1000, 40 << 10}[i%4], true)
		next := b.Apply(mid)
		sameSplit(t, v, next, fmt.Sprintf("step %d (%s, then %s)", i, a, b))
		if len(next) > 0 {
			v = next
		}
	}
}

// A msgpack list of ~120 KB that grows by one item: SplitFrom against Split.
func BenchmarkSplitFromListGrowth(b *testing.B) {
	base, next := listGrowth(testgen.New(5), 500)
	br, _ := Split(base)
	b.Run("Split", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		for b.Loop() {
			Split(next)
		}
	})
	b.Run("SplitFrom", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		for b.Loop() {
			SplitFrom(base, br, next)
		}
	})
}
