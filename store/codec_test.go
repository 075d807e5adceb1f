package store

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCodecChunked(t *testing.T) {
	c, err := newCodec(64 << 20)
	require.NoError(t, err)
	defer c.close()
	c.chunks = 4
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{100, 5000, 64 << 10, 200<<10 + 7, 1 << 20} {
		in := checkpointJSON(rng, n)
		out, enc := c.compress(in, 4096)
		if len(in) > 4096 {
			require.NotEqual(t, encRaw, enc, n)
			require.Less(t, len(out), len(in)*7/8)
		}
		if len(in) >= 2*minChunk {
			require.Equal(t, encZstdChunked, enc, n)
		}
		got, err := c.decode(out, enc, int64(len(in)))
		require.NoError(t, err, n)
		require.True(t, bytes.Equal(in, got), n)

		if enc == encZstdChunked {
			// damaged chunk table / body / sizes are errors, never panics
			for _, mut := range []func([]byte) []byte{
				func(b []byte) []byte { b[0] = 0; return b },
				func(b []byte) []byte { b[0] = 0xff; return b },
				func(b []byte) []byte { b[1] ^= 0x40; return b },
				func(b []byte) []byte { return b[:len(b)-10] },
				func(b []byte) []byte { b[len(b)/2] ^= 0xff; b[len(b)/2+1] ^= 0xff; return b },
				func(b []byte) []byte { return b[:3] },
			} {
				bad := mut(bytes.Clone(out))
				got, err := c.decode(bad, enc, int64(len(in)))
				if err == nil {
					require.False(t, bytes.Equal(got, in), "damage went unnoticed") // caught by SHA-256
				}
			}
			_, err = c.decode(out, enc, int64(len(in))+1)
			require.Error(t, err)
		}
	}
	// incompressible stays raw
	rnd := randBytes(rng, 100<<10)
	out, enc := c.compress(rnd, 4096)
	require.Equal(t, encRaw, enc)
	require.Equal(t, rnd, out)
	_, err = c.decode([]byte("xx"), 9, 2)
	require.Error(t, err)
	_, err = c.decode([]byte("xx"), encRaw, 3)
	require.Error(t, err)
}
