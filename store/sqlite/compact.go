package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// Deferred compression. A save stores a large state raw (encoding store.EncRawPending) and replies
// as soon as that is committed; the compactor compresses it shortly afterwards, off the save
// path: once the writer has been idle for compactIdle, or at once when more than
// compactBacklogBytes of raw states are waiting (so a client that saves non-stop is not left
// with an uncompressed database). zstd costs about as much CPU as the whole SQLite insert of a
// 100 KB state; paid on the save path it was a third of the save's latency.
//
// Rows still pending after a crash or a stop are found again at Open (a partial index on
// encoding = store.EncRawPending keeps that scan proportional to what is pending). Readers treat
// store.EncRawPending exactly like store.EncRaw.
const (
	compactIdle         = 20 * time.Millisecond
	compactBacklogBytes = 32 << 20
	compactBatchBytes   = 1 << 20 // raw bytes compressed (or cut into chunks) per write transaction
)

// compactor tracks the states waiting for compression.
type compactor struct {
	mu      sync.Mutex
	pending map[string]int64 // state hash -> raw size
	bytes   int64
	kick    chan struct{}

	compacted  int64 // states compressed so far
	savedBytes int64 // bytes saved by them
}

func newCompactor() *compactor {
	return &compactor{pending: map[string]int64{}, kick: make(chan struct{}, 1)}
}

func (c *compactor) add(hash []byte, size int64) {
	c.mu.Lock()
	if _, ok := c.pending[string(hash)]; !ok {
		c.pending[string(hash)] = size
		c.bytes += size
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// take removes up to maxBytes worth of pending hashes (at least one if any).
func (c *compactor) take(maxBytes int64) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]byte
	var n int64
	for h, size := range c.pending {
		if len(out) > 0 && n+size > maxBytes {
			break
		}
		out = append(out, []byte(h))
		n += size
		delete(c.pending, h)
		c.bytes -= size
	}
	return out
}

func (c *compactor) backlog() (states int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending), c.bytes
}

// CompactionStats reports the deferred-compression backlog of this process.
func (s *Store) CompactionStats() store.CompactionStats {
	n, b := s.compact.backlog()
	s.compact.mu.Lock()
	defer s.compact.mu.Unlock()
	return store.CompactionStats{PendingStates: n, PendingBytes: b, Compacted: s.compact.compacted, SavedBytes: s.compact.savedBytes}
}

// scanPending registers every state left raw-pending in the database (by a crash, a stop, or
// another ckptd process).
func (s *Store) scanPending(ctx context.Context) error {
	return s.readTx(ctx, func(tx *rtx) error {
		rows, err := tx.QueryContext(ctx, `SELECT hash, size FROM states WHERE encoding = ?`, store.EncRawPending)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h []byte
			var size int64
			if err := rows.Scan(&h, &size); err != nil {
				return err
			}
			s.compact.add(h, size)
		}
		return rows.Err()
	})
}

// compactLoop compresses pending states whenever the writer is idle or the backlog is large.
func (s *Store) compactLoop() {
	defer s.bgWG.Done()
	ctx := context.Background()
	for {
		select {
		case <-s.stopBG:
			return
		case <-s.compact.kick:
		}
		for {
			if !s.waitCompactTurn() {
				return
			}
			if !s.Condition().Writable() {
				return // nothing more is written
			}
			hashes := s.compact.take(compactBatchBytes)
			if len(hashes) == 0 {
				break
			}
			if err := s.compactStates(ctx, hashes); err != nil {
				if errors.Is(err, store.ErrClosed) {
					return
				}
				s.log.Warn("ckptd store: compressing stored states failed; they stay uncompressed until the next start", "err", err, "states", len(hashes))
			}
		}
	}
}

// waitCompactTurn waits until the writer has been idle for compactIdle (or the backlog is over
// compactBacklogBytes). False when the store is closing.
func (s *Store) waitCompactTurn() bool {
	for {
		if _, b := s.compact.backlog(); b == 0 || b >= compactBacklogBytes {
			return true
		}
		idle, wait := s.writerIdle(compactIdle)
		if idle {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-s.stopBG:
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// writerIdle reports whether the writer has nothing queued and committed nothing for d; if
// not, wait is how long until it may be.
func (s *Store) writerIdle(d time.Duration) (idle bool, wait time.Duration) {
	s.mu.Lock()
	busy := len(s.queue) > 0
	s.mu.Unlock()
	since := time.Since(time.Unix(0, s.lastCommit.Load()))
	if !busy && since >= d {
		return true, 0
	}
	if wait = d - since; busy || wait <= 0 {
		wait = d
	}
	return false, wait
}

type compacted struct {
	hash      []byte
	size      int64
	data      []byte
	enc       int
	corrupted bool
	cv        *store.ChunkedValue // a state over chunk.InlineMax: cut into chunks instead
}

// compactStates compresses the given raw-pending states, or cuts those over chunk.InlineMax into
// shared chunks (new content saved whole: PreparedSave.ChunkLater), and writes them back in one
// transaction.
func (s *Store) compactStates(ctx context.Context, hashes [][]byte) error {
	var out []compacted
	err := s.readTx(ctx, func(tx *rtx) error {
		out = out[:0]
		for _, h := range hashes {
			var size int64
			var data []byte
			err := tx.QueryRowContext(ctx, `SELECT size, data FROM states WHERE hash = ? AND encoding = ?`, h, store.EncRawPending).Scan(&size, &data)
			if errors.Is(err, sql.ErrNoRows) {
				continue // deleted by retention, or compacted by another process
			}
			if err != nil {
				return err
			}
			out = append(out, compacted{hash: h, size: size, data: data})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range out {
		c := &out[i]
		if sum := sha256.Sum256(c.data); int64(len(c.data)) != c.size || !bytes.Equal(sum[:], c.hash) {
			// Leave it as it is: loads report it as corrupt, and compressing it would only hide that.
			c.corrupted = true
			s.log.Error("ckptd store: a stored state does not match its SHA-256; leaving it uncompressed", "sha256", fmt.Sprintf("%x", c.hash))
			continue
		}
		if !chunk.Inline(len(c.data)) { // saved whole as new content (PreparedSave.ChunkLater): cut it now
			// cut now, compressed below: only the chunks the database does not hold yet
			c.cv = store.CutChunkedValue(c.data, s.codec, s.opts.CompressThreshold >= 0 && len(c.data) > s.opts.CompressThreshold)
			continue
		}
		data, enc := s.codec.Compress(c.data, s.opts.CompressThreshold)
		if enc == store.EncRaw {
			c.data, c.enc = nil, store.EncRaw // incompressible: only the encoding changes
		} else {
			c.data, c.enc = data, enc
		}
	}
	s.packMissing(ctx, out)
	var saved, done int64
	err = s.do(ctx, func(ctx context.Context, w *wtx) error {
		saved, done = 0, 0
		for _, c := range out {
			if c.cv != nil {
				stored, ok, err := s.chunkState(ctx, w, c.hash, c.cv)
				if err != nil {
					return err
				}
				if ok {
					saved += c.size - stored
					done++
				}
				continue
			}
			var res sql.Result
			var err error
			switch {
			case c.corrupted || c.data == nil: // stays raw for good
				res, err = w.exec(ctx, `UPDATE states SET encoding = ? WHERE hash = ? AND encoding = ?`, store.EncRaw, c.hash, store.EncRawPending)
			default:
				res, err = w.exec(ctx, `UPDATE states SET encoding = ?, stored_size = ?, data = ? WHERE hash = ? AND encoding = ?`,
					c.enc, len(c.data), c.data, c.hash, store.EncRawPending)
			}
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 || c.data == nil {
				continue
			}
			w.fig.stateResized(c.size, int64(len(c.data)))
			rows, err := w.query(ctx, `UPDATE checkpoints SET stored_size = ? WHERE state_hash = ? AND stored_size = ? RETURNING workflow_id`,
				len(c.data), c.hash, c.size)
			if err != nil {
				return err
			}
			for rows.Next() {
				var wf string
				if err := rows.Scan(&wf); err != nil {
					rows.Close()
					return err
				}
				w.fig.restored(wf, c.size, int64(len(c.data)))
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if err := rows.Err(); err != nil {
				return err
			}
			s.walPending.Add(int64(len(c.data)))
			saved += c.size - int64(len(c.data))
			done++
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.compact.mu.Lock()
	s.compact.compacted += done
	s.compact.savedBytes += saved
	s.compact.mu.Unlock()
	return nil
}

// Compact compresses every state still waiting for deferred compression now, without waiting
// for the writer to be idle. Tests, benchmarks and `ckptd` commands that exit right away use it.
func (s *Store) Compact(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hashes := s.compact.take(compactBatchBytes)
		if len(hashes) == 0 {
			return nil
		}
		if err := s.compactStates(ctx, hashes); err != nil {
			return fmt.Errorf("compact: %w", err)
		}
	}
}

// chunkState turns the raw-pending state hash into the chunked value cv inside the writer's
// transaction: its chunks and runs counted (inserted when new), the row's data replaced by the
// index, and the stored size of the row and of its checkpoints set to what it now adds. ok is
// false (and nothing changes) when the row is gone or no longer pending (deleted by retention,
// done by another process).
func (s *Store) chunkState(ctx context.Context, w *wtx, hash []byte, cv *store.ChunkedValue) (stored int64, ok bool, err error) {
	var old int64
	err = w.queryRow(ctx, `SELECT stored_size FROM states WHERE hash = ? AND encoding = ?`, hash, store.EncRawPending).Scan(&old)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	added, err := s.refChunked(ctx, w, cv)
	if err != nil {
		return 0, false, err
	}
	index := cv.IndexData()
	stored = int64(len(index)) + added
	if _, err := w.exec(ctx, `UPDATE states SET encoding = ?, stored_size = ?, data = ? WHERE hash = ? AND encoding = ?`,
		store.EncChunked, stored, index, hash, store.EncRawPending); err != nil {
		return 0, false, err
	}
	w.fig.stateResized(old, stored)
	rows, err := w.query(ctx, `UPDATE checkpoints SET stored_size = ? WHERE state_hash = ? AND stored_size = ? RETURNING workflow_id`,
		stored, hash, old)
	if err != nil {
		return 0, false, err
	}
	for rows.Next() {
		var wf string
		if err := rows.Scan(&wf); err != nil {
			rows.Close()
			return 0, false, err
		}
		w.fig.restored(wf, old, stored)
	}
	if err := rows.Close(); err != nil {
		return 0, false, err
	}
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	w.vacuumAfter() // the raw state's pages go back to the file system
	return stored, true, nil
}

// packMissing compresses the chunks of the states out cuts (compacted.cv) that the database
// does not hold yet. A state saved whole as new content (PreparedSave.ChunkLater) is often the
// workflow's previous state with a few changes here and there (too far apart for the save to
// take it as an edit): compressing all its chunks cost ~1 ms a 100 KB state for the few that
// are new. Which chunks are stored is read outside the writer, so one deleted meanwhile is
// compressed by the writer when it stores the value (store.ChunkedValue.Packed); if the read
// fails, every chunk is compressed now, as before.
func (s *Store) packMissing(ctx context.Context, out []compacted) {
	var addrs []chunk.Address
	for _, c := range out {
		if c.cv != nil {
			addrs = append(addrs, c.cv.Chunks()...)
		}
	}
	if len(addrs) == 0 {
		return
	}
	stored := make(map[chunk.Address]bool, len(addrs))
	err := s.readTx(ctx, func(tx *rtx) error {
		clear(stored)
		return eachAddrRow(ctx, tx.cached, qChunkIDsByAddr, addrs, func(rows *sql.Rows) error {
			var a []byte
			var id int64
			if err := rows.Scan(&a, &id); err != nil {
				return err
			}
			if len(a) == len(chunk.Address{}) {
				stored[chunk.Address(a)] = true
			}
			return nil
		})
	})
	if err != nil {
		clear(stored)
	}
	for _, c := range out {
		if c.cv != nil {
			c.cv.PackMissing(stored)
		}
	}
}
