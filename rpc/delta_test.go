package rpc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
