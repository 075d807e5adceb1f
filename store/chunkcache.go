package store

import (
	"container/list"
	"hash/maphash"
	"sync"

	"github.com/ckptd/ckptd/store/chunk"
)

// DefaultChunkCacheBytes sizes a backend's ChunkCache when Options.ChunkCacheBytes is 0.
const DefaultChunkCacheBytes = 16 << 20

// ChunkCache keeps the decoded bytes of chunks that loads verified, so that a later load of a
// value listing them skips their decompression and address check (OpenChunked, docs/storage.md
// "Loading and verification"). An entry is keyed by the chunk's address and remembers a
// fingerprint of the bytes that were stored for it (maphash of the row's data, with its
// encoding and raw size): a load uses the entry only when the row it just fetched has the same
// encoding, size and fingerprint, so stored bytes damaged since (anything but a fingerprint
// collision, 1 in 2^64) miss, are decoded and checked, and are reported as damaged. On a hit
// the bytes used are the ones checked against the address when the entry was made, so a
// collision can only miss reporting damage, never return wrong bytes, and the whole value's
// SHA-256 is checked on every load anyway. Each open backend has its own (no global state,
// its own maphash seed). Least recently used entries go first once over max bytes.
type ChunkCache struct {
	seed         maphash.Seed
	mu           sync.Mutex
	max          int64
	size         int64
	lru          *list.List // of *chunkEntry, most recent first
	m            map[chunk.Address]*list.Element
	hits, misses uint64
}

type chunkEntry struct {
	addr chunk.Address
	raw  []byte // verified against addr; never modified
	enc  int    // encoding of the stored bytes fp is of
	fp   uint64 // maphash of the stored bytes
}

// chunkEntryOverhead is what an entry costs besides its raw bytes (the entry, its list element
// and map slot), counted in the cache's size so that max bounds its memory.
const chunkEntryOverhead = 160

// NewChunkCache returns a cache of at most max bytes; nil (every call a no-op) when max <= 0.
func NewChunkCache(max int64) *ChunkCache {
	if max <= 0 {
		return nil
	}
	return &ChunkCache{seed: maphash.MakeSeed(), max: max, lru: list.New(), m: map[chunk.Address]*list.Element{}}
}

// fingerprint is the fingerprint of a chunk's stored bytes.
func (c *ChunkCache) fingerprint(stored []byte) uint64 { return maphash.Bytes(c.seed, stored) }

// get returns the verified raw bytes of the chunk at a when the cache has them for exactly the
// stored bytes a row holds: the same encoding, raw size and fingerprint fp (fingerprint of the
// row's data). The bytes are shared: callers copy them and never modify them.
func (c *ChunkCache) get(a chunk.Address, enc int, size int64, fp uint64) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[a]
	if !ok {
		c.misses++
		return nil, false
	}
	ce := e.Value.(*chunkEntry)
	if ce.enc != enc || int64(len(ce.raw)) != size || ce.fp != fp {
		c.misses++
		return nil, false
	}
	c.hits++
	c.lru.MoveToFront(e)
	return ce.raw, true
}

// verifiedChunk is a chunk a load decoded and checked: its address, raw bytes (not yet owned by
// the cache) and the encoding and fingerprint of its stored bytes.
type verifiedChunk struct {
	addr chunk.Address
	raw  []byte
	enc  int
	fp   uint64
}

// add remembers chunks whose raw bytes were checked against their addresses, each as the
// decoding of the stored bytes its enc and fp describe; it copies the raw bytes (the caller
// keeps its buffer). A chunk already cached takes the new encoding and fingerprint (its stored
// bytes changed, compressed by a compactor for example; its raw bytes are the same).
func (c *ChunkCache) add(cs []verifiedChunk) {
	if c == nil || len(cs) == 0 {
		return
	}
	keep := c.max / 8 // one chunk never evicts most of the others (chunks are at most chunk.MaxSize)
	owned := make([][]byte, len(cs))
	for i, v := range cs {
		if int64(len(v.raw)) <= keep {
			owned[i] = append([]byte(nil), v.raw...)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, v := range cs {
		if owned[i] == nil {
			continue
		}
		if e, ok := c.m[v.addr]; ok {
			ce := e.Value.(*chunkEntry)
			ce.enc, ce.fp = v.enc, v.fp
			c.lru.MoveToFront(e)
			continue
		}
		c.m[v.addr] = c.lru.PushFront(&chunkEntry{addr: v.addr, raw: owned[i], enc: v.enc, fp: v.fp})
		c.size += int64(len(owned[i])) + chunkEntryOverhead
	}
	for c.size > c.max {
		last := c.lru.Back()
		ce := last.Value.(*chunkEntry)
		c.lru.Remove(last)
		delete(c.m, ce.addr)
		c.size -= int64(len(ce.raw)) + chunkEntryOverhead
	}
}

// Clear drops every entry (an idle backend gives its memory back); the cache fills again as
// loads verify chunks.
func (c *ChunkCache) Clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Init()
	c.m = map[chunk.Address]*list.Element{} // not clear(c.m): a cleared map keeps its buckets
	c.size = 0
}

// ChunkCacheStats describes a ChunkCache: the same figures as a BlobCache's, Bytes counting the
// raw bytes plus a per-entry overhead.
type ChunkCacheStats = BlobCacheStats

// Stats describes the cache (zero when it is off).
func (c *ChunkCache) Stats() ChunkCacheStats {
	if c == nil {
		return ChunkCacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return ChunkCacheStats{Entries: len(c.m), Bytes: c.size, MaxBytes: c.max, Hits: c.hits, Misses: c.misses}
}
