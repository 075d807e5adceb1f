package store

// LangGraph channel storage (docs/protocol.md, "LangGraph channel storage"): checkpoints keyed by
// (thread, namespace, checkpoint id) whose channel values are stored once per (thread, namespace,
// channel, version, variant), so that a put stores only the channels that changed. A version
// normally names one value (variant 0); when a replayed branch stores other bytes under a version
// another branch already used, they become the next variant, and each checkpoint records the
// variant of each of its channels (its value refs, LGNode.Refs), so that no checkpoint reads a
// value of another branch. This family is separate from the checkpoints: no seq, its own
// retention (opt-in, store/lgretention.go), ids unique per (thread, namespace) only. The nouns,
// and the logic over them every backend shares.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/klauspost/compress/s2"
)

// LGEmptyType is the blob type meaning "this channel has this version but no value".
const LGEmptyType = "empty"

// Limits of the LangGraph family.
const (
	LGMaxListLimit = 100000
	// MaxLGThreadIDBytes bounds a thread id (the empty string is a thread id too, as in
	// LangGraph's savers). Generous, yet small enough for every key holding it to fit in one
	// PostgreSQL index entry (at most 2704 bytes) next to a namespace and a checkpoint id.
	MaxLGThreadIDBytes = 2048
	maxLGCheckpoint    = MaxCheckpointIDBytes
)

// LGBlob is one channel value (or, in writes, a write's value) with its serializer tag.
type LGBlob struct {
	Channel string
	Version string // canonical JSON text of the version (see CanonicalVersion)
	Variant int    // which stored value of (channel, version): 0 the first (see LGNode.Refs)
	Type    string
	Data    []byte
	// Staged names, in a put, a value stored ahead by LGStageValue instead of Type and Data.
	Staged int64
	// Delta, in a put, says Data is only the middle of the value (ResolveLGDeltas).
	Delta *LGDelta
	// sum is Data's SHA-256 once a delta was resolved (checked there): not hashed again. Data
	// is then the rebuilt value, a slice of its own.
	sum *[32]byte
}

// KeptData is Data for a cache to keep: Data itself when it is a value rebuilt from a delta (a
// slice no one else holds), else a copy (Data may be part of a larger request buffer).
func (b *LGBlob) KeptData() []byte { return keptData(b.Data, b.sum) }

func keptData(v []byte, sum *[32]byte) []byte {
	if sum != nil {
		return v
	}
	return bytes.Clone(v)
}

// LGWrite is one pending write of a task.
type LGWrite struct {
	TaskID   string
	TaskPath string
	Idx      int64
	Channel  string
	Type     string
	Data     []byte
	// Staged names, in LGPutWrites, a value stored ahead by LGStageValue instead of Type and Data.
	Staged int64
}

// LGPutRequest is one LangGraph checkpoint to store with its new channel blobs.
type LGPutRequest struct {
	ThreadID        string
	Namespace       string
	CheckpointID    string
	ParentID        string
	Type            string // serializer tag of Checkpoint
	Checkpoint      []byte
	ChannelVersions json.RawMessage // JSON object channel -> version (string or number)
	Metadata        json.RawMessage // JSON object or nil
	Blobs           []LGBlob
	// CheckpointStaged names a value stored ahead by LGStageValue that is the checkpoint (Type
	// and Checkpoint then empty).
	CheckpointStaged int64
	// FencingToken is the token of the writer's claim on the thread (Claims), 0 for none:
	// checked by CheckFence in the write's transaction.
	FencingToken int64
	// Retention, when not nil, becomes the thread's own retention and is applied after the put
	// (LGRetainAfterPut).
	Retention *Retention
	// MaxValueBytes (> 0) bounds a value rebuilt from a wire delta (--max-state-size).
	MaxValueBytes int64
}

// LGTuple is a stored LangGraph checkpoint with the blobs its channel versions name and its
// pending writes. Blobs with the same key share one Data slice within one call's results.
type LGTuple struct {
	ThreadID        string
	Namespace       string
	CheckpointID    string
	ParentID        string
	CreatedAt       time.Time
	Type            string
	Checkpoint      []byte
	ChannelVersions json.RawMessage
	Metadata        json.RawMessage
	Blobs           []LGBlob // in ChannelVersions order; empty and missing blobs left out
	Writes          []LGWrite
}

// LGListFilter selects LangGraph checkpoints. Nil pointers and empty strings mean "any".
type LGListFilter struct {
	ThreadID     string
	Namespace    *string
	CheckpointID string
	Before       string
	Metadata     map[string]json.RawMessage
	// MetadataMatch is the rule Metadata values are compared by (LGMatchJSON when empty).
	MetadataMatch string
	Limit         int    // 0: no limit
	Cursor        string // from a previous page
	// ThreadGiven selects ThreadID even when it is "" (an empty ThreadID alone means any thread).
	ThreadGiven bool
}

// HasThread reports whether f selects one thread.
func (f *LGListFilter) HasThread() bool { return f.ThreadID != "" || f.ThreadGiven }

// LGListResult is one page of LGList.
type LGListResult struct {
	Tuples []LGTuple
	Cursor string // non-empty: more may follow
}

// LGHistory is one channel's part of LGChannelHistory.
type LGHistory struct {
	Writes []LGWrite // oldest first
	Seed   *LGBlob   // nil: none found
}

// LGHistoryResult answers LGChannelHistory.
type LGHistoryResult struct {
	Channels map[string]*LGHistory
	Visited  []string // ancestors walked, nearest first
}

// LGThread summarises one LangGraph thread (lg/* methods) for people.
type LGThread struct {
	ThreadID     string
	Checkpoints  int
	Namespaces   int       // distinct namespaces with checkpoints ("" counts)
	Writes       int       // pending writes
	LatestID     string    // newest checkpoint of the root namespace, else of any namespace
	UpdatedAt    time.Time // when the newest checkpoint was stored
	StoredBytes  int64     // checkpoints, channel values and writes as stored (after compression)
	ChannelBytes int64     // of StoredBytes: channel values
}

// LGCheckpointInfo is one stored LangGraph checkpoint, without its data.
type LGCheckpointInfo struct {
	ThreadID     string
	Namespace    string
	CheckpointID string
	ParentID     string
	CreatedAt    time.Time
	Metadata     json.RawMessage // as sent; nil if none
	Channels     int             // channel versions it names
	Writes       int             // pending writes stored against it
	SizeBytes    int64           // the serialized checkpoint, as sent
	StoredBytes  int64           // the serialized checkpoint, as stored
}

// LGProblem is a stored LangGraph byte string that fails verification, or damage that stopped
// a scan of one of the LangGraph tables (Kind "table").
type LGProblem struct {
	Kind         string // "checkpoint", "blob", "write" or "table"
	ThreadID     string
	Namespace    string
	CheckpointID string // checkpoint, write
	Channel      string // blob, write
	Version      string // blob
	Variant      int    // blob
	TaskID       string // write
	Idx          int64  // write
	Reason       string
}

// LGCounts are the LangGraph rows VerifyLG checked.
type LGCounts struct {
	Checkpoints, Blobs, Writes int
}

// LangGraph rows kinds, as LGRecord.Kind.
const (
	LGKindCheckpoint = "checkpoint"
	LGKindValue      = "value"
	LGKindWrite      = "write"
)

// LGRecord is one stored LangGraph row of a thread with its raw bytes: what LGExport yields and
// LGImport takes. Fields not of its kind are zero.
type LGRecord struct {
	Kind      string // LGKindCheckpoint, LGKindValue or LGKindWrite
	Namespace string

	CheckpointID    string          // checkpoint, write
	ParentID        string          // checkpoint
	CreatedAt       time.Time       // checkpoint
	ChannelVersions json.RawMessage // checkpoint, as sent
	Metadata        json.RawMessage // checkpoint, as sent; nil: none
	ValueRefs       map[string]int  // checkpoint: the variant of each channel whose value is not variant 0

	Channel string // value, write
	Version string // value: canonical JSON text (CanonicalVersion)
	Variant int    // value: which stored value of (Channel, Version)

	TaskID   string // write
	TaskPath string // write
	Idx      int64  // write

	Type string // serializer tag ("empty" for a value without one)
	Data []byte // raw, as sent
}

// LGThreadCounts counts a thread's rows by kind.
type LGThreadCounts struct {
	Checkpoints, Values, Writes int
}

// LGImportResult reports an LGImport.
type LGImportResult struct {
	ThreadID      string
	CreatedThread bool           // the thread had no rows here before
	Imported      LGThreadCounts // rows written
	Skipped       LGThreadCounts // rows already here with the same bytes: left untouched
	DryRun        bool
}

// ---------------------------------------------------------------------------------------------
// Versions, metadata, identifiers

// CanonicalVersion returns the canonical JSON text of a channel version (a JSON string or number).
func CanonicalVersion(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '"' && raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return "", errors.New("must be a string or a number")
	}
	return CanonicalJSON(raw)
}

// ChanVer is one channel of a checkpoint's channel versions.
type ChanVer struct {
	Channel string
	Version string // canonical (CanonicalVersion)
}

// ParseVersions reads a channelVersions object keeping its key order. Every read and prune parses
// the versions of the checkpoints it walks: the common shape (plain ASCII keys, versions that are
// plain ASCII strings or numbers) is scanned directly; anything else goes through encoding/json.
func ParseVersions(raw []byte) ([]ChanVer, error) {
	if out, ok := parseVersionsFast(raw); ok {
		return out, nil
	}
	return parseVersionsSlow(raw)
}

// parseVersionsFast scans the common shape of a channelVersions object; ok false: anything else
// (escapes, non-ASCII, duplicates, bad syntax), which parseVersionsSlow reads or refuses.
func parseVersionsFast(b []byte) ([]ChanVer, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, skipSpace(b, i+1) == len(b)
	}
	out := make([]ChanVer, 0, 8)
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		var ver string
		if i < len(b) && b[i] == '"' {
			var s string
			if s, j, ok = plainString(b, i); !ok {
				return nil, false
			}
			ver = `"` + s + `"`
		} else {
			j = i
			for j < len(b) && (b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || (b[j] >= '0' && b[j] <= '9')) {
				j++
			}
			if !jsonNumber(b[i:j]) {
				return nil, false
			}
			ver = canonicalNumber(json.Number(b[i:j]))
		}
		for _, cv := range out {
			if cv.Channel == key {
				return nil, false
			}
		}
		out = append(out, ChanVer{key, ver})
		i = skipSpace(b, j)
		if i >= len(b) {
			return nil, false
		}
		if b[i] == '}' {
			return out, skipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
}

// plainString reads a JSON string at b[i] made of printable ASCII only, without escapes: its
// text is its canonical form.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		c := b[j]
		switch {
		case c == '"':
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return "", 0, false
		}
	}
	return "", 0, false
}

// jsonNumber reports whether b is a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

func parseVersionsSlow(raw []byte) ([]ChanVer, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []ChanVer
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		ch, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		key, err := CanonicalVersion(v)
		if err != nil {
			return nil, fmt.Errorf("channel %q: version %s", ch, err.Error())
		}
		if seen[ch] {
			return nil, fmt.Errorf("channel %q appears twice", ch)
		}
		seen[ch] = true
		out = append(out, ChanVer{ch, key})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the object")
	}
	return out, nil
}

// LGMetaRow is one metadata index row of a LangGraph checkpoint: a top-level key and the hash of
// its value's canonical JSON (LGMetaHash).
type LGMetaRow struct {
	Key  string
	Hash []byte
}

// LGMetaRows returns the index rows of a metadata object, by key; field names it in errors.
func LGMetaRows(field string, raw []byte) ([]LGMetaRow, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, Invalid(field, "not a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, Invalid(field, "not a JSON object: %v", err)
	}
	out := make([]LGMetaRow, 0, len(m))
	for k, v := range m {
		h, err := LGMetaHash(v)
		if err != nil {
			return nil, Invalid(field, "key %q: %v", k, err)
		}
		out = append(out, LGMetaRow{k, h})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Key < out[b].Key })
	return out, nil
}

// LGMetaHash is the first 16 bytes of the SHA-256 of a metadata value's canonical JSON.
func LGMetaHash(v json.RawMessage) ([]byte, error) {
	c, err := CanonicalJSON(v)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(c))
	return sum[:16], nil
}

// LGMetaFilter turns a list filter's metadata into index rows, by key.
func LGMetaFilter(md map[string]json.RawMessage) ([]LGMetaRow, error) {
	out := make([]LGMetaRow, 0, len(md))
	for k, raw := range md {
		h, err := LGMetaHash(raw)
		if err != nil {
			return nil, Invalid("metadata", "key %q: %v", k, err)
		}
		out = append(out, LGMetaRow{k, h})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Key < out[b].Key })
	return out, nil
}

// CheckLGIDs validates a thread and checkpoint id.
func CheckLGIDs(thread, checkpointID string) error {
	switch {
	case len(thread) > MaxLGThreadIDBytes:
		return Invalid("threadId", "longer than %d bytes", MaxLGThreadIDBytes)
	case checkpointID == "":
		return Invalid("checkpointId", "required")
	case len(checkpointID) > maxLGCheckpoint:
		return Invalid("checkpointId", "longer than %d bytes", maxLGCheckpoint)
	}
	return nil
}

// CheckLGThread validates a thread id taken as a whole (delete, copy target, import): any
// string up to MaxLGThreadIDBytes, "" included.
func CheckLGThread(field, thread string) error {
	if len(thread) > MaxLGThreadIDBytes {
		return Invalid(field, "longer than %d bytes", MaxLGThreadIDBytes)
	}
	return nil
}

// CheckLGWrites validates pending writes of one task before they are stored.
func CheckLGWrites(thread, checkpointID string, writes []LGWrite) error {
	if err := CheckLGIDs(thread, checkpointID); err != nil {
		return err
	}
	for i, w := range writes {
		field := fmt.Sprintf("writes[%d]", i)
		switch {
		case w.TaskID == "":
			return Invalid("taskId", "required")
		case w.Channel == "":
			return Invalid(field+".channel", "required")
		case w.Type == "" && w.Staged == 0:
			return Invalid(field+".type", "required")
		}
	}
	return nil
}

// CheckLGPrune validates a prune strategy.
func CheckLGPrune(strategy string) error {
	switch strategy {
	case "", "keep_latest", "delete":
		return nil
	}
	return Invalid("strategy", "%q is not keep_latest or delete", strategy)
}

// CheckLGCopy validates the threads of a copy.
func CheckLGCopy(src, dst string) error {
	switch {
	case len(dst) > MaxLGThreadIDBytes:
		return Invalid("targetThreadId", "longer than %d bytes", MaxLGThreadIDBytes)
	case src == dst:
		return Invalid("targetThreadId", "must differ from sourceThreadId")
	}
	return nil
}

// LGRunHashes are the metadata hashes of run_id values, once each (LGDeleteForRuns).
func LGRunHashes(runIDs []string) ([][]byte, error) {
	hashes := make([][]byte, 0, len(runIDs))
	seen := map[string]bool{}
	for _, id := range runIDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		raw, _ := json.Marshal(id)
		h, err := LGMetaHash(raw)
		if err != nil {
			return nil, err
		}
		hashes = append(hashes, h)
	}
	return hashes, nil
}

// SortLGWrites orders pending writes as LangGraph replays them: by task path (pathless first),
// then task id, then idx.
func SortLGWrites(ws []LGWrite) {
	sort.SliceStable(ws, func(a, b int) bool {
		x, y := ws[a], ws[b]
		if x.TaskPath != y.TaskPath {
			return x.TaskPath < y.TaskPath
		}
		if x.TaskID != y.TaskID {
			return x.TaskID < y.TaskID
		}
		return x.Idx < y.Idx
	})
}

// ---------------------------------------------------------------------------------------------
// Stored byte strings

// EncS2 marks LangGraph byte strings stored S2-compressed (klauspost/compress/s2, block format).
// LangGraph blobs are read back far more often than states and in bulk (lg/list), so they use
// S2, which decodes several times faster than zstd at a somewhat lower ratio. The value is
// outside the Codec's encodings on purpose: LangGraph rows never go through Codec.Decode.
const EncS2 = 16

// Packed is a LangGraph byte string ready to store: SHA is the SHA-256 of Data as stored
// (compressed or not), checked before anything else reads it.
type Packed struct {
	Enc  int
	Size int // raw
	SHA  []byte
	Data []byte
	// CV is the value cut into chunks when Enc is EncChunked (LGPacker.Value): Data is then its
	// index and SHA the raw value's SHA-256; the backend stores its runs and chunks with the row.
	CV *ChunkedValue
}

// Pack compresses b with S2 when it is larger than threshold (< 0: never) and that saves at
// least 1/8, and hashes what is stored.
func Pack(b []byte, threshold int) Packed {
	p := Packed{Enc: EncRaw, Size: len(b), Data: b}
	if threshold >= 0 && len(b) > threshold {
		if c := s2.Encode(nil, b); len(c) <= len(b)-len(b)/8 {
			p.Enc, p.Data = EncS2, c
		}
	}
	if p.Data == nil {
		p.Data = []byte{}
	}
	sum := sha256.Sum256(p.Data)
	p.SHA = sum[:]
	return p
}

// Unpack verifies a stored LangGraph byte string and returns its raw bytes. Damage is a
// *CorruptError naming checkpointID and what.
func Unpack(checkpointID, what string, data []byte, enc int, size int64, sha []byte) ([]byte, error) {
	corrupt := func(format string, args ...any) error {
		return &CorruptError{CheckpointID: checkpointID, Reason: what + ": " + fmt.Sprintf(format, args...)}
	}
	if sum := sha256.Sum256(data); !bytes.Equal(sum[:], sha) {
		return nil, corrupt("SHA-256 mismatch")
	}
	switch enc {
	case EncRaw:
		if int64(len(data)) != size {
			return nil, corrupt("stored %d bytes, expected %d", len(data), size)
		}
		if data == nil {
			data = []byte{}
		}
		return data, nil
	case EncS2:
		n, err := s2.DecodedLen(data)
		if err != nil || int64(n) != size {
			return nil, corrupt("does not decode: length %d, expected %d (%v)", n, size, err)
		}
		out, err := s2.Decode(make([]byte, n), data)
		if err != nil {
			return nil, corrupt("does not decode: %v", err)
		}
		return out, nil
	}
	return nil, corrupt("unknown encoding %d", enc)
}

// LGPrepared is an LGPutRequest validated and packed for storage.
type LGPrepared struct {
	Req     LGPutRequest
	Meta    []LGMetaRow
	MetaRaw []byte // the metadata object as sent (trimmed); nil without one
	Blobs   []Packed
	CP      Packed
	Micros  int64 // creation time, unix micros
}

// PrepareLGPut validates req and packs its checkpoint and blobs (pk: large blobs chunked).
// Blobs sent as deltas must have been resolved first (ResolveLGDeltas).
func PrepareLGPut(req LGPutRequest, pk LGPacker, now time.Time) (*LGPrepared, error) {
	if err := CheckLGIDs(req.ThreadID, req.CheckpointID); err != nil {
		return nil, err
	}
	if req.Type == "" && req.CheckpointStaged == 0 {
		return nil, Invalid("checkpoint.type", "required")
	}
	if req.Retention != nil {
		if err := req.Retention.Validate(); err != nil {
			return nil, err
		}
	}
	if len(bytes.TrimSpace(req.ChannelVersions)) == 0 {
		return nil, Invalid("channelVersions", "required (a JSON object, {} when empty)")
	}
	if _, err := ParseVersions(req.ChannelVersions); err != nil {
		return nil, Invalid("channelVersions", "%v", err)
	}
	p := &LGPrepared{Req: req, Micros: now.UnixMicro()}
	var err error
	if p.Meta, err = LGMetaRows("metadata", req.Metadata); err != nil {
		return nil, err
	}
	if m := bytes.TrimSpace(req.Metadata); len(m) > 0 && !bytes.Equal(m, []byte("null")) {
		p.MetaRaw = m
	}
	p.Blobs = make([]Packed, len(req.Blobs))
	for i, b := range req.Blobs {
		field := fmt.Sprintf("blobs[%d]", i)
		switch {
		case b.Channel == "":
			return nil, Invalid(field+".channel", "required")
		case b.Version == "":
			return nil, Invalid(field+".version", "required")
		case b.Staged != 0:
			continue // stored ahead: packed then
		case b.Type == "":
			return nil, Invalid(field+".type", "required")
		case b.Type == LGEmptyType && len(b.Data) > 0:
			return nil, Invalid(field+".length", "must be 0 for type empty")
		case b.Delta != nil:
			return nil, Invalid(field+".delta", "not resolved") // a backend's bug: ResolveLGDeltas first
		case b.Type == LGEmptyType:
			p.Blobs[i] = pk.Plain(b.Data)
			continue
		}
		p.Blobs[i] = pk.value(req.ThreadID, req.Namespace, b.Channel, b.Version, b.Data, b.sum)
	}
	if req.CheckpointStaged == 0 {
		p.CP = pk.Plain(req.Checkpoint)
	}
	return p, nil
}

// Check validates an imported row (what LGImport refuses before looking at stored rows).
func (r *LGRecord) Check() error {
	switch r.Kind {
	case LGKindCheckpoint:
		if r.CreatedAt.IsZero() {
			return Invalid("createdAt", "%s: required", r.What())
		}
	case LGKindValue:
		switch canon, err := CanonicalVersion(json.RawMessage(r.Version)); {
		case r.Channel == "":
			return Invalid("channel", "%s: required", r.What())
		case err != nil || canon != r.Version:
			return Invalid("version", "%s: not a canonical version", r.What())
		case r.Type == "":
			return Invalid("type", "%s: required", r.What())
		case r.Type == LGEmptyType && len(r.Data) > 0:
			return Invalid("type", "%s: an empty value with %d bytes", r.What(), len(r.Data))
		case r.Variant < 0:
			return Invalid("variant", "%s: must be >= 0", r.What())
		}
	case LGKindWrite:
		if r.CheckpointID == "" || r.TaskID == "" || r.Channel == "" || r.Type == "" {
			return Invalid("write", "%s: checkpointId, taskId, channel and type are required", r.What())
		}
	default:
		return Invalid("kind", "%q: want checkpoint, value or write", r.Kind)
	}
	return nil
}

// LGValueWhat names a stored value for people: "blob channel@version", "#variant" added when
// it is not the first.
func LGValueWhat(channel, version string, variant int) string {
	if variant == 0 {
		return fmt.Sprintf("blob %s@%s", channel, version)
	}
	return fmt.Sprintf("blob %s@%s#%d", channel, version, variant)
}

// What names the row for people.
func (r *LGRecord) What() string {
	switch r.Kind {
	case LGKindCheckpoint:
		return fmt.Sprintf("checkpoint %q (namespace %q)", r.CheckpointID, r.Namespace)
	case LGKindValue:
		if r.Variant != 0 {
			return fmt.Sprintf("value %s@%s#%d (namespace %q)", r.Channel, r.Version, r.Variant, r.Namespace)
		}
		return fmt.Sprintf("value %s@%s (namespace %q)", r.Channel, r.Version, r.Namespace)
	case LGKindWrite:
		return fmt.Sprintf("write %s/%d of checkpoint %q (namespace %q)", r.TaskID, r.Idx, r.CheckpointID, r.Namespace)
	}
	return "row of kind " + r.Kind
}

// ---------------------------------------------------------------------------------------------
// Cursors

// LGCursor is the position after the last tuple of an lg/list page: its id and the backend's
// storage order key (ties between equal ids of different threads or namespaces).
type LGCursor struct {
	ID  string
	Key int64
}

// Encode is the opaque text of c.
func (c LGCursor) Encode() string {
	b, _ := json.Marshal([]any{c.ID, c.Key})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeLGCursor reads what LGCursor.Encode wrote; anything else is an *InvalidError.
func DecodeLGCursor(c string) (*LGCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, Invalid("cursor", "not a cursor from lg/list")
	}
	var v []json.RawMessage
	var out LGCursor
	if json.Unmarshal(b, &v) != nil || len(v) != 2 || json.Unmarshal(v[0], &out.ID) != nil || json.Unmarshal(v[1], &out.Key) != nil {
		return nil, Invalid("cursor", "not a cursor from lg/list")
	}
	return &out, nil
}

// ---------------------------------------------------------------------------------------------
// Ancestor walks

// LGNode is one checkpoint as the ancestor walks see it.
type LGNode struct {
	Key      int64 // the backend's id of the row
	ID       string
	Parent   string
	Versions []ChanVer
	// Refs holds the variant of each channel whose value is not variant 0 (its value refs).
	Refs    map[string]int
	Created time.Time // when it was stored (retention's maxAgeSeconds); zero when not read
}

// Variant returns the variant of the value the checkpoint refers to for channel.
func (n *LGNode) Variant(channel string) int { return n.Refs[channel] }

// Version returns the version the checkpoint names for channel.
func (n *LGNode) Version(channel string) (string, bool) {
	for _, v := range n.Versions {
		if v.Channel == channel {
			return v.Version, true
		}
	}
	return "", false
}

// NewLGNode parses a stored row's channel versions and value refs (nil: none); a row whose
// versions or refs do not parse is corrupt.
func NewLGNode(key int64, id, parent string, versions, refs []byte) (*LGNode, error) {
	n := &LGNode{Key: key, ID: id, Parent: parent}
	var err error
	if n.Versions, err = ParseVersions(versions); err != nil {
		return nil, &CorruptError{CheckpointID: id, Reason: "stored channel versions do not parse: " + err.Error()}
	}
	if n.Refs, err = ParseValueRefs(refs); err != nil {
		return nil, &CorruptError{CheckpointID: id, Reason: "stored value refs do not parse: " + err.Error()}
	}
	return n, nil
}

// LGAncestry is what ChannelHistory reads of one (thread, namespace), inside one snapshot.
type LGAncestry interface {
	// Node returns checkpoint id ("": the latest), or nil when there is none.
	Node(id string) (*LGNode, error)
	// Writes returns a checkpoint's pending writes in SortLGWrites order.
	Writes(id string) ([]LGWrite, error)
	// Value returns the stored non-empty value of (channel, version, variant), or nil; id names
	// the checkpoint being read (for a *CorruptError).
	Value(id, channel, version string, variant int) (*LGBlob, error)
}

// ChannelHistory walks the parent chain of checkpoint id ("": the latest) collecting, per
// channel, the ancestors' writes up to and including the nearest ancestor with a stored value
// (the seed). See docs/protocol.md, lg/channelHistory.
func ChannelHistory(a LGAncestry, id string, channels []string) (LGHistoryResult, error) {
	res := LGHistoryResult{Channels: map[string]*LGHistory{}, Visited: []string{}}
	open := map[string]bool{}
	perAncestor := map[string][][]LGWrite{}
	for _, ch := range channels {
		res.Channels[ch] = &LGHistory{}
		open[ch] = true
	}
	if len(open) == 0 {
		return res, nil
	}
	target, err := a.Node(id)
	if err != nil || target == nil {
		return res, err
	}
	seen := map[string]bool{target.ID: true}
	next := target.Parent
	for len(open) > 0 && next != "" && !seen[next] {
		seen[next] = true
		n, err := a.Node(next)
		if err != nil {
			return res, err
		}
		if n == nil {
			break
		}
		res.Visited = append(res.Visited, n.ID)
		ws, err := a.Writes(n.ID)
		if err != nil {
			return res, err
		}
		byCh := map[string][]LGWrite{}
		for _, w := range ws {
			if open[w.Channel] {
				byCh[w.Channel] = append(byCh[w.Channel], w)
			}
		}
		for ch := range open {
			perAncestor[ch] = append(perAncestor[ch], byCh[ch])
			v, ok := n.Version(ch)
			if !ok {
				continue
			}
			b, err := a.Value(n.ID, ch, v, n.Variant(ch))
			if err != nil {
				return res, err
			}
			if b != nil {
				seed := *b
				res.Channels[ch].Seed = &seed
				delete(open, ch)
			}
		}
		next = n.Parent
	}
	for ch, lists := range perAncestor {
		h := res.Channels[ch]
		for i := len(lists) - 1; i >= 0; i-- {
			h.Writes = append(h.Writes, lists[i]...)
		}
	}
	return res, nil
}

// LGPruneView is what SelectLGKeep asks of one (thread, namespace).
type LGPruneView interface {
	// HasValue reports whether (channel, version, variant) has a stored non-empty value.
	HasValue(channel, version string, variant int) (bool, error)
	// Written lists the channels a checkpoint's regular (idx >= 0) pending writes write to.
	Written(id string) ([]string, error)
}

// SplitKept splits nodes, in their order, into those whose Key keep holds and the others.
func SplitKept(nodes []*LGNode, keep map[int64]bool) (kept, drop []*LGNode) {
	for _, n := range nodes {
		if keep[n.Key] {
			kept = append(kept, n)
		} else {
			drop = append(drop, n)
		}
	}
	return kept, drop
}

// SelectKeepLatest chooses what a keep_latest prune keeps of one (thread, namespace) whose
// checkpoints nodes lists newest first: the latest, plus the ancestors a delta-channel replay
// of it needs. It returns the Keys of the nodes to keep.
func SelectKeepLatest(nodes []*LGNode, v LGPruneView) (map[int64]bool, error) {
	if len(nodes) == 0 {
		return map[int64]bool{}, nil
	}
	return SelectLGKeep(nodes, []*LGNode{nodes[0]}, v)
}

// SelectLGKeep returns the Keys of the nodes (one (thread, namespace), newest first) a prune
// keeps to keep roots: the roots, plus for each the ancestors a delta-channel replay of it
// needs. A channel without a value at the root (an empty or missing value, or not versioned
// there while an ancestor on the walk wrote to it) is rebuilt by replaying ancestor writes from
// the nearest ancestor with a value: that part of the parent chain is kept, with the ancestor.
func SelectLGKeep(nodes []*LGNode, roots []*LGNode, v LGPruneView) (map[int64]bool, error) {
	byID := make(map[string]*LGNode, len(nodes))
	for _, n := range nodes {
		if _, dup := byID[n.ID]; !dup {
			byID[n.ID] = n
		}
	}
	keep := map[int64]bool{}
	for _, r := range roots {
		keep[r.Key] = true
	}
	// HasValue answers are shared by the walks (a key is asked once).
	type vkey struct {
		ch, ver string
		variant int
	}
	known := map[vkey]bool{}
	has := func(ch, ver string, variant int) (bool, error) {
		k := vkey{ch, ver, variant}
		if b, ok := known[k]; ok {
			return b, nil
		}
		b, err := v.HasValue(ch, ver, variant)
		if err != nil {
			return false, err
		}
		known[k] = b
		return b, nil
	}
	written := map[string][]string{}
	writes := func(id string) ([]string, error) {
		if w, ok := written[id]; ok {
			return w, nil
		}
		w, err := v.Written(id)
		if err != nil {
			return nil, err
		}
		written[id] = w
		return w, nil
	}
	for _, root := range roots {
		valueAtRoot := map[string]bool{}
		open := map[string]bool{}
		for _, cv := range root.Versions {
			ok, err := has(cv.Channel, cv.Version, root.Variant(cv.Channel))
			if err != nil {
				return nil, err
			}
			if ok {
				valueAtRoot[cv.Channel] = true
			} else {
				open[cv.Channel] = true
			}
		}
		closed := map[string]bool{}
		seen := map[string]bool{root.ID: true}
		for cur := byID[root.Parent]; cur != nil && !seen[cur.ID]; cur = byID[cur.Parent] {
			seen[cur.ID] = true
			ws, err := writes(cur.ID)
			if err != nil {
				return nil, err
			}
			for _, ch := range ws {
				if !valueAtRoot[ch] && !closed[ch] {
					open[ch] = true
				}
			}
			if len(open) == 0 {
				break
			}
			keep[cur.Key] = true
			for ch := range open {
				if ver, ok := cur.Version(ch); ok {
					hv, err := has(ch, ver, cur.Variant(ch))
					if err != nil {
						return nil, err
					}
					if hv {
						delete(open, ch)
						closed[ch] = true
					}
				}
			}
		}
	}
	return keep, nil
}
