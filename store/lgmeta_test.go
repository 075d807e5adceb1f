package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLGMetaMatch(t *testing.T) {
	cases := []struct {
		rule, filter, meta string
		want               bool
	}{
		{LGMatchPython, `{"a": 1}`, `{"a": true}`, true},
		{LGMatchPython, `{"a": true}`, `{"a": 1.0}`, true},
		{LGMatchPython, `{"a": false}`, `{"a": 0}`, true},
		{LGMatchPython, `{"a": 2}`, `{"a": true}`, false},
		{LGMatchPython, `{"a": null}`, `{}`, true},
		{LGMatchPython, `{"a": null}`, `{"a": null}`, true},
		{LGMatchPython, `{"a": null}`, `{"a": 0}`, false},
		{LGMatchPython, `{"a": "1"}`, `{"a": 1}`, false},
		{LGMatchPython, `{"a": {"x": [1, {"y": true}]}}`, `{"a": {"x": [1.0, {"y": 1}]}}`, true},
		{LGMatchPython, `{"a": [1, 2]}`, `{"a": [1, 2, 3]}`, false},
		{LGMatchPython, `{"a": 9007199254740993}`, `{"a": 9007199254740992.0}`, false},
		{LGMatchPython, `{"a": 9007199254740992}`, `{"a": 9007199254740992.0}`, true},
		{LGMatchPython, `{"a": 1e400}`, `{"a": 1e400}`, true},
		{LGMatchJS, `{"a": 1}`, `{"a": true}`, false},
		{LGMatchJS, `{"a": {"x": 1, "y": 2}}`, `{"a": {"y": 2, "x": 1}}`, false},
		{LGMatchJS, `{"a": {"x": 1, "y": 2}}`, `{"a": { "x" : 1,"y":2 }}`, true},
		{LGMatchJS, `{"a": null}`, `{}`, false},
		{LGMatchJSON, `{"a": 1}`, `{"a": 1.0}`, true},
		{LGMatchJSON, `{"a": {"x": 1, "y": 2}}`, `{"a": {"y": 2, "x": 1}}`, true},
		{LGMatchJSON, `{"a": null}`, `{}`, false},
	}
	for _, tc := range cases {
		var md map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(tc.filter), &md))
		q, err := NewLGMetaQuery(md, tc.rule)
		require.NoError(t, err)
		require.Equal(t, tc.want, q.Match([]byte(tc.meta)), "%s %s ~ %s", tc.rule, tc.filter, tc.meta)
		// the index narrows without losing a match: a matching value's hash is one of the key's
		if tc.want {
			var stored map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(tc.meta), &stored))
			for _, k := range q.Keys {
				raw, ok := stored[k.Key]
				if !k.Indexed || !ok {
					continue
				}
				h, err := LGMetaHash(raw)
				require.NoError(t, err)
				require.Contains(t, k.Hashes, h, "%s %s ~ %s", tc.rule, tc.filter, tc.meta)
			}
		}
	}
}

func TestLGMetaQueryShape(t *testing.T) {
	q, err := NewLGMetaQuery(map[string]json.RawMessage{"a": json.RawMessage(`[1, 0, true]`), "b": json.RawMessage(`null`)}, LGMatchPython)
	require.NoError(t, err)
	require.True(t, q.Exact)
	require.Len(t, q.Keys[0].Hashes, 8)
	require.True(t, q.Keys[1].Missing)
	require.Equal(t, 0, q.Driver())
	q, err = NewLGMetaQuery(map[string]json.RawMessage{"a": json.RawMessage(`[1,1,1,1,1,1]`)}, LGMatchPython)
	require.NoError(t, err)
	require.False(t, q.Exact)
	require.False(t, q.Keys[0].Indexed)
	require.Equal(t, -1, q.Driver())
	q, err = NewLGMetaQuery(nil, LGMatchJS)
	require.NoError(t, err)
	require.Nil(t, q)
	_, err = NewLGMetaQuery(map[string]json.RawMessage{"a": json.RawMessage(`1`)}, "perl")
	require.Error(t, err)
}

func TestValueRefs(t *testing.T) {
	refs, err := ParseValueRefs([]byte(`{"b":2,"a":0}`))
	require.NoError(t, err)
	require.Equal(t, map[string]int{"b": 2}, refs)
	require.Equal(t, `{"b":2}`, string(EncodeValueRefs(map[string]int{"b": 2, "a": 0})))
	require.Nil(t, EncodeValueRefs(map[string]int{"a": 0}))
	_, err = ParseValueRefs([]byte(`{"a":-1}`))
	require.Error(t, err)
	refs, err = ParseValueRefs(nil)
	require.NoError(t, err)
	require.Nil(t, refs)

	p := Pack([]byte("x"), -1)
	stored := []LGStoredValue{{Variant: 0, Type: "json", SHA: []byte("other"), Size: 1}, {Variant: 2, Type: "json", SHA: p.SHA, Size: 1}}
	m, next := LGMatchVariant(stored, "json", p)
	require.Equal(t, 2, m)
	m, next = LGMatchVariant(stored, "msgpack", p)
	require.Equal(t, -1, m)
	require.Equal(t, 3, next)

	parent := &LGNode{ID: "p", Versions: []ChanVer{{"a", "1"}, {"b", "1"}}, Refs: map[string]int{"a": 1}}
	got, err := LGInheritedRefs([]ChanVer{{"a", "1"}, {"b", "2"}, {"c", "1"}}, map[string]int{"c": 4}, parent,
		func(ch, ver string) (int, error) { return 7, nil })
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 1, "b": 7, "c": 4}, got)
}

func TestLGRetentionRoots(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := make([]*LGNode, 6) // newest first: n5 ... n0, n_i i minutes old... n0 oldest
	for i := range nodes {
		nodes[i] = &LGNode{Key: int64(6 - i), ID: string(rune('f' - i)), Created: now.Add(-time.Duration(i) * time.Minute)}
	}
	ids := func(ns []*LGNode) string {
		out := ""
		for _, n := range ns {
			out += n.ID
		}
		return out
	}
	cases := []struct {
		r       Retention
		protect []string
		want    string
	}{
		{Retention{}, nil, "fedcba"},
		{Retention{KeepLast: 2}, nil, "fe"},
		{Retention{KeepLast: 2, KeepFirst: true}, nil, "fea"},
		{Retention{KeepLast: 2}, []string{"b"}, "feb"},
		{Retention{MaxAgeSeconds: 150}, nil, "fed"},
		{Retention{MaxAgeSeconds: 1}, nil, "f"},
		{Retention{KeepLast: 5, MaxAgeSeconds: 90}, nil, "fe"},
		{Retention{KeepLast: 1}, []string{""}, "f"},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, ids(LGRetentionRoots(nodes, tc.r, now, tc.protect...)), "%+v %v", tc.r, tc.protect)
	}
	require.Equal(t, Retention{KeepLast: 1}, LGEffectiveRetention(nil, nil, Retention{KeepLast: 1}))
	require.Equal(t, Retention{KeepLast: 2}, LGEffectiveRetention(nil, &Retention{KeepLast: 2}, Retention{KeepLast: 1}))
	require.Equal(t, Retention{}, LGEffectiveRetention(&Retention{}, &Retention{KeepLast: 2}, Retention{KeepLast: 1}))
	require.True(t, LGPrunes(Retention{KeepLast: 1}))
	require.False(t, LGPrunes(Retention{IdleTTLSeconds: 1, KeepFirst: true}))
}

// fakeView answers SelectLGKeep from maps.
type fakeView struct {
	values  map[string]bool     // "channel@version#variant" with a value
	written map[string][]string // checkpoint -> channels its writes write
}

func (v fakeView) HasValue(ch, ver string, variant int) (bool, error) {
	return v.values[ch+"@"+ver+"#"+string(rune('0'+variant))], nil
}
func (v fakeView) Written(id string) ([]string, error) { return v.written[id], nil }

func TestSelectLGKeep(t *testing.T) {
	// a chain c0 <- c1 <- ... <- c5; d has a value at c0 and c3 (variant 1 at c3), writes between
	mk := func(i int, ver string, refs map[string]int) *LGNode {
		id := string(rune('0' + i))
		parent := ""
		if i > 0 {
			parent = string(rune('0' + i - 1))
		}
		return &LGNode{Key: int64(i), ID: id, Parent: parent, Versions: []ChanVer{{"d", ver}}, Refs: refs}
	}
	nodes := []*LGNode{mk(5, "5", nil), mk(4, "4", nil), mk(3, "3", map[string]int{"d": 1}), mk(2, "2", nil), mk(1, "1", nil), mk(0, "0", nil)}
	v := fakeView{values: map[string]bool{"d@0#0": true, "d@3#1": true}, written: map[string][]string{"3": {"d"}, "4": {"d"}}}
	keep, err := SelectLGKeep(nodes, []*LGNode{nodes[0]}, v)
	require.NoError(t, err)
	require.Equal(t, map[int64]bool{5: true, 4: true, 3: true}, keep)
	// two roots: c5 and c2 (c2's replay goes back to c0)
	keep, err = SelectLGKeep(nodes, []*LGNode{nodes[0], nodes[3]}, v)
	require.NoError(t, err)
	require.Equal(t, map[int64]bool{5: true, 4: true, 3: true, 2: true, 1: true, 0: true}, keep)
	// variant 0 of d@3 has no value: the walk goes on
	v.values = map[string]bool{"d@0#0": true, "d@3#0": true}
	keep, err = SelectLGKeep(nodes, []*LGNode{nodes[0]}, v)
	require.NoError(t, err)
	require.Len(t, keep, 6)
	plan, err := PlanLGKeepLatest("t", "", nodes, v)
	require.NoError(t, err)
	require.Empty(t, plan.Drop)
}

func TestParseVersionsFastMatchesSlow(t *testing.T) {
	inputs := []string{
		`{}`, ` { } `, `{"a":1}`, `{"a": "00000000000000000000000000000001.0.123"}`, `{"a":1.0,"b":-0,"c":1e3,"d":1.5E-2}`,
		`{"a":"x","b":2, "c" : "y" }`, `{"a":"<&>"}`, `{"é":1}`, `{"a":"é"}`, `{"a":"\u00e9"}`, `{"a\"b":1}`,
		`{"a":1,"a":2}`, `{"a":true}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1}x`, `{"a":1,}`, `{"a" 1}`, `[1]`,
		`{"a":9007199254740993}`, `{"a":1e400}`, `{"a":"\u2028"}`,
	}
	for _, in := range inputs {
		fast, ok := parseVersionsFast([]byte(in))
		slow, err := parseVersionsSlow([]byte(in))
		if ok {
			require.NoError(t, err, in)
			require.Equal(t, slow, fast, in)
		}
		got, gerr := ParseVersions([]byte(in))
		require.Equal(t, err == nil, gerr == nil, in)
		if err == nil {
			require.Equal(t, slow, got, in)
		}
	}
}
