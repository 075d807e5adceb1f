package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// TestLoadOnWritersConnection: while the writer is idle a load of what this store saved lately
// runs on its connection (hotRead) and answers exactly what a pooled connection answers,
// including what another process changed since (its commit invalidates that connection's cache
// like any other's); what another process saved, and any load while a batch runs, goes to the
// pool. Saves and loads racing each other stay correct.
func TestLoadOnWritersConnection(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	s, err := open(ctx, Options{Options: store.Options{Path: path}, noBackground: true})
	require.NoError(t, err)
	defer s.Close()

	res, err := s.Save(ctx, store.SaveRequest{WorkflowID: "wf", State: []byte(`{"n":1}`), StateType: store.StateJSON})
	require.NoError(t, err)
	tx, end, err := s.hotRead(ctx)
	require.NoError(t, err)
	require.NotNil(t, tx, "the writer is idle: its connection is lent")
	again, _, _ := s.hotRead(ctx)
	assert.Nil(t, again, "one read at a time")
	end()

	hot, err := s.Load(ctx, res.CheckpointID)
	require.NoError(t, err)
	var pooled store.Checkpoint
	require.NoError(t, s.readTx(ctx, func(tx *rtx) error {
		pooled, err = s.loadOne(ctx, tx, "c.checkpoint_id = ?", res.CheckpointID)
		return err
	}))
	assert.Equal(t, pooled, hot)
	latest, err := s.LoadLatest(ctx, "wf", "")
	require.NoError(t, err)
	assert.Equal(t, res.CheckpointID, latest.CheckpointID)

	assert.True(t, s.savedRecently(recentCheckpoint(res.CheckpointID)))
	assert.True(t, s.savedRecently(recentWorkflow("wf", "")))

	// another process deletes it: the writer's connection sees that at its next read
	other, err := open(ctx, Options{Options: store.Options{Path: path}, noBackground: true})
	require.NoError(t, err)
	// what another process saved is read through the pool, from the file
	theirs, err := other.Save(ctx, store.SaveRequest{WorkflowID: "theirs", State: []byte(`{"n":2}`), StateType: store.StateJSON})
	require.NoError(t, err)
	assert.False(t, s.savedRecently(recentCheckpoint(theirs.CheckpointID)))
	assert.False(t, s.savedRecently(recentWorkflow("theirs", "")))
	cp, err := s.Load(ctx, theirs.CheckpointID)
	require.NoError(t, err)
	assert.Equal(t, `{"n":2}`, string(cp.State))
	n, err := other.Delete(ctx, res.CheckpointID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, other.Close())
	_, err = s.Load(ctx, res.CheckpointID)
	assert.ErrorIs(t, err, store.ErrNotFound)

	// a batch in progress keeps the connection: the read goes to the pool
	for i := 0; i < 2*maxRecent; i++ {
		s.recent.add(fmt.Sprint(i)) // the oldest are forgotten
	}
	assert.False(t, s.savedRecently(recentWorkflow("wf", "")))
	s.wmu.Lock()
	tx, _, err = s.hotRead(ctx)
	require.NoError(t, err)
	assert.Nil(t, tx)
	s.wmu.Unlock()

	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wf := fmt.Sprintf("race-%d", w)
			for i := 0; i < 50; i++ {
				state := []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))
				r, err := s.Save(ctx, store.SaveRequest{WorkflowID: wf, Step: int64(i), State: state, StateType: store.StateJSON})
				if !assert.NoError(t, err) {
					return
				}
				cp, err := s.Load(ctx, r.CheckpointID)
				if assert.NoError(t, err) {
					assert.Equal(t, string(state), string(cp.State))
				}
				lr, err := s.LoadLatest(ctx, wf, "")
				if assert.NoError(t, err) {
					assert.Equal(t, r.CheckpointID, lr.CheckpointID)
				}
			}
		}()
	}
	wg.Wait()
}
