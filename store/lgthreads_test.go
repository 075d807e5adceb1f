package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLGThreads(t *testing.T) {
	clock := newClock()
	s := openTest(t, func(o *Options) { o.Now = clock.Now })
	ctx := context.Background()
	threads, err := s.LGThreads(ctx)
	require.NoError(t, err)
	assert.Empty(t, threads)

	lgPutT(t, s, "t-old", "", "1f0-a", "", map[string]any{"m": 1}, map[string]string{"m": `["hi"]`}, `{"source":"input","step":-1}`)
	clock.Advance(time.Minute)
	lgPutT(t, s, "t-new", "", "1f0-a", "", map[string]any{"m": 1}, map[string]string{"m": `["a"]`}, `{"source":"input","step":-1}`)
	lgPutT(t, s, "t-new", "", "1f0-b", "1f0-a", map[string]any{"m": 2, "n": 1}, map[string]string{"m": `["a","b"]`, "n": `1`}, `{"source":"loop","step":0}`)
	lgPutT(t, s, "t-new", "sub:1", "1f0-z", "", map[string]any{}, nil, "")
	lgWritesT(t, s, "t-new", "", "1f0-b", "task-1", "", "m", `"c"`, "n", `2`)
	lgWritesT(t, s, "t-writes-only", "", "1f0-x", "task-1", "", "m", `"w"`)

	threads, err = s.LGThreads(ctx)
	require.NoError(t, err)
	require.Len(t, threads, 3)
	assert.Equal(t, []string{"t-new", "t-old", "t-writes-only"}, []string{threads[0].ThreadID, threads[1].ThreadID, threads[2].ThreadID},
		"newest first; a thread with only writes has no update time and comes last")
	n := threads[0]
	assert.Equal(t, 3, n.Checkpoints)
	assert.Equal(t, 2, n.Namespaces)
	assert.Equal(t, 2, n.Writes)
	assert.Equal(t, "1f0-b", n.LatestID, "the root namespace's newest, though sub:1's id sorts after it")
	assert.True(t, n.UpdatedAt.After(threads[1].UpdatedAt))
	assert.Positive(t, n.ChannelBytes)
	assert.Greater(t, n.StoredBytes, n.ChannelBytes)
	assert.Equal(t, 0, threads[2].Checkpoints)
	assert.Equal(t, 1, threads[2].Writes)
	assert.True(t, threads[2].UpdatedAt.IsZero())

	cps, err := s.LGThreadCheckpoints(ctx, "t-new", nil, 0)
	require.NoError(t, err)
	var ids []string
	for _, c := range cps {
		ids = append(ids, c.Namespace+"/"+c.CheckpointID)
	}
	assert.Equal(t, []string{"/1f0-b", "/1f0-a", "sub:1/1f0-z"}, ids)
	b := cps[0]
	assert.Equal(t, "1f0-a", b.ParentID)
	assert.Equal(t, 2, b.Channels)
	assert.Equal(t, 2, b.Writes)
	assert.JSONEq(t, `{"source":"loop","step":0}`, string(b.Metadata))
	assert.EqualValues(t, len(`{"id":"1f0-b"}`), b.SizeBytes)
	assert.Nil(t, cps[2].Metadata)

	root := ""
	cps, err = s.LGThreadCheckpoints(ctx, "t-new", &root, 1)
	require.NoError(t, err)
	require.Len(t, cps, 1)
	assert.Equal(t, "1f0-b", cps[0].CheckpointID)
	none := "nope"
	cps, err = s.LGThreadCheckpoints(ctx, "t-new", &none, 0)
	require.NoError(t, err, "a known thread with nothing in that namespace is not an error")
	assert.Empty(t, cps)
	cps, err = s.LGThreadCheckpoints(ctx, "t-writes-only", nil, 0)
	require.NoError(t, err)
	assert.Empty(t, cps)
	_, err = s.LGThreadCheckpoints(ctx, "unknown", nil, 0)
	require.ErrorIs(t, err, ErrNotFound)
}
