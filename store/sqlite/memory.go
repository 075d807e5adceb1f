package sqlite

import (
	"context"
	"time"
)

// Memory at rest (#18: the daemon's RSS at most 64 MB once idle). Every connection has a page
// cache of up to cache_size (16 MiB for the writer, 4 MiB for each reader): reads spread over a
// large database fill them all, and SQLite keeps the pages until the connection closes. Once the
// store has been idle for releaseIdle after some activity, the background loop asks every
// connection to give its cache back (PRAGMA shrink_memory: the memory goes back to the operating
// system, modernc's allocator unmapping it); the next reads fill it again from the OS page cache.
// It also drops the codec's cache of verified chunks (store.ChunkCache), Go heap that the
// runtime returns to the system in the background once collected.

const releaseIdle = time.Second

// noteRead counts a read for the idle detection (one atomic add per read).
func (s *Store) noteRead() { s.reads.Add(1) }

// idleRelease is called by the background loop on every tick: it releases the connections'
// memory once nothing was read or written for releaseIdle after something was.
func (s *Store) idleRelease(m *memState) {
	n := s.reads.Load() + s.writes.Load()
	now := time.Now()
	if n != m.seen {
		m.seen, m.since, m.dirty = n, now, true
		return
	}
	if m.dirty && now.Sub(m.since) >= releaseIdle {
		m.dirty = false
		s.releaseMemory()
	}
}

type memState struct {
	seen  uint64
	since time.Time
	dirty bool
}

// releaseMemory empties the page caches of the idle read connections, of the checkpointer's,
// and (between its transactions) of the writer's, and drops the verified chunks of loads
// (store.ChunkCache: up to 16 MiB by default; the next loads decode and check them again).
func (s *Store) releaseMemory() {
	s.releases.Add(1)
	s.codec.ChunkCache().Clear()
	ctx := context.Background()
	var idle []*rconn
	for len(idle) < s.rpool.size {
		select {
		case rc := <-s.rpool.free:
			idle = append(idle, rc)
			continue
		default:
		}
		break
	}
	for _, rc := range idle {
		_, err := rc.conn.ExecContext(ctx, "PRAGMA shrink_memory")
		s.rpool.put(rc, err != nil)
	}
	if s.cdb != nil {
		_, _ = s.cdb.ExecContext(ctx, "PRAGMA shrink_memory")
	}
	if s.ws != nil {
		s.shrinkWriter.Store(true)
		s.signal()
	}
}
