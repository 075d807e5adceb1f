//go:build linux

package sqlite

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestWriteGateTakesTurns: a writer that leaves the gate and asks again at once queues behind the
// writer already waiting, instead of taking the write turn back (what SQLite's busy handler let
// happen: a process with saves queued kept the lock for seconds while the others slept).
func TestWriteGateTakesTurns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	a, b, probe := openGate(path), openGate(path), openGate(path)
	require.NotNil(t, a)
	defer a.close()
	defer b.close()
	defer probe.close()

	require.True(t, a.enter())
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	bIn, bDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(bDone)
		require.True(t, b.enter())
		note("b")
		close(bIn)
		time.Sleep(50 * time.Millisecond) // b's transaction
		b.leave()
	}()
	// wait until b holds the turnstile (it is then waiting for the write turn)
	require.Eventually(t, func() bool {
		if probe.flock(unix.F_OFD_SETLK, unix.F_WRLCK, gateTurnstile) == nil {
			probe.unlock(gateTurnstile)
			return false
		}
		return true
	}, 5*time.Second, time.Millisecond)
	a.leave()
	require.True(t, a.enter()) // at once again: must come after b
	note("a")
	a.leave()
	<-bIn
	<-bDone
	assert.Equal(t, []string{"b", "a"}, order)
}

// TestWriteGateUncontended: a store alone on its database takes no turns; with another store
// open on it, entering and leaving an unused gate costs two fcntl calls each way.
func TestWriteGateUncontended(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	g := openGate(path)
	defer g.close()
	require.True(t, g.alone())
	assert.False(t, g.enter(), "alone: no gate")
	other := openGate(path)
	require.False(t, g.alone())
	for i := 0; i < 1000; i++ {
		require.True(t, g.enter())
		g.leave()
	}
	other.close()
	assert.True(t, g.alone(), "the other store went away")
	var nilGate *writeGate
	assert.False(t, nilGate.enter())
	nilGate.leave()
}
