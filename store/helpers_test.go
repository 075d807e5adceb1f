package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a settable Now for tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 22, 3, 30, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond) // strictly increasing
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openTest(t testing.TB, mut ...func(*Options)) *Store {
	t.Helper()
	opts := Options{Path: filepath.Join(t.TempDir(), "ckptd.db"), noBackground: true}
	for _, m := range mut {
		m(&opts)
	}
	s, err := Open(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustSave(t testing.TB, s *Store, req SaveRequest) SaveResult {
	t.Helper()
	res, err := s.Save(context.Background(), req)
	require.NoError(t, err)
	return res
}

// rawDB opens a separate plain connection to the store's file (to corrupt or inspect it).
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

var vocab = strings.Fields(`the agent tool call result user assistant message plan step search query document
	summary answer context memory retrieve function output input error retry node graph state value channel task
	model token prompt response chunk source citation analysis report draft review final update pending write`)

// checkpointJSON builds realistic checkpoint-like JSON of about size bytes (compresses ~3x).
func checkpointJSON(rng *rand.Rand, size int) []byte {
	var b strings.Builder
	b.WriteString(`{"channel_values":{"messages":[`)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `{"id":"%016x%016x","role":"%s","content":"`, rng.Uint64(), rng.Uint64(), role)
		n := 10 + rng.IntN(60)
		for w := 0; w < n; w++ {
			if w > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(vocab[rng.IntN(len(vocab))])
		}
		fmt.Fprintf(&b, `","tokens":%d,"ts":%d}`, rng.IntN(5000), 1700000000000+rng.Int64N(1e9))
	}
	fmt.Fprintf(&b, `]},"step":%d,"versions":{"messages":"%08x"}}`, rng.IntN(100), rng.Uint32())
	return []byte(b.String())
}

func pendingTasksJSON(n int) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"task-%06d","name":"node_%d","path":["__pregel_pull","node_%d"],"args":{"x":%d,"note":"run the tool"}}`, i, i%17, i%17, i)
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}
