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
func SplitFromSum(base []byte, baseRecipe Recipe, next []byte, sum [32]byte) (Recipe, []Chunk) {
	if baseRecipe.Size != int64(len(base)) || len(base) == 0 || len(next) == 0 {
		return SplitSum(next, sum)
	}
	prefix := commonPrefix(base, next)
	suffix := commonSuffix(base[prefix:], next[prefix:])
	if prefix == 0 && suffix == 0 {
		return SplitSum(next, sum)
	}
	refs := baseRecipe.Chunks
	out := Recipe{Size: int64(len(next)), SHA256: sum, Chunks: make([]Ref, 0, len(refs)+4)}
	chunks := make([]Chunk, 0, len(refs)+4)
	add := func(ref Ref, start int) {
		out.Chunks = append(out.Chunks, ref)
		end := start + ref.Size
		chunks = append(chunks, Chunk{Ref: ref, Data: next[start:end:end]})
	}
	// The prefix: base's chunks that end inside it, but never base's last chunk (it ends where
	// base ends, which need not be a cut point of next).
	off, i := 0, 0
	for ; i < len(refs)-1 && off+refs[i].Size <= prefix; i++ {
		add(refs[i], off)
		off += refs[i].Size
	}
	// The offsets of base's chunk starts from i on, to find where the cuts realign.
	shift := len(next) - len(base)
	suffixStart := len(next) - suffix
	bi, boff := i, off // the first base chunk starting at or after the cut being compared
	for off < len(next) {
		n := cut(next[off:], MinSize, MaxSize, cutMask)
		data := next[off : off+n : off+n]
		ref := Ref{Addr: AddressOf(data), Size: n}
		out.Chunks = append(out.Chunks, ref)
		chunks = append(chunks, Chunk{Ref: ref, Data: data})
		off += n
		if off >= len(next) || off < suffixStart {
			continue
		}
		// Is off-shift the start of a base chunk? Then the rest is base's.
		want := off - shift
		for bi < len(refs) && boff < want {
			boff += refs[bi].Size
			bi++
		}
		if boff == want && bi < len(refs) {
			for ; bi < len(refs); bi++ {
				add(refs[bi], off)
				off += refs[bi].Size
			}
		}
	}
	return out, chunks
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
