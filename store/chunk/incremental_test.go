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
