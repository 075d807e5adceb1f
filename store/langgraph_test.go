package store

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLGCanonicalVersion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`1`, `1`}, {`1.0`, `1`}, {`1e0`, `1`}, {`"1"`, `"1"`}, {`"0001.0.5"`, `"0001.0.5"`}, {`2.5`, `2.5`}, {` 3 `, `3`},
	} {
		got, err := CanonicalVersion(json.RawMessage(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{`true`, `null`, `{}`, `[1]`, ``} {
		_, err := CanonicalVersion(json.RawMessage(bad))
		require.Error(t, err, bad)
	}
}

func TestLGCursor(t *testing.T) {
	c := LGCursor{ID: "1f0-a", Key: 42}
	got, err := DecodeLGCursor(c.Encode())
	require.NoError(t, err)
	require.Equal(t, c, *got)
	for _, bad := range []string{"garbage!", "W10", "WyJhIl0"} {
		_, err := DecodeLGCursor(bad)
		var ie *InvalidError
		require.ErrorAs(t, err, &ie, bad)
		require.Equal(t, "cursor", ie.Field)
	}
}

func TestParseVersions(t *testing.T) {
	vs, err := ParseVersions([]byte(`{"b": 2, "a": "0001.5", "c": 1.0}`))
	require.NoError(t, err)
	require.Equal(t, []ChanVer{{"b", "2"}, {"a", `"0001.5"`}, {"c", "1"}}, vs, "key order kept, versions canonical")
	for _, bad := range []string{`[1]`, `{"a":true}`, `{"a":1,"a":2}`, `{"a":1} x`, `{`} {
		_, err := ParseVersions([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestPackUnpack(t *testing.T) {
	long := []byte(strings.Repeat("abcdefgh", 1000))
	for _, tc := range []struct {
		name      string
		in        []byte
		threshold int
		enc       int
	}{
		{"small raw", []byte("x"), 4096, EncRaw},
		{"long compressed", long, 4096, EncS2},
		{"never", long, -1, EncRaw},
		{"empty", nil, 0, EncRaw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Pack(tc.in, tc.threshold)
			require.Equal(t, tc.enc, p.Enc)
			require.Equal(t, len(tc.in), p.Size)
			out, err := Unpack("c", "blob", p.Data, p.Enc, int64(p.Size), p.SHA)
			require.NoError(t, err)
			require.Equal(t, string(tc.in), string(out))
			if len(p.Data) > 0 {
				bad := append([]byte(nil), p.Data...)
				bad[0] ^= 1
				_, err = Unpack("c", "blob", bad, p.Enc, int64(p.Size), p.SHA)
				var ce *CorruptError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, "c", ce.CheckpointID)
				require.Contains(t, ce.Reason, "blob: SHA-256 mismatch")
			}
		})
	}
}
