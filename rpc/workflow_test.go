package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// TestWorkflowListPages (#22): workflow/list answers pages of limit workflows with a cursor
// while more follow, in either order, and refuses a bad limit, cursor or order naming it.
func TestWorkflowListPages(t *testing.T) {
	c := newLGConn(t)
	for i := 0; i < 7; i++ {
		c.ok(protocol.MethodSave, map[string]any{"workflowId": fmt.Sprintf("wf-%d", i)}, nil, nil)
	}
	for _, order := range []string{"", "updated", "id"} {
		var got []string
		params := map[string]any{"limit": 3}
		if order != "" {
			params["order"] = order
		}
		pages := 0
		for {
			var res protocol.WorkflowListResult
			c.ok(protocol.MethodWorkflowList, params, nil, &res)
			pages++
			for _, w := range res.Workflows {
				got = append(got, w.WorkflowID)
				require.Equal(t, 1, w.Count)
				require.NotNil(t, w.Latest)
			}
			if res.Cursor == "" {
				break
			}
			params["cursor"] = res.Cursor
		}
		require.Equal(t, 3, pages, order)
		want := []string{"wf-6", "wf-5", "wf-4", "wf-3", "wf-2", "wf-1", "wf-0"}
		if order == "id" {
			want = []string{"wf-0", "wf-1", "wf-2", "wf-3", "wf-4", "wf-5", "wf-6"}
		}
		require.Equal(t, want, got, order)
	}
	var res protocol.WorkflowListResult
	raw := c.ok(protocol.MethodWorkflowList, map[string]any{}, nil, &res)
	require.Len(t, res.Workflows, 7)
	require.NotContains(t, string(raw), `"cursor"`, "no cursor when nothing follows")

	var first protocol.WorkflowListResult
	c.ok(protocol.MethodWorkflowList, map[string]any{"limit": 1}, nil, &first)
	for _, tc := range []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"limit": 0}, "limit"},
		{map[string]any{"limit": 10001}, "limit"},
		{map[string]any{"order": "name"}, "order"},
		{map[string]any{"order": "stored"}, "order"},
		{map[string]any{"claimable": true, "order": "updated"}, "order"},
		{map[string]any{"cursor": "not-a-cursor"}, "cursor"},
		{map[string]any{"cursor": first.Cursor, "order": "id"}, "cursor"},
	} {
		c.fail(protocol.MethodWorkflowList, tc.params, nil, protocol.CodeInvalidParams, tc.field)
	}
}

// TestPruneLetsLaterSavesThrough (#22): a checkpoint/prune runs in bites, and a save sent after
// it (pipelined on the same connection) commits between two of its bites instead of waiting for
// the whole prune: the prune is held after its first bite until the save's reply has come.
func TestPruneLetsLaterSavesThrough(t *testing.T) {
	saved := make(chan struct{})
	held := make(chan struct{}, 1)
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "p.db"), BiteBudget: time.Nanosecond,
		AfterBite: func(n int) {
			if n == 1 {
				held <- struct{}{}
				select {
				case <-saved:
				case <-time.After(20 * time.Second):
				}
			}
		}})
	require.NoError(t, err)
	defer st.Close()
	for i := 0; i < 3*store.BiteUnits; i++ {
		_, err := st.Save(context.Background(), store.SaveRequest{WorkflowID: fmt.Sprintf("old-%d", i%3)})
		require.NoError(t, err)
	}
	srv := New(st, Options{Version: "test", Durability: "full"})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(context.Background(), inR, outW)
		_ = outW.Close()
	}()
	defer func() { _ = inW.Close(); <-done }()
	fr := framing.NewReader(outR, framing.Limits{})
	send := func(id int, method, params string) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
		_, err := inW.Write(framing.AppendFrame(nil, []byte(body), nil, false))
		require.NoError(t, err)
	}
	go func() { // the prune first, the save right after it, pipelined
		send(1, protocol.MethodPrune, `{"keepLast":1}`)
		<-held
		send(2, protocol.MethodSave, `{"workflowId":"live"}`)
	}()
	var order []string
	for len(order) < 2 {
		f, err := fr.Next()
		require.NoError(t, err)
		var r struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		require.NoError(t, json.Unmarshal(f.Body, &r))
		require.Nil(t, r.Error, string(f.Body))
		if r.ID == 2 {
			order = append(order, "save")
			close(saved)
		} else {
			order = append(order, "prune")
			var pr protocol.PruneResult
			require.NoError(t, json.Unmarshal(r.Result, &pr))
			require.Equal(t, 3*store.BiteUnits-3, pr.Deleted)
		}
	}
	require.Equal(t, []string{"save", "prune"}, order, "the save committed while the prune was between two bites")
}
