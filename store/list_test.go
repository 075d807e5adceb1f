package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type listFixture struct {
	s   *Store
	all []Summary // in save order
}

// newListFixture saves 60 checkpoints over 3 workflows x 2 namespaces with varied phase/metadata.
func newListFixture(t *testing.T) *listFixture {
	s := openTest(t)
	phases := []Phase{PhaseBeforeStep, PhaseCompleted, PhaseFailed, PhaseInterrupted}
	for i := 0; i < 60; i++ {
		wf := fmt.Sprintf("wf-%d", i%3)
		ns := ""
		if i%5 == 0 {
			ns = "sub"
		}
		meta := fmt.Sprintf(`{"source":%q,"step":%d,"tag":"t%d"}`, []string{"loop", "input"}[i%2], i%4, i%3)
		mustSave(t, s, SaveRequest{WorkflowID: wf, Namespace: ns, Phase: phases[i%4], Step: int64(i),
			Metadata: json.RawMessage(meta), State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	all, err := s.List(context.Background(), ListFilter{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, all, 60)
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return &listFixture{s: s, all: all}
}

func strp(s string) *string { return &s }

func metaMatch(sm Summary, f map[string]json.RawMessage) bool {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(sm.Metadata, &m)
	for k, v := range f {
		got, ok := m[k]
		if !ok {
			return false
		}
		a, _ := canonicalJSON(got)
		b, _ := canonicalJSON(v)
		if a != b {
			return false
		}
	}
	return true
}

// expect computes the answer by brute force from the fixture.
func (fx *listFixture) expect(f ListFilter) []string {
	var beforeIdx = len(fx.all)
	if f.Before != "" {
		for i, sm := range fx.all {
			if sm.CheckpointID == f.Before {
				beforeIdx = i
			}
		}
	}
	var out []string
	for i := len(fx.all) - 1; i >= 0; i-- {
		sm := fx.all[i]
		if i >= beforeIdx ||
			(f.WorkflowID != "" && sm.WorkflowID != f.WorkflowID) ||
			(f.Namespace != nil && sm.Namespace != *f.Namespace) ||
			(f.Phase != "" && sm.Phase != f.Phase) ||
			!metaMatch(sm, f.Metadata) {
			continue
		}
		out = append(out, sm.CheckpointID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

func listFilters(fx *listFixture) map[string]ListFilter {
	mid := fx.all[40].CheckpointID
	fs := map[string]ListFilter{}
	wfs := []string{"", "wf-1"}
	nss := []*string{nil, strp(""), strp("sub")}
	phases := []Phase{"", PhaseFailed}
	metas := []map[string]json.RawMessage{nil,
		{"source": json.RawMessage(`"loop"`)},
		{"source": json.RawMessage(`"input"`), "step": json.RawMessage(`1.0`)},
		{"step": json.RawMessage(`"1"`)}, // string "1" != number 1
		{"missing": json.RawMessage(`true`)}}
	befores := []string{"", mid}
	limits := []int{0, 3}
	for _, wf := range wfs {
		for _, ns := range nss {
			for _, ph := range phases {
				for mi, m := range metas {
					for _, b := range befores {
						for _, l := range limits {
							nsn := "nil"
							if ns != nil {
								nsn = fmt.Sprintf("%q", *ns)
							}
							name := fmt.Sprintf("wf=%s/ns=%s/phase=%s/meta=%d/before=%v/limit=%d", wf, nsn, ph, mi, b != "", l)
							fs[name] = ListFilter{WorkflowID: wf, Namespace: ns, Phase: ph, Metadata: m, Before: b, Limit: l}
						}
					}
				}
			}
		}
	}
	return fs
}

func TestListFilters(t *testing.T) {
	fx := newListFixture(t)
	ctx := context.Background()
	nonEmpty := 0
	for name, f := range listFilters(fx) {
		got, err := fx.s.List(ctx, f)
		require.NoError(t, err, name)
		ids := make([]string, 0, len(got))
		for _, sm := range got {
			ids = append(ids, sm.CheckpointID)
		}
		want := fx.expect(f)
		if len(want) == 0 {
			want = []string{}
		}
		require.Equal(t, want, ids, name)
		if len(want) > 0 {
			nonEmpty++
		}
	}
	require.Greater(t, nonEmpty, 50)
	// within a workflow newest first by seq
	got, err := fx.s.List(ctx, ListFilter{WorkflowID: "wf-2", Limit: 5})
	require.NoError(t, err)
	for i := 1; i < len(got); i++ {
		require.Greater(t, got[i-1].Seq, got[i].Seq)
	}
	require.Equal(t, "wf-2", got[0].WorkflowID)
	require.NotEmpty(t, got[0].SHA256)
	require.NotZero(t, got[0].SizeBytes)
}

func TestListQueryPlans(t *testing.T) {
	fx := newListFixture(t)
	ctx := context.Background()
	conn, err := fx.s.rdb.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for name, f := range listFilters(fx) {
		if f.Limit == 0 {
			f.Limit = DefaultListLimit
		}
		q, args, err := listQuery(f, 10, 5, strings.Contains(name, "wf=wf-1"))
		require.NoError(t, err)
		rows, err := conn.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		require.NoError(t, err, name)
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Close())
		joined := strings.Join(plan, "; ")
		require.NotContains(t, joined, "TEMP B-TREE", "%s: %s", name, joined)
		if f.WorkflowID == "" && f.Metadata == nil && f.Namespace == nil && f.Phase == "" {
			continue // plain rowid scan
		}
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN c") {
				require.Contains(t, step, "USING", "%s: full scan: %s", name, joined)
			}
		}
		if testing.Verbose() && f.Before != "" && f.Limit == 3 {
			t.Logf("%s: %s", name, joined)
		}
	}
}
