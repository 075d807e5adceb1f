package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

func archiveCheckpoints() (store.WorkflowRecord, []engine.Sourced) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	rec := store.WorkflowRecord{WorkflowID: "wf", Retention: &store.Retention{KeepLast: 3, KeepFirst: true},
		Config: []byte(`{"a": 1}`), CreatedAt: t0, UpdatedAt: t0.Add(time.Hour)}
	mk := func(i int, typ store.StateType, state []byte) engine.Sourced {
		cp := engine.Sourced{Checkpoint: store.Checkpoint{Summary: store.Summary{CheckpointID: fmt.Sprintf("c-%d", i), WorkflowID: "wf", Seq: int64(i * 2),
			Phase: store.PhaseCompleted, Step: int64(i), StepName: "step é", CreatedAt: t0.Add(time.Duration(i) * time.Minute),
			StateType: typ, FormatVersion: 1, WorkflowHash: "h", Metadata: []byte(`{"k": "<v>"}`)},
			State: state, CompletedTasks: []byte(`[ "x" ]`)}}
		if typ != store.StateNone {
			sum := sha256.Sum256(state)
			cp.SHA256, cp.SizeBytes = hex.EncodeToString(sum[:]), int64(len(state))
		}
		return cp
	}
	cps := []engine.Sourced{
		mk(1, store.StateJSON, cliState(3000)),
		mk(2, store.StateBytes, []byte{0, 1, 2, 0xff}),
		mk(3, store.StateNone, nil),
	}
	cps[1].Error = &store.StepError{Message: "boom", Retryable: true}
	cps[1].Phase = store.PhaseFailed
	cps[2].PendingTasks = []byte(`[{"id":"t"}]`)
	cps[2].PendingWrites = []store.Write{{TaskID: "t", Idx: 0, Channel: "c", Value: []byte(`{"v": 1}`)},
		{TaskID: "t", Idx: -1, Channel: "d", Value: []byte{9, 8}, IsBytes: true, Type: "bytes"}}
	return rec, cps
}

func writeTestArchive(t *testing.T, compression byte) []byte {
	t.Helper()
	rec, cps := archiveCheckpoints()
	var buf bytes.Buffer
	aw, err := newArchiveWriter(&buf, compression)
	require.NoError(t, err)
	require.NoError(t, aw.begin(archiveHeader{Format: archiveFormat, Version: archiveVersion, WorkflowID: "wf",
		Checkpoints: len(cps), ExportedAt: "2026-01-02T00:00:00Z", CkptdVersion: "test"}, rec))
	for _, cp := range cps {
		require.NoError(t, aw.checkpoint(cp.Checkpoint, cp.Sources))
	}
	require.NoError(t, aw.finish())
	return buf.Bytes()
}

func readTestArchive(b []byte) (store.WorkflowRecord, []engine.Sourced, error) {
	ar, err := openArchive(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return store.WorkflowRecord{}, nil, err
	}
	defer ar.close()
	rec, err := ar.workflow()
	if err != nil {
		return rec, nil, err
	}
	var out []engine.Sourced
	for cp, err := range ar.checkpoints() {
		if err != nil {
			return rec, out, err
		}
		out = append(out, cp)
	}
	return rec, out, nil
}

func TestArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	wantRec, want := archiveCheckpoints()
	for _, comp := range []byte{compressionNone, compressionZstd} {
		t.Run(fmt.Sprint(comp), func(t *testing.T) {
			b := writeTestArchive(t, comp)
			assert.Equal(t, archiveMagic, string(b[:len(archiveMagic)]))
			assert.Equal(t, archiveTrailerMagic, string(b[len(b)-archiveTrailerLen:len(b)-sha256.Size]))
			rec, got, err := readTestArchive(b)
			require.NoError(t, err)
			assert.Equal(t, wantRec.WorkflowID, rec.WorkflowID)
			assert.Equal(t, wantRec.Retention, rec.Retention)
			assert.Equal(t, string(wantRec.Config), string(rec.Config))
			assert.True(t, wantRec.CreatedAt.Equal(rec.CreatedAt))
			assert.True(t, rec.CompletedAt.IsZero())
			require.Len(t, got, len(want))
			for i := range want {
				assert.True(t, want[i].CreatedAt.Equal(got[i].CreatedAt))
				got[i].CreatedAt = want[i].CreatedAt
				assert.Equal(t, want[i], got[i]) // raw JSON fields byte-for-byte, "<v>" not escaped
			}
		})
	}
}

// TestArchiveDetectsEveryFlippedByte: changing any single byte of an archive, truncating it
// anywhere or appending to it is detected.
func TestArchiveDetectsEveryFlippedByte(t *testing.T) {
	t.Parallel()
	for _, comp := range []byte{compressionNone, compressionZstd} {
		t.Run(fmt.Sprint(comp), func(t *testing.T) {
			b := writeTestArchive(t, comp)
			masks := []byte{0x01, 0x80, 0xff, 0x10}
			for i := range b {
				x := masks[i%len(masks)] // a different bit pattern at consecutive positions
				d := bytes.Clone(b)
				d[i] ^= x
				_, _, err := readTestArchive(d)
				require.Error(t, err, "byte %d ^ %#x not detected", i, x)
				var ae *archiveError
				require.ErrorAs(t, err, &ae, "byte %d: %v", i, err)
			}
			for n := 0; n < len(b); n++ {
				_, _, err := readTestArchive(b[:n])
				require.Error(t, err, "truncation to %d bytes not detected", n)
			}
			_, _, err := readTestArchive(append(bytes.Clone(b), 0))
			require.Error(t, err)
		})
	}
}

func TestArchiveMessages(t *testing.T) {
	t.Parallel()
	b := writeTestArchive(t, compressionZstd)
	d := bytes.Clone(b)
	d[len(d)/2] ^= 0xff
	_, _, err := readTestArchive(d)
	assert.Contains(t, err.Error(), "damaged: SHA-256 mismatch")
	_, _, err = readTestArchive(b[:len(b)-100])
	assert.Contains(t, err.Error(), "damaged: SHA-256 mismatch")
	_, _, err = readTestArchive([]byte("SQLite format 3\x00 and then some more bytes that go on for a while........"))
	assert.EqualError(t, err, `not a ckptd archive (no "CKPTD-ARCHIVE" header)`)
	_, _, err = readTestArchive(nil)
	assert.Contains(t, err.Error(), "not a ckptd archive")

	// a newer version with an intact digest asks for an upgrade
	v4 := bytes.Clone(b)
	binary.BigEndian.PutUint16(v4[len(archiveMagic):], 4)
	resign(v4)
	_, _, err = readTestArchive(v4)
	assert.EqualError(t, err, "archive format version 4: this ckptd reads versions 1, 2 and 3 (upgrade ckptd)")
	// a version 1 body under a version 3 header: the header record says 1
	v3 := bytes.Clone(b)
	binary.BigEndian.PutUint16(v3[len(archiveMagic):], 3)
	resign(v3)
	_, _, err = readTestArchive(v3)
	assert.ErrorContains(t, err, `invalid archive (its checksum is intact, so it was written this way): header record says format "ckptd-archive" version 1`)
	// a version 1 body under a version 2 header is not a thread archive
	v2 := bytes.Clone(b)
	binary.BigEndian.PutUint16(v2[len(archiveMagic):], 2)
	resign(v2)
	_, _, err = readTestArchive(v2)
	assert.ErrorContains(t, err, `invalid archive (its checksum is intact, so it was written this way): header record says format "ckptd-archive" version 1 kind ""`)
}

// resign recomputes an archive's digest (to craft archives that are intact but invalid).
func resign(b []byte) {
	sum := sha256.Sum256(b[:len(b)-sha256.Size])
	copy(b[len(b)-sha256.Size:], sum[:])
}

// TestArchiveHugeLength: a record announcing an enormous length neither allocates it nor passes.
func TestArchiveHugeLength(t *testing.T) {
	t.Parallel()
	b := writeTestArchive(t, compressionNone)
	// the H record's length field sits right after the header and its kind byte
	binary.BigEndian.PutUint64(b[archiveHeaderLen+1:], 1<<40)
	resign(b)
	_, _, err := readTestArchive(b)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "invalid archive")
	assert.Contains(t, err.Error(), "over the")

	b = writeTestArchive(t, compressionNone)
	binary.BigEndian.PutUint64(b[archiveHeaderLen+1:], 1<<29)
	resign(b)
	_, _, err = readTestArchive(b)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unexpected end of data")
}

// TestArchiveOptionalRecords: lowercase record kinds are optional (skipped by this reader),
// unknown uppercase ones are not.
func TestArchiveOptionalRecords(t *testing.T) {
	t.Parallel()
	rec, cps := archiveCheckpoints()
	build := func(kind byte) []byte {
		var buf bytes.Buffer
		aw, err := newArchiveWriter(&buf, compressionZstd)
		require.NoError(t, err)
		require.NoError(t, aw.begin(archiveHeader{Format: archiveFormat, Version: archiveVersion, WorkflowID: "wf",
			Checkpoints: len(cps)}, rec))
		for _, cp := range cps {
			require.NoError(t, aw.checkpoint(cp.Checkpoint, cp.Sources))
			require.NoError(t, aw.record(kind, []byte(`{"future":true}`)))
		}
		require.NoError(t, aw.finish())
		return buf.Bytes()
	}
	_, got, err := readTestArchive(build('x'))
	require.NoError(t, err)
	assert.Len(t, got, len(cps))
	_, _, err = readTestArchive(build('M'))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "invalid archive")
	assert.Contains(t, err.Error(), `unexpected 'M' record`)
}

// TestArchiveManifests: a checkpoint's drift manifest travels as the m record after it, among
// other optional records; a misplaced, foreign, doubled or undecodable one refuses the archive.
func TestArchiveManifests(t *testing.T) {
	t.Parallel()
	rec, cps := archiveCheckpoints()
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.py"), []byte("print(1)\n"), 0o644))
	m, err := drift.Scan(t.Context(), drift.Spec{Root: root, Gitignore: true}, nil, drift.ScanOptions{})
	require.NoError(t, err)
	mb, err := drift.MarshalManifest(m)
	require.NoError(t, err)
	cps[0].Sources, cps[2].Sources = m, m // a checkpoint with state, one without

	// build writes the archive; extra(i) adds records after checkpoint i's own (before: i = -1)
	build := func(extra func(aw *archiveWriter, i int)) []byte {
		var buf bytes.Buffer
		aw, err := newArchiveWriter(&buf, compressionZstd)
		require.NoError(t, err)
		require.NoError(t, aw.begin(archiveHeader{Format: archiveFormat, Version: archiveVersion, WorkflowID: "wf",
			Checkpoints: len(cps)}, rec))
		extra(aw, -1)
		for i, cp := range cps {
			require.NoError(t, aw.checkpoint(cp.Checkpoint, cp.Sources))
			extra(aw, i)
		}
		require.NoError(t, aw.finish())
		return buf.Bytes()
	}
	manifestRec := func(id string, b []byte) []byte {
		j, err := json.Marshal(archiveManifest{CheckpointID: id, Manifest: b})
		require.NoError(t, err)
		return j
	}

	_, got, err := readTestArchive(build(func(aw *archiveWriter, i int) {
		require.NoError(t, aw.record('x', []byte("future"))) // unknown optional records around the manifests
	}))
	require.NoError(t, err)
	require.Len(t, got, len(cps))
	for i := range cps {
		if cps[i].Sources == nil {
			assert.Nil(t, got[i].Sources, i)
			continue
		}
		require.NotNil(t, got[i].Sources, i)
		b, err := drift.MarshalManifest(got[i].Sources)
		require.NoError(t, err)
		assert.Equal(t, mb, b, i)
	}

	for name, tc := range map[string]struct {
		extra func(aw *archiveWriter, i int)
		want  string
	}{
		"before any checkpoint": {func(aw *archiveWriter, i int) {
			if i == -1 {
				require.NoError(t, aw.record(recManifest, manifestRec("c-1", mb)))
			}
		}, "a source manifest record before any checkpoint"},
		"another checkpoint's": {func(aw *archiveWriter, i int) {
			if i == 1 {
				require.NoError(t, aw.record(recManifest, manifestRec("c-1", mb)))
			}
		}, `checkpoint "c-2" is followed by the source manifest of "c-1"`},
		"twice": {func(aw *archiveWriter, i int) {
			if i == 0 {
				require.NoError(t, aw.record(recManifest, manifestRec("c-1", mb)))
			}
		}, `checkpoint "c-1": a second source manifest`},
		"undecodable": {func(aw *archiveWriter, i int) {
			if i == 1 {
				require.NoError(t, aw.record(recManifest, manifestRec("c-2", []byte("nope"))))
			}
		}, `checkpoint "c-2": source manifest:`},
		"not JSON": {func(aw *archiveWriter, i int) {
			if i == 1 {
				require.NoError(t, aw.record(recManifest, []byte("{")))
			}
		}, `checkpoint "c-2": source manifest record:`},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := readTestArchive(build(tc.extra))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "invalid archive")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// growingCheckpoints are checkpoints whose states grow by a message at each step (stored as
// chunks), with a small state and one without state among them.
func growingCheckpoints(n, size int) []engine.Sourced {
	_, small := archiveCheckpoints()
	w := testgen.NewWorkload(4, size)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var out []engine.Sourced
	for i := 0; i < n; i++ {
		st := w.State()
		w.Advance()
		sum := sha256.Sum256(st)
		out = append(out, engine.Sourced{Checkpoint: store.Checkpoint{Summary: store.Summary{CheckpointID: fmt.Sprintf("g-%d", i),
			WorkflowID: "wf", Seq: int64(100 + i), Phase: store.PhaseCompleted, Step: int64(i), CreatedAt: t0.Add(time.Duration(i) * time.Second),
			StateType: store.StateJSON, FormatVersion: 1, SizeBytes: int64(len(st)), SHA256: hex.EncodeToString(sum[:])}, State: st}})
	}
	return append(small, out...)
}

func writeArchiveVersion(t testing.TB, version uint16, compression byte, cps []engine.Sourced) []byte {
	t.Helper()
	rec, _ := archiveCheckpoints()
	var buf bytes.Buffer
	aw, err := newArchiveWriterVersion(&buf, version, compression)
	require.NoError(t, err)
	require.NoError(t, aw.begin(archiveHeader{Format: archiveFormat, Version: int(version), WorkflowID: "wf",
		Checkpoints: len(cps), ExportedAt: "2026-01-02T00:00:00Z", CkptdVersion: "test"}, rec))
	for _, cp := range cps {
		require.NoError(t, aw.checkpoint(cp.Checkpoint, cp.Sources))
	}
	require.NoError(t, aw.finish())
	return buf.Bytes()
}

// Version 3 carries states over 4 KiB as their chunks, each once per archive: an archive of 30
// growing 200 KB states takes about one state plus the growth, not 30 states; it reads back byte
// for byte, and a run or chunk that is missing or altered is refused.
func TestArchiveVersion3(t *testing.T) {
	cps := growingCheckpoints(30, 200<<10)
	var logical int64
	for _, cp := range cps {
		logical += int64(len(cp.State))
	}
	v1 := writeArchiveVersion(t, archiveVersion, compressionNone, cps)
	v3 := writeArchiveVersion(t, archiveChunkVersion, compressionNone, cps)
	assert.Greater(t, int64(len(v1)), logical, "version 1 carries every state whole")
	assert.Less(t, len(v3), len(v1)/10, "version 3 carries each chunk once: %d bytes against %d", len(v3), len(v1))
	for _, comp := range []byte{compressionNone, compressionZstd} {
		b := writeArchiveVersion(t, archiveChunkVersion, comp, cps)
		require.Equal(t, uint16(archiveChunkVersion), binary.BigEndian.Uint16(b[len(archiveMagic):]))
		_, got, err := readTestArchive(b)
		require.NoError(t, err)
		require.Len(t, got, len(cps))
		for i := range cps {
			require.Equal(t, cps[i].CheckpointID, got[i].CheckpointID)
			require.True(t, bytes.Equal(cps[i].State, got[i].State), "state of %s", cps[i].CheckpointID)
			require.Equal(t, cps[i].PendingWrites, got[i].PendingWrites)
		}
	}

	// a T record naming a run the archive does not hold (the writer believes it wrote it): invalid
	rec, _ := archiveCheckpoints()
	var buf bytes.Buffer
	aw, err := newArchiveWriterVersion(&buf, archiveChunkVersion, compressionNone)
	require.NoError(t, err)
	require.NoError(t, aw.begin(archiveHeader{Format: archiveFormat, Version: archiveChunkVersion, WorkflowID: "wf",
		Checkpoints: 1, ExportedAt: "2026-01-02T00:00:00Z", CkptdVersion: "test"}, rec))
	last := cps[len(cps)-1]
	r, _ := chunk.Split(last.State)
	idx, _ := r.Runs()
	aw.wroteRuns[idx.Runs[0]] = true
	require.NoError(t, aw.checkpoint(last.Checkpoint, nil))
	require.NoError(t, aw.finish())
	_, _, err = readTestArchive(buf.Bytes())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "invalid archive")
	assert.Contains(t, err.Error(), "is missing")
	// any flipped byte: the digest
	bad := bytes.Clone(v3)
	bad[len(bad)/2] ^= 1
	_, _, err = readTestArchive(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SHA-256 mismatch")
}
