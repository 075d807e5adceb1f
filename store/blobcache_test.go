package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBlobCache(t *testing.T) {
	// the cache holds at most its size, least recently used values leave first, and a value
	// over an eighth of it is not kept
	small := NewBlobCache(1 << 10)
	small.Add(make([]byte, 32), make([]byte, 100))
	require.Equal(t, 1, small.Stats().Entries)
	k2 := append(make([]byte, 31), 1)
	small.Add(k2, make([]byte, 129)) // over max/8: not kept
	require.Equal(t, 1, small.Stats().Entries)
	for i := 2; i < 20; i++ {
		small.Add(append(make([]byte, 31), byte(i)), make([]byte, 100))
	}
	require.LessOrEqual(t, small.Stats().Bytes, int64(1<<10))
	_, ok := small.Get(make([]byte, 32))
	require.False(t, ok, "least recently used value evicted")
	v, ok := small.Get(append(make([]byte, 31), 19))
	require.True(t, ok)
	require.Len(t, v, 100)
}
