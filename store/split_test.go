package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitKept(t *testing.T) {
	n := func(k int64) *LGNode { return &LGNode{Key: k} }
	a, b, c := n(1), n(2), n(3)
	for _, tc := range []struct {
		name       string
		nodes      []*LGNode
		keep       map[int64]bool
		kept, drop []*LGNode
	}{
		{"none", nil, nil, nil, nil},
		{"keep all", []*LGNode{a, b}, map[int64]bool{1: true, 2: true}, []*LGNode{a, b}, nil},
		{"drop all", []*LGNode{a, b}, map[int64]bool{}, nil, []*LGNode{a, b}},
		{"order kept", []*LGNode{c, a, b}, map[int64]bool{3: true, 2: true}, []*LGNode{c, b}, []*LGNode{a}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, drop := SplitKept(tc.nodes, tc.keep)
			require.Equal(t, tc.kept, kept)
			require.Equal(t, tc.drop, drop)
		})
	}
}

func TestCheckCompensation(t *testing.T) {
	ok := CompensationRequest{WorkflowID: "w", Action: []byte(`{"undo":1}`)}
	for _, tc := range []struct {
		name  string
		mut   func(*CompensationRequest)
		field string // "" : valid; "too large": a TooLargeError
	}{
		{"valid", func(*CompensationRequest) {}, ""},
		{"no workflow", func(r *CompensationRequest) { r.WorkflowID = "" }, "workflowId"},
		{"long workflow", func(r *CompensationRequest) { r.WorkflowID = strings.Repeat("w", MaxWorkflowIDBytes+1) }, "workflowId"},
		{"no action", func(r *CompensationRequest) { r.Action = nil }, "action"},
		{"null action", func(r *CompensationRequest) { r.Action = []byte("null") }, "action"},
		{"bad JSON", func(r *CompensationRequest) { r.Action = []byte("{") }, "action"},
		{"action at the limit", func(r *CompensationRequest) {
			r.Action = []byte(`"` + strings.Repeat("a", MaxCompensationActionBytes-2) + `"`)
		}, ""},
		{"action over the limit", func(r *CompensationRequest) {
			r.Action = []byte(`"` + strings.Repeat("a", MaxCompensationActionBytes-1) + `"`)
		}, "too large"},
		{"long description", func(r *CompensationRequest) { r.Description = strings.Repeat("d", MaxCompensationTextBytes+1) }, "description"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.mut(&r)
			err := CheckCompensation(r)
			switch tc.field {
			case "":
				require.NoError(t, err)
			case "too large":
				var tl *TooLargeError
				require.True(t, errors.As(err, &tl), "%v", err)
			default:
				var ie *InvalidError
				require.True(t, errors.As(err, &ie), "%v", err)
				require.Equal(t, tc.field, ie.Field)
			}
		})
	}
}
