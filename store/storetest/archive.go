package storetest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func init() {
	add(
		testCase{"ExportImportRoundTrip", testExportImportRoundTrip},
		testCase{"ImportAllOrNothing", testImportAllOrNothing},
		testCase{"ImportConflicts", testImportConflicts},
		testCase{"ImportRenumbersAfterExisting", testImportRenumbersAfterExisting},
		testCase{"ImportDryRun", testImportDryRun},
		testCase{"ImportCanceled", testImportCanceled},
		testCase{"ExportCorruptAndUnknown", testExportCorruptAndUnknown},
		testCase{"ExportImportManifests", testExportImportManifests},
	)
}

// exportAll collects a workflow through Export.
func exportAll(t *testing.T, s store.Backend, wf string) (store.WorkflowRecord, []store.Checkpoint) {
	t.Helper()
	var rec store.WorkflowRecord
	var cps []store.Checkpoint
	n := -1
	require.NoError(t, s.Export(context.Background(), wf, func(r store.WorkflowRecord, count int) error {
		rec, n = r, count
		return nil
	}, func(cp store.Checkpoint) error {
		cps = append(cps, cp)
		return nil
	}))
	require.Equal(t, n, len(cps))
	return rec, cps
}

func seqOf(cps []store.Checkpoint) iter.Seq2[store.Checkpoint, error] {
	return func(yield func(store.Checkpoint, error) bool) {
		for _, cp := range cps {
			if !yield(cp, nil) {
				return
			}
		}
	}
}

func archiveSource(t *testing.T, h *harness) store.Backend {
	clock := NewClock()
	src := h.db(t, withClock(clock))
	rng := rand.New(rand.NewPCG(1, 2))
	big := CheckpointJSON(rng, 200<<10) // compressed, chunked on multi-core machines
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-1", Phase: store.PhaseBeforeStep, State: []byte(`{"a": 1}`),
		StateType: store.StateJSON, Metadata: []byte(`{"k": "v", "n": 1.0}`), WorkflowHash: "h"})
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-2", ParentID: "c-1", Step: 1, StepName: "s", State: big,
		StateType: store.StateJSON, CompletedTasks: []byte(` ["x"] `), PendingTasks: PendingTasksJSON(3)})
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "c-3", Step: 2, Phase: store.PhaseFailed,
		Error: &store.StepError{Message: "boom"}, State: []byte{1, 2, 3}, StateType: store.StateBytes})
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-4", Step: 3})                                         // no state
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-5", Step: 4, State: big, StateType: store.StateJSON}) // dedup
	_, err := src.PutWrites(context.Background(), "wf", "", "c-5", []store.Write{
		{TaskID: "t", Idx: 0, Channel: "a", Value: []byte(`{"v":1}`)},
		{TaskID: "t", Idx: -1, Channel: "err", Value: []byte{0xff}, IsBytes: true, Type: "bytes", TaskPath: "p"},
	})
	require.NoError(t, err)
	_, err = src.Configure(context.Background(), "wf", &store.Retention{KeepLast: 7, KeepFirst: true})
	require.NoError(t, err)
	n, err := src.Delete(context.Background(), "c-1") // a gap in the seqs
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return src
}

func testExportImportRoundTrip(t *testing.T, h *harness) {
	src := archiveSource(t, h)
	require.NoError(t, src.Compact(context.Background())) // imports compress at once: compare like with like
	rec, cps := exportAll(t, src, "wf")
	require.Len(t, cps, 4)
	assert.Equal(t, []int64{2, 3, 4, 5}, []int64{cps[0].Seq, cps[1].Seq, cps[2].Seq, cps[3].Seq})
	assert.Equal(t, &store.Retention{KeepLast: 7, KeepFirst: true}, rec.Retention)

	dst := h.db(t)
	res, err := dst.Import(context.Background(), rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	assert.True(t, res.CreatedWorkflow)
	assert.Equal(t, 4, res.Imported)
	assert.Zero(t, res.Renumbered)

	_, again := exportAll(t, dst, "wf")
	assert.Equal(t, cps, again, "every field, state byte and pending write survives")
	ret, err := dst.Configure(context.Background(), "wf", nil)
	require.NoError(t, err)
	assert.Equal(t, store.Retention{KeepLast: 7, KeepFirst: true}, ret)

	// the next save continues after the highest imported seq
	r := mustSave(t, dst, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-6", State: []byte(`{}`), StateType: store.StateJSON})
	assert.EqualValues(t, 6, r.Seq)
	// a repeated save of an imported checkpoint is idempotent: same digest as the original save
	r = mustSave(t, dst, store.SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "c-3", Step: 2, Phase: store.PhaseFailed,
		Error: &store.StepError{Message: "boom"}, State: []byte{1, 2, 3}, StateType: store.StateBytes})
	assert.True(t, r.Existing)
	assert.EqualValues(t, 3, r.Seq)

	// importing twice is a no-op
	res, err = dst.Import(context.Background(), rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, res.Imported)
	assert.Equal(t, 4, res.Skipped)
	assert.False(t, res.CreatedWorkflow)

	v, err := dst.Verify(context.Background(), nil)
	require.NoError(t, err)
	assert.Empty(t, v)
}

func countCheckpoints(t *testing.T, s store.Backend) int {
	t.Helper()
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	return st.Checkpoints
}

// TestImportAllOrNothing: any failure while importing leaves the database as it was.
func testImportAllOrNothing(t *testing.T, h *harness) {
	src := archiveSource(t, h)
	rec, cps := exportAll(t, src, "wf")
	boom := errors.New("archive damaged")
	badSHA := slices.Clone(cps)
	badSHA[2].State = []byte{9, 9, 9} // c-4 has no state; c-3 is index 1
	badSHA[1].State = []byte{9, 9, 9}
	outOfOrder := []store.Checkpoint{cps[1], cps[0]}
	wrongWf := slices.Clone(cps)
	wrongWf[3].WorkflowID = "other"
	cases := map[string]iter.Seq2[store.Checkpoint, error]{
		"iterator error": func(yield func(store.Checkpoint, error) bool) {
			_ = yield(cps[0], nil) && yield(cps[1], nil) && yield(store.Checkpoint{}, boom)
		},
		"sha mismatch":   seqOf(badSHA),
		"out of order":   seqOf(outOfOrder),
		"wrong workflow": seqOf(wrongWf),
	}
	for name, seq := range cases {
		t.Run(name, func(t *testing.T) {
			dst := h.db(t)
			mustSave(t, dst, store.SaveRequest{WorkflowID: "keep", CheckpointID: "k", State: []byte(`{}`), StateType: store.StateJSON})
			_, err := dst.Import(context.Background(), rec, seq, store.ImportOptions{})
			require.Error(t, err)
			assert.Equal(t, 1, countCheckpoints(t, dst))
			_, err = dst.Workflow(context.Background(), "wf")
			assert.ErrorIs(t, err, store.ErrNotFound, "the workflow row is rolled back too")
		})
	}
	t.Run("iterator error is returned", func(t *testing.T) {
		dst := h.db(t)
		_, err := dst.Import(context.Background(), rec, cases["iterator error"], store.ImportOptions{})
		assert.ErrorIs(t, err, boom)
	})
	t.Run("sha mismatch is corruption", func(t *testing.T) {
		dst := h.db(t)
		_, err := dst.Import(context.Background(), rec, seqOf(badSHA), store.ImportOptions{})
		var ce *store.CorruptError
		assert.ErrorAs(t, err, &ce)
	})
}

func testImportConflicts(t *testing.T, h *harness) {
	src := archiveSource(t, h)
	rec, cps := exportAll(t, src, "wf")
	dst := h.db(t)
	mustSave(t, dst, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-3", State: []byte(`{"different":1}`), StateType: store.StateJSON})
	_, err := dst.Import(context.Background(), rec, seqOf(cps), store.ImportOptions{})
	assert.ErrorIs(t, err, store.ErrConflict)
	assert.Equal(t, 1, countCheckpoints(t, dst))

	dst2 := h.db(t)
	mustSave(t, dst2, store.SaveRequest{WorkflowID: "elsewhere", CheckpointID: "c-5"})
	_, err = dst2.Import(context.Background(), rec, seqOf(cps), store.ImportOptions{})
	assert.ErrorIs(t, err, store.ErrConflict)
	assert.Contains(t, err.Error(), `already exists in workflow "elsewhere"`)
}

func testImportRenumbersAfterExisting(t *testing.T, h *harness) {
	src := archiveSource(t, h)
	rec, cps := exportAll(t, src, "wf")
	clock := NewClock()
	clock.Advance(24 * time.Hour)
	dst := h.db(t, withClock(clock))
	for i := 0; i < 3; i++ { // seqs 1..3 taken
		mustSave(t, dst, store.SaveRequest{WorkflowID: "wf", CheckpointID: fmt.Sprintf("x-%d", i)})
	}
	_, err := dst.Configure(context.Background(), "wf", &store.Retention{KeepLast: 100})
	require.NoError(t, err)
	res, err := dst.Import(context.Background(), rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	// c-2 (seq 2) and c-3 (seq 3) collide: 4, 5; then c-4 (4) and c-5 (5) follow: 6, 7
	var got [][2]int64
	for _, c := range res.Checkpoints {
		got = append(got, [2]int64{c.OriginalSeq, c.Seq})
	}
	assert.Equal(t, [][2]int64{{2, 4}, {3, 5}, {4, 6}, {5, 7}}, got)
	assert.Equal(t, 4, res.Renumbered)
	ret, err := dst.Configure(context.Background(), "wf", nil)
	require.NoError(t, err)
	assert.Equal(t, 100, ret.KeepLast, "an existing workflow keeps its own retention")
	latest, err := dst.LoadLatest(context.Background(), "wf", "")
	require.NoError(t, err)
	assert.Equal(t, "c-5", latest.CheckpointID)
	assert.True(t, latest.CreatedAt.Equal(cps[3].CreatedAt), "creation time kept")
	r := mustSave(t, dst, store.SaveRequest{WorkflowID: "wf", CheckpointID: "y"})
	assert.EqualValues(t, 8, r.Seq)
}

func testImportDryRun(t *testing.T, h *harness) {
	src := archiveSource(t, h)
	rec, cps := exportAll(t, src, "wf")
	dst := h.db(t)
	res, err := dst.Import(context.Background(), rec, seqOf(cps), store.ImportOptions{DryRun: true})
	require.NoError(t, err)
	assert.True(t, res.DryRun)
	assert.Equal(t, 4, res.Imported)
	assert.Equal(t, 0, countCheckpoints(t, dst))
	_, err = dst.Workflow(context.Background(), "wf")
	assert.ErrorIs(t, err, store.ErrNotFound)
}

func testImportCanceled(t *testing.T, h *harness) {
	src := archiveSource(t, h)
	rec, cps := exportAll(t, src, "wf")
	dst := h.db(t)
	ctx, cancel := context.WithCancel(context.Background())
	seq := func(yield func(store.Checkpoint, error) bool) {
		if !yield(cps[0], nil) {
			return
		}
		cancel()
		for _, cp := range cps[1:] {
			if !yield(cp, nil) {
				return
			}
		}
	}
	_, err := dst.Import(ctx, rec, seq, store.ImportOptions{})
	require.Error(t, err)
	require.NoError(t, dst.Close()) // waits for the writer: the job rolled back
	assert.Equal(t, 0, countCheckpoints(t, h.reopen(t, dst)))
}

func testExportCorruptAndUnknown(t *testing.T, h *harness) {
	s := archiveSource(t, h)
	corrupter(t, s).SetStateBytes(t, "c-3", []byte{0, 2, 3}) // was {1, 2, 3}, stored raw
	err := s.Export(context.Background(), "wf", func(store.WorkflowRecord, int) error { return nil }, func(store.Checkpoint) error { return nil })
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "c-3", ce.CheckpointID)
	err = s.Export(context.Background(), "nope", func(store.WorkflowRecord, int) error { return nil }, func(store.Checkpoint) error { return nil })
	assert.ErrorIs(t, err, store.ErrNotFound)
}

// testExportImportManifests: the manifest recorded with a checkpoint travels with it.
func testExportImportManifests(t *testing.T, h *harness) {
	src := h.db(t)
	t1 := newTree(40)
	r1 := t1.record("/src")
	saveWithRecord(t, src, "wf", "c-1", r1)
	mustSave(t, src, store.SaveRequest{WorkflowID: "wf", CheckpointID: "c-2", State: []byte(`{}`)}) // no sources
	r3 := t1.with("pkg1/new.go", "v1").record("/src")
	saveWithRecord(t, src, "wf", "c-3", r3)

	rec, cps := exportAll(t, src, "wf")
	require.Len(t, cps, 3)
	require.NotNil(t, cps[0].Manifest)
	assert.Nil(t, cps[1].Manifest)
	require.NotNil(t, cps[2].Manifest)
	assert.Equal(t, *r1, *cps[0].Manifest)
	assert.Equal(t, *r3, *cps[2].Manifest)

	dst := h.db(t)
	res, err := dst.Import(context.Background(), rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, 3, res.Imported)
	requireRecord(t, dst, "c-1", r1)
	requireRecord(t, dst, "c-3", r3)
	_, err = recordOf(t, dst, "c-2")
	require.ErrorIs(t, err, store.ErrNotFound)
	// the two manifests share their unchanged entries on this side too
	_, _, entries := corrupter(t, dst).ManifestRows(t)
	assert.Equal(t, len(t1)+1, entries)

	// a second import skips everything and leaves the manifests alone
	res, err = dst.Import(context.Background(), rec, seqOf(cps), store.ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, 3, res.Skipped)
	_, again := exportAll(t, dst, "wf")
	assert.Equal(t, *r3, *again[2].Manifest)

	// a record of the wrong shape is refused, and nothing is imported
	bad := slices.Clone(cps)
	broken := *bad[2].Manifest
	broken.Files++
	bad[2].Manifest = &broken
	other := h.db(t)
	_, err = other.Import(context.Background(), rec, seqOf(bad), store.ImportOptions{})
	var ie *store.InvalidError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, "manifest", ie.Field)
	_, err = other.CheckpointManifestRef(context.Background(), "c-1")
	require.ErrorIs(t, err, store.ErrNotFound)
}
