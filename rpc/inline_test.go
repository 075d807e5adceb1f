package rpc

import (
	"encoding/json"
	"testing"

	"github.com/ckptd/ckptd/protocol"
)

// TestInlineRead: the reads readLoop may run on the reading goroutine are those bounded in the
// rows they read: loads, and listings of a bounded page without a metadata filter; never stats
// (it waits for the writer's connection), initialize (it may wait for PostgreSQL) nor a mutation.
func TestInlineRead(t *testing.T) {
	for _, tc := range []struct {
		method, params string
		want           bool
	}{
		{protocol.MethodInitialize, `{"events":["checkpoint/saved"]}`, false},
		{protocol.MethodLoad, `{"workflowId":"w"}`, true},
		{protocol.MethodLGGet, `{"threadId":"t","namespace":""}`, true},
		{protocol.MethodStats, `{}`, false},
		{protocol.MethodSave, `{"workflowId":"w","state":{}}`, false},
		{protocol.MethodLGPut, `{}`, false},
		{protocol.MethodWorkflowList, `{}`, true},
		{protocol.MethodWorkflowList, `{"limit":1000}`, true},
		{protocol.MethodWorkflowList, `{"limit":10000}`, false},
		{protocol.MethodWorkflowList, `{"resumableOnly":true,"cursor":"x"}`, true},
		{protocol.MethodList, `{"workflowId":"w"}`, true},
		{protocol.MethodList, `{"workflowId":"w","limit":10}`, true},
		{protocol.MethodList, `{"workflowId":"w","limit":5000}`, false},
		{protocol.MethodList, `{"metadata":{"k":1},"limit":10}`, false},
		{protocol.MethodList, `{"metadata":{},"limit":10}`, true},
		{protocol.MethodList, `{"metadata":null}`, true},
		{protocol.MethodLGList, `{"threadId":"t"}`, false}, // no limit: everything
		{protocol.MethodLGList, `{"threadId":"t","namespace":"","limit":10}`, true},
		{protocol.MethodLGList, `{"threadId":"t","limit":100000}`, false},
		{protocol.MethodLGList, `{"metadata":{"source":"loop"},"limit":10}`, false},
		{protocol.MethodLGList, `{"metadataMatch":"python","limit":10}`, true},
		{protocol.MethodList, `{"limit":"x"}`, true}, // the handler answers the error at once
		{protocol.MethodList, ``, true},
	} {
		req := &Request{Method: tc.method, In: Incoming{Params: json.RawMessage(tc.params)}}
		if got := inlineRead(req); got != tc.want {
			t.Errorf("%s %s: inline %v, want %v", tc.method, tc.params, got, tc.want)
		}
	}
}
