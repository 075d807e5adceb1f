package main

// The portable checkpoint archive written by `ckptd export` and read by `ckptd import`.
// docs/archive.md is the specification; keep the two in step.
//
//	file    = header body trailer
//	header  = "CKPTD-ARCHIVE\n" version:uint16be compression:uint8 reserved:uint8      (18 bytes)
//	body    = records, as one zstd stream when compression = 1
//	record  = kind:byte length:uint64be payload
//	records = H W (C [S] [m])* E, plus optional lowercase-kind records anywhere after W except
//	          between a C and its S (readers skip kinds they do not know); m is the drift manifest
//	          of the checkpoint before it
//	trailer = "CKPTD-SHA256" sha256(every byte of the file before the digest)          (44 bytes)

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/ckptd/ckptd/drift"
	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

const (
	archiveMagic         = "CKPTD-ARCHIVE\n"
	archiveFormat        = "ckptd-archive"
	archiveVersion       = 1 // a workflow (written as 1, so that older readers still read it)
	archiveThreadVersion = 2 // a LangGraph thread (archive_thread.go); a version 2 reader reads both
	archiveChunkVersion  = 3 // a workflow with states stored as chunks (K U T records); a version 3 reader reads all three
	archiveHeaderLen     = len(archiveMagic) + 4
	archiveTrailerMagic  = "CKPTD-SHA256"
	archiveTrailerLen    = len(archiveTrailerMagic) + sha256.Size

	compressionNone = 0
	compressionZstd = 1

	recHeader     = 'H'
	recWorkflow   = 'W'
	recCheckpoint = 'C'
	recState      = 'S'
	recEnd        = 'E'
	recManifest   = 'm' // optional: the drift manifest of the checkpoint before it
	// version 3: a state over chunk.InlineMax travels as its chunks, each once per archive
	recChunk        = 'K' // a chunk's raw bytes (its address: their SHA-256), before the first run listing it
	recRun          = 'U' // a run (chunk.EncodeRun), before the first state listing it
	recChunkedState = 'T' // in place of S: the addresses of the state's runs (chunk.AppendAddresses)

	maxJSONRecord  = 1 << 30
	maxStateRecord = cliMaxStateBytes
)

// archiveHeader is the H record.
type archiveHeader struct {
	Format       string `json:"format"`
	Version      int    `json:"version"`
	ExportedAt   string `json:"exportedAt"`
	CkptdVersion string `json:"ckptdVersion"`
	WorkflowID   string `json:"workflowId"`
	Checkpoints  int    `json:"checkpoints"`
	StateBytes   int64  `json:"stateBytes"`
}

// archiveWorkflow is the W record.
type archiveWorkflow struct {
	WorkflowID  string           `json:"workflowId"`
	CreatedAt   string           `json:"createdAt"`
	UpdatedAt   string           `json:"updatedAt"`
	CompletedAt string           `json:"completedAt,omitempty"`
	Retention   *store.Retention `json:"retention,omitempty"`
	Config      []byte           `json:"config,omitempty"` // base64 of the raw JSON
}

// archiveCheckpoint is a C record. Raw JSON fields are base64 ([]byte) so they come back
// byte-for-byte (encoding/json would re-format a json.RawMessage).
type archiveCheckpoint struct {
	CheckpointID   string           `json:"checkpointId"`
	WorkflowID     string           `json:"workflowId"`
	Namespace      string           `json:"namespace"`
	Seq            int64            `json:"seq"`
	ParentID       string           `json:"parentId,omitempty"`
	Phase          string           `json:"phase"`
	Step           int64            `json:"step"`
	StepName       string           `json:"stepName,omitempty"`
	Error          *store.StepError `json:"error,omitempty"`
	WorkflowHash   string           `json:"workflowHash,omitempty"`
	Metadata       []byte           `json:"metadata,omitempty"`
	CreatedAt      string           `json:"createdAt"`
	FormatVersion  int              `json:"formatVersion"`
	StateType      string           `json:"stateType"`
	SizeBytes      int64            `json:"sizeBytes"`
	SHA256         string           `json:"sha256,omitempty"`
	CompletedTasks []byte           `json:"completedTasks,omitempty"`
	PendingTasks   []byte           `json:"pendingTasks,omitempty"`
	PendingWrites  []archiveWrite   `json:"pendingWrites,omitempty"`
}

// archiveManifest is an m record: the drift manifest recorded with the checkpoint it follows.
type archiveManifest struct {
	CheckpointID string `json:"checkpointId"`
	Manifest     []byte `json:"manifest"` // base64 of drift.MarshalManifest
}

type archiveWrite struct {
	TaskID   string `json:"taskId"`
	TaskPath string `json:"taskPath,omitempty"`
	Idx      int64  `json:"idx"`
	Channel  string `json:"channel"`
	Type     string `json:"type,omitempty"`
	IsBytes  bool   `json:"isBytes,omitempty"`
	Value    []byte `json:"value"` // base64; null: no value
}

// ---- writing ----

// archiveWriter writes one archive. Call begin, checkpoint for each checkpoint in seq order,
// then finish.
type archiveWriter struct {
	dst  io.Writer
	h    hash.Hash
	phys *bufio.Writer // dst and h
	body io.Writer     // phys, or zw over it
	zw   *zstd.Encoder
	hdr  [9]byte

	// version 3: states over chunk.InlineMax go as chunks; the chunks and runs written so far,
	// and the previous state cut (the next one is cut from it: chunk.SplitFrom)
	chunked     bool
	wroteChunks map[chunk.Address]bool
	wroteRuns   map[chunk.Address]bool
	prev        []byte
	prevRecipe  *chunk.Recipe
}

func newArchiveWriter(dst io.Writer, compression byte) (*archiveWriter, error) {
	return newArchiveWriterVersion(dst, archiveVersion, compression)
}

func newArchiveWriterVersion(dst io.Writer, version uint16, compression byte) (*archiveWriter, error) {
	a := &archiveWriter{dst: dst, h: sha256.New()}
	if version == archiveChunkVersion {
		a.chunked, a.wroteChunks, a.wroteRuns = true, map[chunk.Address]bool{}, map[chunk.Address]bool{}
	}
	a.phys = bufio.NewWriterSize(io.MultiWriter(dst, a.h), 1<<20)
	head := append([]byte(archiveMagic), byte(version>>8), byte(version), compression, 0)
	if _, err := a.phys.Write(head); err != nil {
		return nil, err
	}
	a.body = a.phys
	switch compression {
	case compressionNone:
	case compressionZstd:
		zw, err := zstd.NewWriter(a.phys, zstd.WithEncoderLevel(zstd.SpeedDefault))
		if err != nil {
			return nil, err
		}
		a.zw, a.body = zw, zw
	default:
		return nil, fmt.Errorf("unknown compression %d", compression)
	}
	return a, nil
}

func (a *archiveWriter) record(kind byte, payload []byte) error {
	a.hdr[0] = kind
	binary.BigEndian.PutUint64(a.hdr[1:], uint64(len(payload)))
	if _, err := a.body.Write(a.hdr[:]); err != nil {
		return err
	}
	_, err := a.body.Write(payload)
	return err
}

func (a *archiveWriter) jsonRecord(kind byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return a.record(kind, b)
}

// begin writes the H and W records.
func (a *archiveWriter) begin(h archiveHeader, rec store.WorkflowRecord) error {
	if !utf8.ValidString(rec.WorkflowID) {
		return fmt.Errorf("workflow id %q is not valid UTF-8: it cannot be archived", rec.WorkflowID)
	}
	if err := a.jsonRecord(recHeader, h); err != nil {
		return err
	}
	w := archiveWorkflow{WorkflowID: rec.WorkflowID, CreatedAt: timestamp(rec.CreatedAt), UpdatedAt: timestamp(rec.UpdatedAt),
		CompletedAt: timestamp(rec.CompletedAt), Retention: rec.Retention, Config: rec.Config}
	return a.jsonRecord(recWorkflow, w)
}

// checkpoint writes a C record, its S record when the checkpoint has state and its m record when
// it has a drift manifest (m, nil without one).
func (a *archiveWriter) checkpoint(cp store.Checkpoint, m *drift.Manifest) error {
	for _, s := range []string{cp.CheckpointID, cp.WorkflowID, cp.Namespace, cp.ParentID, cp.StepName, cp.WorkflowHash} {
		if !utf8.ValidString(s) {
			return fmt.Errorf("checkpoint %q: field %q is not valid UTF-8: it cannot be archived", cp.CheckpointID, s)
		}
	}
	ac := archiveCheckpoint{
		CheckpointID: cp.CheckpointID, WorkflowID: cp.WorkflowID, Namespace: cp.Namespace, Seq: cp.Seq,
		ParentID: cp.ParentID, Phase: string(cp.Phase), Step: cp.Step, StepName: cp.StepName, Error: cp.Error,
		WorkflowHash: cp.WorkflowHash, Metadata: cp.Metadata, CreatedAt: timestamp(cp.CreatedAt),
		FormatVersion: cp.FormatVersion, StateType: string(cp.StateType), SizeBytes: cp.SizeBytes, SHA256: cp.SHA256,
		CompletedTasks: cp.CompletedTasks, PendingTasks: cp.PendingTasks,
	}
	for _, w := range cp.PendingWrites {
		for _, s := range []string{w.TaskID, w.TaskPath, w.Channel, w.Type} {
			if !utf8.ValidString(s) {
				return fmt.Errorf("checkpoint %q: a pending write field is not valid UTF-8: it cannot be archived", cp.CheckpointID)
			}
		}
		ac.PendingWrites = append(ac.PendingWrites, archiveWrite{TaskID: w.TaskID, TaskPath: w.TaskPath, Idx: w.Idx,
			Channel: w.Channel, Type: w.Type, IsBytes: w.IsBytes, Value: w.Value})
	}
	var runs []byte // version 3: the T record of a chunked state
	if a.chunked && cp.StateType != store.StateNone && !chunk.Inline(len(cp.State)) {
		var err error
		if runs, err = a.chunks(cp.State); err != nil {
			return err
		}
	}
	if err := a.jsonRecord(recCheckpoint, ac); err != nil {
		return err
	}
	switch {
	case runs != nil:
		if err := a.record(recChunkedState, runs); err != nil {
			return err
		}
	case cp.StateType != store.StateNone:
		if err := a.record(recState, cp.State); err != nil {
			return err
		}
	}
	if m == nil {
		return nil
	}
	mb, err := drift.MarshalManifest(m)
	if err != nil {
		return fmt.Errorf("checkpoint %q: source manifest: %w", cp.CheckpointID, err)
	}
	return a.jsonRecord(recManifest, archiveManifest{CheckpointID: cp.CheckpointID, Manifest: mb})
}

// chunks writes the K and U records of the chunks and runs of state that the archive does not
// hold yet, and returns the state's T record. A state is cut from the previous one (the same
// cuts as chunk.Split, so the chunks are the ones the database shares).
func (a *archiveWriter) chunks(state []byte) ([]byte, error) {
	var recipe chunk.Recipe
	var cs []chunk.Chunk
	if a.prevRecipe != nil {
		recipe, cs = chunk.SplitFrom(a.prev, *a.prevRecipe, state)
	} else {
		recipe, cs = chunk.Split(state)
	}
	a.prev, a.prevRecipe = state, &recipe
	data := make(map[chunk.Address][]byte, len(cs))
	for _, c := range cs {
		data[c.Addr] = c.Data
	}
	idx, runs := recipe.Runs()
	for _, r := range runs {
		if a.wroteRuns[r.Addr] {
			continue
		}
		for _, ref := range r.Refs {
			if a.wroteChunks[ref.Addr] {
				continue
			}
			if err := a.record(recChunk, data[ref.Addr]); err != nil {
				return nil, err
			}
			a.wroteChunks[ref.Addr] = true
		}
		if err := a.record(recRun, r.Data); err != nil {
			return nil, err
		}
		a.wroteRuns[r.Addr] = true
	}
	return chunk.AppendAddresses(make([]byte, 0, len(idx.Runs)*32), idx.Runs), nil
}

// finish writes the E record, ends the body and writes the trailer.
func (a *archiveWriter) finish() error {
	if err := a.record(recEnd, nil); err != nil {
		return err
	}
	if a.zw != nil {
		if err := a.zw.Close(); err != nil {
			return err
		}
	}
	if _, err := a.phys.WriteString(archiveTrailerMagic); err != nil {
		return err
	}
	if err := a.phys.Flush(); err != nil {
		return err
	}
	_, err := a.dst.Write(a.h.Sum(nil))
	return err
}

// ---- reading ----

// archiveError says the archive is damaged or not a valid archive.
type archiveError struct{ msg string }

func (e *archiveError) Error() string { return e.msg }

func damaged(format string, args ...any) error {
	return &archiveError{msg: fmt.Sprintf(format, args...)}
}

// archiveReader reads and verifies one archive from a sized, random-access source (a file).
// Every byte is hashed as it is read; the end of checkpoints() compares the digest.
type archiveReader struct {
	src    io.ReaderAt
	size   int64
	h      hash.Hash
	want   []byte
	raw    io.Reader // the body section, teed into h
	body   *bufio.Reader
	zr     *zstd.Decoder
	header archiveHeader
	wf     archiveWorkflow
	thread archiveThreadHeader // version 2
	failed error

	// version 3: the chunks and runs read so far, by address
	chunks map[chunk.Address][]byte
	runs   map[chunk.Address][]byte
}

// isThread reports whether the archive holds a LangGraph thread (version 2) rather than a
// workflow.
func (a *archiveReader) isThread() bool { return a.thread.Version == archiveThreadVersion }

func openArchive(src io.ReaderAt, size int64) (*archiveReader, error) {
	if size < int64(archiveHeaderLen+archiveTrailerLen) {
		var head [len(archiveMagic)]byte
		if n, _ := src.ReadAt(head[:], 0); n < len(head) || string(head[:]) != archiveMagic {
			return nil, damaged("not a ckptd archive (%d bytes, no %q header)", size, archiveMagic[:len(archiveMagic)-1])
		}
		return nil, damaged("truncated: %d bytes is too short for an archive", size)
	}
	head := make([]byte, archiveHeaderLen)
	if _, err := src.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("read archive header: %w", err)
	}
	if string(head[:len(archiveMagic)]) != archiveMagic {
		return nil, damaged("not a ckptd archive (no %q header)", archiveMagic[:len(archiveMagic)-1])
	}
	a := &archiveReader{src: src, size: size, h: sha256.New(), want: make([]byte, sha256.Size)}
	a.h.Write(head)
	if _, err := src.ReadAt(a.want, size-sha256.Size); err != nil {
		return nil, fmt.Errorf("read archive trailer: %w", err)
	}
	a.raw = io.TeeReader(io.NewSectionReader(src, int64(archiveHeaderLen), size-int64(archiveHeaderLen+archiveTrailerLen)), a.h)
	version := binary.BigEndian.Uint16(head[len(archiveMagic):])
	compression, reserved := head[len(archiveMagic)+2], head[len(archiveMagic)+3]
	switch {
	case version != archiveVersion && version != archiveThreadVersion && version != archiveChunkVersion:
		if a.digestOK() {
			return nil, damaged("archive format version %d: this ckptd reads versions %d, %d and %d (upgrade ckptd)",
				version, archiveVersion, archiveThreadVersion, archiveChunkVersion)
		}
		return nil, a.fail(fmt.Errorf("bad version %d", version))
	case reserved != 0 || compression > compressionZstd:
		return nil, a.fail(fmt.Errorf("bad header flags"))
	}
	if compression == compressionZstd {
		zr, err := zstd.NewReader(a.raw, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(maxStateRecord)+maxJSONRecord))
		if err != nil {
			return nil, err
		}
		a.zr = zr
		a.body = bufio.NewReaderSize(zr, 64<<10)
	} else {
		a.body = bufio.NewReaderSize(a.raw, 64<<10)
	}
	if version == archiveThreadVersion {
		if err := a.readJSON(recHeader, &a.thread); err != nil {
			return nil, a.fail(err)
		}
		if a.thread.Format != archiveFormat || a.thread.Version != archiveThreadVersion || a.thread.Kind != archiveThreadKind {
			return nil, a.fail(fmt.Errorf("header record says format %q version %d kind %q", a.thread.Format, a.thread.Version, a.thread.Kind))
		}
		if a.thread.ThreadID == "" || a.thread.Checkpoints < 0 || a.thread.Values < 0 || a.thread.Writes < 0 {
			return nil, a.fail(errors.New("header record: no threadId, or negative counts"))
		}
		return a, nil
	}
	if err := a.readJSON(recHeader, &a.header); err != nil {
		return nil, a.fail(err)
	}
	if a.header.Format != archiveFormat || a.header.Version != int(version) {
		return nil, a.fail(fmt.Errorf("header record says format %q version %d", a.header.Format, a.header.Version))
	}
	if version == archiveChunkVersion {
		a.chunks, a.runs = map[chunk.Address][]byte{}, map[chunk.Address][]byte{}
	}
	if err := a.readJSON(recWorkflow, &a.wf); err != nil {
		return nil, a.fail(err)
	}
	if a.wf.WorkflowID == "" || a.wf.WorkflowID != a.header.WorkflowID {
		return nil, a.fail(fmt.Errorf("workflow record names %q, header %q", a.wf.WorkflowID, a.header.WorkflowID))
	}
	return a, nil
}

// close releases the decompressor.
func (a *archiveReader) close() {
	if a.zr != nil {
		a.zr.Close()
	}
}

// digestOK finishes hashing the file (whatever was not read yet) and compares the digest.
func (a *archiveReader) digestOK() bool {
	if _, err := io.Copy(io.Discard, a.raw); err != nil {
		return false
	}
	magic := make([]byte, len(archiveTrailerMagic))
	if _, err := a.src.ReadAt(magic, a.size-int64(archiveTrailerLen)); err != nil {
		return false
	}
	a.h.Write(magic)
	return string(magic) == archiveTrailerMagic && bytes.Equal(a.h.Sum(nil), a.want)
}

// fail turns a problem met while reading into the error to report: a digest mismatch says
// "damaged" (any changed or missing byte ends here); an intact digest around an invalid
// structure says "invalid".
func (a *archiveReader) fail(err error) error {
	if a.failed != nil {
		return a.failed
	}
	var ae *archiveError
	switch {
	case errors.As(err, &ae):
		a.failed = err
	case a.digestOK():
		a.failed = damaged("invalid archive (its checksum is intact, so it was written this way): %v", err)
	default:
		a.failed = damaged("damaged: SHA-256 mismatch, the file was modified or truncated after it was written (first problem: %v)", err)
	}
	return a.failed
}

var errTruncated = errors.New("unexpected end of data")

// record reads the next record, refusing lengths above limit. Payloads are read as they arrive,
// so a damaged length cannot make the reader allocate more than the data that is there.
func (a *archiveReader) record(limit int64) (byte, []byte, error) {
	var hdr [9]byte
	if _, err := io.ReadFull(a.body, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, errTruncated
		}
		return 0, nil, err
	}
	kind, n := hdr[0], binary.BigEndian.Uint64(hdr[1:])
	if n > uint64(limit) {
		return kind, nil, fmt.Errorf("record %q of %d bytes is over the %d-byte limit", kind, n, limit)
	}
	// grow with the data actually there: at most about twice what was read is ever allocated
	const first = 1 << 20
	buf := make([]byte, 0, min(n, first))
	for uint64(len(buf)) < n {
		k := int(min(n-uint64(len(buf)), uint64(max(len(buf), first))))
		buf = slices.Grow(buf, k)
		m, err := io.ReadFull(a.body, buf[len(buf):len(buf)+k])
		buf = buf[:len(buf)+m]
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return kind, nil, errTruncated
			}
			return kind, nil, err
		}
	}
	return kind, buf, nil
}

func (a *archiveReader) readJSON(want byte, v any) error {
	kind, b, err := a.record(maxJSONRecord)
	if err != nil {
		return err
	}
	if kind != want {
		return fmt.Errorf("expected a %q record, found %q", want, kind)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%q record: %v", want, err)
	}
	return nil
}

// workflow is the archived workflow's record.
func (a *archiveReader) workflow() (store.WorkflowRecord, error) {
	if a.isThread() {
		return store.WorkflowRecord{}, a.fail(fmt.Errorf("it holds LangGraph thread %q, not a workflow", a.thread.ThreadID))
	}
	rec := store.WorkflowRecord{WorkflowID: a.wf.WorkflowID, Retention: a.wf.Retention, Config: a.wf.Config}
	for _, f := range []struct {
		s   string
		dst *time.Time
	}{{a.wf.CreatedAt, &rec.CreatedAt}, {a.wf.UpdatedAt, &rec.UpdatedAt}, {a.wf.CompletedAt, &rec.CompletedAt}} {
		if f.s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.s)
		if err != nil {
			return rec, a.fail(fmt.Errorf("workflow record: bad time %q", f.s))
		}
		*f.dst = t
	}
	return rec, nil
}

// checkpoints yields every checkpoint, verified (state size and SHA-256), in seq order. The
// sequence ends with an error if anything is wrong, including a digest mismatch found after the
// last checkpoint: a consumer that stops at the first error never acts on a damaged archive.
func (a *archiveReader) checkpoints() iter.Seq2[engine.Sourced, error] {
	return func(yield func(engine.Sourced, error) bool) {
		if a.failed != nil {
			yield(engine.Sourced{}, a.failed)
			return
		}
		n := 0
		var lastSeq int64
		var kind byte
		var b []byte
		var err error
		next := true // read the next record; false: the lookahead after a checkpoint holds it
		for {
			if next {
				if kind, b, err = a.record(maxJSONRecord); err != nil {
					yield(engine.Sourced{}, a.fail(err))
					return
				}
			}
			next = true
			switch {
			case kind == recEnd:
				if err := a.end(b, n); err != nil {
					yield(engine.Sourced{}, err)
				}
				return
			case kind == recCheckpoint:
			case (kind == recChunk || kind == recRun) && a.chunks != nil:
				if err := a.piece(kind, b); err != nil {
					yield(engine.Sourced{}, a.fail(err))
					return
				}
				continue
			case kind == recManifest:
				yield(engine.Sourced{}, a.fail(errors.New("a source manifest record before any checkpoint")))
				return
			case kind >= 'a' && kind <= 'z':
				continue // an optional record of a newer writer: skipped (the digest still covers it)
			default:
				yield(engine.Sourced{}, a.fail(fmt.Errorf("unexpected %q record after %d checkpoints", kind, n)))
				return
			}
			c, err := a.checkpoint(b, n, lastSeq)
			cp := engine.Sourced{Checkpoint: c}
			if err != nil {
				yield(engine.Sourced{}, a.fail(err))
				return
			}
			// The optional records after it: its manifest, and any a newer writer added.
			for {
				if kind, b, err = a.record(maxJSONRecord); err != nil {
					yield(engine.Sourced{}, a.fail(err))
					return
				}
				if kind < 'a' || kind > 'z' {
					break
				}
				if kind != recManifest {
					continue
				}
				if cp.Sources, err = a.manifest(b, cp); err != nil {
					yield(engine.Sourced{}, a.fail(err))
					return
				}
			}
			next = false
			n++
			lastSeq = cp.Seq
			if !yield(cp, nil) {
				return
			}
		}
	}
}

func (a *archiveReader) checkpoint(b []byte, n int, lastSeq int64) (store.Checkpoint, error) {
	var ac archiveCheckpoint
	if err := json.Unmarshal(b, &ac); err != nil {
		return store.Checkpoint{}, fmt.Errorf("checkpoint record %d: %v", n+1, err)
	}
	bad := func(format string, args ...any) (store.Checkpoint, error) {
		return store.Checkpoint{}, fmt.Errorf("checkpoint %q: %s", ac.CheckpointID, fmt.Sprintf(format, args...))
	}
	switch {
	case ac.CheckpointID == "":
		return bad("no checkpointId")
	case ac.WorkflowID != a.wf.WorkflowID:
		return bad("belongs to workflow %q, the archive holds %q", ac.WorkflowID, a.wf.WorkflowID)
	case n > 0 && ac.Seq <= lastSeq:
		return bad("seq %d does not follow %d", ac.Seq, lastSeq)
	case n >= a.header.Checkpoints:
		return bad("more checkpoints than the %d the header announces", a.header.Checkpoints)
	case !store.Phase(ac.Phase).Valid():
		return bad("phase %q", ac.Phase)
	}
	created, err := time.Parse(time.RFC3339Nano, ac.CreatedAt)
	if err != nil {
		return bad("createdAt %q", ac.CreatedAt)
	}
	cp := store.Checkpoint{Summary: store.Summary{
		CheckpointID: ac.CheckpointID, WorkflowID: ac.WorkflowID, Namespace: ac.Namespace, Seq: ac.Seq,
		ParentID: ac.ParentID, Phase: store.Phase(ac.Phase), Step: ac.Step, StepName: ac.StepName, Error: ac.Error,
		WorkflowHash: ac.WorkflowHash, Metadata: nilIfEmpty(ac.Metadata), CreatedAt: created.UTC(),
		StateType: store.StateType(ac.StateType), SizeBytes: ac.SizeBytes, SHA256: ac.SHA256,
		FormatVersion: ac.FormatVersion,
	}, CompletedTasks: nilIfEmpty(ac.CompletedTasks), PendingTasks: nilIfEmpty(ac.PendingTasks)}
	for _, w := range ac.PendingWrites {
		cp.PendingWrites = append(cp.PendingWrites, store.Write{TaskID: w.TaskID, TaskPath: w.TaskPath, Idx: w.Idx,
			Channel: w.Channel, Type: w.Type, IsBytes: w.IsBytes, Value: w.Value})
	}
	switch cp.StateType {
	case store.StateNone:
		if ac.SizeBytes != 0 || ac.SHA256 != "" {
			return bad("stateType none with a size or SHA-256")
		}
		return cp, nil
	case store.StateJSON, store.StateBytes:
	default:
		return bad("stateType %q", ac.StateType)
	}
	kind, state, err := a.record(maxStateRecord)
	if err != nil {
		return store.Checkpoint{}, err
	}
	if kind == recChunkedState && a.chunks != nil {
		if state, err = a.reassemble(state, ac.SizeBytes, ac.SHA256); err != nil {
			return bad("%v", err)
		}
	} else if kind != recState {
		return bad("expected its state record, found %q", kind)
	}
	if int64(len(state)) != ac.SizeBytes {
		return bad("state is %d bytes, the checkpoint says %d", len(state), ac.SizeBytes)
	}
	sum := sha256.Sum256(state)
	if hex.EncodeToString(sum[:]) != ac.SHA256 {
		return bad("state SHA-256 mismatch")
	}
	cp.State = state
	return cp, nil
}

// piece keeps a K (chunk) or U (run) record of a version 3 archive. A run must list only chunks
// read before it; each address comes once.
func (a *archiveReader) piece(kind byte, b []byte) error {
	addr := chunk.AddressOf(b)
	if kind == recChunk {
		if len(b) == 0 || len(b) > chunk.MaxSize {
			return fmt.Errorf("a chunk record of %d bytes", len(b))
		}
		if _, dup := a.chunks[addr]; dup {
			return fmt.Errorf("chunk %s twice", addr)
		}
		a.chunks[addr] = b
		return nil
	}
	refs, err := chunk.DecodeRun(b)
	if err != nil {
		return fmt.Errorf("run record: %v", err)
	}
	for _, r := range refs {
		if _, ok := a.chunks[r.Addr]; !ok {
			return fmt.Errorf("run %s lists chunk %s, not in the archive before it", addr, r.Addr)
		}
	}
	if _, dup := a.runs[addr]; dup {
		return fmt.Errorf("run %s twice", addr)
	}
	a.runs[addr] = b
	return nil
}

// reassemble rebuilds a state from its T record (the addresses of its runs), checking every run
// and chunk and the whole state's size and SHA-256 (hex).
func (a *archiveReader) reassemble(index []byte, size int64, shaHex string) ([]byte, error) {
	addrs, err := chunk.DecodeAddresses(index)
	if err != nil {
		return nil, err
	}
	var sum [32]byte
	if _, err := hex.Decode(sum[:], []byte(shaHex)); err != nil || len(shaHex) != 64 {
		return nil, fmt.Errorf("sha256 %q", shaHex)
	}
	fetch := func(m map[chunk.Address][]byte) chunk.FetchFunc {
		return func(ad chunk.Address) ([]byte, error) {
			if b, ok := m[ad]; ok {
				return b, nil
			}
			return nil, chunk.ErrNotFound
		}
	}
	recipe, err := chunk.Expand(chunk.Index{Size: size, SHA256: sum, Runs: addrs}, fetch(a.runs))
	if err != nil {
		return nil, fmt.Errorf("state: %v", err)
	}
	state, err := chunk.Reassemble(recipe, fetch(a.chunks))
	if err != nil {
		return nil, fmt.Errorf("state: %v", err)
	}
	return state, nil
}

// manifest decodes the m record b that follows checkpoint cp.
func (a *archiveReader) manifest(b []byte, cp engine.Sourced) (*drift.Manifest, error) {
	var am archiveManifest
	if err := json.Unmarshal(b, &am); err != nil {
		return nil, fmt.Errorf("checkpoint %q: source manifest record: %v", cp.CheckpointID, err)
	}
	switch {
	case am.CheckpointID != cp.CheckpointID:
		return nil, fmt.Errorf("checkpoint %q is followed by the source manifest of %q", cp.CheckpointID, am.CheckpointID)
	case cp.Sources != nil:
		return nil, fmt.Errorf("checkpoint %q: a second source manifest", cp.CheckpointID)
	}
	m, err := drift.UnmarshalManifest(am.Manifest)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %q: source manifest: %v", cp.CheckpointID, err)
	}
	return m, nil
}

// end checks the E record, that nothing follows it, and the file digest.
func (a *archiveReader) end(payload []byte, n int) error {
	var counts error
	if n != a.header.Checkpoints {
		counts = fmt.Errorf("%d checkpoints, the header announces %d", n, a.header.Checkpoints)
	}
	return a.endWith(payload, counts)
}

// endWith checks the E record's payload, that nothing follows it, then counts (the caller's
// verdict on the record counts, nil when they match), then the file digest.
func (a *archiveReader) endWith(payload []byte, counts error) error {
	if len(payload) != 0 {
		return a.fail(fmt.Errorf("end record with %d bytes of payload", len(payload)))
	}
	if _, err := a.body.ReadByte(); err == nil {
		return a.fail(errors.New("data after the end record"))
	} else if !errors.Is(err, io.EOF) {
		return a.fail(err)
	}
	if counts != nil {
		return a.fail(counts)
	}
	if !a.digestOK() {
		a.failed = damaged("damaged: SHA-256 mismatch, the file was modified or truncated after it was written")
		return a.failed
	}
	return nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
