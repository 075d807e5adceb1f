// Package jsonvalid checks that bytes are one JSON value in valid UTF-8 (exactly what
// json.Valid(b) && utf8.Valid(b) accepts, several times faster), and checks an edited value
// without reading all of it again: a validation can leave Marks (the parser's state about every
// 64 KiB, at a token start or between two characters of a string), and ValidEdit of a value that
// keeps a prefix and a suffix of a marked base resumes from the last mark before the change and
// stops as soon as the parser is back in the base's state at the same place in the kept suffix
// (the rest then parses as it did in the base, which was valid).
package jsonvalid

import (
	"encoding/binary"
	"sort"
	"unicode/utf8"
)

// maxDepth is encoding/json's nesting limit, kept so that whatever Valid accepts
// json.Unmarshal accepts too.
const maxDepth = 10000

// markEvery is about how many bytes lie between two marks of a marked validation (a variable
// for the tests only).
var markEvery = 64 << 10

// maxMarkDepth: a parser state nested deeper than this is not marked (a mark copies the stack of
// open containers); the next token start tries again.
const maxMarkDepth = 256

// parser states at the top of the loop (a token start, or a character of a string)
const (
	stValue     = iota // a value must start at i (whitespace skipped)
	stAfter            // a value just ended at i
	stKey              // an object key must start at i (whitespace skipped)
	stString           // inside a string value, a character (or escape, or the closing quote) starts at i
	stKeyString        // inside an object key, the same
)

// mark is the parser's state at a token start or inside a string (one long string, a document
// or an encoded file, is often most of a state): at pos, in state, with stack the open
// containers ('{' or '[' each, outermost first). The byte at pos is the last one the parser had
// looked at to get there.
type mark struct {
	pos   int
	state uint8
	stack string
}

// Marks are the parser states a successful validation of one value passed through, in order of
// position: each is a state from which the rest of that value parses as valid. They describe
// that value only (Len); nil Marks are none.
type Marks struct {
	n  int // the value's length
	at []mark
}

// Len is the length of the value m describes.
func (m *Marks) Len() int {
	if m == nil {
		return -1
	}
	return m.n
}

// Valid reports whether b is exactly one JSON value (RFC 8259, surrounding whitespace allowed)
// in valid UTF-8, nested at most 10000 deep (encoding/json's limit). It accepts exactly what
// json.Valid(b) && utf8.Valid(b) accepts, several times faster (strings, the bulk of states,
// are scanned 8 bytes at a time), and needs no recursion.
func Valid(b []byte) bool {
	p := parser{b: b}
	return p.run(start(b), nil)
}

// ValidMarked is Valid that also returns the marks of b (nil when b is not valid).
func ValidMarked(b []byte) (bool, *Marks) {
	p := parser{b: b, every: markEvery, next: markEvery}
	if !p.run(start(b), nil) {
		return false, nil
	}
	return true, &Marks{n: len(b), at: p.marks}
}

// ValidEdit is ValidMarked(next) for next = base[:keepPrefix] + (anything) +
// base[len(base)-keepSuffix:] where base is valid and baseMarks are its marks: it parses next
// from the last mark before keepPrefix up to the first place in the kept suffix where the parser
// is in the state the base's parse had there. Marks that do not describe a base of next's
// shape (nil, another length, keepPrefix/keepSuffix out of range) make it a full ValidMarked.
func ValidEdit(base []byte, baseMarks *Marks, next []byte, keepPrefix, keepSuffix int) (bool, *Marks) {
	if baseMarks == nil || baseMarks.n != len(base) || keepPrefix < 0 || keepSuffix < 0 ||
		keepPrefix+keepSuffix > len(base) || keepPrefix+keepSuffix > len(next) {
		return ValidMarked(next)
	}
	bm := baseMarks.at
	// resume from the last mark strictly before keepPrefix: the parser had looked at bytes up to
	// and including the one at its position, all of them kept
	r := sort.Search(len(bm), func(k int) bool { return bm[k].pos >= keepPrefix }) - 1
	p := parser{b: next, every: markEvery}
	var from resume
	if r >= 0 {
		p.marks = append(make([]mark, 0, len(bm)+2), bm[:r+1]...)
		from = resume{pos: bm[r].pos, state: bm[r].state, stack: []byte(bm[r].stack)}
	} else {
		from = start(next)
	}
	p.next = (from.pos/markEvery + 1) * markEvery
	// base marks in the kept suffix, where the parse may find itself back in the base's state
	d := len(next) - len(base)
	s := sort.Search(len(bm), func(k int) bool { return bm[k].pos >= len(base)-keepSuffix })
	sync := &syncPoints{marks: bm[s:], shift: d}
	if !p.run(from, sync) {
		return false, nil
	}
	if sync.hit >= 0 { // the rest is the base's: its marks, moved
		for _, m := range bm[s+sync.hit:] {
			if len(p.marks) == 0 || p.marks[len(p.marks)-1].pos < m.pos+d {
				p.marks = append(p.marks, mark{pos: m.pos + d, state: m.state, stack: m.stack})
			}
		}
	}
	return true, &Marks{n: len(next), at: p.marks}
}

// resume is where a parse starts: position, state and open containers.
type resume struct {
	pos   int
	state uint8
	stack []byte
}

func start(b []byte) resume { return resume{pos: skipWS(b, 0), state: stValue} }

// syncPoints are a base's marks in the kept suffix of an edited value, shifted by the edit's
// change of length: reaching one of them in the same state ends the parse (valid).
type syncPoints struct {
	marks []mark
	shift int
	k     int // the next candidate
	hit   int // index of the mark reached, or -1
}

// parser validates b; with every > 0 it records a mark at the first token start at or past
// next, next+every, ...
type parser struct {
	b     []byte
	every int
	next  int
	marks []mark
}

func (p *parser) mark(i int, state uint8, stack []byte) {
	if len(stack) > maxMarkDepth {
		return
	}
	p.marks = append(p.marks, mark{pos: i, state: state, stack: string(stack)})
	p.next = (i/p.every + 1) * p.every
}

// run parses p.b from r to the end (or to a sync point) and reports whether it is valid.
func (p *parser) run(r resume, sync *syncPoints) bool {
	b := p.b
	var small [64]byte
	stack := append(small[:0], r.stack...)
	state := r.state
	i := r.pos
	if sync != nil {
		sync.hit = -1
	}
	for {
		if p.every > 0 && i >= p.next {
			p.mark(i, state, stack)
		}
		if sync != nil && sync.k < len(sync.marks) {
			for sync.k < len(sync.marks) && sync.marks[sync.k].pos+sync.shift < i {
				sync.k++
			}
			if sync.k < len(sync.marks) {
				if m := sync.marks[sync.k]; m.pos+sync.shift == i && m.state == state && m.stack == string(stack) {
					sync.hit = sync.k
					return true
				}
			}
		}
		switch state {
		case stValue:
			if i >= len(b) {
				return false
			}
			switch c := b[i]; c {
			case '{', '[':
				if len(stack) >= maxDepth {
					return false
				}
				i = skipWS(b, i+1)
				if i < len(b) && b[i] == c+2 { // '}' == '{'+2, ']' == '['+2
					i++
					state = stAfter
					continue
				}
				stack = append(stack, c)
				if c == '{' {
					state = stKey
				}
				continue
			case '"':
				closed := false
				if i, closed = scanString(b, i+1, p.pause(i+1, sync)); !closed && i >= 0 {
					state = stString
					continue
				}
			case 't':
				i = validLiteral(b, i, "true")
			case 'f':
				i = validLiteral(b, i, "false")
			case 'n':
				i = validLiteral(b, i, "null")
			default:
				i = validNumber(b, i)
			}
			if i < 0 {
				return false
			}
			state = stAfter
		case stAfter:
			i = skipWS(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			switch b[i] {
			case ',':
				i = skipWS(b, i+1)
				if top == '{' {
					state = stKey
				} else {
					state = stValue
				}
			case top + 2:
				stack = stack[:len(stack)-1]
				i++
			default:
				return false
			}
		case stKey:
			if i >= len(b) || b[i] != '"' {
				return false
			}
			closed := false
			if i, closed = scanString(b, i+1, p.pause(i+1, sync)); i < 0 {
				return false
			}
			if !closed {
				state = stKeyString
				continue
			}
			if i = colon(b, i); i < 0 {
				return false
			}
			state = stValue
		case stString, stKeyString:
			// scan to the closing quote, pausing at the next place a mark or a sync point is due
			closed := false
			if i, closed = scanString(b, i, p.pause(i, sync)); i < 0 {
				return false
			}
			switch {
			case !closed:
			case state == stString:
				state = stAfter
			default:
				if i = colon(b, i); i < 0 {
					return false
				}
				state = stValue
			}
		}
	}
}

// pause is where a string scanned from i stops early: the next mark's place, or the next sync
// point after i (len(p.b) when neither is due).
func (p *parser) pause(i int, sync *syncPoints) int {
	stop := len(p.b)
	if p.every > 0 && p.next > i { // (p.next <= i: a state too deep to mark, none is due)
		stop = min(stop, p.next)
	}
	if sync != nil {
		for k := sync.k; k < len(sync.marks); k++ {
			if at := sync.marks[k].pos + sync.shift; at > i {
				stop = min(stop, at)
				break
			}
		}
	}
	return stop
}

// colon returns the index of the value after an object key ending at i (the key's ':' and the
// whitespace around it skipped), or -1.
func colon(b []byte, i int) int {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipWS(b, i+1)
}

// skipWS returns the index of the first byte at or after i that is not JSON whitespace.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// scanString scans a JSON string from b[j], the start of a character inside it (or of its
// closing quote), and returns the index just past the closing quote with closed true; or, when
// it reaches stop at the start of a character before that, stop's index (or the first character
// start after it) with closed false; or -1 if the string is not valid.
func scanString(b []byte, j, stop int) (int, bool) {
	for {
		// Fast path: skip 8 bytes at a time while none is '"', '\\', a control character or
		// non-ASCII (SWAR: each test is exact about whether any byte matches).
		for j+8 <= stop {
			v := binary.LittleEndian.Uint64(b[j:])
			q := v ^ (swarOnes * '"')
			s := v ^ (swarOnes * '\\')
			if ((v-swarOnes*0x20)&^v|(q-swarOnes)&^q|(s-swarOnes)&^s|v)&swarHigh != 0 {
				break
			}
			j += 8
		}
		if j >= len(b) {
			return -1, false
		}
		if j >= stop {
			return j, false
		}
		c := b[j]
		switch {
		case c == '"':
			return j + 1, true
		case c == '\\':
			if j+1 >= len(b) {
				return -1, false
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) {
					return -1, false
				}
				for _, h := range b[j+2 : j+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1, false
					}
				}
				j += 6
			default:
				return -1, false
			}
		case c < 0x20:
			return -1, false
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && size == 1 {
				return -1, false
			}
			j += size
		}
	}
}

func validLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// validNumber returns the index just past the JSON number starting at b[i], or -1.
func validNumber(b []byte, i int) int {
	digits := func(i int) int { // at least one digit
		j := i
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return -1
		}
	}
	return i
}
