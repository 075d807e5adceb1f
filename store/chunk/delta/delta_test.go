package delta

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
)

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkDelta checks Compute's result for prev -> next: Apply rebuilds next, the middle is next's,
// and the prefix and suffix are maximal (one more byte would differ or overlap).
func checkDelta(t *testing.T, prev, next []byte, what string) (middle []byte) {
	t.Helper()
	kp, ks, middle := Compute(prev, next)
	if kp < 0 || ks < 0 || kp+ks > min(len(prev), len(next)) {
		t.Fatalf("%s: keepPrefix %d keepSuffix %d for %d -> %d bytes", what, kp, ks, len(prev), len(next))
	}
	if !bytes.Equal(middle, next[kp:len(next)-ks]) {
		t.Fatalf("%s: middle is not next[keepPrefix:len-keepSuffix]", what)
	}
	if kp < min(len(prev), len(next)) && prev[kp] == next[kp] {
		t.Fatalf("%s: prefix %d is not the longest", what, kp)
	}
	if kp+ks < min(len(prev), len(next)) && prev[len(prev)-1-ks] == next[len(next)-1-ks] {
		t.Fatalf("%s: suffix %d is not the longest", what, ks)
	}
	got, err := Apply(prev, kp, ks, middle, hexSHA(next))
	if err != nil {
		t.Fatalf("%s: Apply: %v", what, err)
	}
	if !bytes.Equal(got, next) {
		t.Fatalf("%s: Apply rebuilt %d bytes that differ from the %d expected", what, len(got), len(next))
	}
	return middle
}

// TestRoundTripRandomEdits: random appends, insertions, deletions and replacements (1 to 3 per
// step, anywhere) over random JSON, text and binary values give byte-exact round trips with
// maximal prefixes and suffixes.
func TestRoundTripRandomEdits(t *testing.T) {
	r := testgen.New(1)
	for _, k := range []struct {
		name string
		gen  func(int) []byte
		text bool
	}{{"json", r.JSON, true}, {"text", r.Text, true}, {"binary", r.Binary, false}, {"random", r.Bytes, false}} {
		for _, size := range []int{0, 1, 7, 8, 9, 255, 256, 257, 5000, 200 << 10} {
			v := k.gen(size)
			for i := 0; i < 30; i++ {
				n := 1 + r.Intn(3)
				next := v
				var edits []string
				for j := 0; j < n; j++ {
					e := r.Edit(next, []int{1, 8, 300, 5000}[r.Intn(4)], k.text)
					next = e.Apply(next)
					edits = append(edits, e.String())
				}
				middle := checkDelta(t, v, next, fmt.Sprintf("%s %d step %d (%s)", k.name, size, i, strings.Join(edits, "; ")))
				if len(middle) > len(next) {
					t.Fatal("middle longer than the value")
				}
				v = next
			}
		}
	}
}

// TestSingleEditMiddle: for one edit, the middle is at most the inserted bytes (shorter when they
// repeat their neighbours): the greedy prefix never makes the suffix miss the edit's end.
func TestSingleEditMiddle(t *testing.T) {
	r := testgen.New(2)
	v := r.JSON(100 << 10)
	for i := 0; i < 300; i++ {
		e := r.Edit(v, 2000, true)
		next := e.Apply(v)
		middle := checkDelta(t, v, next, e.String())
		if len(middle) > len(e.Ins) {
			t.Fatalf("%s: middle of %d bytes for %d inserted", e, len(middle), len(e.Ins))
		}
	}
}

// TestCommonAffixesAllAlignments compares the word and block loops with the plain definition for
// differences at every offset near word and block edges, from both ends.
func TestCommonAffixesAllAlignments(t *testing.T) {
	r := testgen.New(3)
	base := r.Bytes(3*block + 21)
	naivePrefix := func(a, b []byte) int {
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		return i
	}
	naiveSuffix := func(a, b []byte) int {
		i := 0
		for i < len(a) && i < len(b) && a[len(a)-1-i] == b[len(b)-1-i] {
			i++
		}
		return i
	}
	for cut := 0; cut <= len(base); cut++ {
		for _, pos := range []int{0, 1, 7, 8, 9, 63, block - 1, block, block + 1, 2*block + 5, len(base) - 1} {
			a := base[:cut]
			b := bytes.Clone(a)
			if pos < len(b) {
				b[pos] ^= 0x40
			}
			if got, want := commonPrefix(a, b), naivePrefix(a, b); got != want {
				t.Fatalf("len %d diff at %d: commonPrefix %d, want %d", cut, pos, got, want)
			}
			if got, want := commonSuffix(a, b), naiveSuffix(a, b); got != want {
				t.Fatalf("len %d diff at %d: commonSuffix %d, want %d", cut, pos, got, want)
			}
			// Different lengths: b is a longer with extra bytes at the start (suffix) or end (prefix).
			longer := append(bytes.Clone(a), 1, 2, 3)
			if got, want := commonPrefix(a, longer), naivePrefix(a, longer); got != want {
				t.Fatalf("len %d: prefix with a longer value: %d, want %d", cut, got, want)
			}
			longer = append([]byte{9, 8, 7}, b...)
			if got, want := commonSuffix(a, longer), naiveSuffix(a, longer); got != want {
				t.Fatalf("len %d: suffix with a longer value: %d, want %d", cut, got, want)
			}
		}
	}
}

func TestApplyErrors(t *testing.T) {
	base := []byte("0123456789")
	good := hexSHA([]byte("01XY89"))
	if got, err := Apply(base, 2, 2, []byte("XY"), good); err != nil || string(got) != "01XY89" {
		t.Fatalf("Apply = %q, %v", got, err)
	}
	if got, err := Apply(base, 2, 2, []byte("XY"), strings.ToUpper(good)); err != nil || string(got) != "01XY89" {
		t.Fatalf("upper-case hex: %q, %v", got, err)
	}
	if got, err := Apply(nil, 0, 0, nil, hexSHA(nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q, %v", got, err)
	}
	if got, err := Apply(base, 10, 0, []byte("!"), hexSHA([]byte("0123456789!"))); err != nil || string(got) != "0123456789!" {
		t.Fatalf("append: %q, %v", got, err)
	}
	tests := []struct {
		name           string
		kp, ks         int
		sha            string
		field, message string
	}{
		{"negative prefix", -1, 0, good, "stateDelta.keepPrefix", "-1 is negative"},
		{"prefix past the base", 11, 0, good, "stateDelta.keepPrefix", "11 exceeds the base's 10 bytes"},
		{"negative suffix", 0, -3, good, "stateDelta.keepSuffix", "-3 is negative"},
		{"suffix past the base", 0, 12, good, "stateDelta.keepSuffix", "12 exceeds the base's 10 bytes"},
		{"overlap", 6, 5, good, "stateDelta.keepSuffix", "keepPrefix 6 + keepSuffix 5 exceed the base's 10 bytes (prefix and suffix overlap)"},
		{"sha too short", 2, 2, good[:10], "stateDelta.sha256", "want 64 hex digits, got 10 characters"},
		{"sha not hex", 2, 2, "zz" + good[2:], "stateDelta.sha256", "not hex"},
		{"sha of another value", 2, 2, hexSHA(base), "stateDelta.sha256", "the rebuilt value (6 bytes) has SHA-256 " + good + ", not " + hexSHA(base)},
		{"prefix checked before the hash", -1, 0, "nope", "stateDelta.keepPrefix", "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Apply(base, tc.kp, tc.ks, []byte("XY"), tc.sha)
			var de *Error
			if !errors.As(err, &de) || got != nil {
				t.Fatalf("Apply = %q, %v; want a *delta.Error", got, err)
			}
			if de.Path() != tc.field || !strings.Contains(de.Reason, tc.message) {
				t.Fatalf("error %q: want field %s saying %q", err, tc.field, tc.message)
			}
			if want := "invalid " + tc.field + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Error() = %q, want prefix %q", err, want)
			}
			if in := de.In("blobs[2].delta"); in.Path() != "blobs[2].delta."+de.Field || de.Object != "stateDelta" {
				t.Fatalf("In: %q (original now %q)", in.Path(), de.Path())
			}
		})
	}
}

func TestApplyDoesNotAlias(t *testing.T) {
	base := []byte("abcdef")
	middle := []byte("XYZ")
	got, err := Apply(base, 3, 3, middle, hexSHA([]byte("abcXYZdef")))
	if err != nil {
		t.Fatal(err)
	}
	got[0], got[3] = '!', '!'
	if string(base) != "abcdef" || string(middle) != "XYZ" {
		t.Fatal("the result shares memory with its inputs")
	}
}

func TestPays(t *testing.T) {
	tests := []struct {
		next, middle int
		want         bool
	}{
		{MinSize, 0, false},                 // small values go whole
		{MinSize + 1, 0, true},              // identical but for nothing
		{MinSize + 1, MinSize/2 + 1, false}, // just over half
		{10000, 4999, true},
		{10000, 5000, false},        // half is not less than half
		{1 << 20, 1100, true},       // the workload
		{1 << 20, 700 << 10, false}, // two edits far apart
	}
	for _, tc := range tests {
		if got := Pays(tc.next, tc.middle); got != tc.want {
			t.Errorf("Pays(%d, %d) = %v, want %v", tc.next, tc.middle, got, tc.want)
		}
	}
}

// TestApplyMarked: a chain of random edits applied with the previous value's marks gives the
// values Apply gives, and marks equal to those of hashing each value from the start.
func TestApplyMarked(t *testing.T) {
	defer func(e int) { hashEvery = e }(hashEvery)
	for _, every := range []int{64, 640, 64 << 10} {
		hashEvery = every
		r := rand.New(rand.NewPCG(uint64(every), 3))
		prev := make([]byte, 200_000)
		for i := range prev {
			prev[i] = byte(r.IntN(256))
		}
		_, marks := MarkHash(prev)
		for step := 0; step < 200; step++ {
			next := append([]byte{}, prev...)
			at := r.IntN(len(next) + 1)
			switch r.IntN(3) {
			case 0:
				next = append(next[:at], append([]byte("inserted bytes"), prev[at:]...)...)
			case 1:
				next = append(next[:at], prev[min(len(prev), at+r.IntN(300)):]...)
			default:
				if at < len(next) {
					next[at]++
				}
			}
			kp, ks, mid := Compute(prev, next)
			sum := sha256.Sum256(next)
			got, gotMarks, err := ApplyMarked(prev, marks, kp, ks, mid, hex.EncodeToString(sum[:]))
			require.NoError(t, err)
			require.Equal(t, next, got)
			_, want := MarkHash(next)
			require.Equal(t, want, gotMarks, "every %d step %d", every, step)
			// a wrong sum is refused, whatever the marks
			_, _, err = ApplyMarked(prev, marks, kp, ks, mid, strings.Repeat("0", 64))
			require.Error(t, err)
			prev, marks = next, gotMarks
		}
		// marks of another value (wrong length) are not used
		sum := sha256.Sum256(prev[:len(prev)-1])
		got, _, err := ApplyMarked(prev, &HashMarks{n: 3}, len(prev)-1, 0, nil, hex.EncodeToString(sum[:]))
		require.NoError(t, err)
		require.Equal(t, prev[:len(prev)-1], got)
	}
}
