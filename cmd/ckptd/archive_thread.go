package main

// Version 2 archives: one LangGraph thread (docs/archive.md, "Version 2").
//
//	records = H (G D | V D | X D)* E, plus optional lowercase-kind records anywhere after H
//	          except between a G, V or X and its D
//	G = a checkpoint, V = a channel value, X = a pending write (JSON), D = its raw bytes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"time"
	"unicode/utf8"

	"github.com/ckptd/ckptd/store"
)

const (
	archiveThreadKind = "langgraph-thread"

	recLGCheckpoint = 'G'
	recLGValue      = 'V'
	recLGWrite      = 'X'
	recLGData       = 'D'
)

// archiveThreadHeader is the H record of a version 2 archive.
type archiveThreadHeader struct {
	Format       string `json:"format"`
	Version      int    `json:"version"`
	Kind         string `json:"kind"`
	ExportedAt   string `json:"exportedAt"`
	CkptdVersion string `json:"ckptdVersion"`
	ThreadID     string `json:"threadId"`
	Checkpoints  int    `json:"checkpoints"`
	Values       int    `json:"values"`
	Writes       int    `json:"writes"`
}

// archiveLGRow is a G, V or X record; fields not of its kind are omitted. Raw JSON the saver
// sent (channelVersions, metadata) is base64 ([]byte) so it comes back byte for byte.
type archiveLGRow struct {
	Namespace       string `json:"namespace"`
	CheckpointID    string `json:"checkpointId,omitempty"`
	ParentID        string `json:"parentId,omitempty"`
	CreatedAt       string `json:"createdAt,omitempty"`
	ChannelVersions []byte `json:"channelVersions,omitempty"`
	Metadata        []byte `json:"metadata,omitempty"`
	// ValueRefs (checkpoint): the variant of each channel whose value is not variant 0.
	ValueRefs map[string]int `json:"valueRefs,omitempty"`
	Channel   string         `json:"channel,omitempty"`
	Version   string         `json:"version,omitempty"`
	// Variant (value): which value of (channel, version); 0 when absent.
	Variant   int    `json:"variant,omitempty"`
	TaskID    string `json:"taskId,omitempty"`
	TaskPath  string `json:"taskPath,omitempty"`
	Idx       *int64 `json:"idx,omitempty"`
	Type      string `json:"type"`
	SizeBytes int64  `json:"sizeBytes"`
	SHA256    string `json:"sha256"`
}

var lgKindRecord = map[string]byte{store.LGKindCheckpoint: recLGCheckpoint, store.LGKindValue: recLGValue,
	store.LGKindWrite: recLGWrite}

// beginThread writes the H record of a thread archive (made with archiveThreadVersion).
func (a *archiveWriter) beginThread(h archiveThreadHeader) error {
	if !utf8.ValidString(h.ThreadID) {
		return fmt.Errorf("thread id %q is not valid UTF-8: it cannot be archived", h.ThreadID)
	}
	return a.jsonRecord(recHeader, h)
}

// lgRow writes one G, V or X record and its D record.
func (a *archiveWriter) lgRow(r store.LGRecord) error {
	kind, ok := lgKindRecord[r.Kind]
	if !ok {
		return fmt.Errorf("unknown LangGraph row kind %q", r.Kind)
	}
	for _, s := range []string{r.Namespace, r.CheckpointID, r.ParentID, r.Channel, r.Version, r.TaskID, r.TaskPath, r.Type} {
		if !utf8.ValidString(s) {
			return fmt.Errorf("LangGraph %s %q: a field is not valid UTF-8: it cannot be archived", r.Kind, r.CheckpointID)
		}
	}
	sum := sha256.Sum256(r.Data)
	row := archiveLGRow{Namespace: r.Namespace, Type: r.Type, SizeBytes: int64(len(r.Data)), SHA256: hex.EncodeToString(sum[:])}
	switch r.Kind {
	case store.LGKindCheckpoint:
		row.CheckpointID, row.ParentID, row.CreatedAt = r.CheckpointID, r.ParentID, timestamp(r.CreatedAt)
		row.ChannelVersions, row.Metadata, row.ValueRefs = r.ChannelVersions, r.Metadata, r.ValueRefs
	case store.LGKindValue:
		row.Channel, row.Version, row.Variant = r.Channel, r.Version, r.Variant
	case store.LGKindWrite:
		idx := r.Idx
		row.CheckpointID, row.TaskID, row.TaskPath, row.Idx, row.Channel = r.CheckpointID, r.TaskID, r.TaskPath, &idx, r.Channel
	}
	if err := a.jsonRecord(kind, row); err != nil {
		return err
	}
	return a.record(recLGData, r.Data)
}

// lgRecords yields every row of a thread archive, verified (size and SHA-256 of its bytes).
// Like checkpoints, the sequence ends with an error if anything is wrong, including the digest.
func (a *archiveReader) lgRecords() iter.Seq2[store.LGRecord, error] {
	return func(yield func(store.LGRecord, error) bool) {
		if a.failed != nil {
			yield(store.LGRecord{}, a.failed)
			return
		}
		if !a.isThread() {
			yield(store.LGRecord{}, a.fail(fmt.Errorf("it holds workflow %q, not a LangGraph thread", a.header.WorkflowID)))
			return
		}
		var got store.LGThreadCounts
		for {
			kind, b, err := a.record(maxJSONRecord)
			if err != nil {
				yield(store.LGRecord{}, a.fail(err))
				return
			}
			var r store.LGRecord
			switch {
			case kind == recEnd:
				var counts error
				if h := a.thread; got != (store.LGThreadCounts{Checkpoints: h.Checkpoints, Values: h.Values, Writes: h.Writes}) {
					counts = fmt.Errorf("%d checkpoints, %d values and %d writes; the header announces %d, %d and %d",
						got.Checkpoints, got.Values, got.Writes, h.Checkpoints, h.Values, h.Writes)
				}
				if err := a.endWith(b, counts); err != nil {
					yield(store.LGRecord{}, err)
				}
				return
			case kind == recLGCheckpoint:
				r.Kind = store.LGKindCheckpoint
				got.Checkpoints++
			case kind == recLGValue:
				r.Kind = store.LGKindValue
				got.Values++
			case kind == recLGWrite:
				r.Kind = store.LGKindWrite
				got.Writes++
			case kind >= 'a' && kind <= 'z':
				continue // an optional record of a newer writer
			default:
				yield(store.LGRecord{}, a.fail(fmt.Errorf("unexpected %q record", kind)))
				return
			}
			if err := a.lgRow(b, &r); err != nil {
				yield(store.LGRecord{}, a.fail(err))
				return
			}
			if !yield(r, nil) {
				return
			}
		}
	}
}

// lgRow decodes the G, V or X record b into r and reads its D record.
func (a *archiveReader) lgRow(b []byte, r *store.LGRecord) error {
	var row archiveLGRow
	if err := json.Unmarshal(b, &row); err != nil {
		return fmt.Errorf("LangGraph %s record: %v", r.Kind, err)
	}
	what := fmt.Sprintf("LangGraph %s %q", r.Kind, row.CheckpointID)
	switch r.Kind {
	case store.LGKindCheckpoint:
		if row.CheckpointID == "" {
			return fmt.Errorf("%s: no checkpointId", what)
		}
		t, err := time.Parse(time.RFC3339Nano, row.CreatedAt)
		if err != nil {
			return fmt.Errorf("%s: createdAt %q", what, row.CreatedAt)
		}
		// the store keeps microseconds, and so does an export
		r.CheckpointID, r.ParentID, r.CreatedAt = row.CheckpointID, row.ParentID, t.UTC().Truncate(time.Microsecond)
		r.ChannelVersions = json.RawMessage(row.ChannelVersions)
		if len(row.Metadata) > 0 {
			r.Metadata = json.RawMessage(row.Metadata)
		}
		for ch, v := range row.ValueRefs {
			if v < 0 {
				return fmt.Errorf("%s: valueRefs: channel %q: variant %d", what, ch, v)
			}
		}
		r.ValueRefs = row.ValueRefs
	case store.LGKindValue:
		what = fmt.Sprintf("LangGraph value %s@%s", row.Channel, row.Version)
		if row.Channel == "" || row.Version == "" {
			return fmt.Errorf("%s: no channel or version", what)
		}
		if row.Variant < 0 {
			return fmt.Errorf("%s: variant %d", what, row.Variant)
		}
		r.Channel, r.Version, r.Variant = row.Channel, row.Version, row.Variant
	case store.LGKindWrite:
		if row.CheckpointID == "" || row.TaskID == "" || row.Channel == "" || row.Idx == nil {
			return fmt.Errorf("%s: a write needs checkpointId, taskId, idx and channel", what)
		}
		r.CheckpointID, r.TaskID, r.TaskPath, r.Idx, r.Channel = row.CheckpointID, row.TaskID, row.TaskPath, *row.Idx, row.Channel
	}
	r.Namespace, r.Type = row.Namespace, row.Type
	kind, data, err := a.record(maxStateRecord)
	if err != nil {
		return err
	}
	if kind != recLGData {
		return fmt.Errorf("%s: expected its data record, found %q", what, kind)
	}
	if int64(len(data)) != row.SizeBytes {
		return fmt.Errorf("%s: data is %d bytes, the record says %d", what, len(data), row.SizeBytes)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != row.SHA256 {
		return fmt.Errorf("%s: data SHA-256 mismatch", what)
	}
	r.Data = data
	return nil
}
