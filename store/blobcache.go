package store

import (
	"container/list"
	"sync"
)

// BlobCache keeps recently written or read LangGraph channel values in memory, keyed by the
// SHA-256 of their stored bytes (Packed.SHA), for every backend. A read looks the key up from
// the row it is about to read and takes the value from here instead of reading, decompressing
// and verifying the stored bytes again. Being content-addressed it is never stale: a key names exactly one
// value, whoever wrote or deleted rows since (another process included). Values are shared:
// callers must not modify them. Least recently used values go first once over max bytes.
type BlobCache struct {
	mu           sync.Mutex
	max          int64
	size         int64
	lru          *list.List // of *blobEntry, most recent first
	m            map[[32]byte]*list.Element
	hits, misses uint64
}

type blobEntry struct {
	key [32]byte
	val []byte
}

// NewBlobCache returns a cache of at most max bytes; nil (every call a no-op) when max <= 0.
func NewBlobCache(max int64) *BlobCache {
	if max <= 0 {
		return nil
	}
	return &BlobCache{max: max, lru: list.New(), m: map[[32]byte]*list.Element{}}
}

// Get returns the value stored under sha (the stored bytes' SHA-256).
func (c *BlobCache) Get(sha []byte) ([]byte, bool) {
	if c == nil || len(sha) != 32 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[[32]byte(sha)]
	if !ok {
		c.misses++
		return nil, false
	}
	c.hits++
	c.lru.MoveToFront(e)
	return e.Value.(*blobEntry).val, true
}

// Keeps reports whether Add keeps a value of n bytes: not when the cache is off, nor for values
// larger than an eighth of it (one would evict everything else).
func (c *BlobCache) Keeps(n int) bool { return c != nil && int64(n) <= c.max/8 }

// Add remembers val as the value whose stored bytes hash to sha. val must not change afterwards.
func (c *BlobCache) Add(sha, val []byte) {
	if !c.Keeps(len(val)) || len(sha) != 32 {
		return
	}
	key := [32]byte(sha)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		c.lru.MoveToFront(e)
		return
	}
	c.m[key] = c.lru.PushFront(&blobEntry{key: key, val: val})
	c.size += int64(len(val))
	for c.size > c.max {
		last := c.lru.Back()
		be := last.Value.(*blobEntry)
		c.lru.Remove(last)
		delete(c.m, be.key)
		c.size -= int64(len(be.val))
	}
}

// Stats describes the cache (zero when it is off).
func (c *BlobCache) Stats() BlobCacheStats {
	if c == nil {
		return BlobCacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return BlobCacheStats{Entries: len(c.m), Bytes: c.size, MaxBytes: c.max, Hits: c.hits, Misses: c.misses}
}
