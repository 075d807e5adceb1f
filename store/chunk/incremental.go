package chunk

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
)

// SplitFrom returns Split(next) when base's recipe is baseRecipe (Split(base)), cutting only
// around what changed: a value saved after an edit of the previous one shares a prefix and a
// suffix with it, and cut points depend on the bytes since the chunk's start only (see cut). So
// every chunk of base that ends (by a real cut, not at base's end) inside the common prefix is a
// chunk of next, and once a cut of next lands inside the common suffix at the offset where base
// has a cut as well, every chunk from there on is base's. Only the chunks in between are cut
// and hashed: a 1 MB value edited in one place costs one SHA-256 over the value (its address)
// and the cutting of a few chunks, instead of cutting and hashing everything (~3 ms).
//
// The result is identical to Split(next) (TestSplitFromMatchesSplit); a baseRecipe that does
// not describe base (wrong size) makes it fall back to Split. The chunks' Data alias next.
func SplitFrom(base []byte, baseRecipe Recipe, next []byte) (Recipe, []Chunk) {
	return SplitFromSum(base, baseRecipe, next, sha256.Sum256(next))
}

// SplitFromSum is SplitFrom for a caller that has just computed next's SHA-256 itself (sum):
// the recipe records sum without hashing next again. A wrong sum makes a recipe whose value
// never verifies.
//
// Beyond the common prefix and suffix it finds one more stretch next shares with base at (about)
// the same place: the bytes after a short change near the start (a msgpack list's count, a JSON
// counter) that the prefix stops at. A list that grew by one item then costs the cutting of its
// first chunk and of its end, not of everything.
func SplitFromSum(base []byte, baseRecipe Recipe, next []byte, sum [32]byte) (Recipe, []Chunk) {
	if baseRecipe.Size != int64(len(base)) || len(base) == 0 || len(next) == 0 {
		return SplitSum(next, sum)
	}
	regions := matchRegions(base, next)
	if len(regions) == 0 {
		return SplitSum(next, sum)
	}
	refs := baseRecipe.Chunks
	starts := make([]int, len(refs)+1) // starts[i]: base offset of chunk i; starts[len]: len(base)
	for i, r := range refs {
		starts[i+1] = starts[i] + r.Size
	}
	out := Recipe{Size: int64(len(next)), SHA256: sum, Chunks: make([]Ref, 0, len(refs)+4)}
	chunks := make([]Chunk, 0, len(refs)+4)
	add := func(ref Ref, start int) {
		out.Chunks = append(out.Chunks, ref)
		end := start + ref.Size
		chunks = append(chunks, Chunk{Ref: ref, Data: next[start:end:end]})
	}
	// Every chunk of next starts where a cut of next fell. Where that is, inside a region, the
	// start of a base chunk (moved by the region's shift) lying wholly inside the region, that
	// chunk is next's too: cut points depend on the bytes since the chunk's start only. Base's
	// last chunk ends where base ends, which is not a cut point, unless next ends there as well.
	off, ri, bi := 0, 0, 0
	for off < len(next) {
		for ri < len(regions) && regions[ri].nextEnd() <= off {
			ri++
		}
		if ri < len(regions) && regions[ri].next <= off {
			rg := regions[ri]
			want := off - rg.shift()
			for bi < len(refs) && starts[bi] < want {
				bi++
			}
			if bi < len(refs) && starts[bi] == want {
				reused := false
				for ; bi < len(refs) && starts[bi+1] <= rg.base+rg.n; bi++ {
					if bi == len(refs)-1 && starts[bi+1]+rg.shift() != len(next) {
						break
					}
					add(refs[bi], off)
					off += refs[bi].Size
					reused = true
				}
				if reused {
					continue
				}
			}
		}
		n := cut(next[off:], MinSize, MaxSize, cutMask)
		data := next[off : off+n : off+n]
		ref := Ref{Addr: AddressOf(data), Size: n}
		out.Chunks = append(out.Chunks, ref)
		chunks = append(chunks, Chunk{Ref: ref, Data: data})
		off += n
	}
	return out, chunks
}

// region is a stretch of n bytes at offset next of next that equals base's at offset base.
type region struct{ next, base, n int }

func (r region) nextEnd() int { return r.next + r.n }
func (r region) shift() int   { return r.next - r.base }

// Resynchronising after a short change near the start: the change spans at most resyncGap
// bytes, and may have grown or shrunk the value by at most resyncShift (a msgpack count's header
// grows by two bytes at 16 items and at 65,536); the bytes after it must match for resyncMin.
const (
	resyncGap   = 16
	resyncShift = 4
	resyncMin   = 64
)

// matchRegions returns, in order and without overlap, the stretches next shares with base that
// SplitFromSum reuses base's chunks in: the common prefix, the stretch after a short change that
// ends the prefix (if any), and the common suffix of what is left.
func matchRegions(base, next []byte) []region {
	var out []region
	prefix := commonPrefix(base, next)
	if prefix > 0 {
		out = append(out, region{0, 0, prefix})
	}
	bEnd, nEnd := prefix, prefix // where the regions found so far end, in base and in next
	if prefix < len(base) && prefix < len(next) {
	search:
		for gap := 1; gap <= resyncGap; gap++ {
			for d := -resyncShift; d <= resyncShift; d++ {
				nb, bb := prefix+gap+max(d, 0), prefix+gap+max(-d, 0)
				if nb+resyncMin > len(next) || bb+resyncMin > len(base) || !bytes.Equal(next[nb:nb+resyncMin], base[bb:bb+resyncMin]) {
					continue
				}
				n := commonPrefix(base[bb:], next[nb:])
				out = append(out, region{nb, bb, n})
				bEnd, nEnd = bb+n, nb+n
				break search
			}
		}
	}
	if suffix := commonSuffix(base[bEnd:], next[nEnd:]); suffix > 0 {
		out = append(out, region{len(next) - suffix, len(base) - suffix, suffix})
	}
	return out
}

// commonPrefix returns the length of the longest common prefix of a and b (as delta.Compute:
// 256-byte blocks with bytes.Equal, then 8-byte words).
func commonPrefix(a, b []byte) int {
	const block = 256
	n := min(len(a), len(b))
	i := 0
	for i+block <= n && bytes.Equal(a[i:i+block], b[i:i+block]) {
		i += block
	}
	for ; i+8 <= n; i += 8 {
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)/8
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// commonSuffix returns the length of the longest common suffix of a and b.
func commonSuffix(a, b []byte) int {
	const block = 256
	n := min(len(a), len(b))
	la, lb := len(a), len(b)
	i := 0
	for i+block <= n && bytes.Equal(a[la-i-block:la-i], b[lb-i-block:lb-i]) {
		i += block
	}
	for ; i+8 <= n; i += 8 {
		if x := binary.LittleEndian.Uint64(a[la-i-8:]) ^ binary.LittleEndian.Uint64(b[lb-i-8:]); x != 0 {
			return i + bits.LeadingZeros64(x)/8
		}
	}
	for i < n && a[la-1-i] == b[lb-1-i] {
		i++
	}
	return i
}
