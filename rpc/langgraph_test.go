package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// lgConn is a Server on pipes, spoken to with raw frames.
type lgConn struct {
	t    *testing.T
	in   *io.PipeWriter
	r    *framing.Reader
	id   int
	done chan struct{}
}

func newLGConn(t *testing.T) *lgConn {
	t.Helper()
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "lg.db"),
		DefaultRetention: store.Retention{KeepLast: 2}})
	require.NoError(t, err)
	srv := New(st, Options{Version: "test", Durability: "full", DefaultRetention: store.Retention{KeepLast: 2}})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &lgConn{t: t, in: inW, r: framing.NewReader(outR, framing.Limits{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		_ = srv.Serve(context.Background(), inR, outW)
		_ = outW.Close()
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
		require.NoError(t, st.Close())
	})
	return c
}

type lgReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	att    []byte
	hasAtt bool
}

func (c *lgConn) call(method string, params any, att []byte) lgReply {
	c.t.Helper()
	c.id++
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params})
	require.NoError(c.t, err)
	_, err = c.in.Write(framing.AppendFrame(nil, body, att, att != nil))
	require.NoError(c.t, err)
	f, err := c.r.Next()
	require.NoError(c.t, err)
	var r lgReply
	require.NoError(c.t, json.Unmarshal(f.Body, &r))
	r.att, r.hasAtt = f.Attachment, f.HasAttachment
	return r
}

func (c *lgConn) ok(method string, params any, att []byte, out any) []byte {
	c.t.Helper()
	r := c.call(method, params, att)
	require.Nil(c.t, r.Error, "%s: %+v", method, r.Error)
	if out != nil {
		require.NoError(c.t, json.Unmarshal(r.Result, out))
	}
	return r.att
}

func (c *lgConn) fail(method string, params any, att []byte, code int, field string) {
	c.t.Helper()
	r := c.call(method, params, att)
	require.NotNil(c.t, r.Error, "%s should fail", method)
	require.Equal(c.t, code, r.Error.Code, r.Error.Message)
	if field != "" {
		var d struct{ Field string }
		require.NoError(c.t, json.Unmarshal(r.Error.Data, &d))
		require.Equal(c.t, field, d.Field, r.Error.Message)
	}
}

func seg(att []byte, s protocol.LGSegment) string { return string(att[s.Offset : s.Offset+s.Length]) }

func TestLGProtocolRoundTrip(t *testing.T) {
	c := newLGConn(t)
	// checkpoint 1: three channels; the attachment holds the segments in any order
	att := []byte("CKPT1|big-value|small|")
	put1 := map[string]any{
		"threadId": "t-1", "checkpointId": "1f0-a",
		"checkpoint":      map[string]any{"type": "msgpack", "offset": 0, "length": 5},
		"channelVersions": map[string]any{"messages": "0001.5", "step": 1, "e": 1},
		"metadata":        map[string]any{"source": "input", "step": -1, "run_id": "r1"},
		"blobs": []map[string]any{
			{"channel": "step", "version": 1, "type": "json", "offset": 16, "length": 5},
			{"channel": "messages", "version": "0001.5", "type": "msgpack", "offset": 6, "length": 9},
			{"channel": "e", "version": 1, "type": "empty", "offset": 0, "length": 0},
		},
	}
	var pr protocol.LGPutResult
	c.ok(protocol.MethodLGPut, put1, att, &pr)
	require.Equal(t, protocol.LGPutResult{ThreadID: "t-1", CheckpointID: "1f0-a", BlobsStored: 3}, pr)

	// checkpoint 2 changes only step; no attachment needed for an all-empty put
	put2 := map[string]any{
		"threadId": "t-1", "checkpointId": "1f0-b", "parentId": "1f0-a",
		"checkpoint":      map[string]any{"type": "msgpack", "offset": 0, "length": 5},
		"channelVersions": map[string]any{"messages": "0001.5", "step": 2, "e": 1},
		"metadata":        map[string]any{"source": "loop", "step": 0, "run_id": "r1"},
		"blobs":           []map[string]any{{"channel": "step", "version": 2, "type": "json", "offset": 5, "length": 1}},
	}
	c.ok(protocol.MethodLGPut, put2, []byte("CKPT27"), nil)
	var wr protocol.WritesPutResult
	c.ok(protocol.MethodLGPutWrites, map[string]any{"threadId": "t-1", "checkpointId": "1f0-b", "taskId": "task", "taskPath": "~pull, n",
		"writes": []map[string]any{{"channel": "messages", "type": "json", "offset": 0, "length": 4},
			{"channel": "__interrupt__", "idx": -3, "type": "json", "offset": 4, "length": 2}}}, []byte(`"hi"{}`), &wr)
	require.Equal(t, 2, wr.Stored)

	var gr protocol.LGGetResult
	ga := c.ok(protocol.MethodLGGet, map[string]any{"threadId": "t-1"}, nil, &gr)
	require.NotNil(t, gr.Tuple)
	tu := gr.Tuple
	require.Equal(t, "1f0-b", tu.CheckpointID)
	require.Equal(t, "1f0-a", *tu.ParentID)
	require.Equal(t, "CKPT2", seg(ga, tu.Checkpoint))
	require.JSONEq(t, `{"messages":"0001.5","step":2,"e":1}`, string(tu.ChannelVersions))
	require.Len(t, tu.Blobs, 2) // e is empty
	require.Equal(t, "messages", tu.Blobs[0].Channel)
	require.Equal(t, `"0001.5"`, string(tu.Blobs[0].Version))
	require.Equal(t, "big-value", seg(ga, tu.Blobs[0].LGSegment))
	require.Equal(t, "7", seg(ga, tu.Blobs[1].LGSegment))
	require.Equal(t, `2`, string(tu.Blobs[1].Version))
	require.Len(t, tu.Writes, 2)
	require.Equal(t, "__interrupt__", tu.Writes[0].Channel) // idx -3 before 0
	require.Equal(t, "{}", seg(ga, tu.Writes[0].LGSegment))
	require.Equal(t, `"hi"`, seg(ga, tu.Writes[1].LGSegment))

	// a missing checkpoint is a null tuple, not an error
	r := c.call(protocol.MethodLGGet, map[string]any{"threadId": "t-1", "checkpointId": "nope"}, nil)
	require.Nil(t, r.Error)
	require.JSONEq(t, `{"tuple":null}`, string(r.Result))

	// list: the shared messages blob is sent once
	var lr protocol.LGListResult
	la := c.ok(protocol.MethodLGList, map[string]any{"threadId": "t-1", "namespace": ""}, nil, &lr)
	require.Len(t, lr.Tuples, 2)
	require.Equal(t, lr.Tuples[0].Blobs[0].Offset, lr.Tuples[1].Blobs[0].Offset)
	require.Equal(t, strings.Count(string(la), "big-value"), 1)
	c.ok(protocol.MethodLGList, map[string]any{"metadata": map[string]any{"source": "input"}}, nil, &lr)
	require.Len(t, lr.Tuples, 1)
	c.ok(protocol.MethodLGList, map[string]any{"before": "1f0-b", "limit": 5}, nil, &lr)
	require.Len(t, lr.Tuples, 1)
	require.Equal(t, "1f0-a", lr.Tuples[0].CheckpointID)

	// retention (--keep-last 2) never touches LangGraph checkpoints
	for i := 0; i < 3; i++ {
		c.ok(protocol.MethodLGPut, map[string]any{"threadId": "t-1", "checkpointId": "1f1-" + string(rune('a'+i)),
			"checkpoint": map[string]any{"type": "json", "offset": 0, "length": 2}, "channelVersions": map[string]any{}}, []byte("{}"), nil)
	}
	c.ok(protocol.MethodLGList, map[string]any{"threadId": "t-1"}, nil, &lr)
	require.Len(t, lr.Tuples, 5)

	// channel history
	var hr protocol.LGChannelHistoryResult
	ha := c.ok(protocol.MethodLGChannelHistory, map[string]any{"threadId": "t-1", "checkpointId": "1f1-a", "channels": []string{"messages", "x"}}, nil, &hr)
	require.Empty(t, hr.Channels["messages"].Writes) // 1f1-a has no parent
	c.ok(protocol.MethodLGPut, map[string]any{"threadId": "t-1", "checkpointId": "1f2", "parentId": "1f0-b",
		"checkpoint": map[string]any{"type": "json", "offset": 0, "length": 2}, "channelVersions": map[string]any{"messages": "0002.1"},
		"blobs": []map[string]any{{"channel": "messages", "version": "0002.1", "type": "empty", "length": 0}}}, []byte("{}"), nil)
	ha = c.ok(protocol.MethodLGChannelHistory, map[string]any{"threadId": "t-1", "checkpointId": "1f2", "channels": []string{"messages"}}, nil, &hr)
	h := hr.Channels["messages"]
	require.Len(t, h.Writes, 1)
	require.Equal(t, `"hi"`, seg(ha, h.Writes[0].LGSegment))
	require.NotNil(t, h.Seed)
	require.Equal(t, "big-value", seg(ha, h.Seed.LGSegment))
	require.Equal(t, []string{"1f0-b"}, hr.Visited)

	// copy, delete for runs, prune, delete
	var cr protocol.ThreadCopyResult
	c.ok(protocol.MethodThreadCopy, map[string]any{"sourceThreadId": "t-1", "targetThreadId": "t-2"}, nil, &cr)
	require.Equal(t, 6, cr.Copied)
	var dr protocol.DeleteResult
	c.ok(protocol.MethodLGDeleteForRuns, map[string]any{"runIds": []string{"r1"}}, nil, &dr)
	require.Equal(t, 4, dr.Deleted) // 1f0-a, 1f0-b in both threads
	c.ok(protocol.MethodThreadPrune, map[string]any{"threadIds": []string{"t-1"}}, nil, &dr)
	require.Equal(t, 3, dr.Deleted)
	c.ok(protocol.MethodLGList, map[string]any{"threadId": "t-1"}, nil, &lr)
	require.Equal(t, "1f2", lr.Tuples[0].CheckpointID)
	c.ok(protocol.MethodThreadDelete, map[string]any{"threadId": "t-2"}, nil, &dr)
	require.Equal(t, 4, dr.Deleted)
	c.ok(protocol.MethodLGList, map[string]any{"threadId": "t-2"}, nil, &lr)
	require.Empty(t, lr.Tuples)
}

func TestLGProtocolErrors(t *testing.T) {
	c := newLGConn(t)
	good := func() map[string]any {
		return map[string]any{"threadId": "t", "checkpointId": "c", "checkpoint": map[string]any{"type": "json", "offset": 0, "length": 2},
			"channelVersions": map[string]any{}}
	}
	with := func(k string, v any) map[string]any {
		p := good()
		if v == nil {
			delete(p, k)
		} else {
			p[k] = v
		}
		return p
	}
	att := []byte("{}")
	c.fail(protocol.MethodLGPut, with("threadId", nil), att, protocol.CodeInvalidParams, "threadId")
	c.fail(protocol.MethodLGPut, with("checkpointId", nil), att, protocol.CodeInvalidParams, "checkpointId")
	c.fail(protocol.MethodLGPut, with("checkpoint", nil), att, protocol.CodeInvalidParams, "checkpoint")
	c.fail(protocol.MethodLGPut, with("checkpoint", map[string]any{"offset": 0, "length": 2}), att, protocol.CodeInvalidParams, "checkpoint.type")
	c.fail(protocol.MethodLGPut, with("checkpoint", map[string]any{"type": "json", "offset": 1, "length": 2}), att, protocol.CodeInvalidParams, "checkpoint.length")
	c.fail(protocol.MethodLGPut, with("checkpoint", map[string]any{"type": "json", "offset": -1, "length": 1}), att, protocol.CodeInvalidParams, "checkpoint.offset")
	c.fail(protocol.MethodLGPut, good(), nil, protocol.CodeInvalidParams, "checkpoint.length")
	c.fail(protocol.MethodLGPut, with("channelVersions", nil), att, protocol.CodeInvalidParams, "channelVersions")
	c.fail(protocol.MethodLGPut, with("channelVersions", map[string]any{"a": true}), att, protocol.CodeInvalidParams, "channelVersions")
	c.fail(protocol.MethodLGPut, with("metadata", []int{1}), att, protocol.CodeInvalidParams, "metadata")
	c.fail(protocol.MethodLGPut, with("blobs", []map[string]any{{"channel": "a", "version": []int{1}, "type": "json", "length": 0}}), att, protocol.CodeInvalidParams, "blobs[0].version")
	c.fail(protocol.MethodLGPut, with("blobs", []map[string]any{{"channel": "a", "version": 1, "type": "json", "offset": 1, "length": 5}}), att, protocol.CodeInvalidParams, "blobs[0].length")
	c.fail(protocol.MethodLGPut, with("blobs", []map[string]any{{"channel": "a", "version": 1, "type": "empty", "offset": 0, "length": 1}}), att, protocol.CodeInvalidParams, "blobs[0].length")
	c.fail(protocol.MethodLGPutWrites, map[string]any{"threadId": "t", "checkpointId": "c", "taskId": "k"}, nil, protocol.CodeInvalidParams, "writes")
	c.fail(protocol.MethodLGPutWrites, map[string]any{"threadId": "t", "checkpointId": "c", "writes": []any{}}, nil, protocol.CodeInvalidParams, "taskId")
	c.fail(protocol.MethodLGList, map[string]any{"limit": 0}, nil, protocol.CodeInvalidParams, "limit")
	c.fail(protocol.MethodLGList, map[string]any{"cursor": "%%%"}, nil, protocol.CodeInvalidParams, "cursor")
	c.fail(protocol.MethodLGChannelHistory, map[string]any{"threadId": "t"}, nil, protocol.CodeInvalidParams, "channels")
	c.fail(protocol.MethodThreadCopy, map[string]any{"sourceThreadId": "t", "targetThreadId": "t"}, nil, protocol.CodeInvalidParams, "targetThreadId")
	c.fail(protocol.MethodThreadPrune, map[string]any{"threadIds": []string{"t"}, "strategy": "all"}, nil, protocol.CodeInvalidParams, "strategy")
	c.fail(protocol.MethodLGDeleteForRuns, map[string]any{}, nil, protocol.CodeInvalidParams, "runIds")
	// the connection is still fine
	c.ok(protocol.MethodLGPut, good(), att, nil)
	var gr protocol.LGGetResult
	c.ok(protocol.MethodLGGet, map[string]any{"threadId": "t"}, nil, &gr)
	require.Equal(t, "c", gr.Tuple.CheckpointID)
	// a large put: segments of a multi-megabyte attachment
	big := bytes.Repeat([]byte("abcdefgh"), 1<<19)
	p := good()
	p["checkpointId"] = "d"
	p["channelVersions"] = map[string]any{"big": 1}
	p["blobs"] = []map[string]any{{"channel": "big", "version": 1, "type": "bytes", "offset": 2, "length": len(big)}}
	c.ok(protocol.MethodLGPut, p, append([]byte("{}"), big...), nil)
	a := c.ok(protocol.MethodLGGet, map[string]any{"threadId": "t"}, nil, &gr)
	require.Equal(t, big, []byte(seg(a, gr.Tuple.Blobs[0].LGSegment)))
}

// TestLGFidelityProtocol: staged values (lg/putValue, valueId), the empty thread id, metadata
// rules, lg/configure and a put's retention, over the wire.
func TestLGFidelityProtocol(t *testing.T) {
	c := newLGConn(t)
	var caps protocol.InitializeResult
	c.ok(protocol.MethodInitialize, map[string]any{"clientName": "t"}, nil, &caps)
	require.True(t, caps.Capabilities.LangGraph.PutValue)
	require.Equal(t, store.MaxLGThreadIDBytes, caps.Capabilities.LangGraph.MaxThreadIDBytes)

	// two values staged one frame each, then a put naming them and a write naming a third
	v1 := bytes.Repeat([]byte("1"), 1<<20)
	v2 := bytes.Repeat([]byte("2"), 1<<20)
	var pv protocol.LGPutValueResult
	c.ok(protocol.MethodLGPutValue, map[string]any{"threadId": "", "type": "bytes", "offset": 0, "length": len(v1)}, v1, &pv)
	id1 := pv.ValueID
	c.ok(protocol.MethodLGPutValue, map[string]any{"threadId": "", "type": "bytes", "offset": 0, "length": len(v2)}, v2, &pv)
	id2 := pv.ValueID
	var put protocol.LGPutResult
	c.ok(protocol.MethodLGPut, map[string]any{"threadId": "", "checkpointId": "c1", "checkpoint": map[string]any{"type": "json", "offset": 0, "length": 2},
		"channelVersions": map[string]any{"a": 1, "b": 1}, "metadata": map[string]any{"flag": true},
		"blobs": []any{map[string]any{"channel": "a", "version": 1, "valueId": id1}, map[string]any{"channel": "b", "version": 1, "valueId": id2}}},
		[]byte("{}"), &put)
	require.Equal(t, 2, put.BlobsStored)
	require.Equal(t, "", put.ThreadID)
	c.ok(protocol.MethodLGPutValue, map[string]any{"threadId": "", "type": "json", "offset": 0, "length": 3}, []byte(`"w"`), &pv)
	c.ok(protocol.MethodLGPutWrites, map[string]any{"threadId": "", "checkpointId": "c1", "taskId": "k",
		"writes": []any{map[string]any{"channel": "a", "valueId": pv.ValueID}}}, nil, nil)
	var gr protocol.LGGetResult
	att := c.ok(protocol.MethodLGGet, map[string]any{"threadId": ""}, nil, &gr)
	require.Equal(t, "c1", gr.Tuple.CheckpointID)
	require.Equal(t, string(v1), seg(att, gr.Tuple.Blobs[0].LGSegment))
	require.Equal(t, string(v2), seg(att, gr.Tuple.Blobs[1].LGSegment))
	require.Equal(t, `"w"`, seg(att, gr.Tuple.Writes[0].LGSegment))
	// a value is taken once
	c.fail(protocol.MethodLGPut, map[string]any{"threadId": "", "checkpointId": "c2", "checkpoint": map[string]any{"valueId": id1},
		"channelVersions": map[string]any{}}, nil, protocol.CodeInvalidParams, "checkpoint.valueId")
	c.fail(protocol.MethodLGPut, map[string]any{"threadId": "", "checkpointId": "c2", "checkpoint": map[string]any{"valueId": 1, "type": "json"},
		"channelVersions": map[string]any{}}, nil, protocol.CodeInvalidParams, "checkpoint.valueId")
	c.fail(protocol.MethodLGPutValue, map[string]any{"threadId": "t", "type": "json", "offset": 0, "length": 9}, []byte("1"), protocol.CodeInvalidParams, "length")
	c.fail(protocol.MethodLGPutValue, map[string]any{"type": "json", "offset": 0, "length": 1}, []byte("1"), protocol.CodeInvalidParams, "threadId")
	c.fail(protocol.MethodLGGet, map[string]any{"threadId": strings.Repeat("x", store.MaxLGThreadIDBytes+1)}, nil, protocol.CodeInvalidParams, "threadId")
	c.fail(protocol.MethodLGGet, map[string]any{}, nil, protocol.CodeInvalidParams, "threadId")

	// lg/list: threadId "" is the thread "", absent is every thread; metadataMatch
	c.ok(protocol.MethodLGPut, map[string]any{"threadId": "other", "checkpointId": "c1", "checkpoint": map[string]any{"type": "json", "offset": 0, "length": 2},
		"channelVersions": map[string]any{}, "metadata": map[string]any{"flag": 1}}, []byte("{}"), nil)
	count := func(params map[string]any) int {
		var lr protocol.LGListResult
		c.ok(protocol.MethodLGList, params, nil, &lr)
		return len(lr.Tuples)
	}
	require.Equal(t, 1, count(map[string]any{"threadId": ""}))
	require.Equal(t, 2, count(map[string]any{}))
	require.Equal(t, 1, count(map[string]any{"metadata": map[string]any{"flag": 1}}))
	require.Equal(t, 2, count(map[string]any{"metadata": map[string]any{"flag": 1}, "metadataMatch": "python"}))
	require.Equal(t, 2, count(map[string]any{"metadata": map[string]any{"nope": nil}, "metadataMatch": "python"}))
	require.Equal(t, 1, count(map[string]any{"metadata": map[string]any{"flag": true}, "metadataMatch": "javascript"}))
	c.fail(protocol.MethodLGList, map[string]any{"metadata": map[string]any{"a": 1}, "metadataMatch": "lua"}, nil, protocol.CodeInvalidParams, "metadataMatch")

	// lg/configure and a put's retention
	var cr protocol.LGConfigureResult
	c.ok(protocol.MethodLGConfigure, map[string]any{}, nil, &cr)
	require.Equal(t, "daemon", cr.Source)
	c.ok(protocol.MethodLGConfigure, map[string]any{"retention": map[string]any{"keepLast": 1}}, nil, &cr)
	require.Equal(t, protocol.LGConfigureResult{Retention: protocol.EffectiveRetention{KeepLast: 1}, Source: "database"}, cr)
	c.fail(protocol.MethodLGConfigure, map[string]any{"threadId": "t", "retention": map[string]any{"keepLast": -1}}, nil, protocol.CodeInvalidParams, "retention.keepLast")
	c.fail(protocol.MethodLGConfigure, map[string]any{"threadId": "t", "retention": map[string]any{}, "inherit": true}, nil, protocol.CodeInvalidParams, "inherit")
	c.ok(protocol.MethodLGPut, map[string]any{"threadId": "other", "checkpointId": "c2", "parentId": "c1",
		"checkpoint": map[string]any{"type": "json", "offset": 0, "length": 2}, "channelVersions": map[string]any{},
		"retention": map[string]any{"keepLast": 5, "idleTtlSeconds": 60}}, []byte("{}"), nil)
	require.Equal(t, 2, count(map[string]any{"threadId": "other"}))
	c.ok(protocol.MethodLGConfigure, map[string]any{"threadId": "other"}, nil, &cr)
	require.Equal(t, protocol.EffectiveRetention{KeepLast: 5, IdleTTLSeconds: 60}, cr.Retention)
	require.Equal(t, "thread", cr.Source)
	c.ok(protocol.MethodLGPut, map[string]any{"threadId": "", "checkpointId": "c3",
		"checkpoint": map[string]any{"type": "json", "offset": 0, "length": 2}, "channelVersions": map[string]any{}}, []byte("{}"), nil)
	require.Equal(t, 1, count(map[string]any{"threadId": ""}), "the database's keepLast 1")
}
