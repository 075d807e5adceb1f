package store

import (
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
// an edit of. The chunks not in base are compressed now, on the caller's goroutine (in
// parallel when there are many); the others only if a backend finds them missing (Packed).
func NewChunkedValue(v []byte, base *ValueBase, codec *Codec, compress bool) *ChunkedValue {
	return newChunkedValue(v, nil, base, codec, compress)
}

// newChunkedValue is NewChunkedValue with v's SHA-256 already known when sum is not nil.
func newChunkedValue(v []byte, sum *[32]byte, base *ValueBase, codec *Codec, compress bool) *ChunkedValue {
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
	cv.packAll(fresh)
	return cv
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
	out := c.enc.EncodeAll(b, make([]byte, 0, limit))
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
func (c *Codec) OpenChunked(indexData []byte, size int64, sha []byte, runs BatchFetch[[]byte], chunks BatchFetch[ChunkRow]) ([]byte, error) {
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
	rows, err := chunks(recipe.Distinct())
	if err != nil {
		return nil, err
	}
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
