package rpc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk/delta"
)

func saveFrame(id int, params map[string]any, att []byte) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "checkpoint/save", "params": params})
	return framing.AppendFrame(nil, b, att, att != nil)
}

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// checkpoint/save's stateDelta: the state rebuilt from the base's bytes is stored like a state
// sent whole (same sha256, same idempotency), and each check answers its code naming its field,
// in the order docs/protocol.md gives.
func TestSaveStateDelta(t *testing.T) {
	c := newSrvConn(t, Options{MaxStateBytes: 256 << 10}, nil)
	w := testgen.NewWorkload(3, 64<<10)
	base := w.State()
	c.sendAsync(saveFrame(1, map[string]any{"workflowId": "wf", "stateAttachment": true}, base))
	r := c.next()
	require.Nil(t, r.Error)
	var first protocol.SaveResult
	require.NoError(t, json.Unmarshal(r.Result, &first))

	w.Advance()
	next := w.State()
	kp, ks, middle := delta.Compute(base, next)
	d := func(mut func(m map[string]any)) map[string]any {
		m := map[string]any{"baseCheckpointId": first.CheckpointID, "keepPrefix": kp, "keepSuffix": ks, "sha256": hexSum(next)}
		if mut != nil {
			mut(m)
		}
		return m
	}
	c.sendAsync(saveFrame(2, map[string]any{"workflowId": "wf", "checkpointId": "c-2", "stateAttachment": true, "stateDelta": d(nil)}, middle))
	r = c.next()
	require.Nil(t, r.Error, "%+v", r.Error)
	var res protocol.SaveResult
	require.NoError(t, json.Unmarshal(r.Result, &res))
	require.Equal(t, hexSum(next), res.SHA256)
	require.Equal(t, int64(len(next)), res.SizeBytes)
	cp, err := c.st.Load(t.Context(), "c-2")
	require.NoError(t, err)
	require.Equal(t, next, cp.State)
	// a resend, whole, is the same save (idempotent)
	c.sendAsync(saveFrame(3, map[string]any{"workflowId": "wf", "checkpointId": "c-2", "stateAttachment": true}, next))
	r = c.next()
	require.Nil(t, r.Error, "%+v", r.Error)
	var again protocol.SaveResult
	require.NoError(t, json.Unmarshal(r.Result, &again))
	require.Equal(t, res.Seq, again.Seq)

	for i, tc := range []struct {
		name   string
		params map[string]any
		att    []byte
		code   int
		field  string
	}{
		{"no attachment", map[string]any{"workflowId": "wf", "stateDelta": d(nil)}, nil, -32602, "stateDelta"},
		{"missing base", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(func(m map[string]any) { m["baseCheckpointId"] = "gone" })}, middle, -32001, ""},
		{"base required", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(func(m map[string]any) { delete(m, "baseCheckpointId") })}, middle, -32602, "stateDelta.baseCheckpointId"},
		{"keepPrefix negative", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(func(m map[string]any) { m["keepPrefix"] = -1 })}, middle, -32602, "stateDelta.keepPrefix"},
		{"keepPrefix beyond the base", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(func(m map[string]any) { m["keepPrefix"] = len(base) + 1 })}, middle, -32602, "stateDelta.keepPrefix"},
		{"overlap", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(func(m map[string]any) { m["keepSuffix"] = len(base) - kp + 1 })}, middle, -32602, "stateDelta.keepSuffix"},
		{"sha256 malformed", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(func(m map[string]any) { m["sha256"] = "abc" })}, middle, -32602, "stateDelta.sha256"},
		{"too large", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(nil)}, make([]byte, 200<<10), -32004, ""},
		{"sha256 mismatch", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(func(m map[string]any) { m["sha256"] = hexSum(base) })}, middle, -32602, "stateDelta.sha256"},
		{"sha256 mismatch, bytes", map[string]any{"workflowId": "wf", "stateAttachment": true, "stateType": "bytes",
			"stateDelta": d(func(m map[string]any) { m["sha256"] = hexSum(base) })}, middle, -32602, "stateDelta.sha256"},
		{"rebuilt state is not JSON", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(func(m map[string]any) {
				broken := append(append(append([]byte{}, base[:kp]...), "{{{"...), base[len(base)-ks:]...)
				m["sha256"] = hexSum(broken)
			})}, []byte("{{{"), -32602, "stateType"},
		{"unknown member", map[string]any{"workflowId": "wf", "stateAttachment": true,
			"stateDelta": d(func(m map[string]any) { m["keepPrefx"] = 1 })}, middle, -32602, "stateDelta.keepPrefx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.sendAsync(saveFrame(10+i, tc.params, tc.att))
			r := c.next()
			require.NotNil(t, r.Error, "accepted")
			require.Equal(t, tc.code, r.Error.Code, "%s", r.Error.Message)
			if tc.field != "" {
				var data struct{ Field string }
				require.NoError(t, json.Unmarshal(r.Error.Data, &data))
				require.Equal(t, tc.field, data.Field, r.Error.Message)
			}
			if tc.code == -32001 {
				require.Contains(t, string(r.Error.Data), "gone")
			}
		})
	}
	n, err := c.st.List(t.Context(), store.ListFilter{WorkflowID: "wf"})
	require.NoError(t, err)
	require.Len(t, n, 2, "no refused delta stored anything")
}

// A delta of a small state (checked before the save is queued, not concurrently with it) is
// refused the same way, JSON or bytes.
func TestSaveStateDeltaSmall(t *testing.T) {
	c := newSrvConn(t, Options{}, nil)
	base := []byte(`{"messages":["` + strings.Repeat("a", 2000) + `"],"step":1}`)
	c.sendAsync(saveFrame(1, map[string]any{"workflowId": "wf", "stateAttachment": true}, base))
	r := c.next()
	require.Nil(t, r.Error)
	var first protocol.SaveResult
	require.NoError(t, json.Unmarshal(r.Result, &first))
	next := []byte(`{"messages":["` + strings.Repeat("a", 2000) + `","b"],"step":2}`)
	kp, ks, middle := delta.Compute(base, next)
	for i, typ := range []string{"json", "bytes"} {
		for _, sum := range []string{hexSum(base), hexSum(next)} {
			c.sendAsync(saveFrame(10+i, map[string]any{"workflowId": "wf", "stateAttachment": true, "stateType": typ,
				"stateDelta": map[string]any{"baseCheckpointId": first.CheckpointID, "keepPrefix": kp, "keepSuffix": ks, "sha256": sum}}, middle))
			r := c.next()
			if sum == hexSum(next) {
				require.Nil(t, r.Error, "%+v", r.Error)
				continue
			}
			require.NotNil(t, r.Error, "accepted")
			require.Equal(t, -32602, r.Error.Code, "%s", r.Error.Message)
			var data struct{ Field string }
			require.NoError(t, json.Unmarshal(r.Error.Data, &data))
			require.Equal(t, "stateDelta.sha256", data.Field, r.Error.Message)
		}
	}
	n, err := c.st.List(t.Context(), store.ListFilter{WorkflowID: "wf"})
	require.NoError(t, err)
	require.Len(t, n, 3, "the refused deltas stored nothing")
}

// stats reports the database's footprint, and a workflow's when asked; an unknown one is -32001.
func TestStatsFootprint(t *testing.T) {
	c := newSrvConn(t, Options{}, nil)
	w := testgen.NewWorkload(5, 64<<10)
	for i := 0; i < 5; i++ {
		c.sendAsync(saveFrame(i+1, map[string]any{"workflowId": "wf", "stateAttachment": true}, w.State()))
		require.Nil(t, c.next().Error)
		w.Advance()
	}
	c.sendAsync(reqFrame(10, "stats", map[string]any{"workflowId": "wf"}))
	r := c.next()
	require.Nil(t, r.Error, "%+v", r.Error)
	var res protocol.StatsResult
	require.NoError(t, json.Unmarshal(r.Result, &res))
	require.NotNil(t, res.DB.Storage)
	require.NotNil(t, res.Workflow)
	require.Equal(t, "wf", res.Workflow.WorkflowID)
	require.Equal(t, res.DB.Storage.LogicalBytes, res.Workflow.LogicalBytes)
	require.Equal(t, res.DB.Storage.StoredBytes, res.Workflow.StoredBytes)
	require.Greater(t, res.Workflow.Ratio, 2.0) // more once the compactor cut the first (new content) state
	require.Positive(t, res.DB.Storage.Chunks)
	require.Nil(t, res.Thread)
	require.Equal(t, protocol.BlobCacheStats{MaxBytes: store.DefaultChunkCacheBytes}, res.DB.ChunkCache, "no load yet")

	// loads of chunked states: the first decodes and checks each chunk, the next copies those
	// the previous load checked (the states share most of their chunks)
	ids, err := c.st.List(t.Context(), store.ListFilter{WorkflowID: "wf"})
	require.NoError(t, err)
	require.Len(t, ids, 5)
	for i, sm := range ids[1:] {
		c.sendAsync(reqFrame(40+i, "checkpoint/load", map[string]any{"checkpointId": sm.CheckpointID}))
		r := c.next()
		require.Nil(t, r.Error, "%+v", r.Error)
	}
	c.sendAsync(reqFrame(11, "stats", map[string]any{}))
	r = c.next()
	require.Nil(t, r.Error, "%+v", r.Error)
	res = protocol.StatsResult{}
	require.NoError(t, json.Unmarshal(r.Result, &res))
	cc := res.DB.ChunkCache
	t.Logf("chunkCache %+v", cc)
	require.Positive(t, cc.Misses, "the first load decoded its chunks")
	require.Positive(t, cc.Hits, "later loads copied the chunks already checked")
	// (entries and bytes go back to 0 when the store has been idle for a second)
	require.LessOrEqual(t, cc.Bytes, cc.MaxBytes)
	require.Equal(t, cc.Entries == 0, cc.Bytes == 0)
	for i, p := range []map[string]any{{"workflowId": "nope"}, {"threadId": "nope"}} {
		c.sendAsync(reqFrame(20+i, "stats", p))
		r := c.next()
		require.NotNil(t, r.Error)
		require.Equal(t, -32001, r.Error.Code)
	}
	c.sendAsync(reqFrame(30, "stats", map[string]any{"workflowID": "wf"}))
	r = c.next()
	require.NotNil(t, r.Error)
	require.Equal(t, -32602, r.Error.Code)
}

// lg/put's blobs[i].delta: a channel value sent as the middle bytes against another version of
// the channel is stored as the value it describes; each check answers its code naming its field.
func TestLGPutValueDelta(t *testing.T) {
	c := newLGConn(t)
	r := testgen.New(21)
	v1 := r.JSON(32 << 10)
	put := func(id, parent, ver string, blob map[string]any, att []byte) map[string]any {
		return map[string]any{"threadId": "t", "checkpointId": id, "parentId": parent,
			"checkpoint":      map[string]any{"type": "json", "offset": 0, "length": 2},
			"channelVersions": map[string]any{"m": ver}, "blobs": []any{blob}}
	}
	whole := func(ver string, v []byte) (map[string]any, []byte) {
		return map[string]any{"channel": "m", "version": ver, "type": "json", "offset": 2, "length": len(v)}, append([]byte("{}"), v...)
	}
	b, att := whole("1", v1)
	c.ok("lg/put", put("c1", "", "1", b, att), att, nil)

	v2 := append(append(append([]byte{}, v1[:len(v1)/2]...), `"inserted",`...), v1[len(v1)/2:]...)
	kp, ks, middle := delta.Compute(v1, v2)
	dblob := func(mut func(d map[string]any)) (map[string]any, []byte) {
		d := map[string]any{"baseVersion": "1", "keepPrefix": kp, "keepSuffix": ks, "sha256": hexSum(v2)}
		if mut != nil {
			mut(d)
		}
		return map[string]any{"channel": "m", "version": "2", "type": "json", "offset": 2, "length": len(middle), "delta": d},
			append([]byte("{}"), middle...)
	}
	b, att = dblob(nil)
	c.ok("lg/put", put("c2", "c1", "2", b, att), att, nil)
	var got protocol.LGGetResult
	ratt := c.ok("lg/get", map[string]any{"threadId": "t", "checkpointId": "c2"}, nil, &got)
	require.NotNil(t, got.Tuple)
	require.Len(t, got.Tuple.Blobs, 1)
	require.Equal(t, string(v2), seg(ratt, got.Tuple.Blobs[0].LGSegment))

	for _, tc := range []struct {
		name  string
		mut   func(d map[string]any)
		code  int
		field string
	}{
		{"missing base", func(d map[string]any) { d["baseVersion"] = "9" }, -32001, "blobs[0].delta.baseVersion"},
		{"base required", func(d map[string]any) { delete(d, "baseVersion") }, -32602, "blobs[0].delta.baseVersion"},
		{"keepPrefix required", func(d map[string]any) { delete(d, "keepPrefix") }, -32602, "blobs[0].delta.keepPrefix"},
		{"keepSuffix negative", func(d map[string]any) { d["keepSuffix"] = -1 }, -32602, "blobs[0].delta.keepSuffix"},
		{"keepPrefix beyond the base", func(d map[string]any) { d["keepPrefix"] = len(v1) + 1 }, -32602, "blobs[0].delta.keepPrefix"},
		{"overlap", func(d map[string]any) { d["keepSuffix"] = len(v1) - kp + 1 }, -32602, "blobs[0].delta.keepSuffix"},
		{"sha256 malformed", func(d map[string]any) { d["sha256"] = "xyz" }, -32602, "blobs[0].delta.sha256"},
		{"sha256 mismatch", func(d map[string]any) { d["sha256"] = hexSum(v1) }, -32602, "blobs[0].delta.sha256"},
		{"unknown member", func(d map[string]any) { d["basVersion"] = "1" }, -32602, "blobs[0].delta.basVersion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, att := dblob(tc.mut)
			c.fail("lg/put", put("c3", "c2", "3", b, att), att, tc.code, tc.field)
		})
	}
	// a staged value cannot be a delta
	c.fail("lg/put", put("c3", "c2", "3", map[string]any{"channel": "m", "version": "3", "valueId": 1,
		"delta": map[string]any{"baseVersion": "1", "keepPrefix": 0, "keepSuffix": 0, "sha256": hexSum(v1)}}, []byte("{}")),
		[]byte("{}"), -32602, "blobs[0].delta")
	require.Nil(t, c.call("lg/get", map[string]any{"threadId": "t", "checkpointId": "c3"}, nil).Error)
	var none protocol.LGGetResult
	c.ok("lg/get", map[string]any{"threadId": "t", "checkpointId": "c3"}, nil, &none)
	require.Nil(t, none.Tuple, "no refused put stored anything")
}

// blobs[i].delta.copies: a msgpack-like value whose header changed and which grew at its end is
// a delta of a few bytes (the header, the new item) with the base's body copied in.
func TestLGPutValueDeltaCopies(t *testing.T) {
	c := newLGConn(t)
	r := testgen.New(22)
	body := r.JSON(24 << 10)
	v1 := append([]byte{0xdc, 0x00, 0x10}, body...)
	v2 := append(append([]byte{0xdc, 0x00, 0x11}, body...), "new item"...)
	put := func(id, parent, ver string, blob map[string]any, att []byte) map[string]any {
		return map[string]any{"threadId": "t", "checkpointId": id, "parentId": parent,
			"checkpoint":      map[string]any{"type": "json", "offset": 0, "length": 2},
			"channelVersions": map[string]any{"m": ver}, "blobs": []any{blob}}
	}
	c.ok("lg/put", put("c1", "", "1", map[string]any{"channel": "m", "version": "1", "type": "msgpack", "offset": 2, "length": len(v1)},
		append([]byte("{}"), v1...)), append([]byte("{}"), v1...), nil)
	mid := append([]byte{0x11}, "new item"...)
	blob := func(copies any) map[string]any {
		return map[string]any{"channel": "m", "version": "2", "type": "msgpack", "offset": 2, "length": len(mid),
			"delta": map[string]any{"baseVersion": "1", "keepPrefix": 2, "keepSuffix": 0, "sha256": hexSum(v2), "copies": copies}}
	}
	att := append([]byte("{}"), mid...)
	c.fail("lg/put", put("c2", "c1", "2", blob([]any{[]any{1, 3}}), att), att, -32602, "blobs[0].delta.copies[0]")
	c.fail("lg/put", put("c2", "c1", "2", blob([]any{[]any{1, 3, len(v1)}}), att), att, -32602, "blobs[0].delta.copies[0]")
	c.fail("lg/put", put("c2", "c1", "2", blob([]any{[]any{len(mid) + 1, 3, 1}}), att), att, -32602, "blobs[0].delta.copies[0]")
	c.ok("lg/put", put("c2", "c1", "2", blob([]any{[]any{1, 3, len(body)}}), att), att, nil)
	var got protocol.LGGetResult
	ratt := c.ok("lg/get", map[string]any{"threadId": "t", "checkpointId": "c2"}, nil, &got)
	require.Equal(t, string(v2), seg(ratt, got.Tuple.Blobs[0].LGSegment))
}
