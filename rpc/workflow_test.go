package rpc

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/protocol"
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
