package sqlite

import "github.com/ckptd/ckptd/store"

// BlobCacheStats reports the LangGraph channel-value cache (zero when it is off).
func (s *Store) BlobCacheStats() store.BlobCacheStats { return s.blobs.Stats() }

// ChunkCacheStats reports the codec's cache of verified chunks (store.ChunkCache).
func (s *Store) ChunkCacheStats() store.ChunkCacheStats { return s.codec.ChunkCache().Stats() }
