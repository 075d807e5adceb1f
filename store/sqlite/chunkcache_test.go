package sqlite

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// flipStoredChunkByte flips a byte in the middle of the bytes stored for the chunk at addr (as
// stored: compressed or not, in a pack or in its own row) through a separate connection, leaving
// its encoding, size and place as they are: damage only the stored bytes show. It returns the
// chunk's encoding.
func flipStoredChunkByte(t *testing.T, path string, addr chunk.Address) int {
	t.Helper()
	db := rawDB(t, path)
	var id int64
	var enc int
	var data []byte
	var pack, off, n sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT c.id, c.encoding, c.data, c.pack, c.pack_off, c.pack_len FROM chunks c
		JOIN chunk_addrs a ON a.id = c.id WHERE a.address = ?`, addr[:]).Scan(&id, &enc, &data, &pack, &off, &n))
	if !pack.Valid {
		data[len(data)/2] ^= 0x10
		_, err := db.Exec(`UPDATE chunks SET data = ? WHERE id = ?`, data, id)
		require.NoError(t, err)
		return enc
	}
	require.NoError(t, db.QueryRow(`SELECT data FROM packs WHERE id = ?`, pack.Int64).Scan(&data))
	data[off.Int64+n.Int64/2] ^= 0x10
	_, err := db.Exec(`UPDATE packs SET data = ? WHERE id = ?`, data, pack.Int64)
	require.NoError(t, err)
	return enc
}

// TestChunkCacheStoredDamage: loads take a value's chunks from the store's chunk cache once a
// load verified them, and give back the value saved; a stored chunk then damaged in the
// database file in place (a byte of its stored bytes flipped, compressed or raw, its encoding
// and size kept) is reported by the very next load in the same store, naming the chunk. Verify
// neither uses nor fills the cache, and the idle memory release empties it.
func TestChunkCacheStoredDamage(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	cc := s.codec.ChunkCache()
	require.NotNil(t, cc, "on by default")
	require.EqualValues(t, store.DefaultChunkCacheBytes, cc.Stats().MaxBytes)
	v := checkpointJSON(rand.New(rand.NewPCG(18, 2)), 100<<10)
	id := saveChunked(t, s, "w", v)
	load := func(what string) {
		t.Helper()
		cp, err := s.Load(ctx, id)
		require.NoError(t, err, what)
		require.Equal(t, v, cp.State, what)
	}
	load("first load")
	filled := cc.Stats()
	require.NotZero(t, filled.Entries)
	load("from the cache")
	require.Equal(t, filled.Hits+uint64(filled.Entries), cc.Stats().Hits, "every chunk from the cache")

	_, cs := chunk.Split(v)
	encs := map[int]bool{}
	for _, k := range []int{0, len(cs) / 2, len(cs) - 1} { // the last, short, is stored raw
		a := cs[k].Addr
		encs[flipStoredChunkByte(t, s.path, a)] = true
		_, err := s.Load(ctx, id)
		var ce *store.CorruptError
		require.ErrorAs(t, err, &ce, "chunk %d damaged", k)
		require.Equal(t, id, ce.CheckpointID)
		require.Contains(t, ce.Reason, a.String(), "the reason names the chunk")
		flipStoredChunkByte(t, s.path, a) // repaired
		load("repaired")
	}
	require.Equal(t, map[int]bool{store.EncZstd: true, store.EncRaw: true}, encs, "damaged compressed and raw chunks")

	s.releaseMemory()
	require.Zero(t, cc.Stats().Entries, "an idle store drops its chunk cache")
	require.Zero(t, cc.Stats().Bytes)
	before := cc.Stats()
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, bad)
	require.Equal(t, before, cc.Stats(), "Verify leaves the cache alone")
	load("after the release")
	require.NotZero(t, cc.Stats().Entries, "filled again")
}

// TestChunkCacheOff: ChunkCacheBytes < 0 turns the cache off; loads decode every chunk.
func TestChunkCacheOff(t *testing.T) {
	s := openTest(t, func(o *Options) { o.ChunkCacheBytes = -1 })
	require.Nil(t, s.codec.ChunkCache())
	v := checkpointJSON(rand.New(rand.NewPCG(18, 3)), 50<<10)
	id := saveChunked(t, s, "w", v)
	for i := 0; i < 2; i++ {
		cp, err := s.Load(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, v, cp.State)
	}
}
