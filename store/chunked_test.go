package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ckptd/ckptd/store/chunk"
)

// chunkedFixture is a chunked value stored in maps, as a backend would store it.
type chunkedFixture struct {
	index []byte
	size  int64
	sha   []byte
	runs  map[chunk.Address][]byte
	rows  map[chunk.Address]ChunkRow
}

func newChunkedFixture(c *Codec, v []byte, compress bool) *chunkedFixture {
	cv := NewChunkedValue(v, nil, c, compress)
	f := &chunkedFixture{index: cv.IndexData(), size: cv.Size(), sha: bytes.Clone(cv.SHA256()),
		runs: map[chunk.Address][]byte{}, rows: map[chunk.Address]ChunkRow{}}
	for _, rc := range cv.RunCounts() {
		f.runs[rc.Addr] = cv.Run(rc.Addr).Data
	}
	for a := range cv.chunks {
		data, enc, size := cv.Packed(a)
		f.rows[a] = ChunkRow{Enc: enc, Size: int64(size), Data: bytes.Clone(data)}
	}
	return f
}

func (f *chunkedFixture) open(c *Codec) ([]byte, error) {
	return c.OpenChunked(f.index, f.size, f.sha, fetchFrom(f.runs), fetchFrom(f.rows))
}

// reference is OpenChunked as it was before assemble: every chunk decoded on its own, then
// chunk.Reassemble. Its answers (value or error text) are the ones OpenChunked must give.
func (f *chunkedFixture) reference(c *Codec) ([]byte, error) {
	addrs, err := chunk.DecodeAddresses(f.index)
	if err != nil {
		return nil, err
	}
	recipe, err := chunk.Expand(chunk.Index{Size: f.size, SHA256: [32]byte(f.sha), Runs: addrs}, fromMap(f.runs))
	if err != nil {
		return nil, err
	}
	rows := map[chunk.Address]ChunkRow{}
	for _, a := range recipe.Distinct() {
		if r, ok := f.rows[a]; ok {
			rows[a] = r
		}
	}
	return c.reassemble(recipe, rows)
}

func fetchFrom[T any](m map[chunk.Address]T) BatchFetch[T] {
	return func(addrs []chunk.Address) (map[chunk.Address]T, error) {
		out := map[chunk.Address]T{}
		for _, a := range addrs {
			if v, ok := m[a]; ok {
				out[a] = v
			}
		}
		return out, nil
	}
}

func jsonLike(rng *rand.Rand, n int) []byte {
	var b bytes.Buffer
	words := []string{"agent", "tool", "message", "state", "value", "channel", "step", "plan"}
	for b.Len() < n {
		fmt.Fprintf(&b, `{"id":"%016x","w":"%s %s","n":%d},`, rng.Uint64(), words[rng.IntN(len(words))], words[rng.IntN(len(words))], rng.IntN(1e6))
	}
	return b.Bytes()[:n]
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestOpenChunkedAssemble checks that OpenChunked (decoding into place, in parallel for large
// values) gives back every value exactly, and for every kind of damage the same error as the
// chunk by chunk rebuild; with a ChunkCache too, every damage done after a load filled it.
func TestOpenChunkedAssemble(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) { testOpenChunkedAssemble(t, cached) })
	}
}

func testOpenChunkedAssemble(t *testing.T, cached bool) {
	c, err := NewCodec(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if cached {
		c.UseChunkCache(NewChunkCache(64 << 20))
		defer func() {
			if st := c.ChunkCache().Stats(); st.Hits == 0 || st.Entries == 0 {
				t.Errorf("the cache was not used: %+v", st)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(7, 7))
	block := randBytes(rng, 24<<10)
	values := []struct {
		name string
		v    []byte
	}{
		{"json 20KB", jsonLike(rng, 20<<10)},
		{"json 100KB", jsonLike(rng, 100<<10)},
		{"json 1MB", jsonLike(rng, 1<<20)},
		{"random 100KB", randBytes(rng, 100<<10)},
		{"repeats", bytes.Repeat(block, 12)},
		{"repeats of json", bytes.Repeat(jsonLike(rng, 30<<10), 6)},
		{"mixed", append(append(jsonLike(rng, 60<<10), randBytes(rng, 40<<10)...), jsonLike(rng, 60<<10)...)},
	}
	for _, tc := range values {
		for _, compress := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/compress=%v", tc.name, compress), func(t *testing.T) {
				f := newChunkedFixture(c, tc.v, compress)
				got, err := f.open(c)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, tc.v) {
					t.Fatal("value differs")
				}
				if cap(got) != len(got) {
					t.Errorf("cap %d, len %d: the caller's appends must not reach bytes beyond", cap(got), len(got))
				}
				if cached { // again, from the cache: the same bytes, and not the cache's own
					clear(got)
					again, err := f.open(c)
					if err != nil || !bytes.Equal(again, tc.v) {
						t.Fatalf("second load: %v, equal %v", err, bytes.Equal(again, tc.v))
					}
				}
				if len(tc.v) > 200<<10 {
					return // its chunks are those of the smaller values: no other damage to show
				}
				// chunks damaged in turn (the first and last few in the value), in every way
				addrs, _ := chunk.DecodeAddresses(f.index)
				recipe, err := chunk.Expand(chunk.Index{Size: f.size, SHA256: [32]byte(f.sha), Runs: addrs}, fromMap(f.runs))
				if err != nil {
					t.Fatal(err)
				}
				distinct := recipe.Distinct()
				if strings.HasPrefix(tc.name, "repeats") && len(distinct) >= len(recipe.Chunks) {
					t.Fatalf("no repeated chunks in %d", len(recipe.Chunks))
				}
				if len(distinct) > 6 {
					distinct = append(distinct[:3], distinct[len(distinct)-3:]...)
				}
				for _, a := range distinct {
					row := f.rows[a]
					damages := []struct {
						what string
						mut  func(r ChunkRow) (ChunkRow, bool)
					}{
						{"flipped byte", func(r ChunkRow) (ChunkRow, bool) {
							r.Data = bytes.Clone(r.Data)
							r.Data[len(r.Data)/2] ^= 0x40
							return r, true
						}},
						{"truncated", func(r ChunkRow) (ChunkRow, bool) { r.Data = r.Data[:len(r.Data)-1]; return r, true }},
						{"size +1", func(r ChunkRow) (ChunkRow, bool) { r.Size++; return r, true }},
						{"size -1", func(r ChunkRow) (ChunkRow, bool) { r.Size--; return r, true }},
						{"unknown encoding", func(r ChunkRow) (ChunkRow, bool) { r.Enc = 9; return r, true }},
						{"raw bytes as zstd", func(r ChunkRow) (ChunkRow, bool) {
							if r.Enc != EncRaw {
								return r, false
							}
							r.Enc = EncZstd
							return r, true
						}},
						{"missing", func(r ChunkRow) (ChunkRow, bool) { return r, true }},
					}
					for _, d := range damages {
						bad, ok := d.mut(row)
						if !ok {
							continue
						}
						if d.what == "missing" {
							delete(f.rows, a)
						} else {
							f.rows[a] = bad
						}
						_, gotErr := f.open(c)
						_, wantErr := f.reference(c)
						f.rows[a] = row
						if wantErr == nil || gotErr == nil || gotErr.Error() != wantErr.Error() ||
							!errors.Is(gotErr, chunk.ErrCorrupt) {
							t.Fatalf("chunk %s %s: got %v, want %v (matching ErrCorrupt)", a, d.what, gotErr, wantErr)
						}
					}
				}
				// a wrong recorded SHA-256
				sha := f.sha
				f.sha = bytes.Clone(sha)
				f.sha[0] ^= 1
				_, gotErr := f.open(c)
				_, wantErr := f.reference(c)
				f.sha = sha
				if gotErr == nil || wantErr == nil || gotErr.Error() != wantErr.Error() {
					t.Fatalf("wrong SHA-256: got %v, want %v", gotErr, wantErr)
				}
			})
		}
	}
}

// BenchmarkOpenChunked is the CPU of rebuilding a chunked value from rows in memory: decoding,
// checking each chunk's address and the value's SHA-256 (no database). Beside it: the same with
// a ChunkCache holding every chunk (cached) and with one that holds none and takes them all
// (filling), the chunk by chunk rebuild it replaced (reference) and its floors, a bare zstd
// decode of the same chunks into one buffer (decode) and a bare SHA-256 of the value (sha256).
func BenchmarkOpenChunked(b *testing.B) {
	c, err := NewCodec(1 << 30)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{100 << 10, 1 << 20} {
		f := newChunkedFixture(c, jsonLike(rand.New(rand.NewPCG(1, uint64(n))), n), true)
		b.Run(fmt.Sprintf("%dKB", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				if _, err := f.open(c); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, warm := range []bool{true, false} {
			name := "cached"
			if !warm {
				name = "filling" // every chunk missed, decoded and copied into the cache
			}
			b.Run(fmt.Sprintf("%dKB/%s", n>>10, name), func(b *testing.B) {
				cc := NewChunkCache(64 << 20)
				c.UseChunkCache(cc)
				defer c.UseChunkCache(nil)
				b.SetBytes(int64(n))
				for i := 0; i < b.N; i++ {
					if !warm {
						cc.Clear()
					}
					if _, err := f.open(c); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		var frames [][]byte
		var sizes []int
		for _, r := range f.rows {
			if r.Enc == EncZstd {
				frames, sizes = append(frames, r.Data), append(sizes, int(r.Size))
			}
		}
		b.Run(fmt.Sprintf("%dKB/decode", n>>10), func(b *testing.B) {
			buf := make([]byte, n+decodeSlack)
			for i := 0; i < b.N; i++ {
				off := 0
				for j, fr := range frames {
					if _, err := c.dec.DecodeAll(fr, buf[off:off:off+sizes[j]+decodeSlack]); err != nil {
						b.Fatal(err)
					}
					off += sizes[j]
				}
			}
		})
		v, _ := f.open(c)
		b.Run(fmt.Sprintf("%dKB/sha256", n>>10), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				sha256.Sum256(v)
			}
		})
		b.Run(fmt.Sprintf("%dKB/reference", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				if _, err := f.reference(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCutChunkedValuePackMissing: a value cut without compressing compresses only the chunks it
// is told are missing; the others are compressed only if asked for (Packed), and both give the
// bytes NewChunkedValue would store.
func TestCutChunkedValuePackMissing(t *testing.T) {
	c, err := NewCodec(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v := jsonLike(rand.New(rand.NewPCG(3, 3)), 200<<10)
	want := NewChunkedValue(v, nil, c, true)
	cv := CutChunkedValue(v, c, true)
	addrs := cv.Chunks()
	if len(addrs) != len(want.chunks) || len(addrs) < 4 {
		t.Fatalf("%d chunks, want %d (at least 4)", len(addrs), len(want.chunks))
	}
	stored := map[chunk.Address]bool{}
	for _, a := range addrs[:len(addrs)/2] {
		stored[a] = true
	}
	cv.PackMissing(stored)
	for _, a := range addrs {
		if got := cv.chunks[a].packed; got == stored[a] {
			t.Errorf("chunk %s: packed %v, stored %v", a, got, stored[a])
		}
		d, enc, size := cv.Packed(a)
		wd, wenc, wsize := want.Packed(a)
		if enc != wenc || size != wsize || !bytes.Equal(d, wd) {
			t.Errorf("chunk %s: packed as %d (%d bytes), want %d (%d bytes)", a, enc, len(d), wenc, len(wd))
		}
	}
	if !bytes.Equal(cv.IndexData(), want.IndexData()) {
		t.Error("index differs")
	}
}
