package delta

import (
	"errors"
	"testing"
)

// FuzzComputeApply: for any two byte strings, Compute gives a maximal prefix and suffix and
// Apply rebuilds the second from the first. Seeds: testdata/fuzz/FuzzComputeApply.
func FuzzComputeApply(f *testing.F) {
	f.Add([]byte(`{"messages":["hi"],"step":1}`), []byte(`{"messages":["hi","there"],"step":2}`))
	f.Fuzz(func(t *testing.T, prev, next []byte) {
		checkDelta(t, prev, next, "fuzz")
	})
}

// FuzzApply: Apply never panics on any delta; it either rebuilds a value of the right size with
// the named hash, or names the field at fault. Seeds: testdata/fuzz/FuzzApply.
func FuzzApply(f *testing.F) {
	f.Add([]byte("0123456789"), 2, 2, []byte("XY"), hexSHA([]byte("01XY89")))
	f.Fuzz(func(t *testing.T, base []byte, kp, ks int, middle []byte, sha string) {
		got, err := Apply(base, kp, ks, middle, sha)
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || got != nil {
				t.Fatalf("Apply error %v is not a *delta.Error", err)
			}
			switch de.Field {
			case "keepPrefix", "keepSuffix", "sha256":
			default:
				t.Fatalf("unknown field %q", de.Field)
			}
			return
		}
		if len(got) != kp+len(middle)+ks || hexSHA(got) != sha && hexSHA(got) != toLower(sha) {
			t.Fatalf("rebuilt %d bytes with SHA-256 %s for %s", len(got), hexSHA(got), sha)
		}
	})
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
