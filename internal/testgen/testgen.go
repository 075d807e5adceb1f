// Package testgen generates the inputs of the chunk and delta tests and benchmarks: random JSON,
// text and binary values, random edits of them, and the workload of issue #17 (a ~1 MB JSON
// state that grows by ~1 KB per step). Its generator is splitmix64, written here, so that golden
// vectors built from its output never depend on math/rand's sequences.
package testgen

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Rand is a splitmix64 generator: the same seed gives the same sequence on every platform and
// Go version.
type Rand struct{ s uint64 }

// New returns a generator seeded with seed.
func New(seed uint64) *Rand { return &Rand{s: seed} }

// Uint64 returns the next 64 random bits.
func (r *Rand) Uint64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Intn returns a number in [0, n); n > 0. (The modulo bias is irrelevant here.)
func (r *Rand) Intn(n int) int { return int(r.Uint64() % uint64(n)) }

// Bytes returns n random bytes.
func (r *Rand) Bytes(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			b[j] = byte(v)
			v >>= 8
		}
	}
	return b
}

var words = strings.Fields(`the of and to in is it you that he was for on are with as his they be at one
have this from or had by hot word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so these her
long make thing see him two has look more day could go come did number sound no most people my over
know water than call first who may down side been now find any new work part take get place made live
where after back little only round man year came show every good me give our under name very through
just form sentence great think say help low line differ turn cause much mean before move right boy old
too same tell does set three want air well also play small end put home read hand port large spell add
even land here must big high such follow act why ask men change went light kind off need house picture
try us again animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye never last
let thought city tree cross farm hard start might story saw far sea draw left late run while press
close night real life few north open seem together next white children begin got walk example ease
paper group always music those both mark often letter until mile river car feet care second book carry
took science eat room friend began idea fish mountain stop once base hear horse cut sure watch color
face wood main enough plain girl usual young ready above ever red list though feel talk bird soon body
dog family direct pose leave song measure door product black short numeral class wind question happen
complete ship area half rock order fire south problem piece told knew pass since top whole king space
heard best hour better true during hundred five remember step early hold west ground interest reach
fast verb sing listen six table travel less morning ten simple several vowel toward war lay against
pattern slow center love person money serve appear road map rain rule govern pull cold notice voice
unit power town fine certain fly fall lead cry dark machine note wait plan figure star box noun field
rest correct able pound done beauty drive stood contain front teach week final gave green quick
develop ocean warm free minute strong special mind behind clear tail produce fact street inch multiply
nothing course stay wheel full force blue object decide surface deep moon island foot system busy test
record boat common gold possible plane stead dry wonder laugh thousand ago ran check game shape equate
miss brought heat snow tire bring yes distant fill east paint language among`)

// Text returns exactly n bytes of English-like words (frequent words more frequent), no quotes or
// backslashes, so it can sit inside a JSON string.
func (r *Rand) Text(n int) []byte {
	b := make([]byte, 0, n+16)
	for len(b) < n {
		b = append(b, words[r.Intn(r.Intn(len(words))+1)]...)
		if r.Intn(12) == 0 {
			b = append(b, '.')
		}
		b = append(b, ' ')
	}
	return b[:n]
}

// JSON returns a random JSON document of at least n bytes: an object of nested objects, arrays,
// strings, numbers, booleans and nulls.
func (r *Rand) JSON(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		r.jsonValue(&b, 0)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func (r *Rand) jsonValue(b *bytes.Buffer, depth int) {
	k := r.Intn(8)
	if depth >= 4 && k >= 6 {
		k = r.Intn(6)
	}
	switch k {
	case 0:
		b.WriteString("null")
	case 1:
		b.WriteString(strconv.FormatBool(r.Intn(2) == 0))
	case 2:
		b.WriteString(strconv.FormatInt(int64(r.Uint64()>>r.Intn(64)), 10))
	case 3:
		b.WriteString(strconv.FormatFloat(float64(r.Intn(1_000_000))/1000, 'g', -1, 64))
	case 4, 5:
		b.WriteByte('"')
		b.Write(r.Text(1 + r.Intn(200)))
		b.WriteByte('"')
	case 6:
		b.WriteByte('[')
		for i, n := 0, r.Intn(6); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			r.jsonValue(b, depth+1)
		}
		b.WriteByte(']')
	default:
		b.WriteByte('{')
		for i, n := 0, r.Intn(6); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, `"%s_%d":`, words[r.Intn(len(words))], i)
			r.jsonValue(b, depth+1)
		}
		b.WriteByte('}')
	}
}

// Binary returns n bytes of structured binary data: random stretches, runs of one byte, and
// copies of earlier stretches (so values contain repeated content, like real serialised data).
func (r *Rand) Binary(n int) []byte {
	b := make([]byte, 0, n)
	for len(b) < n {
		m := min(1+r.Intn(4096), n-len(b))
		switch k := r.Intn(4); {
		case k == 0:
			b = append(b, bytes.Repeat([]byte{byte(r.Intn(256))}, m)...)
		case k == 1 && len(b) > m:
			p := r.Intn(len(b) - m)
			b = append(b, b[p:p+m]...)
		default:
			b = append(b, r.Bytes(m)...)
		}
	}
	return b
}

// Edit is one change of a byte string: delete Del bytes at Pos, then insert Ins there.
type Edit struct {
	Kind string // append, insert, delete, replace
	Pos  int
	Del  int
	Ins  []byte
}

// Apply returns a new slice: v with the edit applied.
func (e Edit) Apply(v []byte) []byte {
	out := make([]byte, 0, len(v)-e.Del+len(e.Ins))
	out = append(out, v[:e.Pos]...)
	out = append(out, e.Ins...)
	return append(out, v[e.Pos+e.Del:]...)
}

func (e Edit) String() string {
	return fmt.Sprintf("%s at %d: -%d +%d", e.Kind, e.Pos, e.Del, len(e.Ins))
}

// Edit returns a random edit of v, of at most maxLen bytes deleted and inserted: an append, an
// insertion, a deletion or a replacement at a random place. The inserted bytes are text when
// text is true, random bytes otherwise.
func (r *Rand) Edit(v []byte, maxLen int, text bool) Edit {
	ins := func() []byte {
		n := 1 + r.Intn(maxLen)
		if text {
			return r.Text(n)
		}
		return r.Bytes(n)
	}
	kinds := []string{"append", "insert", "delete", "replace"}
	k := kinds[r.Intn(len(kinds))]
	if len(v) == 0 {
		k = "append"
	}
	switch k {
	case "append":
		return Edit{Kind: k, Pos: len(v), Ins: ins()}
	case "insert":
		return Edit{Kind: k, Pos: r.Intn(len(v) + 1), Ins: ins()}
	case "delete":
		p := r.Intn(len(v))
		return Edit{Kind: k, Pos: p, Del: 1 + r.Intn(min(maxLen, len(v)-p))}
	default:
		p := r.Intn(len(v))
		return Edit{Kind: k, Pos: p, Del: 1 + r.Intn(min(maxLen, len(v)-p)), Ins: ins()}
	}
}

// Workload is the workload of issue #17: an agent's JSON state of about Size bytes (a message
// history plus retrieved documents) that, at every step, gains one ~1 KB message and changes one
// field (the step counter).
type Workload struct {
	r    *Rand
	msgs [][]byte
	docs []byte
	step int
	// FieldFirst puts the changed field before the message list: the two edits of a step are
	// then ~700 KB apart (the hard case for a prefix/suffix delta). Otherwise it follows the list,
	// right after the appended message, as in a Python dict built messages-first.
	FieldFirst bool
}

// NewWorkload returns the workload at step 0: ~70% messages, ~30% documents, about size bytes.
func NewWorkload(seed uint64, size int) *Workload {
	w := &Workload{r: New(seed)}
	w.docs = w.r.Text(size * 3 / 10)
	for n := len(w.docs); n < size; n += len(w.msgs[len(w.msgs)-1]) + 1 {
		w.msgs = append(w.msgs, w.message())
	}
	return w
}

var roles = []string{"user", "assistant", "tool"}

func (w *Workload) message() []byte {
	return fmt.Appendf(nil, `{"id":"msg-%06d","role":"%s","content":"%s","tokens":%d}`,
		len(w.msgs), roles[w.r.Intn(len(roles))], w.r.Text(850+w.r.Intn(200)), 100+w.r.Intn(400))
}

// State returns the state of the current step as JSON.
func (w *Workload) State() []byte {
	var b bytes.Buffer
	b.Grow(len(w.docs) + len(w.msgs)*1100)
	field := `"step":` + strconv.Itoa(w.step)
	b.WriteByte('{')
	if w.FieldFirst {
		b.WriteString(field + ",")
	}
	b.WriteString(`"messages":[`)
	for i, m := range w.msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString(`],`)
	if !w.FieldFirst {
		b.WriteString(field + ",")
	}
	b.WriteString(`"documents":"`)
	b.Write(w.docs)
	b.WriteString(`"}`)
	return b.Bytes()
}

// Advance moves to the next step: one more message, the step counter incremented.
func (w *Workload) Advance() {
	w.step++
	w.msgs = append(w.msgs, w.message())
}
