package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/ckptd/ckptd/store/chunk"
)

// Chunked values (docs/storage.md, "Chunked values"): a value larger than chunk.InlineMax is
// stored as content-defined chunks shared by every value that contains them, and its row keeps
// its index (chunk.Index: size, SHA-256, run addresses) with encoding EncChunked. What a backend
// does with them is the same everywhere and written once here: prepare a value (cut, cut into
// runs, compress the chunks that are likely new), and load one back (fetch its runs and chunks
// in batches, verify everything). The SQL that stores rows and counts references is the
// backends'.

// ChunkedValue is a value made ready for chunked storage.
type ChunkedValue struct {
	Index  chunk.Index
	Recipe chunk.Recipe
	runs   map[chunk.Address]chunk.Run
	runN   chunk.Tally
	chunks map[chunk.Address]*StoredChunk
	codec  *Codec
	pack   bool // compress chunks
	// packing is closed once the chunks NewChunkedValue compresses in the background are done
	// (nil: none were): Packed and PackMissing wait for it.
	packing chan struct{}
}

// StoredChunk is one distinct chunk of a ChunkedValue: its raw bytes and, once Packed, what a
// backend stores (zstd when that saves at least 1/8, else the raw bytes).
type StoredChunk struct {
	Raw    []byte
	data   []byte
	enc    int
	packed bool
}

// ValueBase is an earlier value, with its recipe (nil if it was not cut), that a new value probably shares most chunks
// with (the previous state of the same workflow): NewChunkedValue then cuts only around the
// change (chunk.SplitFrom) and compresses only the chunks base does not have.
type ValueBase struct {
	Value  []byte
	Recipe *chunk.Recipe
}

// NewChunkedValue cuts v (larger than chunk.InlineMax) into chunks and runs. With compress the
// chunks are stored zstd-compressed where that pays; base, if not nil, is a value v is likely
// an edit of. The chunks not in base are compressed from now on, on a goroutine of their own
// (in parallel when there are many), while the value goes to the writer, whose statements need
// them only when it stores the chunks its database lacks (Packed waits for them); the others
// only if a backend finds them missing (Packed).
func NewChunkedValue(v []byte, base *ValueBase, codec *Codec, compress bool) *ChunkedValue {
	return newChunkedValue(v, nil, base, codec, compress)
}

// newChunkedValue is NewChunkedValue with v's SHA-256 already known when sum is not nil.
func newChunkedValue(v []byte, sum *[32]byte, base *ValueBase, codec *Codec, compress bool) *ChunkedValue {
	cv, fresh := cutChunkedValue(v, sum, base, codec, compress)
	if cv.pack && len(fresh) > 0 {
		cv.packing = make(chan struct{})
		go func() {
			defer close(cv.packing)
			cv.packAll(fresh)
		}()
	}
	return cv
}

// packed waits for the chunks NewChunkedValue compresses in the background.
func (cv *ChunkedValue) packed() {
	if cv.packing != nil {
		<-cv.packing
	}
}

// CutChunkedValue is NewChunkedValue without a base and without compressing anything yet: the
// caller finds out which chunks its backend already stores and compresses the others with
// PackMissing (a chunk still missing when the value is stored is compressed then: Packed).
func CutChunkedValue(v []byte, codec *Codec, compress bool) *ChunkedValue {
	cv, _ := cutChunkedValue(v, nil, nil, codec, compress)
	return cv
}

// Chunks lists the addresses of the value's distinct chunks.
func (cv *ChunkedValue) Chunks() []chunk.Address {
	out := make([]chunk.Address, 0, len(cv.chunks))
	for a := range cv.chunks {
		out = append(out, a)
	}
	return out
}

// PackMissing compresses the chunks stored does not list (in parallel when there are many):
// the ones a backend does not hold yet, whose compression it would otherwise do while storing
// the value.
func (cv *ChunkedValue) PackMissing(stored map[chunk.Address]bool) {
	cv.packed()
	var fresh []*StoredChunk
	for a, c := range cv.chunks {
		if !stored[a] {
			fresh = append(fresh, c)
		}
	}
	cv.packAll(fresh)
}

// cutChunkedValue cuts v and returns the value with the chunks base does not have (all without
// base), not compressed yet.
func cutChunkedValue(v []byte, sum *[32]byte, base *ValueBase, codec *Codec, compress bool) (*ChunkedValue, []*StoredChunk) {
	var recipe chunk.Recipe
	var cs []chunk.Chunk
	switch {
	case base != nil && base.Recipe != nil && sum != nil:
		recipe, cs = chunk.SplitFromSum(base.Value, *base.Recipe, v, *sum)
	case base != nil && base.Recipe != nil:
		recipe, cs = chunk.SplitFrom(base.Value, *base.Recipe, v)
	case sum != nil:
		recipe, cs = chunk.SplitSum(v, *sum)
	default:
		recipe, cs = chunk.Split(v)
	}
	idx, runs := recipe.Runs()
	cv := &ChunkedValue{Index: idx, Recipe: recipe, runs: make(map[chunk.Address]chunk.Run, len(runs)),
		runN: chunk.Tally{}, chunks: make(map[chunk.Address]*StoredChunk, len(cs)), codec: codec, pack: compress && codec != nil}
	for _, r := range runs {
		cv.runs[r.Addr] = r
		cv.runN[r.Addr]++
	}
	var known map[chunk.Address]bool
	if base != nil && base.Recipe != nil {
		known = make(map[chunk.Address]bool, len(base.Recipe.Chunks))
		for _, r := range base.Recipe.Chunks {
			known[r.Addr] = true
		}
	}
	var fresh []*StoredChunk
	for _, c := range cs {
		if _, ok := cv.chunks[c.Addr]; ok {
			continue
		}
		sc := &StoredChunk{Raw: c.Data}
		cv.chunks[c.Addr] = sc
		if !known[c.Addr] {
			fresh = append(fresh, sc)
		}
	}
	return cv, fresh
}

// packAll compresses chunks, on up to GOMAXPROCS goroutines when there are many.
func (cv *ChunkedValue) packAll(cs []*StoredChunk) {
	if len(cs) < 32 {
		for _, c := range cs {
			cv.packOne(c)
		}
		return
	}
	par := min(runtime.GOMAXPROCS(0), 8)
	var wg sync.WaitGroup
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(cs); i += par {
				cv.packOne(cs[i])
			}
		}()
	}
	wg.Wait()
}

func (cv *ChunkedValue) packOne(c *StoredChunk) {
	if c.packed {
		return
	}
	c.data, c.enc = c.Raw, EncRaw
	if cv.pack {
		c.data, c.enc = cv.codec.CompressChunk(c.Raw)
	}
	c.packed = true
}

// IndexData is what the value's row stores: the addresses of its runs (chunk.AppendAddresses).
func (cv *ChunkedValue) IndexData() []byte { return chunk.AppendAddresses(nil, cv.Index.Runs) }

// RunCounts lists the value's runs with how often its index lists each, in address order.
func (cv *ChunkedValue) RunCounts() []chunk.Count { return cv.runN.Sorted() }

// Run returns one of the value's runs.
func (cv *ChunkedValue) Run(a chunk.Address) chunk.Run { return cv.runs[a] }

// Packed returns what a backend stores for the value's chunk a: its bytes, their encoding and
// the raw size. It compresses the chunk first if NewChunkedValue did not.
func (cv *ChunkedValue) Packed(a chunk.Address) (data []byte, enc int, size int) {
	cv.packed()
	c := cv.chunks[a]
	cv.packOne(c)
	return c.data, c.enc, len(c.Raw)
}

// Size is the value's size.
func (cv *ChunkedValue) Size() int64 { return cv.Index.Size }

// SHA256 is the value's SHA-256.
func (cv *ChunkedValue) SHA256() []byte { return cv.Index.SHA256[:] }

// CompressChunk is Compress for one chunk of a chunked value (at most chunk.MaxSize bytes, so
// always one zstd frame): the zstd encoding when it saves at least 1/8, else b with EncRaw.
func (c *Codec) CompressChunk(b []byte) ([]byte, int) {
	limit := len(b) - len(b)/8
	out := c.chunkEnc.EncodeAll(b, make([]byte, 0, limit))
	if len(out) > limit {
		return b, EncRaw
	}
	return out, EncZstd
}

// ChunkRow is a stored chunk as a backend read it: its encoding, raw size and stored bytes.
type ChunkRow struct {
	Enc  int
	Size int64
	Data []byte
}

// BatchFetch returns the stored rows of as many of addrs as are stored (a backend's one query
// for all of them: WHERE address IN (…) or = ANY($1)). A missing address is simply absent from
// the map; only storage failures are errors.
type BatchFetch[T any] func(addrs []chunk.Address) (map[chunk.Address]T, error)

// OpenChunked rebuilds and verifies a chunked value from its stored index (IndexData, its
// recorded size and SHA-256): the runs in one batch, then the chunks in one batch,
// decompressed. Damage of any kind (a missing or altered run or chunk, a bad index, a value
// whose size or SHA-256 is not the recorded one) is an error matching chunk.ErrCorrupt whose
// text says what is damaged; storage failures are passed on.
//
// A chunk whose stored bytes are the ones an earlier load of this codec verified (its
// ChunkCache, if any: same encoding, size and fingerprint) is taken from the cache instead of
// being decompressed and checked against its address again; the value's SHA-256 is checked
// all the same.
func (c *Codec) OpenChunked(indexData []byte, size int64, sha []byte, runs BatchFetch[[]byte], chunks BatchFetch[ChunkRow]) ([]byte, error) {
	return c.openChunked(indexData, size, sha, runs, chunks, c.cache)
}

// VerifyChunked is OpenChunked for an integrity check: every chunk is decompressed and checked
// against its address, and the ChunkCache is neither read nor filled (a check of the whole
// database would otherwise push every chunk through it).
func (c *Codec) VerifyChunked(indexData []byte, size int64, sha []byte, runs BatchFetch[[]byte], chunks BatchFetch[ChunkRow]) ([]byte, error) {
	return c.openChunked(indexData, size, sha, runs, chunks, nil)
}

func (c *Codec) openChunked(indexData []byte, size int64, sha []byte, runs BatchFetch[[]byte], chunks BatchFetch[ChunkRow], cache *ChunkCache) ([]byte, error) {
	addrs, err := chunk.DecodeAddresses(indexData)
	if err != nil {
		return nil, err
	}
	if len(sha) != 32 {
		return nil, &chunk.FormatError{Kind: chunk.KindValue, Index: -1, Reason: fmt.Sprintf("recorded SHA-256 has %d bytes", len(sha))}
	}
	idx := chunk.Index{Size: size, SHA256: [32]byte(sha), Runs: addrs}
	got, err := runs(distinct(addrs))
	if err != nil {
		return nil, err
	}
	recipe, err := chunk.Expand(idx, fromMap(got))
	if err != nil {
		return nil, err
	}
	places := layout(recipe)
	addrs = make([]chunk.Address, len(places))
	for i, p := range places {
		addrs[i] = p.addr
	}
	rows, err := chunks(addrs)
	if err != nil {
		return nil, err
	}
	if out, ok := c.assemble(recipe, places, rows, cache); ok {
		return out, nil
	}
	// Something does not fit (damage, or a value too large to reserve at once): the step by step
	// rebuild says exactly what.
	return c.reassemble(recipe, rows)
}

// reassemble decodes every chunk on its own and hands them to chunk.Reassemble, which checks
// each chunk and the value and names what is damaged.
func (c *Codec) reassemble(recipe chunk.Recipe, rows map[chunk.Address]ChunkRow) ([]byte, error) {
	raw := make(map[chunk.Address][]byte, len(rows))
	for a, r := range rows {
		b, derr := c.Decode(r.Data, r.Enc, r.Size)
		if derr != nil {
			return nil, &chunkDecodeError{addr: a, err: derr}
		}
		raw[a] = b
	}
	return chunk.Reassemble(recipe, fromMap(raw))
}

// chunkPlace is a distinct chunk of a recipe where it is first used: its address, its offset
// in the value and its size.
type chunkPlace struct {
	addr chunk.Address
	off  int64
	size int
}

// layout lists the distinct chunks of a valid recipe in order of first use (Recipe.Distinct),
// with where they first appear.
func layout(r chunk.Recipe) []chunkPlace {
	seen := make(map[chunk.Address]struct{}, len(r.Chunks))
	out := make([]chunkPlace, 0, len(r.Chunks))
	var off int64
	for _, ref := range r.Chunks {
		if _, ok := seen[ref.Addr]; !ok {
			seen[ref.Addr] = struct{}{}
			out = append(out, chunkPlace{addr: ref.Addr, off: off, size: ref.Size})
		}
		off += int64(ref.Size)
	}
	return out
}

// assembleCap bounds the value assemble reserves up front (like chunk.Reassemble's cap: a
// damaged recipe claiming a huge size must not allocate it); larger values take reassemble.
const assembleCap = 64 << 20

// decodeSlack is what the zstd decoder needs past a block's end to use its fast copies
// (klauspost/compress: compressedBlockOverAlloc); without it, it copies bounds-exactly, ~15-20%
// slower on our ~2 KiB chunks.
const decodeSlack = 16

// assemble is chunk.Reassemble without its copies: every distinct chunk is decoded straight
// into its first place in the value and its SHA-256 checked against its address there, repeats are copied from the first place, and the whole
// value's size and SHA-256 are checked. The checks are Reassemble's, on the same bytes; ok is
// false when any fails (or a chunk is missing, of the wrong size, or does not decode): the
// caller then rebuilds with reassemble, which names the damage.
//
// With a cache, a chunk whose row is what cache holds it verified as (ChunkCache.get: same
// encoding, size and fingerprint of the stored bytes) is copied from there instead of decoded
// and checked; the others are decoded and checked as above, and added to cache once the whole
// value checked out.
//
// Chunks are decoded in offset order, each with decodeSlack bytes of room past its end (the
// decoder's fast copies scribble there) inside the value's buffer: those bytes belong to a later
// chunk, decoded afterwards, or to a repeat, copied once every chunk is decoded, so no scribble
// outlives the decoding. (Decoding on several goroutines was measured too: on the 2 shared
// cores of bench/results/2026-11-27-save-load-cost.md it cost more CPU and more latency.)
func (c *Codec) assemble(r chunk.Recipe, places []chunkPlace, rows map[chunk.Address]ChunkRow, cache *ChunkCache) (_ []byte, ok bool) {
	if r.Size > assembleCap || len(rows) < len(places) {
		return nil, false
	}
	buf := make([]byte, r.Size+decodeSlack)
	out := buf[:r.Size]
	var fresh []verifiedChunk // decoded and checked here: for cache
	// one decodes p into its place (buf has room for the scribbles past the last chunk).
	one := func(p chunkPlace) bool {
		row, found := rows[p.addr]
		if !found || row.Size != int64(p.size) {
			return false
		}
		end := p.off + int64(p.size)
		dst := buf[p.off:end:end]
		var fp uint64
		if cache != nil {
			fp = cache.fingerprint(row.Data)
			if raw, hit := cache.get(p.addr, row.Enc, row.Size, fp); hit {
				copy(dst, raw)
				return true
			}
		}
		switch row.Enc {
		case EncRaw, EncRawPending:
			if len(row.Data) != p.size {
				return false
			}
			copy(dst, row.Data)
		case EncZstd:
			// Never more than end+decodeSlack: the decoder does not grow dst (WithDecodeAllCapLimit).
			got, err := c.dec.DecodeAll(row.Data, buf[p.off:p.off:end+decodeSlack])
			if err != nil || len(got) != p.size || &got[0] != &dst[0] {
				return false
			}
		default:
			return false
		}
		if chunk.AddressOf(dst) != p.addr {
			return false
		}
		if cache != nil {
			// dst is final: later chunks and repeats are written past it only
			fresh = append(fresh, verifiedChunk{addr: p.addr, raw: dst, enc: row.Enc, fp: fp})
		}
		return true
	}
	for _, p := range places {
		if !one(p) {
			return nil, false
		}
	}
	if len(places) < len(r.Chunks) { // repeats: the same bytes as their first place, checked there
		first := make(map[chunk.Address]int64, len(places))
		for _, p := range places {
			first[p.addr] = p.off
		}
		var off int64
		for _, ref := range r.Chunks {
			if src := first[ref.Addr]; src != off {
				copy(out[off:off+int64(ref.Size)], out[src:src+int64(ref.Size)])
			}
			off += int64(ref.Size)
		}
	}
	if sha256.Sum256(out) != r.SHA256 {
		return nil, false
	}
	cache.add(fresh) // copies: out is the caller's
	return out[:r.Size:r.Size], true
}

// chunkDecodeError says a stored chunk does not decode (unknown encoding, bad zstd frame, wrong
// size): damage, like a chunk whose bytes do not hash to its address.
type chunkDecodeError struct {
	addr chunk.Address
	err  error
}

func (e *chunkDecodeError) Error() string {
	return fmt.Sprintf("chunk %s does not decode: %v: %v", e.addr, e.err, chunk.ErrCorrupt)
}

func (e *chunkDecodeError) Is(target error) bool { return target == chunk.ErrCorrupt }

func distinct(addrs []chunk.Address) []chunk.Address {
	seen := make(map[chunk.Address]struct{}, len(addrs))
	out := make([]chunk.Address, 0, len(addrs))
	for _, a := range addrs {
		if _, ok := seen[a]; !ok {
			seen[a] = struct{}{}
			out = append(out, a)
		}
	}
	return out
}

func fromMap(m map[chunk.Address][]byte) chunk.FetchFunc {
	return func(a chunk.Address) ([]byte, error) {
		if b, ok := m[a]; ok {
			return b, nil
		}
		return nil, chunk.ErrNotFound
	}
}

// ChunkedReason is the reason a checkpoint (or value) is corrupt when err, from OpenChunked,
// says stored chunks are damaged; ok is false for other errors (storage failures).
func ChunkedReason(err error) (reason string, ok bool) {
	if errors.Is(err, chunk.ErrCorrupt) {
		return "chunked value: " + strings.TrimSuffix(err.Error(), ": "+chunk.ErrCorrupt.Error()), true
	}
	return "", false
}

// PreparedWrite is a pending write made ready to store: its value cut into chunks (Chunked)
// when it is larger than chunk.InlineMax.
type PreparedWrite struct {
	Write
	Chunked *ChunkedValue
}

// PrepareWrites cuts the large values of ws (outside the writer); their chunks are compressed
// when the value is larger than compressThreshold (Options.CompressThreshold; < 0: never).
func PrepareWrites(ws []Write, codec *Codec, compressThreshold int) []PreparedWrite {
	out := make([]PreparedWrite, len(ws))
	for i, w := range ws {
		out[i].Write = w
		if w.Value != nil && !chunk.Inline(len(w.Value)) {
			out[i].Chunked = NewChunkedValue(w.Value, nil, codec, compressThreshold >= 0 && len(w.Value) > compressThreshold)
		}
	}
	return out
}

// OpenValue verifies and decodes one stored value: Unpack, or for a chunked one (EncChunked) the
// bytes openChunked reassembles, its damage reported as a *CorruptError naming checkpointID and
// what.
func OpenValue(checkpointID, what string, data []byte, enc int, size int64, sha []byte, openChunked func() ([]byte, error)) ([]byte, error) {
	if enc != EncChunked {
		return Unpack(checkpointID, what, data, enc, size, sha)
	}
	raw, err := openChunked()
	if err != nil {
		if reason, ok := ChunkedReason(err); ok {
			return nil, &CorruptError{CheckpointID: checkpointID, Reason: what + ": " + reason}
		}
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return raw, nil
}
