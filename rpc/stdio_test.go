package rpc

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStdioDrained: after shutdown, Serve waits for the read loop to take in what the client
// already sent; it must not wait for a read loop that has ended (the client closed stdin) nor
// for one parked in Read with nothing to read.
func TestStdioDrained(t *testing.T) {
	returns := func(s *stdio) {
		t.Helper()
		done := make(chan struct{})
		go func() { s.drained(time.Hour); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("drained kept waiting")
		}
	}

	// the client closed its end: Read returned EOF and will not be called again
	r, w := io.Pipe()
	s := &stdio{in: r, out: io.Discard}
	require.NoError(t, w.Close())
	_, err := s.Read(make([]byte, 8))
	require.ErrorIs(t, err, io.EOF)
	returns(s)

	// the read loop sits in Read: nothing more was sent
	r, w = io.Pipe()
	defer w.Close()
	s = &stdio{in: r, out: io.Discard}
	go func() { _, _ = s.Read(make([]byte, 8)) }()
	returns(s)
}
