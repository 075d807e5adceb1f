package sqlite

import "github.com/ckptd/ckptd/store"

// BlobCacheStats reports the LangGraph channel-value cache (zero when it is off).
func (s *Store) BlobCacheStats() store.BlobCacheStats { return s.blobs.Stats() }
