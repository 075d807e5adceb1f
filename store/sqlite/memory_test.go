package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// TestIdleReleasesMemory: once the store has been idle for releaseIdle after reads or writes,
// every connection gives its page cache back, once; new activity arms it again, and the store
// reads and writes as before.
func TestIdleReleasesMemory(t *testing.T) {
	t.Parallel()
	s := openTest(t, func(o *Options) { o.noBackground, o.ckptInterval = false, 20*time.Millisecond })
	ctx := context.Background()
	var ids []string
	for i := 0; i < 20; i++ {
		res := mustSave(t, s, store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%d", i%3), State: []byte(fmt.Sprintf(`{"i":%d}`, i)), StateType: store.StateJSON})
		ids = append(ids, res.CheckpointID)
	}
	require.Eventually(t, func() bool { return s.releases.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(releaseIdle + 200*time.Millisecond)
	require.EqualValues(t, 1, s.releases.Load(), "an idle store releases once, not on every tick")

	for _, id := range ids {
		cp, err := s.Load(ctx, id)
		require.NoError(t, err)
		require.NotEmpty(t, cp.State)
	}
	require.Eventually(t, func() bool { return s.releases.Load() == 2 }, 10*time.Second, 10*time.Millisecond)
	mustSave(t, s, store.SaveRequest{WorkflowID: "wf-0", State: []byte(`{"after":true}`), StateType: store.StateJSON})
	cp, err := s.LoadLatest(ctx, "wf-0", "")
	require.NoError(t, err)
	require.JSONEq(t, `{"after":true}`, string(cp.State))
}
