package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// CanonicalJSON returns a compact canonical text of one JSON value: object keys sorted, no
// insignificant whitespace, numbers normalised (1, 1.0 and 1e0 are equal), no HTML escaping.
// Strings and numbers of different types stay different ("1" != 1).
func CanonicalJSON(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("trailing data after JSON value")
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		if x {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case json.Number:
		buf.WriteString(canonicalNumber(x))
	case string:
		writeJSONString(buf, x)
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(buf, k)
			buf.WriteByte(':')
			if err := writeCanonical(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("unexpected JSON value %T", v)
	}
	return nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

func canonicalNumber(n json.Number) string {
	s := string(n)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	if !strings.ContainsAny(s, ".eE") {
		return s // an integer beyond int64: keep its digits exactly
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return s // out of float range: keep the literal
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// CountArray counts the top-level elements of a JSON array without decoding it. Empty input or
// null counts 0. ok is false when the text is not an array. It runs on every save's task lists
// (a 1000-task list is ~110 KB), so strings are skipped with bytes.IndexByte and everything else
// through a lookup table.
func CountArray(b []byte) (n int, isNull bool, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) {
		return 0, true, true
	}
	if bytes.Equal(bytes.TrimSpace(b[i:]), []byte("null")) {
		return 0, true, true
	}
	if b[i] != '[' {
		return 0, false, false
	}
	depth, commas, content := 0, 0, false
	for i < len(b) {
		c := b[i]
		switch arrayClass[c] {
		case clsSpace:
			i++
			continue
		case clsOther:
			content = true
			i++
			continue
		}
		switch c {
		case '"':
			end, found := stringEnd(b, i+1)
			if !found {
				return 0, false, false
			}
			content = true
			i = end + 1
			continue
		case '[', '{':
			if depth >= 1 {
				content = true
			}
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				if skipSpace(b, i+1) != len(b) {
					return 0, false, false
				}
				if !content {
					return 0, false, true
				}
				return commas + 1, false, true
			}
		case ',':
			if depth == 1 {
				commas++
			}
		}
		i++
	}
	return 0, false, false // unterminated
}

const (
	clsOther = iota
	clsSpace
	clsStructural
)

var arrayClass = func() (t [256]uint8) {
	for _, c := range " \t\r\n" {
		t[c] = clsSpace
	}
	for _, c := range `"[]{},` {
		t[c] = clsStructural
	}
	return t
}()

// stringEnd returns the index of the quote that closes the string whose body starts at i.
func stringEnd(b []byte, i int) (int, bool) {
	for {
		k := bytes.IndexByte(b[i:], '"')
		if k < 0 {
			return 0, false
		}
		j := i + k
		backslashes := 0
		for p := j - 1; p >= i && b[p] == '\\'; p-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return j, true
		}
		i = j + 1
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
