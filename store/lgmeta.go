package store

// Metadata filters of lg/list (docs/protocol.md, "lg/list"): which checkpoints a filter
// {key: value, ...} selects depends on the rule the client names, so that each LangGraph saver
// selects exactly what the reference saver of its language selects:
//
//   - LGMatchJSON (the default): the key is present with an equal JSON value (numbers by value,
//     objects and arrays whole, key order ignored).
//   - LGMatchPython: Python's ==, as LangGraph's Python savers compare: True == 1 == 1.0,
//     False == 0, objects and arrays element by element with the same rule, and a null value
//     also matches a checkpoint without the key (metadata.get(key) is None).
//   - LGMatchJS: the JSON texts are equal once whitespace is removed (what LangGraph.js's
//     SqliteSaver compares: SQLite's text of the stored value against JSON.stringify of the
//     filter's): true is not 1, key order counts, and a missing key never matches.
//
// Backends select through the metadata index (lg_meta: per top-level key, LGMetaHash of the
// value's canonical JSON): LGMetaQuery turns each key into the hashes that may match and says
// whether they select exactly; when they do not, the backend checks each candidate with Match.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/big"
	"sort"
	"strings"
)

// Metadata filter rules (lg/list metadataMatch).
const (
	LGMatchJSON   = "json"
	LGMatchPython = "python"
	LGMatchJS     = "javascript"
)

// maxLGMetaAlternatives caps the canonical forms a Python filter value expands to (each 0, 1,
// true or false in it doubles them); beyond, the key is checked by Match only.
const maxLGMetaAlternatives = 32

// LGMetaKey is one key of a metadata filter as the index selects it.
type LGMetaKey struct {
	Key string
	// Hashes: the key's index row has one of these LGMetaHash values. Empty when Indexed is
	// false (the index cannot narrow this key: every checkpoint is a candidate).
	Hashes  [][]byte
	Missing bool // a checkpoint without the key matches too
	Indexed bool
}

// LGMetaQuery is a metadata filter ready to run.
type LGMetaQuery struct {
	Rule string
	Keys []LGMetaKey // by key
	// Exact: the index conditions of Keys select exactly the matching checkpoints, no Match needed.
	Exact bool
	want  map[string]json.RawMessage
	pyq   map[string]any
}

// CheckLGMatch validates a metadataMatch rule ("" is LGMatchJSON).
func CheckLGMatch(rule string) error {
	switch rule {
	case "", LGMatchJSON, LGMatchPython, LGMatchJS:
		return nil
	}
	return Invalid("metadataMatch", "%q is not one of json, python, javascript", rule)
}

// NewLGMetaQuery prepares filter md under rule; nil when md is empty (no filter).
func NewLGMetaQuery(md map[string]json.RawMessage, rule string) (*LGMetaQuery, error) {
	if err := CheckLGMatch(rule); err != nil {
		return nil, err
	}
	if rule == "" {
		rule = LGMatchJSON
	}
	if len(md) == 0 {
		return nil, nil
	}
	q := &LGMetaQuery{Rule: rule, Exact: true, want: md}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		raw := md[k]
		v, err := decodeJSONNumber(raw)
		if err != nil {
			return nil, Invalid("metadata", "key %q: %v", k, err)
		}
		mk := LGMetaKey{Key: k, Indexed: true}
		switch rule {
		case LGMatchJSON:
			h, err := LGMetaHash(raw)
			if err != nil {
				return nil, Invalid("metadata", "key %q: %v", k, err)
			}
			mk.Hashes = [][]byte{h}
		case LGMatchPython:
			if q.pyq == nil {
				q.pyq = map[string]any{}
			}
			q.pyq[k] = v
			mk.Missing = v == nil
			alts, ok := pyAlternatives(v)
			if !ok {
				mk.Indexed, q.Exact = false, false
				break
			}
			for _, a := range alts {
				h, err := LGMetaHash([]byte(a))
				if err != nil {
					return nil, Invalid("metadata", "key %q: %v", k, err)
				}
				mk.Hashes = append(mk.Hashes, h)
			}
		case LGMatchJS:
			// Equal texts are equal canonical forms: the hash narrows, Match decides.
			h, err := LGMetaHash(raw)
			if err != nil {
				return nil, Invalid("metadata", "key %q: %v", k, err)
			}
			mk.Hashes = [][]byte{h}
			q.Exact = false
		}
		q.Keys = append(q.Keys, mk)
	}
	return q, nil
}

// Driver returns the index of a key whose index rows alone can drive a search over every
// thread (indexed, a missing key not matching, one hash), or -1.
func (q *LGMetaQuery) Driver() int {
	best := -1
	for i, k := range q.Keys {
		if k.Indexed && !k.Missing && len(k.Hashes) > 0 {
			if best < 0 || len(k.Hashes) < len(q.Keys[best].Hashes) {
				best = i
			}
		}
	}
	return best
}

// Match reports whether a checkpoint's stored metadata (a JSON object, nil: none) matches.
func (q *LGMetaQuery) Match(meta []byte) bool {
	var stored map[string]json.RawMessage
	if m := bytes.TrimSpace(meta); len(m) > 0 && !bytes.Equal(m, []byte("null")) {
		if json.Unmarshal(m, &stored) != nil {
			return false
		}
	}
	switch q.Rule {
	case LGMatchPython:
		for k, want := range q.pyq {
			raw, ok := stored[k]
			if !ok {
				if want != nil {
					return false
				}
				continue
			}
			got, err := decodeJSONNumber(raw)
			if err != nil || !pyEqual(want, got) {
				return false
			}
		}
		return true
	case LGMatchJS:
		for k, want := range q.want {
			raw, ok := stored[k]
			if !ok || !compactEqual(raw, want) {
				return false
			}
		}
		return true
	}
	for k, want := range q.want {
		raw, ok := stored[k]
		if !ok {
			return false
		}
		a, err1 := CanonicalJSON(raw)
		b, err2 := CanonicalJSON(want)
		if err1 != nil || err2 != nil || a != b {
			return false
		}
	}
	return true
}

func decodeJSONNumber(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func compactEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return false
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// pyAlternatives returns the canonical JSON texts equal to v under Python's == (0 and false, 1
// and true interchangeable anywhere in it); ok false when there are too many, or when v holds
// a number canonical forms could confuse (beyond 2^53, or not finite).
func pyAlternatives(v any) ([]string, bool) {
	switch x := v.(type) {
	case nil:
		return []string{"null"}, true
	case bool:
		if x {
			return []string{"true", "1"}, true
		}
		return []string{"false", "0"}, true
	case string:
		var b bytes.Buffer
		writeJSONString(&b, x)
		return []string{b.String()}, true
	case json.Number:
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) >= 1<<53 {
			return nil, false
		}
		c := canonicalNumber(x)
		switch c {
		case "0":
			return []string{"0", "false"}, true
		case "1":
			return []string{"1", "true"}, true
		}
		return []string{c}, true
	case []any:
		out := []string{""}
		for i, e := range x {
			alts, ok := pyAlternatives(e)
			if !ok {
				return nil, false
			}
			var next []string
			for _, prefix := range out {
				for _, a := range alts {
					sep := ","
					if i == 0 {
						sep = ""
					}
					next = append(next, prefix+sep+a)
				}
			}
			if len(next) > maxLGMetaAlternatives {
				return nil, false
			}
			out = next
		}
		for i := range out {
			out[i] = "[" + out[i] + "]"
		}
		return out, true
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := []string{""}
		for i, k := range keys {
			alts, ok := pyAlternatives(x[k])
			if !ok {
				return nil, false
			}
			var kb bytes.Buffer
			writeJSONString(&kb, k)
			var next []string
			for _, prefix := range out {
				for _, a := range alts {
					sep := ","
					if i == 0 {
						sep = ""
					}
					next = append(next, prefix+sep+kb.String()+":"+a)
				}
			}
			if len(next) > maxLGMetaAlternatives {
				return nil, false
			}
			out = next
		}
		for i := range out {
			out[i] = "{" + out[i] + "}"
		}
		return out, true
	}
	return nil, false
}

// pyNumber is a JSON number or bool as Python holds it: an int (exact) or a float.
type pyNumber struct {
	i     *big.Int
	f     float64
	float bool
}

func toPyNumber(v any) (pyNumber, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return pyNumber{i: big.NewInt(1)}, true
		}
		return pyNumber{i: big.NewInt(0)}, true
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			i, ok := new(big.Int).SetString(s, 10)
			return pyNumber{i: i}, ok
		}
		f, err := x.Float64()
		if err != nil && !math.IsInf(f, 0) { // Python's float() makes out-of-range literals infinite
			return pyNumber{}, false
		}
		return pyNumber{f: f, float: true}, true
	}
	return pyNumber{}, false
}

func (a pyNumber) equal(b pyNumber) bool {
	switch {
	case a.float && b.float:
		return a.f == b.f
	case !a.float && !b.float:
		return a.i.Cmp(b.i) == 0
	case a.float:
		a, b = b, a
	}
	// a int, b float: exact, as Python compares them
	if math.IsInf(b.f, 0) || math.IsNaN(b.f) {
		return false
	}
	return new(big.Float).SetInt(a.i).Cmp(big.NewFloat(b.f)) == 0
}

// pyEqual is Python's == over decoded JSON (numbers as json.Number).
func pyEqual(a, b any) bool {
	if na, ok := toPyNumber(a); ok {
		nb, ok := toPyNumber(b)
		return ok && na.equal(nb)
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !pyEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !pyEqual(v, w) {
				return false
			}
		}
		return true
	}
	return false
}
