package storetest

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// Values that list part of another's chunks (a backend may keep the chunks one store added
// together, as SQLite's packs do): when the other goes, what they list stays readable and the
// rest goes; storing the other again lists what is still stored; with the last value gone
// nothing is left, and the kept footprint is the recount all along.

func init() {
	add(testCase{"ChunksPartlyListed", testChunksPartlyListed})
}

func testChunksPartlyListed(t *testing.T, h *harness) {
	s := h.db(t)
	ctx := context.Background()
	r := testgen.New(77)
	a := r.Bytes(200 << 10) // new content: ~100 chunks stored by one store
	_, cs := chunk.Split(a)
	prefix := func(n int) []byte {
		size := 0
		for _, c := range cs[:n] {
			size += int(c.Size)
		}
		return bytes.Clone(a[:size])
	}
	b := append(prefix(len(cs)/3), r.Bytes(20<<10)...) // a's first third
	c := append(prefix(1), r.Bytes(20<<10)...)         // a's first chunk
	d := append(prefix(len(cs)-2), r.Bytes(5<<10)...)  // all of a but its last chunks
	save := func(wf string, v []byte) string {
		id := mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: v, StateType: store.StateBytes}).CheckpointID
		require.NoError(t, s.Compact(ctx)) // a backend may cut new content into chunks after the save
		return id
	}
	check := func(what string, want map[string][]byte) {
		t.Helper()
		loadEach(t, s, want, what)
		verifyClean(t, s, what)
		checkKeptFootprint(t, s, what)
	}
	ids := map[string]string{"a": save("a", a)}
	for wf, v := range map[string][]byte{"b": b, "c": c, "d": d} {
		ids[wf] = save(wf, v)
	}
	check("stored", map[string][]byte{ids["a"]: a, ids["b"]: b, ids["c"]: c, ids["d"]: d})
	_, err := s.DeleteWorkflow(ctx, "a")
	require.NoError(t, err)
	check("a deleted", map[string][]byte{ids["b"]: b, ids["c"]: c, ids["d"]: d})
	_, err = s.DeleteWorkflow(ctx, "d")
	require.NoError(t, err)
	check("d deleted", map[string][]byte{ids["b"]: b, ids["c"]: c})
	ids["a"] = save("a", a) // lists b's and c's chunks of a again, stores the others anew
	check("a again", map[string][]byte{ids["a"]: a, ids["b"]: b, ids["c"]: c})
	for _, wf := range []string{"b", "a"} {
		_, err = s.DeleteWorkflow(ctx, wf)
		require.NoError(t, err)
	}
	check("a and b deleted", map[string][]byte{ids["c"]: c})
	_, err = s.DeleteWorkflow(ctx, "c")
	require.NoError(t, err)
	check("all deleted", nil)
	runs, chunks := verifyClean(t, s, "all deleted")
	require.Zero(t, runs)
	require.Zero(t, chunks)
	fp, err := s.Footprints(ctx, store.FootprintRequest{})
	require.NoError(t, err)
	require.Zero(t, fp.Total.StoredBytes)
}
