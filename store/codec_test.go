package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCodecChunked(t *testing.T) {
	c, err := NewCodec(64 << 20)
	require.NoError(t, err)
	defer c.Close()
	c.chunks = 4
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{100, 5000, 64 << 10, 200<<10 + 7, 1 << 20} {
		in := jsonOf(rng, n)
		out, enc := c.Compress(in, 4096)
		if len(in) > 4096 {
			require.NotEqual(t, EncRaw, enc, n)
			require.Less(t, len(out), len(in)*7/8)
		}
		if len(in) >= 2*minChunk {
			require.Equal(t, EncZstdChunked, enc, n)
		}
		got, err := c.Decode(out, enc, int64(len(in)))
		require.NoError(t, err, n)
		require.True(t, bytes.Equal(in, got), n)

		if enc == EncZstdChunked {
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
				got, err := c.Decode(bad, enc, int64(len(in)))
				if err == nil {
					require.False(t, bytes.Equal(got, in), "damage went unnoticed") // caught by SHA-256
				}
			}
			_, err = c.Decode(out, enc, int64(len(in))+1)
			require.Error(t, err)
		}
	}
	// incompressible stays raw
	rnd := noise(rng, 100<<10)
	out, enc := c.Compress(rnd, 4096)
	require.Equal(t, EncRaw, enc)
	require.Equal(t, rnd, out)
	_, err = c.Decode([]byte("xx"), 9, 2)
	require.Error(t, err)
	_, err = c.Decode([]byte("xx"), EncRaw, 3)
	require.Error(t, err)
}

// jsonOf is compressible JSON of about n bytes.
func jsonOf(rng *rand.Rand, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"messages":[`)
	words := []string{"agent", "tool", "call", "result", "plan", "step", "state", "value"}
	for i := 0; b.Len() < n-20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"n":%d,"text":"%s %s %s"}`, rng.IntN(1000), words[rng.IntN(8)], words[rng.IntN(8)], words[rng.IntN(8)])
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// noise is n incompressible bytes.
func noise(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
