package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSelectExpired(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// 6 checkpoints, seq 1..6, created 60s apart, newest at now
	items := func(n int) []RetentionItem {
		var out []RetentionItem
		for i := n; i >= 1; i-- { // deliberately unsorted (descending)
			out = append(out, RetentionItem{Seq: int64(i), ID: fmt.Sprintf("c%d", i), CreatedAt: now.Add(-time.Duration(n-i) * time.Minute)})
		}
		return out
	}
	cases := []struct {
		name string
		n    int
		r    Retention
		want []string
	}{
		{"empty", 0, Retention{KeepLast: 1}, nil},
		{"single never", 1, Retention{KeepLast: 1, MaxAgeSeconds: 1}, nil},
		{"off", 6, Retention{}, nil},
		{"unlimited keepLast 0", 6, Retention{KeepLast: 0}, nil},
		{"keepLast 10 of 6", 6, Retention{KeepLast: 10}, nil},
		{"keepLast 6 of 6", 6, Retention{KeepLast: 6}, nil},
		{"keepLast 3", 6, Retention{KeepLast: 3}, []string{"c1", "c2", "c3"}},
		{"keepLast 1", 6, Retention{KeepLast: 1}, []string{"c1", "c2", "c3", "c4", "c5"}},
		{"keepLast 3 keepFirst", 6, Retention{KeepLast: 3, KeepFirst: true}, []string{"c2", "c3"}},
		{"keepLast 1 keepFirst", 2, Retention{KeepLast: 1, KeepFirst: true}, nil},
		{"maxAge 150s", 6, Retention{MaxAgeSeconds: 150}, []string{"c1", "c2", "c3"}},
		{"maxAge exact boundary kept", 6, Retention{MaxAgeSeconds: 120}, []string{"c1", "c2", "c3"}},
		{"maxAge tiny never newest", 6, Retention{MaxAgeSeconds: 1}, []string{"c1", "c2", "c3", "c4", "c5"}},
		{"maxAge keepFirst", 6, Retention{MaxAgeSeconds: 150, KeepFirst: true}, []string{"c2", "c3"}},
		{"union keepLast 5 + maxAge 150", 6, Retention{KeepLast: 5, MaxAgeSeconds: 150}, []string{"c1", "c2", "c3"}},
		{"union keepLast 2 + maxAge 150", 6, Retention{KeepLast: 2, MaxAgeSeconds: 150}, []string{"c1", "c2", "c3", "c4"}},
		{"negative is off", 6, Retention{KeepLast: -1, MaxAgeSeconds: -5}, nil},
		{"idle ttl ignored", 6, Retention{IdleTTLSeconds: 1}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := items(tc.n)
			orig := append([]RetentionItem(nil), in...)
			require.Equal(t, tc.want, SelectExpired(in, tc.r, now))
			require.Equal(t, orig, in, "input not modified")
		})
	}
}

func TestPruneRetention(t *testing.T) {
	own := Retention{KeepLast: 7, KeepFirst: true, IdleTTLSeconds: 9}
	for _, tc := range []struct {
		req  PruneRequest
		want Retention
	}{
		{PruneRequest{}, own},
		{PruneRequest{KeepLast: 2}, Retention{KeepLast: 2, KeepFirst: true}},
		{PruneRequest{OlderThanSeconds: 60}, Retention{MaxAgeSeconds: 60, KeepFirst: true}},
	} {
		require.Equal(t, tc.want, tc.req.Retention(own), "%+v", tc.req)
	}
	require.Error(t, PruneRequest{KeepLast: -1}.Validate())
	require.Error(t, PruneRequest{OlderThanSeconds: -1}.Validate())
	require.NoError(t, PruneRequest{KeepLast: 1}.Validate())
	now := time.Now()
	require.True(t, Retention{IdleTTLSeconds: 60}.Expired(now.Add(-61*time.Second), now))
	require.False(t, Retention{IdleTTLSeconds: 60}.Expired(now.Add(-59*time.Second), now))
	require.False(t, Retention{}.Expired(now.Add(-time.Hour), now))
	for _, r := range []Retention{{KeepLast: -1}, {MaxAgeSeconds: -1}, {IdleTTLSeconds: -1}} {
		var ie *InvalidError
		require.ErrorAs(t, r.Validate(), &ie)
	}
}
