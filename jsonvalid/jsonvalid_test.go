package jsonvalid

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func reference(b []byte) bool { return json.Valid(b) && utf8.Valid(b) }

func TestValid(t *testing.T) {
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `[ ]`, `{ }`, `null`, `true`, `false`, `nul`, `0`, `-0`, `01`, `1.`, `1.5e+3`, `-1E-0`, `1e`,
		`"a"`, `"\u00e9\ud83d"`, `"\x"`, `"\u12G4"`, "\"\x01\"", "\"\xff\"", "\"é☃𝄞\"", `"` + strings.Repeat("abcdefgh", 5) + `\"x"`,
		`{"a":[1,{"b":null}],"c":"d"}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{1:2}`, `[1]]`, `[[]`, `{} {}`, "\t\n\r [1] \n",
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	} {
		require.Equal(t, reference([]byte(s)), Valid([]byte(s)), "%.40q", s)
		ok, m := ValidMarked([]byte(s))
		require.Equal(t, reference([]byte(s)), ok, "%.40q", s)
		require.Equal(t, ok, m != nil)
	}
}

// gen writes a random JSON value of about n bytes: nested objects and arrays, strings with
// escapes and multi-byte characters, numbers, literals, whitespace.
func gen(r *rand.Rand, sb *strings.Builder, n, depth int) {
	ws := func() {
		if r.IntN(8) == 0 {
			sb.WriteString([]string{" ", "\n", "\t ", "\r\n  "}[r.IntN(4)])
		}
	}
	ws()
	switch k := r.IntN(10); {
	case depth < 12 && n > 40 && k < 3:
		sb.WriteByte('{')
		for i, m := 0, 1+r.IntN(6); i < m; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			ws()
			fmt.Fprintf(sb, `"k%d\n%s"`, i, strings.Repeat("é", r.IntN(3)))
			ws()
			sb.WriteByte(':')
			gen(r, sb, n/m, depth+1)
		}
		ws()
		sb.WriteByte('}')
	case depth < 12 && n > 40 && k < 6:
		sb.WriteByte('[')
		for i, m := 0, 1+r.IntN(8); i < m; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			gen(r, sb, n/m, depth+1)
		}
		sb.WriteByte(']')
	case k < 8:
		sb.WriteByte('"')
		for i, m := 0, r.IntN(max(n, 2)); i < m; i++ {
			switch c := r.IntN(40); {
			case c == 0:
				sb.WriteString(`\"`)
			case c == 1:
				sb.WriteString(`\u00e9`)
			case c == 2:
				sb.WriteString("☃")
			case c == 3:
				sb.WriteString(`\\`)
			default:
				sb.WriteByte(byte('a' + c%26))
			}
		}
		sb.WriteByte('"')
	case k == 8:
		fmt.Fprintf(sb, "%d.%de-%d", r.IntN(100000)-50000, r.IntN(100), r.IntN(9))
	default:
		sb.WriteString([]string{"true", "false", "null", "[]", "{}"}[r.IntN(5)])
	}
	ws()
}

// edit returns base with one random change: a generated value or random JSON-ish bytes
// inserted, a range deleted or replaced, or an element appended to the first array; with the
// prefix and suffix of base it keeps.
func edit(r *rand.Rand, base []byte) (next []byte, keepPrefix, keepSuffix int) {
	at := r.IntN(len(base) + 1)
	end := min(len(base), at+r.IntN(64))
	var mid string
	switch r.IntN(5) {
	case 0: // insert a value (valid where a value may go)
		var sb strings.Builder
		gen(r, &sb, 1+r.IntN(200), 10)
		mid, end = sb.String(), at
	case 1: // delete
		mid = ""
	case 2: // replace with JSON punctuation and text
		var sb strings.Builder
		for i, m := 0, r.IntN(12); i < m; i++ {
			sb.WriteString([]string{`,`, `:`, `"`, `[`, `]`, `{`, `}`, `1`, `x`, `\`, ` `, "é", "\xff", `true`}[r.IntN(14)])
		}
		mid = sb.String()
	case 3: // append an element to an array: valid, the common case of a growing state
		if k := strings.LastIndexByte(string(base), ']'); k > 0 && base[k-1] != '[' {
			at, end, mid = k, k, `,{"m":"`+strings.Repeat("z", r.IntN(3000))+`"}`
		}
	default: // change a digit or letter in place
		if at < len(base) {
			end, mid = at+1, string("0123456789abc"[r.IntN(13)])
		}
	}
	next = append(append(append([]byte{}, base[:at]...), mid...), base[end:]...)
	return next, at, len(base) - end
}

// checkMarks asserts that each of m's marks is a state from which the rest of b parses as valid.
func checkMarks(t *testing.T, b []byte, m *Marks) {
	t.Helper()
	require.Equal(t, len(b), m.Len())
	step := max(1, len(m.at)/20) // a sample of 20: each check parses the rest of b
	for k, mk := range m.at {
		if k > 0 {
			require.Less(t, m.at[k-1].pos, mk.pos)
		}
		if k%step != 0 && k != len(m.at)-1 {
			continue
		}
		p := parser{b: b}
		require.True(t, p.run(resume{pos: mk.pos, state: mk.state, stack: []byte(mk.stack)}, nil), "mark %d at %d", k, mk.pos)
	}
}

// TestValidEdit: chains of random edits of random documents, each checked by ValidEdit from
// the previous valid value's marks: the verdict is Valid's, and the marks it returns are
// states of the new value (a parse from each ends valid).
func TestValidEdit(t *testing.T) {
	defer func(e int) { markEvery = e }(markEvery)
	for _, every := range []int{7, 64, 1 << 10} {
		markEvery = every
		r := rand.New(rand.NewPCG(uint64(every), 1))
		valid, resynced := 0, 0
		for doc := 0; doc < 60; doc++ {
			var sb strings.Builder
			gen(r, &sb, 200+r.IntN(20000), 0)
			base := []byte(sb.String())
			ok, marks := ValidMarked(base)
			require.True(t, ok, "%.200q", base)
			checkMarks(t, base, marks)
			for step := 0; step < 30; step++ {
				next, kp, ks := edit(r, base)
				ok, m := ValidEdit(base, marks, next, kp, ks)
				require.Equal(t, reference(next), ok, "every %d doc %d step %d: kp %d ks %d", every, doc, step, kp, ks)
				if !ok {
					require.Nil(t, m)
					continue
				}
				valid++
				checkMarks(t, next, m)
				if full, fm := ValidMarked(next); full && len(m.at) >= len(fm.at)/2 {
					resynced++
				}
				base, marks = next, m
			}
		}
		require.Greater(t, valid, 300, "every %d: too few valid edits to test anything", every)
		require.Greater(t, resynced, valid/2)
	}
}

// TestValidEditWork: on a ~1 MB state edited in the middle, ValidEdit parses a bounded part of
// it (from the mark before the change to the base's next state in the kept suffix).
func TestValidEditWork(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"messages":[`)
	for i := 0; i < 1000; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"id":%d,"content":"%s"}`, i, strings.Repeat("word ", 200))
	}
	sb.WriteString(`],"step":1,"tail":[` + strings.Repeat(`"x",`, 50000) + `"y"]}`)
	base := []byte(sb.String())
	ok, marks := ValidMarked(base)
	require.True(t, ok)
	at := strings.Index(sb.String(), `],"step"`)
	next := append(append(append([]byte{}, base[:at]...), `,{"id":1000,"content":"hi"}],"step":2`...), base[at+len(`],"step":1`):]...)
	kp, ks := at, len(base)-at-len(`],"step":1`)
	require.True(t, reference(next))
	ok, m := ValidEdit(base, marks, next, kp, ks)
	require.True(t, ok)
	checkMarks(t, next, m)
	// the parse stopped in the kept suffix, at most a mark's distance past the change: the
	// marks after that are the base's, moved by the edit's growth
	d := len(next) - len(base)
	var moved int
	for _, mk := range m.at {
		if mk.pos > at+markEvery+100 {
			k := sortSearch(marks.at, mk.pos-d)
			require.Less(t, k, len(marks.at))
			require.Equal(t, mk.pos-d, marks.at[k].pos)
			moved++
		}
	}
	require.GreaterOrEqual(t, moved, 2)
}

// TestValidEditWorkInString: a change followed by one long string (a document, an encoded
// file) parses only up to the base's next mark inside that string, and an edit that opens or
// closes a string there is judged as a full validation would.
func TestValidEditWorkInString(t *testing.T) {
	doc := strings.Repeat(`lorem ipsum \"dolor\" sit amet, ☃ \u00e9 `, 8000) // ~340 KB
	base := []byte(`{"messages":[{"id":0}],"step":1,"documents":"` + doc + `","n":1}`)
	ok, marks := ValidMarked(base)
	require.True(t, ok)
	checkMarks(t, base, marks)
	inString := 0
	for _, mk := range marks.at {
		if mk.state == stString {
			inString++
		}
	}
	require.Greater(t, inString, 3, "marks inside the long string")

	at := strings.Index(string(base), `],"step"`)
	next := append(append(append([]byte{}, base[:at]...), `,{"id":1}],"step":2`...), base[at+len(`],"step":1`):]...)
	kp, ks := at, len(base)-at-len(`],"step":1`)
	ok, m := ValidEdit(base, marks, next, kp, ks)
	require.True(t, ok)
	checkMarks(t, next, m)
	d := len(next) - len(base)
	moved := 0
	for _, mk := range m.at {
		if mk.pos > at+markEvery+100 {
			k := sortSearch(marks.at, mk.pos-d)
			require.Less(t, k, len(marks.at))
			require.Equal(t, mk.pos-d, marks.at[k].pos, "a mark past the parse's end is the base's, moved")
			moved++
		}
	}
	require.GreaterOrEqual(t, moved, 3)

	// edits inside the string: a quote that ends it early, an escape cut in half, a control
	// character, a valid change; each verdict is the reference's
	mid := len(base) / 2
	for _, ins := range []string{`"`, `\`, "\x01", `\u12`, `x`, `\n`, `","k":"`, "\xe2\x98"} {
		next := append(append(append([]byte{}, base[:mid]...), ins...), base[mid:]...)
		ok, m := ValidEdit(base, marks, next, mid, len(base)-mid)
		require.Equal(t, reference(next), ok, "insert %q", ins)
		if ok {
			checkMarks(t, next, m)
		}
	}
}

func sortSearch(ms []mark, pos int) int {
	for k, m := range ms {
		if m.pos >= pos {
			return k
		}
	}
	return len(ms)
}

func TestValidEditRefusesMismatchedMarks(t *testing.T) {
	base := []byte(`[1,2,3]`)
	_, marks := ValidMarked(base)
	// marks of another length: a full validation
	ok, m := ValidEdit([]byte(`[1,2,3,4]`), marks, []byte(`[1,2,`), 5, 0)
	require.False(t, ok)
	require.Nil(t, m)
	ok, _ = ValidEdit(base, marks, []byte(`[1,2,3,4]`), 6, 1)
	require.True(t, ok)
}

func FuzzValidEdit(f *testing.F) {
	f.Add(uint64(1), uint16(100), uint8(3))
	f.Add(uint64(7), uint16(5000), uint8(20))
	f.Fuzz(func(t *testing.T, seed uint64, size uint16, steps uint8) {
		defer func(e int) { markEvery = e }(markEvery)
		markEvery = 16
		r := rand.New(rand.NewPCG(seed, 2))
		var sb strings.Builder
		gen(r, &sb, int(size), 0)
		base := []byte(sb.String())
		ok, marks := ValidMarked(base)
		require.True(t, ok)
		for i := 0; i < int(steps%64); i++ {
			next, kp, ks := edit(r, base)
			ok, m := ValidEdit(base, marks, next, kp, ks)
			require.Equal(t, reference(next), ok)
			if ok {
				base, marks = next, m
			}
		}
	})
}

func BenchmarkValidEdit(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"messages":[`)
	for i := 0; i < 700; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"id":%d,"content":"%s"}`, i, strings.Repeat("word ", 200))
	}
	sb.WriteString(`],"step":1,"documents":"` + strings.Repeat("lorem ipsum ", 25000) + `"}`)
	base := []byte(sb.String())
	_, marks := ValidMarked(base)
	at := strings.Index(sb.String(), `],"step"`)
	next := append(append(append([]byte{}, base[:at]...), `,{"id":700,"content":"hi"}],"step":2`...), base[at+len(`],"step":1`):]...)
	kp, ks := at, len(base)-at-len(`],"step":1`)
	b.Run("full", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		for b.Loop() {
			ValidMarked(next)
		}
	})
	b.Run("edit", func(b *testing.B) {
		b.SetBytes(int64(len(next)))
		for b.Loop() {
			ValidEdit(base, marks, next, kp, ks)
		}
	})
}
