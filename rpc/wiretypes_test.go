package rpc

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/protocol"
)

// TestDecodeParamsNamesWireTypes: a JSON value of the wrong kind for a field whose type is a
// wire struct (package protocol) is reported as "expected object", never as a Go type name.
func TestDecodeParamsNamesWireTypes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params string
		into   any
		field  string
		reason string
	}{
		{"step error", `{"error": "boom"}`, &protocol.SaveParams{}, "error", "expected object, got JSON string"},
		{"retention", `{"workflowId": "w", "retention": 3}`, &protocol.ConfigureParams{}, "retention", "expected object, got JSON number"},
		{"lg segment", `{"checkpoint": [1]}`, &protocol.LGPutParams{}, "checkpoint", "expected object, got JSON array"},
		{"writes", `{"writes": {}}`, &protocol.WritesPutParams{}, "writes", "expected array, got JSON object"},
		{"integer", `{"step": "1"}`, &protocol.SaveParams{}, "step", "expected integer, got JSON string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			perr := decodeParams(json.RawMessage(tc.params), tc.into)
			require.NotNil(t, perr)
			assert.Equal(t, int64(protocol.CodeInvalidParams), perr.Code)
			var data struct{ Field, Reason string }
			require.NoError(t, json.Unmarshal(*perr.Data, &data))
			assert.Equal(t, tc.field, data.Field)
			assert.Equal(t, tc.reason, data.Reason)
		})
	}
}
