package chunk

// The chunking scheme. Every constant here is part of the storage format: it decides where a value
// is cut, hence which chunks two versions of a value share. Reads never depend on it (a recipe
// lists its chunks, whatever cut them), so changing it later breaks nothing stored, but every value
// written afterwards would share almost no chunk with the values written before. Hence: never
// change them; TestGoldenBoundaries fails when anything here moves a cut.
const (
	// MinSize is the smallest chunk, except for the last chunk of a value: no cut is looked for
	// before it (FastCDC's cut-point skipping).
	MinSize = 1 << 10
	// MaxSize is the largest chunk: a value with no cut point for MaxSize bytes (long runs of one
	// byte, ...) is cut there.
	MaxSize = 16 << 10
	// AvgSize is the mean chunk size of varied data: MinSize plus the mean distance to the next
	// cut point, 1/P(cut) = 2^10. BenchmarkChunking reports the mean it measures.
	AvgSize = MinSize + 1<<10
	// InlineMax is the largest value a backend stores whole, as today, instead of as chunks:
	// values this small would be one or two chunks, so cutting them saves nothing and costs a
	// recipe.
	InlineMax = 4 << 10

	// window is the reach of the Gear hash: its top bit depends on the last 64 bytes. Hashing
	// starts window bytes before MinSize, so whether a position is a cut point depends on the 64
	// bytes ending there only, never on where the chunk started.
	window = 64

	// cutMask: a position is a cut point when these 10 bits of the hash are zero (1 position in
	// 1024). The bits are spread evenly over the word (TestMask derives them), so every test
	// looks at the whole 64-byte window. One mask for every position, unlike FastCDC's
	// normalised chunking (a harder mask before a "normal size", an easier one after): there the
	// cut depends on the distance from the chunk's start, so after an insertion the cuts that
	// follow drift for several chunks (3.45 chunks rewritten beyond a 1 KB insertion with min
	// 1 KiB / normal 2 KiB, against 1.51 with one mask: see docs/storage.md).
	cutMask = 0x8208208208208200
)

// Inline reports whether a backend stores a value of n bytes whole rather than as chunks.
func Inline(n int) bool { return n <= InlineMax }

// Boundaries returns where the chunks of value end: strictly increasing offsets, the last one
// len(value). An empty value has no chunks (nil). The cuts depend on the content only (Gear
// hashing with cut-point skipping as in FastCDC, the table in gear.go and the constants above),
// so an edit moves the cuts near it only, and the chunks before and after it stay the same.
func Boundaries(value []byte) []int {
	if len(value) == 0 {
		return nil
	}
	ends := make([]int, 0, len(value)/AvgSize+1)
	for off := 0; off < len(value); {
		off += cut(value[off:], MinSize, MaxSize, cutMask)
		ends = append(ends, off)
	}
	return ends
}

// cut returns the length of the chunk that starts data: at most max, at least min unless data
// is shorter. The chunk ends after the first byte, from min on, where the hash of the 64 bytes
// ending there has no bit of mask set. The parameters are arguments only so that the tests can
// compare other settings.
func cut(data []byte, min, max int, mask uint64) int {
	n := len(data)
	if n <= min {
		return n
	}
	if n > max {
		n = max
	}
	d := data[:n]
	var fp uint64
	for _, b := range d[min-window : min] {
		fp = fp<<1 + gear[b]
	}
	for i := min; i < len(d); i++ {
		fp = fp<<1 + gear[d[i]]
		if fp&mask == 0 {
			return i + 1
		}
	}
	return n
}
