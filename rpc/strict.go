package rpc

// Strict params (docs/protocol.md, "Errors"): a params object may hold only the names its
// method takes, spelt exactly. encoding/json would match "workflowid" to workflowId and drop
// "stat" (a typo of "state") without a word, and an acknowledged save with a misspelt field
// is a save that lost data. So decodeParams first walks the object's keys against the params
// struct's json tags and refuses the first unknown one with -32602, suggesting the name meant.
//
// The walk follows the struct: it recurses into fields typed as structs (error, retention,
// LangGraph segments), slices of structs (writes, blobs) and maps of structs. Fields that are
// json.RawMessage, maps of raw values, interfaces or other json.Unmarshalers are user data
// (state, metadata, task lists, channel versions) and are skipped unread. A raw field with a
// shape of its own (sources) is checked where it is decoded, with checkParamKeys.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/protocol"
)

// paramShape is the set of names a params object (or a nested object) takes.
type paramShape struct {
	fields map[string]paramField
	names  []string // declaration order: suggestions prefer the first of equally close names
}

// paramField says how a known name's value is checked.
type paramField struct {
	shape *paramShape // nil: not inspected (scalars and user data)
	array bool        // an array of shape objects
	mapOf bool        // an object of shape objects (its keys are user data)
}

// paramShapes caches the shape of every params type seen: reflect.Type -> *paramShape.
var paramShapes sync.Map

var jsonUnmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// shapeOf returns the shape of struct type t (pointers dereferenced); nil if t is no struct.
// t's own fields are walked even if t decodes itself (drift.Spec defaults a field): its tags
// are its wire names.
func shapeOf(t reflect.Type) *paramShape {
	if s, ok := paramShapes.Load(t); ok {
		return s.(*paramShape)
	}
	st := t
	for st.Kind() == reflect.Pointer {
		st = st.Elem()
	}
	var s *paramShape
	if st.Kind() == reflect.Struct {
		s = buildShape(st, map[reflect.Type]*paramShape{})
	}
	got, _ := paramShapes.LoadOrStore(t, s)
	return got.(*paramShape)
}

func buildShape(t reflect.Type, memo map[reflect.Type]*paramShape) *paramShape {
	if s := memo[t]; s != nil {
		return s
	}
	s := &paramShape{fields: map[string]paramField{}}
	memo[t] = s
	addFields(s, t, memo, map[reflect.Type]bool{})
	return s
}

// addFields adds t's fields to s the way encoding/json sees them: json tag names (the Go name
// when untagged), "-" skipped, fields of untagged embedded structs promoted; a name already
// taken by a shallower field keeps it.
func addFields(s *paramShape, t reflect.Type, memo map[reflect.Type]*paramShape, seen map[reflect.Type]bool) {
	if seen[t] {
		return
	}
	seen[t] = true
	var embedded []reflect.Type
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := s.fields[name]; dup {
			continue
		}
		s.fields[name] = fieldShape(f.Type, memo)
		s.names = append(s.names, name)
	}
	for _, et := range embedded {
		addFields(s, et, memo, seen)
	}
}

// fieldShape is how a field of type t is checked.
func fieldShape(t reflect.Type, memo map[reflect.Type]*paramShape) paramField {
	if decodesItself(t) {
		return paramField{}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return paramField{shape: buildShape(t, memo)}
	case reflect.Slice, reflect.Array, reflect.Map:
		et := t.Elem()
		if decodesItself(et) {
			return paramField{}
		}
		for et.Kind() == reflect.Pointer {
			et = et.Elem()
		}
		if et.Kind() != reflect.Struct {
			return paramField{}
		}
		if t.Kind() == reflect.Map {
			return paramField{shape: buildShape(et, memo), mapOf: true}
		}
		return paramField{shape: buildShape(et, memo), array: true}
	}
	return paramField{}
}

func decodesItself(t reflect.Type) bool {
	return t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler)
}

// checkParamKeys refuses the first key of the JSON object raw that v's type (a struct or a
// pointer to one) does not take, naming it prefix+key. Anything but an object passes: decoding
// reports it. So does malformed JSON, which the codec never hands to a handler.
func checkParamKeys(raw []byte, v any, prefix string) *jsonrpc2.Error {
	s := shapeOf(reflect.TypeOf(v))
	if s == nil {
		return nil
	}
	i := paramSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil
	}
	if _, bad := checkParamObject(raw, i, s); bad != nil {
		return bad.error(prefix)
	}
	return nil
}

// badKey is an unknown key found by checkParamObject; path is where it sits (e.g. "writes[0]."),
// built on the way out, and shape the object that does not take it.
type badKey struct {
	key   string
	path  string
	shape *paramShape
}

// maxNamedKey bounds how much of an unknown key an error repeats.
const maxNamedKey = 128

func (b *badKey) error(prefix string) *jsonrpc2.Error {
	// The key is repeated as data.field, which JSON carries as UTF-8: a byte that is not
	// becomes U+FFFD there, so it becomes U+FFFD here too and message and field agree.
	key := b.key
	if len(key) > maxNamedKey {
		key = strings.ToValidUTF8(key[:maxNamedKey], "") + "..."
	}
	key = strings.ToValidUTF8(key, "\uFFFD")
	field := prefix + b.path + key
	reason := "unknown param " + quote(field)
	if meant := closestName(b.key, b.shape.names); meant != "" {
		reason += " (did you mean " + quote(prefix+b.path+meant) + "?)"
	}
	return rpcError(protocol.CodeInvalidParams, "invalid params: "+reason, map[string]string{"field": field, "reason": reason})
}

// checkParamObject checks the object starting at b[i] == '{' and returns the index just past it
// (-1 if b is malformed: then nothing is reported).
func checkParamObject(b []byte, i int, s *paramShape) (int, *badKey) {
	i = paramSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for i < len(b) && b[i] == '"' {
		ke := paramStringEnd(b, i)
		if ke < 0 {
			return -1, nil
		}
		key := b[i+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if json.Unmarshal(b[i:ke], &k) != nil {
				return -1, nil
			}
			key = []byte(k)
		}
		f, ok := s.fields[string(key)]
		if !ok {
			return -1, &badKey{key: string(key), shape: s}
		}
		i = paramSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return -1, nil
		}
		i = paramSpace(b, i+1)
		if i >= len(b) {
			return -1, nil
		}
		var end int
		var bad *badKey
		switch {
		case f.shape == nil:
			end = paramValueEnd(b, i)
		case f.array && b[i] == '[':
			end, bad = checkParamArray(b, i, f.shape)
		case f.mapOf && b[i] == '{':
			end, bad = checkParamMap(b, i, f.shape)
		case !f.array && !f.mapOf && b[i] == '{':
			end, bad = checkParamObject(b, i, f.shape)
			if bad != nil {
				bad.path = "." + bad.path
			}
		default: // null, or the wrong type: decoding says so
			end = paramValueEnd(b, i)
		}
		if bad != nil {
			bad.path = string(key) + bad.path
			return -1, bad
		}
		if end < 0 {
			return -1, nil
		}
		i = paramSpace(b, end)
		if i >= len(b) {
			return -1, nil
		}
		switch b[i] {
		case ',':
			i = paramSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return -1, nil
		}
	}
	return -1, nil
}

// checkParamArray checks the objects of the array at b[i] == '['; other elements are skipped.
func checkParamArray(b []byte, i int, s *paramShape) (int, *badKey) {
	i = paramSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for n := 0; i < len(b); n++ {
		var end int
		if b[i] == '{' {
			var bad *badKey
			if end, bad = checkParamObject(b, i, s); bad != nil {
				bad.path = "[" + strconv.Itoa(n) + "]." + bad.path
				return -1, bad
			}
		} else {
			end = paramValueEnd(b, i)
		}
		if end < 0 {
			return -1, nil
		}
		i = paramSpace(b, end)
		if i >= len(b) {
			return -1, nil
		}
		switch b[i] {
		case ',':
			i = paramSpace(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return -1, nil
		}
	}
	return -1, nil
}

// checkParamMap checks the object values of the object at b[i] == '{' (whose keys are free).
func checkParamMap(b []byte, i int, s *paramShape) (int, *badKey) {
	i = paramSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for i < len(b) && b[i] == '"' {
		ke := paramStringEnd(b, i)
		if ke < 0 {
			return -1, nil
		}
		keyJSON := b[i:ke]
		i = paramSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return -1, nil
		}
		i = paramSpace(b, i+1)
		if i >= len(b) {
			return -1, nil
		}
		var end int
		if b[i] == '{' {
			var bad *badKey
			if end, bad = checkParamObject(b, i, s); bad != nil {
				var k string
				if json.Unmarshal(keyJSON, &k) != nil {
					k = string(keyJSON)
				}
				bad.path = "." + k + "." + bad.path
				return -1, bad
			}
		} else {
			end = paramValueEnd(b, i)
		}
		if end < 0 {
			return -1, nil
		}
		i = paramSpace(b, end)
		if i >= len(b) {
			return -1, nil
		}
		switch b[i] {
		case ',':
			i = paramSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return -1, nil
		}
	}
	return -1, nil
}

func paramSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// paramStringEnd returns the index just past the JSON string starting at b[i] == '"', or -1.
func paramStringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		k += j
		n := 0
		for m := k - 1; m > i && b[m] == '\\'; m-- {
			n++
		}
		if n%2 == 0 {
			return k + 1
		}
		j = k + 1
	}
	return -1
}

// paramValueEnd returns the index just past the JSON value starting at b[i], or -1. It only finds
// the end (strings, bracket depth); the codec has validated the JSON.
func paramValueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return paramStringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				e := paramStringEnd(b, i)
				if e < 0 {
					return -1
				}
				i = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
		j++
	}
	return j
}

// closestName is the known name a misspelt key most likely meant: one equal to it but for
// case, '_' and '-' (workflowid, workflow_id -> workflowId), else the nearest within a small
// edit distance; "" if none is close.
func closestName(key string, names []string) string {
	k := foldName(key)
	best, bestD := "", -1
	for _, n := range names {
		d := nameDistance(k, foldName(n))
		limit := min(len(k), len(n)) / 3
		if limit < 1 {
			limit = 1
		}
		if d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = n, d
		}
	}
	return best
}

func foldName(s string) string {
	s = strings.ToLower(s)
	if strings.ContainsAny(s, "_-") {
		s = strings.NewReplacer("_", "", "-", "").Replace(s)
	}
	return s
}

// nameDistance is the optimal string alignment distance (insertions, deletions,
// substitutions, adjacent transpositions) between a and b, by byte.
func nameDistance(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return len(a) + len(b)
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
