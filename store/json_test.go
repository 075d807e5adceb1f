package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tasksJSON is a JSON array of n task objects.
func tasksJSON(n int) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"task-%06d","path":["__pregel_pull","node_%d"],"args":{"x":%d,"note":"a, b"}}`, i, i%17, i)
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}

func TestMetadataCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`1`, `1`}, {`1.0`, `1`}, {`1e2`, `100`}, {`"1"`, `"1"`}, {`-0.5`, `-0.5`},
		{` { "b" : [ 1 , true , null ], "a" : "x<y" } `, `{"a":"x<y","b":[1,true,null]}`},
		{`12345678901234567890`, `12345678901234567890`},
		{`"\u00e9"`, `"é"`},
	} {
		got, err := CanonicalJSON([]byte(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{``, `{`, `1 2`, `nul`} {
		_, err := CanonicalJSON([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestCountArray(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		null bool
		ok   bool
	}{
		{``, 0, true, true}, {`null`, 0, true, true}, {` [ ] `, 0, false, true}, {`[1]`, 1, false, true},
		{`[1,2,3]`, 3, false, true}, {`[[1,2],{"a":[3,4]},"x,y\"]"]`, 3, false, true}, {`[{}]`, 1, false, true},
		{`{}`, 0, false, false}, {`"x"`, 0, false, false}, {`[1,2`, 0, false, false}, {`[1] x`, 0, false, false},
		{`["a\\", "b,c"]`, 2, false, true}, {`["\\\"],", 1]`, 2, false, true}, {`["\"]`, 0, false, false},
		{"[\n\t1 ,\r\n 2 ]\n", 2, false, true}, {`[""]`, 1, false, true}, {`[true,null,-1e5]`, 3, false, true},
	} {
		n, null, ok := CountArray([]byte(tc.in))
		require.Equal(t, tc.ok, ok, tc.in)
		if ok {
			require.Equal(t, tc.n, n, tc.in)
			require.Equal(t, tc.null, null, tc.in)
		}
	}
	n, _, ok := CountArray(tasksJSON(1000))
	require.True(t, ok)
	require.Equal(t, 1000, n)
	var arr []json.RawMessage
	require.NoError(t, json.Unmarshal(tasksJSON(10), &arr))
	require.Len(t, arr, 10)
}
