package protocol

// The LangGraph channel storage family (docs/protocol.md, "LangGraph channel storage"): lg/* and
// thread/*. Byte strings travel as segments {offset, length} of the frame's single attachment.

import "encoding/json"

// Method names of the LangGraph family (binding).
const (
	MethodLGPut            = "lg/put"
	MethodLGPutWrites      = "lg/putWrites"
	MethodLGGet            = "lg/get"
	MethodLGList           = "lg/list"
	MethodLGChannelHistory = "lg/channelHistory"
	MethodLGDeleteForRuns  = "lg/deleteForRuns"
	MethodThreadDelete     = "thread/delete"
	MethodThreadCopy       = "thread/copy"
	MethodThreadPrune      = "thread/prune"
	MethodLGPutValue       = "lg/putValue"
	MethodLGConfigure      = "lg/configure"
)

// Metadata filter rules of lg/list (metadataMatch).
const (
	LGMatchJSON   = "json"
	LGMatchPython = "python"
	LGMatchJS     = "javascript"
)

// LGCapabilities tells a LangGraph saver what this server's lg/* methods offer (initialize).
type LGCapabilities struct {
	// PutValue: lg/putValue, and valueId in place of a segment in lg/put and lg/putWrites.
	PutValue bool `json:"putValue"`
	// Retention: lg/configure and lg/put's retention.
	Retention bool `json:"retention"`
	// MetadataMatch lists the rules lg/list's metadataMatch takes.
	MetadataMatch []string `json:"metadataMatch"`
	// MaxThreadIDBytes bounds a threadId ("" is one).
	MaxThreadIDBytes int `json:"maxThreadIdBytes"`
	// ValueDeltas: lg/put takes blobs[i].delta (a channel value sent as a wire delta against
	// another version of the channel).
	ValueDeltas bool `json:"valueDeltas"`
}

// LGSegmentIn is a typed byte string of a request: a segment of its attachment, or (ValueID)
// a value stored ahead by lg/putValue.
type LGSegmentIn struct {
	Type    string `json:"type"`
	Offset  *int64 `json:"offset"`
	Length  *int64 `json:"length"`
	ValueID *int64 `json:"valueId"`
}

// LGBlobIn is one channel value of lg/put.
type LGBlobIn struct {
	Channel string          `json:"channel"`
	Version json.RawMessage `json:"version"`
	LGSegmentIn
	// Delta says the segment holds only the middle of the value: the rest is kept from the
	// value of another version of the channel (docs/protocol.md, lg/put "Value deltas").
	Delta *LGValueDelta `json:"delta"`
}

// LGValueDelta is lg/put's blobs[i].delta: the value is the value of (channel, baseVersion) in
// the same thread and namespace with its first keepPrefix and last keepSuffix bytes kept and the
// segment in between; sha256 is the hex SHA-256 of the result.
type LGValueDelta struct {
	BaseVersion json.RawMessage `json:"baseVersion"`
	KeepPrefix  *int64          `json:"keepPrefix"`
	KeepSuffix  *int64          `json:"keepSuffix"`
	SHA256      *string         `json:"sha256"`
	// Copies splice ranges of the base into the middle: [at, from, length] inserts the base's
	// bytes [from, from+length) at offset at of the segment (ats non-decreasing).
	Copies [][]int64 `json:"copies"`
}

// LGPutParams are lg/put's params.
type LGPutParams struct {
	ThreadID        *string         `json:"threadId"`
	Namespace       string          `json:"namespace"`
	CheckpointID    string          `json:"checkpointId"`
	ParentID        string          `json:"parentId"`
	Checkpoint      *LGSegmentIn    `json:"checkpoint"`
	ChannelVersions json.RawMessage `json:"channelVersions"`
	Metadata        json.RawMessage `json:"metadata"`
	Blobs           []LGBlobIn      `json:"blobs"`
	// FencingToken is the token of the caller's claim on the thread (workflow/claim with the
	// thread id as workflowId).
	FencingToken *int64 `json:"fencingToken"`
	// Retention becomes the thread's own retention and applies after the put (lg/configure).
	Retention *Retention `json:"retention"`
}

// LGPutResult answers lg/put.
type LGPutResult struct {
	ThreadID     string `json:"threadId"`
	Namespace    string `json:"namespace"`
	CheckpointID string `json:"checkpointId"`
	BlobsStored  int    `json:"blobsStored"`
}

// LGWriteIn is one write of lg/putWrites.
type LGWriteIn struct {
	Channel string `json:"channel"`
	Idx     *int64 `json:"idx"`
	LGSegmentIn
}

// LGPutWritesParams are lg/putWrites' params.
type LGPutWritesParams struct {
	ThreadID     *string     `json:"threadId"`
	Namespace    string      `json:"namespace"`
	CheckpointID string      `json:"checkpointId"`
	TaskID       string      `json:"taskId"`
	TaskPath     string      `json:"taskPath"`
	Writes       []LGWriteIn `json:"writes"`
	FencingToken *int64      `json:"fencingToken"`
}

// LGSegment is a typed segment of a response attachment.
type LGSegment struct {
	Type   string `json:"type"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
}

// LGBlobOut is one channel value of a tuple.
type LGBlobOut struct {
	Channel string          `json:"channel"`
	Version json.RawMessage `json:"version"`
	LGSegment
}

// LGWriteOut is one pending write of a tuple or a channel history.
type LGWriteOut struct {
	TaskID   string `json:"taskId"`
	TaskPath string `json:"taskPath"`
	Idx      int64  `json:"idx"`
	Channel  string `json:"channel"`
	LGSegment
}

// LGTuple is the wire form of a LangGraph CheckpointTuple.
type LGTuple struct {
	ThreadID        string          `json:"threadId"`
	Namespace       string          `json:"namespace"`
	CheckpointID    string          `json:"checkpointId"`
	ParentID        *string         `json:"parentId"`
	CreatedAt       string          `json:"createdAt"`
	Checkpoint      LGSegment       `json:"checkpoint"`
	ChannelVersions json.RawMessage `json:"channelVersions"`
	Metadata        json.RawMessage `json:"metadata"`
	Blobs           []LGBlobOut     `json:"blobs"`
	Writes          []LGWriteOut    `json:"writes"`
}

// LGGetParams are lg/get's params.
type LGGetParams struct {
	ThreadID     *string `json:"threadId"`
	Namespace    string  `json:"namespace"`
	CheckpointID string  `json:"checkpointId"`
}

// LGGetResult answers lg/get.
type LGGetResult struct {
	Tuple *LGTuple `json:"tuple"`
}

// LGListParams are lg/list's params.
type LGListParams struct {
	ThreadID      *string                    `json:"threadId"`
	Namespace     *string                    `json:"namespace"`
	CheckpointID  string                     `json:"checkpointId"`
	Before        string                     `json:"before"`
	Metadata      map[string]json.RawMessage `json:"metadata"`
	MetadataMatch string                     `json:"metadataMatch"`
	Limit         *int                       `json:"limit"`
	Cursor        string                     `json:"cursor"`
}

// LGListResult answers lg/list.
type LGListResult struct {
	Tuples []LGTuple `json:"tuples"`
	Cursor string    `json:"cursor,omitempty"`
}

// LGChannelHistoryParams are lg/channelHistory's params.
type LGChannelHistoryParams struct {
	ThreadID     *string  `json:"threadId"`
	Namespace    string   `json:"namespace"`
	CheckpointID string   `json:"checkpointId"`
	Channels     []string `json:"channels"`
}

// LGSeed is the seed value of a channel history.
type LGSeed struct {
	Version json.RawMessage `json:"version"`
	LGSegment
}

// LGChannelHistory is one channel of lg/channelHistory.
type LGChannelHistory struct {
	Writes []LGWriteOut `json:"writes"`
	Seed   *LGSeed      `json:"seed,omitempty"`
}

// LGChannelHistoryResult answers lg/channelHistory.
type LGChannelHistoryResult struct {
	Channels map[string]LGChannelHistory `json:"channels"`
	Visited  []string                    `json:"visited"`
}

// LGDeleteForRunsParams are lg/deleteForRuns' params.
type LGDeleteForRunsParams struct {
	RunIDs []string `json:"runIds"`
}

// ThreadDeleteParams are thread/delete's params.
type ThreadDeleteParams struct {
	ThreadID *string `json:"threadId"`
}

// ThreadCopyParams are thread/copy's params.
type ThreadCopyParams struct {
	SourceThreadID *string `json:"sourceThreadId"`
	TargetThreadID *string `json:"targetThreadId"`
}

// ThreadCopyResult answers thread/copy.
type ThreadCopyResult struct {
	Copied int `json:"copied"`
}

// ThreadPruneParams are thread/prune's params.
type ThreadPruneParams struct {
	ThreadIDs []string `json:"threadIds"`
	Strategy  string   `json:"strategy"`
}

// LGPutValueParams are lg/putValue's params: one value as a segment of the attachment.
type LGPutValueParams struct {
	ThreadID *string `json:"threadId"`
	Type     string  `json:"type"`
	Offset   *int64  `json:"offset"`
	Length   *int64  `json:"length"`
}

// LGPutValueResult answers lg/putValue.
type LGPutValueResult struct {
	ValueID int64 `json:"valueId"`
}

// LGConfigureParams are lg/configure's params: threadId absent configures every thread without a
// retention of its own (the database's).
type LGConfigureParams struct {
	ThreadID  *string    `json:"threadId"`
	Retention *Retention `json:"retention"`
	Inherit   bool       `json:"inherit"`
}

// LGConfigureResult answers lg/configure: the retention in force and where it comes from
// ("thread", "database" or "daemon").
type LGConfigureResult struct {
	ThreadID  *string            `json:"threadId,omitempty"`
	Retention EffectiveRetention `json:"retention"`
	Source    string             `json:"source"`
}
