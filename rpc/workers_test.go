package rpc

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWorkersRunEverythingAndReuse(t *testing.T) {
	w := &workers{tasks: make(chan func())}
	var n atomic.Int64
	// sequential tasks: after the first, an idle worker is normally there to take the next one
	for i := 0; i < 100; i++ {
		done := make(chan struct{})
		w.run(func() { n.Add(1); close(done) })
		<-done
		time.Sleep(50 * time.Microsecond) // let the worker get back to waiting
	}
	require.Equal(t, int64(100), n.Load())
	require.Less(t, w.started.Load(), int64(10), "sequential tasks reuse the idle worker")

	// a blocked task never holds up others: each finds an idle worker or gets a new one
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		w.run(func() { defer wg.Done(); <-release })
	}
	ran := make(chan struct{})
	w.run(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a task waited behind blocked ones")
	}
	close(release)
	wg.Wait()

	var zero workers // nil channel: a goroutine per task
	done := make(chan struct{})
	zero.run(func() { close(done) })
	<-done
}
