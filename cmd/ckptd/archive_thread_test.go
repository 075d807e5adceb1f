package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

func threadRecords() []store.LGRecord {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	return []store.LGRecord{
		{Kind: store.LGKindCheckpoint, CheckpointID: "1f0-a", CreatedAt: t0, ChannelVersions: json.RawMessage(`{"m": 1}`),
			Metadata: json.RawMessage(`{"source": "input", "step": -1}`), Type: "json", Data: []byte(`{"v":4}`)},
		{Kind: store.LGKindCheckpoint, Namespace: "sub:1", CheckpointID: "1f0-b", ParentID: "1f0-a", CreatedAt: t0.Add(time.Second),
			ChannelVersions: json.RawMessage(`{}`), Type: "msgpack", Data: []byte{0x80}},
		{Kind: store.LGKindValue, Channel: "m", Version: "1", Type: "json", Data: []byte(`["hi"]`)},
		{Kind: store.LGKindValue, Channel: "e", Version: `"00000001.0.5"`, Type: store.LGEmptyType, Data: []byte{}},
		{Kind: store.LGKindWrite, CheckpointID: "1f0-a", TaskID: "t", TaskPath: "p", Idx: -1, Channel: "__error__", Type: "json", Data: []byte(`"boom"`)},
		// a replayed branch's own value of m@1, which the second checkpoint of the root reads
		{Kind: store.LGKindValue, Channel: "m", Version: "1", Variant: 1, Type: "json", Data: []byte(`["other branch"]`)},
		{Kind: store.LGKindCheckpoint, CheckpointID: "1f0-c", ParentID: "1f0-a", CreatedAt: t0.Add(2 * time.Second),
			ChannelVersions: json.RawMessage(`{"m": 1}`), ValueRefs: map[string]int{"m": 1}, Type: "json", Data: []byte(`{"v":4}`)},
	}
}

func writeThreadArchive(t testing.TB, comp byte, recs []store.LGRecord, extra func(aw *archiveWriter, i int)) []byte {
	t.Helper()
	var counts store.LGThreadCounts
	for _, r := range recs {
		switch r.Kind {
		case store.LGKindCheckpoint:
			counts.Checkpoints++
		case store.LGKindValue:
			counts.Values++
		case store.LGKindWrite:
			counts.Writes++
		}
	}
	var buf bytes.Buffer
	aw, err := newArchiveWriterVersion(&buf, archiveThreadVersion, comp)
	require.NoError(t, err)
	require.NoError(t, aw.beginThread(archiveThreadHeader{Format: archiveFormat, Version: archiveThreadVersion, Kind: archiveThreadKind,
		ExportedAt: "2026-01-02T00:00:00Z", CkptdVersion: "test", ThreadID: "t", Checkpoints: counts.Checkpoints,
		Values: counts.Values, Writes: counts.Writes}))
	for i, r := range recs {
		require.NoError(t, aw.lgRow(r))
		if extra != nil {
			extra(aw, i)
		}
	}
	require.NoError(t, aw.finish())
	return buf.Bytes()
}

func readThreadArchive(b []byte) (string, []store.LGRecord, error) {
	ar, err := openArchive(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return "", nil, err
	}
	defer ar.close()
	var out []store.LGRecord
	for r, err := range ar.lgRecords() {
		if err != nil {
			return ar.thread.ThreadID, out, err
		}
		out = append(out, r)
	}
	return ar.thread.ThreadID, out, nil
}

func TestThreadArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	want := threadRecords()
	for _, comp := range []byte{compressionNone, compressionZstd} {
		b := writeThreadArchive(t, comp, want, func(aw *archiveWriter, i int) {
			require.NoError(t, aw.record('x', []byte("a newer writer's optional record")))
		})
		thread, got, err := readThreadArchive(b)
		require.NoError(t, err)
		assert.Equal(t, "t", thread)
		assert.Equal(t, want, got, "raw JSON byte for byte, times to the microsecond")

		// a thread archive is not a workflow archive, and the other way round
		_, _, err = readTestArchive(b)
		assert.ErrorContains(t, err, `it holds LangGraph thread "t", not a workflow`)
		_, _, err = readThreadArchive(writeTestArchive(t, comp))
		assert.ErrorContains(t, err, `it holds workflow "wf", not a LangGraph thread`)
	}
}

// TestThreadArchiveRefused: every inconsistency of an intact (re-signed) or damaged thread
// archive is refused with a precise reason.
func TestThreadArchiveRefused(t *testing.T) {
	t.Parallel()
	recs := threadRecords()
	for name, tc := range map[string]struct {
		build func() []byte
		want  string
	}{
		"damaged": {func() []byte {
			b := writeThreadArchive(t, compressionZstd, recs, nil)
			b[len(b)/2] ^= 1
			return b
		}, "damaged: SHA-256 mismatch"},
		"data of another size": {func() []byte {
			// the first row's recorded size says 8, its data is 7 bytes; re-signed, so intact
			b := writeThreadArchive(t, compressionNone, recs, nil)
			i := bytes.Index(b, []byte(`"sizeBytes":7`))
			require.Positive(t, i)
			b[i+len(`"sizeBytes":`)] = '8'
			resign(b)
			return b
		}, `LangGraph checkpoint "1f0-a": data is 7 bytes, the record says 8`},
		"count": {func() []byte {
			return writeThreadArchive(t, compressionNone, recs[:4], func(aw *archiveWriter, i int) {
				if i == 3 {
					require.NoError(t, aw.lgRow(recs[4]))
					require.NoError(t, aw.lgRow(recs[4]))
				}
			})
		}, "2 checkpoints, 2 values and 2 writes; the header announces 2, 2 and 0"},
		"no data record": {func() []byte {
			return writeThreadArchive(t, compressionNone, recs[:1], func(aw *archiveWriter, i int) {
				require.NoError(t, aw.jsonRecord(recLGValue, archiveLGRow{Channel: "m", Version: "1", Type: "json"}))
				require.NoError(t, aw.record(recEnd, nil))
			})
		}, `LangGraph value m@1: expected its data record, found 'E'`},
		"workflow record": {func() []byte {
			return writeThreadArchive(t, compressionNone, recs[:1], func(aw *archiveWriter, i int) {
				require.NoError(t, aw.record(recCheckpoint, []byte(`{}`)))
			})
		}, `unexpected 'C' record`},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := readThreadArchive(tc.build())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
