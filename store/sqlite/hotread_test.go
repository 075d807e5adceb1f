package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/storetest"
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

// TestLGReadsOnWritersConnection: lg/get and a short lg/list of a thread and namespace this
// store put lately run on the idle writer's connection and answer exactly what a pooled
// connection answers, including what another process wrote since; other threads, namespaces,
// long or metadata-filtered lists, and threads put only by another process go to the pool.
func TestLGReadsOnWritersConnection(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lg.db")
	s, err := open(ctx, Options{Options: store.Options{Path: path}, noBackground: true})
	require.NoError(t, err)
	defer s.Close()
	big := `"` + strings.Repeat("m", 20<<10) + `"` // a chunked channel value
	storetest.PutLG(t, s, "T", "", "c1", "", map[string]any{"m": 1}, map[string]string{"m": big}, `{"step":1}`)
	storetest.PutLG(t, s, "T", "", "c2", "c1", map[string]any{"m": 2, "n": 1}, map[string]string{"m": big[:len(big)-1] + `x"`, "n": `"v"`}, `{"step":2}`)
	storetest.PutLGWrites(t, s, "T", "", "c2", "task", "p", "m", `"w"`)
	require.True(t, s.savedRecently(recentThread("T", "")))
	require.False(t, s.savedRecently(recentThread("T", "other")))

	// the same answers from the pool (a read transaction of its own) and from the writer's connection
	pooledGet := func(id string) *store.LGTuple {
		var out *store.LGTuple
		require.NoError(t, s.readTx(ctx, func(tx *rtx) (err error) {
			out, err = s.newLGReader(ctx, tx).get("T", "", id)
			return err
		}))
		require.NotNil(t, out)
		return out
	}
	lent := s.lent.Load()
	latest, err := s.LGGet(ctx, "T", "", "")
	require.NoError(t, err)
	require.Equal(t, lent+1, s.lent.Load(), "lg/get of a thread put lately: on the writer's connection")
	require.Equal(t, pooledGet("c2"), latest)
	require.Len(t, latest.Blobs, 2)
	require.Len(t, latest.Writes, 1)
	root := ""
	page, err := s.LGList(ctx, store.LGListFilter{ThreadID: "T", Namespace: &root, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, lent+2, s.lent.Load(), "a short lg/list too")
	require.Len(t, page.Tuples, 2)
	require.Equal(t, *pooledGet("c2"), page.Tuples[0])
	require.Equal(t, *pooledGet("c1"), page.Tuples[1])

	// to the pool: another namespace, a long list, a metadata filter, a list across namespaces
	_, err = s.LGGet(ctx, "T", "other", "")
	require.NoError(t, err)
	for _, f := range []store.LGListFilter{
		{ThreadID: "T", Namespace: &root, Limit: lgHotListMax + 1},
		{ThreadID: "T", Namespace: &root},
		{ThreadID: "T", Namespace: &root, Limit: 10, Metadata: map[string]json.RawMessage{"step": json.RawMessage(`2`)}},
		{ThreadID: "T", Limit: 10},
	} {
		res, err := s.LGList(ctx, f)
		require.NoError(t, err)
		require.NotEmpty(t, res.Tuples)
	}
	require.Equal(t, lent+2, s.lent.Load(), "none of these on the writer's connection")

	// another process puts into the thread and deletes a checkpoint: the writer's connection sees both
	other, err := open(ctx, Options{Options: store.Options{Path: path}, noBackground: true})
	require.NoError(t, err)
	storetest.PutLG(t, other, "T", "", "c3", "c2", map[string]any{"m": 3}, map[string]string{"m": big[:len(big)-1] + `y"`}, "")
	storetest.PutLG(t, other, "U", "", "u1", "", map[string]any{}, nil, "")
	require.NoError(t, other.Close())
	require.False(t, s.savedRecently(recentThread("U", "")), "put by another process")
	latest, err = s.LGGet(ctx, "T", "", "")
	require.NoError(t, err)
	require.Equal(t, lent+3, s.lent.Load())
	require.Equal(t, "c3", latest.CheckpointID, "another process's put, seen on the writer's connection")
	require.Equal(t, pooledGet("c3"), latest)
	page, err = s.LGList(ctx, store.LGListFilter{ThreadID: "T", Namespace: &root, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Tuples, 3)
	require.Equal(t, lent+4, s.lent.Load())
	u, err := s.LGGet(ctx, "U", "", "")
	require.NoError(t, err)
	require.Equal(t, "u1", u.CheckpointID)
	require.Equal(t, lent+4, s.lent.Load(), "U is read through the pool")

	// while a batch holds the writer's connection, the read goes to the pool
	s.wmu.Lock()
	done := make(chan error, 1)
	go func() { _, err := s.LGGet(ctx, "T", "", ""); done <- err }()
	require.NoError(t, <-done)
	s.wmu.Unlock()
	require.Equal(t, lent+4, s.lent.Load())

	// another process deletes the thread: the writer's connection finds nothing
	other, err = open(ctx, Options{Options: store.Options{Path: path}, noBackground: true})
	require.NoError(t, err)
	_, err = other.LGDeleteThread(ctx, "T")
	require.NoError(t, err)
	require.NoError(t, other.Close())
	gone, err := s.LGGet(ctx, "T", "", "")
	require.NoError(t, err)
	require.Nil(t, gone)
	require.Equal(t, lent+5, s.lent.Load())
}
