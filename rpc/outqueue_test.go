package rpc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
)

// slowWriter records each Write and holds the first one until released, so that the frames
// written meanwhile queue up behind it.
type slowWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	first   chan struct{} // closed when the first Write has begun
	release chan struct{}
	fail    error
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	n := w.writes
	w.mu.Unlock()
	if n == 1 {
		close(w.first)
		<-w.release
	}
	if w.fail != nil {
		return 0, w.fail
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// TestOutQueueCoalesces: frames written while another is being written go out together, whole
// and in one piece each, small ones in one Write; each writer returns once its frame is out.
func TestOutQueueCoalesces(t *testing.T) {
	c := NewCodec(framing.Limits{}, nil)
	w := &slowWriter{first: make(chan struct{}), release: make(chan struct{})}
	first := make(chan error, 1)
	go func() { first <- c.writeFrame(w, [][]byte{[]byte(`{"first":1}`)}, nil, false) }()
	<-w.first
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(fmt.Sprintf(`{"id":%d}`, i))
			var att []byte
			if i%10 == 0 { // a large attachment: written from where it is
				att = bytes.Repeat([]byte{byte('a' + i/10)}, copyMax+1)
			}
			errs <- c.writeFrame(w, [][]byte{body}, att, att != nil)
		}()
	}
	// wait until every frame is queued behind the blocked write
	for {
		c.out.mu.Lock()
		queued := len(c.out.frames)
		c.out.mu.Unlock()
		if queued == n {
			break
		}
	}
	close(w.release)
	require.NoError(t, <-first)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// 1 write for the first frame; then the 40 queued frames: small runs between the 4 large
	// attachments, each attachment on its own
	assert.LessOrEqual(t, w.writes, 1+2*4+1)

	r := framing.NewReader(&w.buf, framing.Limits{MaxBody: 1 << 20, MaxAttachment: 1 << 20})
	seen := map[string]bool{}
	for {
		f, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		seen[string(f.Body)] = true
		var id int
		if _, err := fmt.Sscanf(string(f.Body), `{"id":%d}`, &id); err == nil && id%10 == 0 {
			require.True(t, f.HasAttachment, string(f.Body))
			assert.Equal(t, strings.Repeat(string(rune('a'+id/10)), copyMax+1), string(f.Attachment))
		} else {
			assert.False(t, f.HasAttachment, string(f.Body))
		}
	}
	assert.Len(t, seen, n+1)
}

// TestOutQueueErrors: a failed write fails every frame of its round, and the queue goes on.
func TestOutQueueErrors(t *testing.T) {
	c := NewCodec(framing.Limits{}, nil)
	w := &slowWriter{first: make(chan struct{}), release: make(chan struct{}), fail: errors.New("broken pipe")}
	first := make(chan error, 1)
	go func() { first <- c.writeFrame(w, [][]byte{[]byte(`{}`)}, nil, false) }()
	<-w.first
	second := make(chan error, 1)
	go func() { second <- c.writeFrame(w, [][]byte{[]byte(`{}`)}, nil, false) }()
	for {
		c.out.mu.Lock()
		queued := len(c.out.frames)
		c.out.mu.Unlock()
		if queued == 1 {
			break
		}
	}
	close(w.release)
	assert.EqualError(t, <-first, "broken pipe")
	assert.EqualError(t, <-second, "broken pipe")

	var ok bytes.Buffer
	require.NoError(t, c.writeFrame(&ok, [][]byte{[]byte(`{"a":1}`)}, []byte("x"), true))
	assert.Equal(t, "Content-Length: 7\r\nCkptd-Attachment-Length: 1\r\n\r\n{\"a\":1}x", ok.String())
}
