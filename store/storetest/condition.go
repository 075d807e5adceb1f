package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func init() {
	add(testCase{"ConditionWritable", testConditionWritable})
}

// testConditionWritable: a new database, and the same database reopened, accept writes
// (Condition is the zero value), and a checkpoint whose stored bytes fail verification is that
// checkpoint's corruption, not the storage's: the backend keeps writing. The Condition type's
// own rules hold whatever the backend.
func testConditionWritable(t *testing.T, h *harness) {
	ctx := context.Background()
	s := h.db(t)
	require.Equal(t, store.Condition{}, s.Condition())
	id := mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":1}`)}).CheckpointID
	corrupter(t, s).SetStateBytes(t, id, []byte(`{"a":2}`))
	_, err := s.Load(ctx, id)
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.True(t, s.Condition().Writable(), "a corrupt checkpoint must not stop writes: %+v", s.Condition())
	mustSave(t, s, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":3}`)})
	require.NoError(t, s.Close())

	again := h.db(t, func(o *Options) { o.Same = s })
	assert.Equal(t, store.Condition{}, again.Condition())
	mustSave(t, again, store.SaveRequest{WorkflowID: "w", State: []byte(`{"a":4}`)})

	// the contract's value type
	for _, c := range []struct {
		cond           store.Condition
		writable, fail bool
	}{
		{store.Condition{}, true, false},
		{store.Condition{Reason: store.ReasonDamaged, Detail: "d"}, false, true},
		{store.Condition{Reason: store.ReasonRemoved}, false, true},
		{store.Condition{Reason: store.ReasonReplaced}, false, true},
		{store.Condition{Reason: store.ReasonDiskFull}, false, false},
		{store.Condition{Reason: store.ReasonReadOnly}, false, false},
	} {
		assert.Equal(t, c.writable, c.cond.Writable(), c.cond.Reason)
		assert.Equal(t, c.fail, c.cond.Failed(), c.cond.Reason)
		err := c.cond.Err()
		if c.writable {
			assert.NoError(t, err)
			continue
		}
		var ue *store.UnavailableError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, c.cond.Reason, ue.Reason)
		assert.True(t, errors.Is(err, store.ErrUnavailable))
	}
}
