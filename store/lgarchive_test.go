package store

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func lgExportAll(t *testing.T, s *Store, thread string) (LGThreadCounts, []LGRecord) {
	t.Helper()
	var counts LGThreadCounts
	var out []LGRecord
	require.NoError(t, s.LGExport(context.Background(), thread, func(c LGThreadCounts) error {
		counts = c
		return nil
	}, func(r LGRecord) error {
		out = append(out, r)
		return nil
	}))
	return counts, out
}

func lgSeq(rs []LGRecord) iter.Seq2[LGRecord, error] {
	return func(yield func(LGRecord, error) bool) {
		for _, r := range rs {
			if !yield(r, nil) {
				return
			}
		}
	}
}

func lgArchiveSource(t *testing.T) *Store {
	clock := newClock()
	s := openTest(t, func(o *Options) { o.Now = clock.Now })
	big := string(checkpointJSON(rand.New(rand.NewPCG(5, 5)), 64<<10)) // compressed when stored
	lgPutT(t, s, "t", "", "1f0-a", "", map[string]any{"m": 1, "e": 1}, map[string]string{"m": big, "e": ""}, `{"source":"input","step":-1}`)
	lgPutT(t, s, "t", "", "1f0-b", "1f0-a", map[string]any{"m": 2, "e": 1}, map[string]string{"m": `["x"]`}, `{"source":"loop","step":0}`)
	lgPutT(t, s, "t", "sub:1", "1f0-c", "", map[string]any{"q": "00000001.0.5"}, map[string]string{"q": `"q"`}, "")
	lgWritesT(t, s, "t", "", "1f0-b", "task-1", "p", "m", `"w0"`, "e", `"w1"`)
	lgPutT(t, s, "other", "", "1f0-a", "", map[string]any{"m": 1}, map[string]string{"m": `["other"]`}, "")
	return s
}

func TestLGExportImportRoundTrip(t *testing.T) {
	src := lgArchiveSource(t)
	counts, recs := lgExportAll(t, src, "t")
	assert.Equal(t, LGThreadCounts{Checkpoints: 3, Values: 4, Writes: 2}, counts)
	require.Len(t, recs, 9)
	kinds := make([]string, len(recs))
	for i, r := range recs {
		kinds[i] = r.Kind
	}
	assert.Equal(t, []string{"checkpoint", "checkpoint", "checkpoint", "value", "value", "value", "value", "write", "write"}, kinds)

	dst := openTest(t)
	res, err := dst.LGImport(context.Background(), "t", lgSeq(recs), ImportOptions{})
	require.NoError(t, err)
	assert.True(t, res.CreatedThread)
	assert.Equal(t, counts, res.Imported)
	assert.Equal(t, LGThreadCounts{}, res.Skipped)

	// every row comes back identical, creation times included, and reads the same as the original
	_, again := lgExportAll(t, dst, "t")
	assert.Equal(t, recs, again)
	for _, ns := range []string{"", "sub:1"} {
		a, err := src.LGGet(context.Background(), "t", ns, "")
		require.NoError(t, err)
		b, err := dst.LGGet(context.Background(), "t", ns, "")
		require.NoError(t, err)
		assert.Equal(t, a, b, ns)
	}
	root := ""
	la, err := src.LGList(context.Background(), LGListFilter{ThreadID: "t", Namespace: &root,
		Metadata: map[string]json.RawMessage{"source": json.RawMessage(`"loop"`)}})
	require.NoError(t, err)
	lb, err := dst.LGList(context.Background(), LGListFilter{ThreadID: "t", Namespace: &root,
		Metadata: map[string]json.RawMessage{"source": json.RawMessage(`"loop"`)}})
	require.NoError(t, err)
	require.Len(t, lb.Tuples, 1, "the metadata index came along")
	assert.Equal(t, la.Tuples, lb.Tuples)

	// a second import skips everything; a dry run writes nothing
	res, err = dst.LGImport(context.Background(), "t", lgSeq(recs), ImportOptions{})
	require.NoError(t, err)
	assert.False(t, res.CreatedThread)
	assert.Equal(t, LGThreadCounts{}, res.Imported)
	assert.Equal(t, counts, res.Skipped)
	dry := openTest(t)
	res, err = dry.LGImport(context.Background(), "t", lgSeq(recs), ImportOptions{DryRun: true})
	require.NoError(t, err)
	assert.True(t, res.DryRun)
	assert.Equal(t, counts, res.Imported)
	err = dry.LGExport(context.Background(), "t", func(LGThreadCounts) error { return nil }, func(LGRecord) error { return nil })
	require.ErrorIs(t, err, ErrNotFound)

	_, problems, err := dst.VerifyLG(context.Background())
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestLGImportRefuses(t *testing.T) {
	src := lgArchiveSource(t)
	_, recs := lgExportAll(t, src, "t")
	for _, tc := range []struct {
		name   string
		mutate func(rs []LGRecord) []LGRecord
		check  func(t *testing.T, err error)
	}{
		{"bad kind", func(rs []LGRecord) []LGRecord { rs[0].Kind = "blob"; return rs }, invalidField("kind")},
		{"no creation time", func(rs []LGRecord) []LGRecord { rs[0].CreatedAt = time.Time{}; return rs }, invalidField("createdAt")},
		{"version not canonical", func(rs []LGRecord) []LGRecord { rs[3].Version = " 1"; return rs }, invalidField("version")},
		{"empty value with bytes", func(rs []LGRecord) []LGRecord { rs[3].Type = LGEmptyType; rs[3].Data = []byte("x"); return rs }, invalidField("type")},
		{"write without task", func(rs []LGRecord) []LGRecord { rs[7].TaskID = ""; return rs }, invalidField("write")},
		{"bad channel versions", func(rs []LGRecord) []LGRecord { rs[1].ChannelVersions = json.RawMessage(`[1]`); return rs }, invalidField("channelVersions")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := openTest(t)
			rs := tc.mutate(slices.Clone(recs))
			_, err := dst.LGImport(context.Background(), "t", lgSeq(rs), ImportOptions{})
			require.Error(t, err)
			tc.check(t, err)
			err = dst.LGExport(context.Background(), "t", func(LGThreadCounts) error { return nil }, func(LGRecord) error { return nil })
			require.ErrorIs(t, err, ErrNotFound, "nothing was written")
		})
	}

	// the same key with other bytes conflicts, and the whole import is refused
	dst := openTest(t)
	lgPutT(t, dst, "t", "sub:1", "1f0-c", "", map[string]any{"q": "00000001.0.5"}, map[string]string{"q": `"different"`}, "")
	_, err := dst.LGImport(context.Background(), "t", lgSeq(recs), ImportOptions{})
	require.ErrorIs(t, err, ErrConflict)
	assert.Contains(t, err.Error(), "already here with different content")
	counts, _ := lgExportAll(t, dst, "t")
	assert.Equal(t, LGThreadCounts{Checkpoints: 1, Values: 1}, counts)

	// an error from the records rolls everything back
	failing := func(yield func(LGRecord, error) bool) {
		if yield(recs[0], nil) {
			yield(LGRecord{}, errors.New("archive damaged"))
		}
	}
	empty := openTest(t)
	_, err = empty.LGImport(context.Background(), "t", failing, ImportOptions{})
	require.ErrorContains(t, err, "archive damaged")
	err = empty.LGExport(context.Background(), "t", func(LGThreadCounts) error { return nil }, func(LGRecord) error { return nil })
	require.ErrorIs(t, err, ErrNotFound)
}

func invalidField(field string) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		var ie *InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, field, ie.Field)
	}
}

// TestLGExportCorrupt: a damaged row stops the export with a *CorruptError naming it.
func TestLGExportCorrupt(t *testing.T) {
	s := lgArchiveSource(t)
	_, err := rawDB(t, s.Path()).Exec(`UPDATE lg_blobs SET data = CAST('["y"]' AS BLOB) WHERE thread_id = 't' AND version = '2'`)
	require.NoError(t, err)
	err = s.LGExport(context.Background(), "t", func(LGThreadCounts) error { return nil }, func(LGRecord) error { return nil })
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "SHA-256 mismatch")
}
