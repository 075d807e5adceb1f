package store

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
)

// exportAll collects a workflow through Export.
func exportAll(t *testing.T, s *Store, wf string) (WorkflowRecord, []Checkpoint) {
	t.Helper()
	var rec WorkflowRecord
	var cps []Checkpoint
	n := -1
	require.NoError(t, s.Export(context.Background(), wf, func(r WorkflowRecord, count int) error {
		rec, n = r, count
		return nil
	}, func(cp Checkpoint) error {
		cps = append(cps, cp)
		return nil
	}))
	require.Equal(t, n, len(cps))
	return rec, cps
}

func seqOf(cps []Checkpoint) iter.Seq2[Checkpoint, error] {
	return func(yield func(Checkpoint, error) bool) {
		for _, cp := range cps {
			if !yield(cp, nil) {
				return
			}
		}
	}
}

func archiveSource(t *testing.T) *Store {
	clock := newClock()
	src := openTest(t, func(o *Options) { o.Now = clock.Now })
	rng := rand.New(rand.NewPCG(1, 2))
	big := checkpointJSON(rng, 200<<10) // compressed, chunked on multi-core machines
	mustSave(t, src, SaveRequest{WorkflowID: "wf", CheckpointID: "c-1", Phase: PhaseBeforeStep, State: []byte(`{"a": 1}`),
		StateType: StateJSON, Metadata: []byte(`{"k": "v", "n": 1.0}`), WorkflowHash: "h"})
	mustSave(t, src, SaveRequest{WorkflowID: "wf", CheckpointID: "c-2", ParentID: "c-1", Step: 1, StepName: "s", State: big,
		StateType: StateJSON, CompletedTasks: []byte(` ["x"] `), PendingTasks: pendingTasksJSON(3)})
	mustSave(t, src, SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "c-3", Step: 2, Phase: PhaseFailed,
		Error: &StepError{Message: "boom"}, State: []byte{1, 2, 3}, StateType: StateBytes})
	mustSave(t, src, SaveRequest{WorkflowID: "wf", CheckpointID: "c-4", Step: 3})                                   // no state
	mustSave(t, src, SaveRequest{WorkflowID: "wf", CheckpointID: "c-5", Step: 4, State: big, StateType: StateJSON}) // dedup
	_, err := src.PutWrites(context.Background(), "wf", "", "c-5", []Write{
		{TaskID: "t", Idx: 0, Channel: "a", Value: []byte(`{"v":1}`)},
		{TaskID: "t", Idx: -1, Channel: "err", Value: []byte{0xff}, IsBytes: true, Type: "bytes", TaskPath: "p"},
	})
	require.NoError(t, err)
	_, err = src.Configure(context.Background(), "wf", &Retention{KeepLast: 7, KeepFirst: true})
	require.NoError(t, err)
	n, err := src.Delete(context.Background(), "c-1") // a gap in the seqs
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return src
}

func TestExportImportRoundTrip(t *testing.T) {
	src := archiveSource(t)
	require.NoError(t, src.Compact(context.Background())) // imports compress at once: compare like with like
	rec, cps := exportAll(t, src, "wf")
	require.Len(t, cps, 4)
	assert.Equal(t, []int64{2, 3, 4, 5}, []int64{cps[0].Seq, cps[1].Seq, cps[2].Seq, cps[3].Seq})
	assert.Equal(t, &Retention{KeepLast: 7, KeepFirst: true}, rec.Retention)

	dst := openTest(t)
	res, err := dst.Import(context.Background(), rec, seqOf(cps), ImportOptions{})
	require.NoError(t, err)
	assert.True(t, res.CreatedWorkflow)
	assert.Equal(t, 4, res.Imported)
	assert.Zero(t, res.Renumbered)

	_, again := exportAll(t, dst, "wf")
	assert.Equal(t, cps, again, "every field, state byte and pending write survives")
	ret, err := dst.Configure(context.Background(), "wf", nil)
	require.NoError(t, err)
	assert.Equal(t, Retention{KeepLast: 7, KeepFirst: true}, ret)

	// the next save continues after the highest imported seq
	r := mustSave(t, dst, SaveRequest{WorkflowID: "wf", CheckpointID: "c-6", State: []byte(`{}`), StateType: StateJSON})
	assert.EqualValues(t, 6, r.Seq)
	// a repeated save of an imported checkpoint is idempotent: same digest as the original save
	r = mustSave(t, dst, SaveRequest{WorkflowID: "wf", Namespace: "sub", CheckpointID: "c-3", Step: 2, Phase: PhaseFailed,
		Error: &StepError{Message: "boom"}, State: []byte{1, 2, 3}, StateType: StateBytes})
	assert.True(t, r.Existing)
	assert.EqualValues(t, 3, r.Seq)

	// importing twice is a no-op
	res, err = dst.Import(context.Background(), rec, seqOf(cps), ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, res.Imported)
	assert.Equal(t, 4, res.Skipped)
	assert.False(t, res.CreatedWorkflow)

	v, err := dst.Verify(context.Background(), nil)
	require.NoError(t, err)
	assert.Empty(t, v)
}

func countCheckpoints(t *testing.T, s *Store) int {
	t.Helper()
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	return st.Checkpoints
}

// TestImportAllOrNothing: any failure while importing leaves the database as it was.
func TestImportAllOrNothing(t *testing.T) {
	src := archiveSource(t)
	rec, cps := exportAll(t, src, "wf")
	boom := errors.New("archive damaged")
	badSHA := slices.Clone(cps)
	badSHA[2].State = []byte{9, 9, 9} // c-4 has no state; c-3 is index 1
	badSHA[1].State = []byte{9, 9, 9}
	outOfOrder := []Checkpoint{cps[1], cps[0]}
	wrongWf := slices.Clone(cps)
	wrongWf[3].WorkflowID = "other"
	cases := map[string]iter.Seq2[Checkpoint, error]{
		"iterator error": func(yield func(Checkpoint, error) bool) {
			_ = yield(cps[0], nil) && yield(cps[1], nil) && yield(Checkpoint{}, boom)
		},
		"sha mismatch":   seqOf(badSHA),
		"out of order":   seqOf(outOfOrder),
		"wrong workflow": seqOf(wrongWf),
	}
	for name, seq := range cases {
		t.Run(name, func(t *testing.T) {
			dst := openTest(t)
			mustSave(t, dst, SaveRequest{WorkflowID: "keep", CheckpointID: "k", State: []byte(`{}`), StateType: StateJSON})
			_, err := dst.Import(context.Background(), rec, seq, ImportOptions{})
			require.Error(t, err)
			assert.Equal(t, 1, countCheckpoints(t, dst))
			_, err = dst.Workflow(context.Background(), "wf")
			assert.ErrorIs(t, err, ErrNotFound, "the workflow row is rolled back too")
		})
	}
	t.Run("iterator error is returned", func(t *testing.T) {
		dst := openTest(t)
		_, err := dst.Import(context.Background(), rec, cases["iterator error"], ImportOptions{})
		assert.ErrorIs(t, err, boom)
	})
	t.Run("sha mismatch is corruption", func(t *testing.T) {
		dst := openTest(t)
		_, err := dst.Import(context.Background(), rec, seqOf(badSHA), ImportOptions{})
		var ce *CorruptError
		assert.ErrorAs(t, err, &ce)
	})
}

func TestImportConflicts(t *testing.T) {
	src := archiveSource(t)
	rec, cps := exportAll(t, src, "wf")
	dst := openTest(t)
	mustSave(t, dst, SaveRequest{WorkflowID: "wf", CheckpointID: "c-3", State: []byte(`{"different":1}`), StateType: StateJSON})
	_, err := dst.Import(context.Background(), rec, seqOf(cps), ImportOptions{})
	assert.ErrorIs(t, err, ErrConflict)
	assert.Equal(t, 1, countCheckpoints(t, dst))

	dst2 := openTest(t)
	mustSave(t, dst2, SaveRequest{WorkflowID: "elsewhere", CheckpointID: "c-5"})
	_, err = dst2.Import(context.Background(), rec, seqOf(cps), ImportOptions{})
	assert.ErrorIs(t, err, ErrConflict)
	assert.Contains(t, err.Error(), `already exists in workflow "elsewhere"`)
}

func TestImportRenumbersAfterExisting(t *testing.T) {
	src := archiveSource(t)
	rec, cps := exportAll(t, src, "wf")
	clock := newClock()
	clock.Advance(24 * time.Hour)
	dst := openTest(t, func(o *Options) { o.Now = clock.Now })
	for i := 0; i < 3; i++ { // seqs 1..3 taken
		mustSave(t, dst, SaveRequest{WorkflowID: "wf", CheckpointID: fmt.Sprintf("x-%d", i)})
	}
	_, err := dst.Configure(context.Background(), "wf", &Retention{KeepLast: 100})
	require.NoError(t, err)
	res, err := dst.Import(context.Background(), rec, seqOf(cps), ImportOptions{})
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
	r := mustSave(t, dst, SaveRequest{WorkflowID: "wf", CheckpointID: "y"})
	assert.EqualValues(t, 8, r.Seq)
}

func TestImportDryRun(t *testing.T) {
	src := archiveSource(t)
	rec, cps := exportAll(t, src, "wf")
	dst := openTest(t)
	res, err := dst.Import(context.Background(), rec, seqOf(cps), ImportOptions{DryRun: true})
	require.NoError(t, err)
	assert.True(t, res.DryRun)
	assert.Equal(t, 4, res.Imported)
	assert.Equal(t, 0, countCheckpoints(t, dst))
	_, err = dst.Workflow(context.Background(), "wf")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestImportCanceled(t *testing.T) {
	src := archiveSource(t)
	rec, cps := exportAll(t, src, "wf")
	dst := openTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	seq := func(yield func(Checkpoint, error) bool) {
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
	_, err := dst.Import(ctx, rec, seq, ImportOptions{})
	require.Error(t, err)
	require.NoError(t, dst.Close()) // waits for the writer: the job rolled back
	dst2, err := Open(context.Background(), Options{Path: dst.Path()})
	require.NoError(t, err)
	defer dst2.Close()
	assert.Equal(t, 0, countCheckpoints(t, dst2))
}

func TestExportCorruptAndUnknown(t *testing.T) {
	src := archiveSource(t)
	require.NoError(t, src.Close())
	db := rawDB(t, src.Path())
	_, err := db.Exec(`UPDATE states SET data = X'00' || substr(data, 2) WHERE size = 3`)
	require.NoError(t, err)
	s, err := Open(context.Background(), Options{Path: src.Path()})
	require.NoError(t, err)
	defer s.Close()
	err = s.Export(context.Background(), "wf", func(WorkflowRecord, int) error { return nil }, func(Checkpoint) error { return nil })
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "c-3", ce.CheckpointID)
	err = s.Export(context.Background(), "nope", func(WorkflowRecord, int) error { return nil }, func(Checkpoint) error { return nil })
	assert.ErrorIs(t, err, ErrNotFound)
}

// TestExportImportManifests: the drift manifest recorded with a checkpoint travels with it, so
// drift can be checked against an imported checkpoint as against the original.
func TestExportImportManifests(t *testing.T) {
	src := openTest(t)
	root := srcTree(t, 40)
	m1 := scanTree(t, root, nil)
	em1 := saveWithManifest(t, src, "wf", "c-1", m1, nil)
	mustSave(t, src, SaveRequest{WorkflowID: "wf", CheckpointID: "c-2", State: []byte(`{}`)}) // no sources
	require.NoError(t, os.WriteFile(filepath.Join(root, "pkg1", "new.go"), []byte("package p\n"), 0o644))
	m3 := scanTree(t, root, m1)
	saveWithManifest(t, src, "wf", "c-3", m3, em1)

	rec, cps := exportAll(t, src, "wf")
	require.Len(t, cps, 3)
	require.NotNil(t, cps[0].Manifest)
	assert.Nil(t, cps[1].Manifest)
	require.NotNil(t, cps[2].Manifest)
	assert.Equal(t, manifestBytes(t, m1), manifestBytes(t, cps[0].Manifest))
	assert.Equal(t, manifestBytes(t, m3), manifestBytes(t, cps[2].Manifest))

	dst := openTest(t)
	res, err := dst.Import(context.Background(), rec, seqOf(cps), ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, 3, res.Imported)
	for id, want := range map[string]*drift.Manifest{"c-1": m1, "c-3": m3} {
		got, err := loadManifestOf(t, dst, id)
		require.NoError(t, err, id)
		assert.Equal(t, manifestBytes(t, want), manifestBytes(t, got), id)
	}
	_, err = loadManifestOf(t, dst, "c-2")
	require.ErrorIs(t, err, ErrNotFound)
	// the two manifests share their unchanged entries on this side too
	var entries int
	require.NoError(t, dst.rdb.QueryRow(`SELECT count(*) FROM drift_entries`).Scan(&entries))
	assert.Equal(t, len(m3.Entries), entries)

	// a second import skips everything and leaves the manifests alone
	res, err = dst.Import(context.Background(), rec, seqOf(cps), ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, 3, res.Skipped)
	_, again := exportAll(t, dst, "wf")
	assert.Equal(t, manifestBytes(t, m3), manifestBytes(t, again[2].Manifest))

	// a manifest whose root is not absolute is refused, and nothing is imported
	bad := slices.Clone(cps)
	rel := *bad[2].Manifest
	rel.Spec.Root = "relative/dir"
	bad[2].Manifest = &rel
	other := openTest(t)
	_, err = other.Import(context.Background(), rec, seqOf(bad), ImportOptions{})
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, "manifest", ie.Field)
	assert.Contains(t, ie.Reason, `root "relative/dir" is not an absolute path`)
	_, err = other.CheckpointManifestRef(context.Background(), "c-1")
	require.ErrorIs(t, err, ErrNotFound)
}
