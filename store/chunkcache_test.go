package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store/chunk"
)

// cacheChunk is a verified chunk of n bytes numbered i, stored as its raw bytes.
func cacheChunk(c *ChunkCache, i, n int) verifiedChunk {
	raw := bytes.Repeat([]byte{byte(i), byte(i >> 8)}, n/2)
	return verifiedChunk{addr: chunk.AddressOf(raw), raw: raw, enc: EncRaw, fp: c.fingerprint(raw)}
}

func TestChunkCacheLRU(t *testing.T) {
	// the cache holds at most its size (raw bytes and each entry's overhead), least recently used
	// chunks leave first, and a chunk over an eighth of it is not kept
	const n = 1000
	c := NewChunkCache(10 * (n + chunkEntryOverhead))
	var vs []verifiedChunk
	for i := 0; i < 20; i++ {
		vs = append(vs, cacheChunk(c, i, n))
	}
	c.add(vs[:10])
	require.Equal(t, 10, c.Stats().Entries)
	// 0 used again: 1 is now the least recently used
	_, ok := c.get(vs[0].addr, vs[0].enc, int64(n), vs[0].fp)
	require.True(t, ok)
	c.add(vs[10:11])
	st := c.Stats()
	require.Equal(t, 10, st.Entries)
	require.LessOrEqual(t, st.Bytes, st.MaxBytes)
	_, ok = c.get(vs[1].addr, vs[1].enc, int64(n), vs[1].fp)
	require.False(t, ok, "least recently used chunk evicted")
	for _, i := range []int{0, 2, 10} {
		raw, ok := c.get(vs[i].addr, vs[i].enc, int64(n), vs[i].fp)
		require.True(t, ok, "chunk %d", i)
		require.Equal(t, vs[i].raw, raw)
	}
	c.add(vs[11:])
	st = c.Stats()
	require.Equal(t, 10, st.Entries)
	require.Equal(t, int64(10*(n+chunkEntryOverhead)), st.Bytes)

	big := cacheChunk(c, 99, int(c.max/8)+2)
	c.add([]verifiedChunk{big})
	_, ok = c.get(big.addr, big.enc, int64(len(big.raw)), big.fp)
	require.False(t, ok, "a chunk over an eighth of the cache is not kept")

	c.Clear()
	st = c.Stats()
	require.Zero(t, st.Entries)
	require.Zero(t, st.Bytes)
	_, ok = c.get(vs[19].addr, vs[19].enc, int64(n), vs[19].fp)
	require.False(t, ok, "cleared")
	c.add(vs[:1])
	require.Equal(t, 1, c.Stats().Entries, "a cleared cache fills again")
}

func TestChunkCacheMatch(t *testing.T) {
	// an entry is used only for exactly the stored bytes it was verified with: another
	// fingerprint (other stored bytes), encoding or size misses
	c := NewChunkCache(1 << 20)
	v := cacheChunk(c, 1, 2000)
	c.add([]verifiedChunk{v})
	raw, ok := c.get(v.addr, EncRaw, 2000, v.fp)
	require.True(t, ok)
	require.Equal(t, v.raw, raw)

	damaged := bytes.Clone(v.raw)
	damaged[1000] ^= 1
	for _, m := range []struct {
		what string
		enc  int
		size int64
		fp   uint64
	}{
		{"other stored bytes", EncRaw, 2000, c.fingerprint(damaged)},
		{"other encoding", EncZstd, 2000, v.fp},
		{"other size", EncRaw, 1999, v.fp},
	} {
		_, ok := c.get(v.addr, m.enc, m.size, m.fp)
		require.False(t, ok, m.what)
	}
	_, ok = c.get(chunk.AddressOf(damaged), EncRaw, 2000, c.fingerprint(damaged))
	require.False(t, ok, "other address")
	st := c.Stats()
	require.EqualValues(t, 1, st.Hits)
	require.EqualValues(t, 4, st.Misses)

	// the cache keeps its own copy: the buffer the value was assembled in is the caller's
	clear(v.raw)
	raw, ok = c.get(v.addr, EncRaw, 2000, v.fp)
	require.True(t, ok)
	require.NotEqual(t, v.raw, raw)

	// the stored bytes changed (compressed since): the entry takes the new ones
	z, enc := testCodec(t).CompressChunk(raw)
	require.Equal(t, EncZstd, enc)
	c.add([]verifiedChunk{{addr: v.addr, raw: raw, enc: EncZstd, fp: c.fingerprint(z)}})
	_, ok = c.get(v.addr, EncZstd, 2000, c.fingerprint(z))
	require.True(t, ok)
	_, ok = c.get(v.addr, EncRaw, 2000, v.fp)
	require.False(t, ok)
	require.Equal(t, 1, c.Stats().Entries)

	// another cache (another backend) has another seed: fingerprints are not shared
	require.NotEqual(t, c.fingerprint(raw), NewChunkCache(1<<20).fingerprint(raw))

	var off *ChunkCache // NewChunkCache(0)
	require.Nil(t, NewChunkCache(0))
	off.add([]verifiedChunk{v})
	off.Clear()
	require.Zero(t, off.Stats())
}

func testCodec(t *testing.T) *Codec {
	t.Helper()
	c, err := NewCodec(1 << 30)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// TestOpenChunkedCacheDamage: a value loaded once (its chunks cached), then one of its stored
// chunks damaged in place, keeping its encoding and size: the next load decodes that chunk,
// finds the damage and names it, exactly as without the cache; repaired, it loads again.
// Integrity checks (VerifyChunked) neither use nor fill the cache.
func TestOpenChunkedCacheDamage(t *testing.T) {
	c := testCodec(t)
	cc := NewChunkCache(16 << 20)
	c.UseChunkCache(cc)
	rng := rand.New(rand.NewPCG(3, 18))
	for _, tc := range []struct {
		name string
		v    []byte
		enc  int
	}{
		{"zstd", jsonLike(rng, 100<<10), EncZstd},
		{"raw", randBytes(rng, 100<<10), EncRaw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newChunkedFixture(c, tc.v, true)
			before := cc.Stats()
			v, err := c.VerifyChunked(f.index, f.size, f.sha, fetchFrom(f.runs), fetchFrom(f.rows))
			require.NoError(t, err)
			require.Equal(t, tc.v, v)
			require.Equal(t, before, cc.Stats(), "VerifyChunked leaves the cache alone")

			v, err = f.open(c)
			require.NoError(t, err)
			require.Equal(t, tc.v, v)
			filled := cc.Stats()
			require.Equal(t, before.Entries+len(f.rows), filled.Entries)
			v, err = f.open(c)
			require.NoError(t, err)
			require.Equal(t, tc.v, v, "a value from the cache is the value")
			require.Equal(t, filled.Hits+uint64(len(f.rows)), cc.Stats().Hits, "every chunk from the cache")

			var a chunk.Address
			for a = range f.rows {
				if f.rows[a].Enc == tc.enc {
					break
				}
			}
			row := f.rows[a]
			require.Equal(t, tc.enc, row.Enc)
			for _, i := range []int{0, len(row.Data) / 2, len(row.Data) - 1} {
				bad := row
				bad.Data = bytes.Clone(row.Data)
				bad.Data[i] ^= 0x08
				f.rows[a] = bad
				_, err = f.open(c)
				_, want := f.reference(c)
				require.Error(t, want)
				require.Error(t, err, "byte %d of %s damaged", i, a)
				require.True(t, errors.Is(err, chunk.ErrCorrupt), "%v", err)
				require.Equal(t, want.Error(), err.Error())
				require.Contains(t, err.Error(), a.String(), "the damaged chunk is named")
				_, err = c.VerifyChunked(f.index, f.size, f.sha, fetchFrom(f.runs), fetchFrom(f.rows))
				require.Equal(t, want.Error(), err.Error())
			}
			f.rows[a] = row
			v, err = f.open(c)
			require.NoError(t, err)
			require.Equal(t, tc.v, v, "repaired")
		})
	}
}

// TestOpenChunkedCacheConcurrent: loads on several goroutines share one cache (run with -race).
func TestOpenChunkedCacheConcurrent(t *testing.T) {
	c := testCodec(t)
	c.UseChunkCache(NewChunkCache(256 << 10)) // smaller than the values: evictions all along
	rng := rand.New(rand.NewPCG(5, 18))
	var fs []*chunkedFixture
	var vs [][]byte
	for i := 0; i < 4; i++ {
		v := jsonLike(rng, 100<<10)
		fs, vs = append(fs, newChunkedFixture(c, v, true)), append(vs, v)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				k := (g + i) % len(fs)
				v, err := fs[k].open(c)
				if err == nil && !bytes.Equal(v, vs[k]) {
					err = fmt.Errorf("value %d differs", k)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := c.ChunkCache().Stats()
	require.LessOrEqual(t, st.Bytes, st.MaxBytes)
	require.NotZero(t, st.Hits)
}
