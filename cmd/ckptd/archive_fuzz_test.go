package main

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/store"
)

// fuzzManifest is a small fixed source manifest (a scan would differ from run to run).
func fuzzManifest() *drift.Manifest {
	h := bytes.Repeat([]byte{7}, 32)
	return &drift.Manifest{Version: drift.ManifestVersion, Algorithm: drift.AlgorithmBLAKE3,
		Spec: drift.Spec{Root: "/src/agent", Exclude: []string{"*.tmp"}, Gitignore: true}, ScanStartNs: 1700000000000000000,
		Entries: []drift.Entry{
			{Path: "agent.py", Type: drift.TypeFile, Size: 29, MtimeNs: 1, CtimeNs: 2, Ino: 3, Mode: 0o644, Hash: h},
			{Path: "lib/link", Type: drift.TypeSymlink, Target: "../agent.py"},
		},
		Dirs:     []drift.Dir{{Path: "", MtimeNs: 5, Ino: 6}, {Path: "lib", MtimeNs: 7, Ino: 8}},
		Rules:    []drift.Entry{{Path: ".gitignore", Type: drift.TypeFile, Size: 4, Hash: h}},
		Warnings: []string{"lib/x: permission denied"},
	}
}

// fixDigest rewrites an archive's trailer digest so that the reader parses everything before
// it instead of stopping at a checksum mismatch.
func fixDigest(b []byte) []byte {
	if len(b) < archiveHeaderLen+archiveTrailerLen {
		return b
	}
	out := bytes.Clone(b)
	sum := sha256.Sum256(out[:len(out)-sha256.Size])
	copy(out[len(out)-sha256.Size:], sum[:])
	return out
}

// FuzzArchive: the reader never panics on any archive, workflow or LangGraph thread (with a
// valid digest, so that every record is parsed), and whatever it accepts it writes back and
// reads again unchanged.
func FuzzArchive(f *testing.F) {
	rec, cps := archiveCheckpoints()
	cps[0].Sources, cps[2].Sources = fuzzManifest(), fuzzManifest()
	for _, comp := range []byte{compressionNone, compressionZstd} {
		var buf bytes.Buffer
		aw, err := newArchiveWriter(&buf, comp)
		require.NoError(f, err)
		require.NoError(f, aw.begin(archiveHeader{Format: archiveFormat, Version: archiveVersion, WorkflowID: "wf",
			Checkpoints: len(cps), ExportedAt: "2026-01-02T00:00:00Z", CkptdVersion: "fuzz"}, rec))
		for _, cp := range cps {
			require.NoError(f, aw.checkpoint(cp.Checkpoint, cp.Sources))
		}
		require.NoError(f, aw.finish())
		f.Add(buf.Bytes())
		f.Add(writeThreadArchive(f, comp, threadRecords(), nil))
		f.Add(writeArchiveVersion(f, archiveChunkVersion, comp, growingCheckpoints(3, 6<<10))) // chunked states
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 64<<10 {
			return // the seeds are a few KiB: longer inputs explore nothing new, slowly
		}
		in = fixDigest(in)
		if ar, err := openArchive(bytes.NewReader(in), int64(len(in))); err == nil {
			if ar.isThread() {
				fuzzThreadRoundTrip(t, ar)
				return
			}
			ar.close() // read again below; an unclosed zstd decoder keeps its goroutine and buffers
		}
		rec, got, err := readTestArchive(in)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		aw, err := newArchiveWriter(&buf, compressionNone)
		require.NoError(t, err)
		require.NoError(t, aw.begin(archiveHeader{Format: archiveFormat, Version: archiveVersion, WorkflowID: rec.WorkflowID,
			Checkpoints: len(got)}, rec))
		for _, cp := range got {
			if err := aw.checkpoint(cp.Checkpoint, cp.Sources); err != nil {
				return // accepted but not archivable (say, a string that is not UTF-8)
			}
		}
		require.NoError(t, aw.finish())
		rec2, again, err := readTestArchive(buf.Bytes())
		require.NoError(t, err, "an archive written from what was read must read back")
		require.Equal(t, rec.WorkflowID, rec2.WorkflowID)
		require.Equal(t, len(got), len(again))
		for i := range got {
			require.Equal(t, got[i].CheckpointID, again[i].CheckpointID)
			require.Equal(t, got[i].State, again[i].State)
			require.Equal(t, got[i].Sources == nil, again[i].Sources == nil)
			if got[i].Sources != nil {
				a, err := drift.MarshalManifest(got[i].Sources)
				require.NoError(t, err)
				b, err := drift.MarshalManifest(again[i].Sources)
				require.NoError(t, err)
				require.Equal(t, a, b)
			}
		}
	})
}

// fuzzThreadRoundTrip reads a thread archive; if it is accepted, it must write back and read
// again unchanged.
func fuzzThreadRoundTrip(t *testing.T, ar *archiveReader) {
	var got []store.LGRecord
	for r, err := range ar.lgRecords() {
		if err != nil {
			ar.close()
			return
		}
		got = append(got, r)
	}
	ar.close()
	var buf bytes.Buffer
	aw, err := newArchiveWriterVersion(&buf, archiveThreadVersion, compressionNone)
	require.NoError(t, err)
	if aw.beginThread(ar.thread) != nil {
		return // accepted but not archivable (a thread id that is not UTF-8)
	}
	for _, r := range got {
		if aw.lgRow(r) != nil {
			return
		}
	}
	require.NoError(t, aw.finish())
	thread, again, err := readThreadArchive(buf.Bytes())
	require.NoError(t, err, "a thread archive written from what was read must read back")
	require.Equal(t, ar.thread.ThreadID, thread)
	require.Equal(t, got, again)
}
