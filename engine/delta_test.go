package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk/delta"
	"github.com/ckptd/ckptd/store/sqlite"
)

func hexSHA(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// ApplyStateDelta rebuilds a state from its base's bytes and checks the delta in the order
// docs/storage.md gives: base, keepPrefix, keepSuffix, sha256's form, size; then Verify checks
// the rebuilt state's sha256.
func TestApplyStateDelta(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ckptd.db")
	st, err := sqlite.Open(ctx, store.Options{Path: path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e := New(st, nil)
	w := testgen.NewWorkload(1, 64<<10)
	base := w.State()
	res, err := st.Save(ctx, store.SaveRequest{WorkflowID: "wf", State: base})
	require.NoError(t, err)
	w.Advance()
	next := w.State()
	kp, ks, middle := delta.Compute(base, next)
	require.True(t, delta.Pays(len(next), len(middle)))
	d := StateDelta{BaseCheckpointID: res.CheckpointID, KeepPrefix: int64(kp), KeepSuffix: int64(ks), SHA256: hexSHA(next)}
	got, err := e.ApplyStateDelta(ctx, d, middle, 1<<20)
	require.NoError(t, err)
	require.True(t, bytes.Equal(next, got.State))
	require.Nil(t, got.Marks.Hash, "hashed by Verify, not before")
	require.NoError(t, got.Verify())

	// saved with its marks, the rebuilt state is the base of the next delta, marks included:
	// a chain of deltas rebuilds and validates each state from the previous one's marks
	require.True(t, got.ValidJSON())
	require.NotNil(t, got.Marks.Hash)
	require.NotNil(t, got.Marks.JSON)
	prevID, prev, marks := "", next, got.Marks
	res2, err := st.Save(ctx, store.SaveRequest{WorkflowID: "wf", State: next, Marks: marks})
	require.NoError(t, err)
	prevID = res2.CheckpointID
	for i := 0; i < 5; i++ {
		w.Advance()
		st3 := w.State()
		b, err := st.StateBase(ctx, prevID)
		require.NoError(t, err)
		require.Same(t, marks, b.Marks, "the cache keeps the marks of the state it holds")
		kp, ks, mid := delta.Compute(prev, st3)
		r, err := e.ApplyStateDelta(ctx, StateDelta{BaseCheckpointID: prevID, KeepPrefix: int64(kp), KeepSuffix: int64(ks), SHA256: hexSHA(st3)}, mid, 1<<20)
		require.NoError(t, err)
		require.Equal(t, st3, r.State)
		require.NoError(t, r.Verify())
		require.True(t, r.ValidJSON())
		res, err := st.Save(ctx, store.SaveRequest{WorkflowID: "wf", State: r.State, Marks: r.Marks})
		require.NoError(t, err)
		prevID, prev, marks = res.CheckpointID, st3, r.Marks
	}
	// a state that is not JSON any more is refused by ValidJSON whatever the marks
	kp, ks, mid := delta.Compute(prev, append(append([]byte{}, prev...), '}'))
	bad := append(append([]byte{}, prev...), '}')
	r, err := e.ApplyStateDelta(ctx, StateDelta{BaseCheckpointID: prevID, KeepPrefix: int64(kp), KeepSuffix: int64(ks), SHA256: hexSHA(bad)}, mid, 1<<20)
	require.NoError(t, err)
	require.NoError(t, r.Verify())
	require.False(t, r.ValidJSON())

	// the base read from the database when the cache does not hold it (a restart)
	st2, err := sqlite.Open(ctx, store.Options{Path: path, StateCacheBytes: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st2.Close() })
	got, err = New(st2, nil).ApplyStateDelta(ctx, d, middle, 1<<20)
	require.NoError(t, err)
	require.True(t, bytes.Equal(next, got.State))
	require.NoError(t, got.Verify())

	field := func(err error) string {
		var de *delta.Error
		if errors.As(err, &de) {
			return de.Path()
		}
		return "not a delta.Error: " + err.Error()
	}
	for _, tc := range []struct {
		name  string
		mut   func(d *StateDelta)
		max   int64
		check func(t *testing.T, err error)
	}{
		{"missing base", func(d *StateDelta) { d.BaseCheckpointID = "nope" }, 1 << 20,
			func(t *testing.T, err error) { require.ErrorIs(t, err, store.ErrNotFound) }},
		{"keepPrefix beyond the base", func(d *StateDelta) { d.KeepPrefix = int64(len(base)) + 1; d.SHA256 = "x" }, 1 << 20,
			func(t *testing.T, err error) { require.Equal(t, "stateDelta.keepPrefix", field(err)) }},
		{"prefix and suffix overlap", func(d *StateDelta) { d.KeepSuffix = int64(len(base)); d.SHA256 = "x" }, 1 << 20,
			func(t *testing.T, err error) { require.Equal(t, "stateDelta.keepSuffix", field(err)) }},
		{"sha256 not hex", func(d *StateDelta) { d.SHA256 = "zz" }, 10,
			func(t *testing.T, err error) { require.Equal(t, "stateDelta.sha256", field(err)) }},
		{"too large, before hashing", func(d *StateDelta) { d.SHA256 = hexSHA([]byte("other")) }, 1000,
			func(t *testing.T, err error) {
				var tl *store.TooLargeError
				require.ErrorAs(t, err, &tl)
				require.Equal(t, int64(len(next)), tl.Size)
			}},
		{"sha256 of another value", func(d *StateDelta) { d.SHA256 = hexSHA([]byte("other")) }, 1 << 20,
			func(t *testing.T, err error) { require.Equal(t, "stateDelta.sha256", field(err)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dd := d
			tc.mut(&dd)
			r, err := e.ApplyStateDelta(ctx, dd, middle, tc.max)
			if err == nil {
				err = r.Verify() // the rebuilt state's sha256
			}
			require.Error(t, err)
			tc.check(t, err)
		})
	}
}
