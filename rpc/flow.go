package rpc

import (
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Flow control of one connection (docs/protocol.md, "Backpressure").
//
// A request is in flight from the moment it is read until its reply is written (a notification:
// until its handler returns). While MaxInFlight requests or MaxInFlightBytes bytes (params plus
// attachment) are in flight, the read loop stops reading stdin: the pipe fills up and the
// client's writes block until replies are read and written. The request that reaches a bound is
// always accepted, so one request larger than MaxInFlightBytes still runs (alone).
//
// Memory: after a burst (more than freeAfterAlloc bytes allocated since the heap was last
// returned) the heap is collected and returned to the operating system once the connection has
// been idle for freeIdle. With Options.ManageMemory the Go runtime's soft memory limit also
// follows what the heap needs: the live heap that is not requests in flight (caches, say), plus
// memBase of headroom, plus memPerByte × the bytes in flight. serve runs with GOGC=400 (fewer
// collections while states of a few hundred KiB stream through); without the limit a burst lets
// the heap grow to five times its live size, which a burst of large states has time to do.

const (
	// DefaultMaxInFlight and DefaultMaxInFlightBytes are the bounds used when Options leave them 0.
	DefaultMaxInFlight      = 64
	DefaultMaxInFlightBytes = 16 << 20

	freeAfterAlloc = 16 << 20
	freeIdle       = 100 * time.Millisecond

	// memBase is the headroom the limit leaves above the live heap and the requests: room for
	// the garbage between two collections. At 16 MiB the runtime gave back to the kernel the
	// pages of every freed state-sized buffer and faulted them in again for the next one: a
	// delta save of a 1 MB state (#17's workload) spent ~0.9 ms of its ~5.5 ms of CPU in page
	// faults. 32 MiB: 4.4 against 5.7 ms per save, and 10,000 pipelined 100 KB saves in 7.7
	// against 10.5 s with a peak RSS of 57 MB (target 64.4; BenchmarkMemoryPipelinedSaves).
	memBase    = 32 << 20
	memPerByte = 2
	memStep    = 4 << 20 // the limit is updated when it would move this much
)

type flow struct {
	maxReqs  int
	maxBytes int64
	manage   bool // Options.ManageMemory

	mu        sync.Mutex
	reqs      int
	bytes     int64
	room      chan struct{} // closed (and replaced) when something is released while waiting is set
	waiting   bool          // the read loop waits for room
	limit     int64         // the soft memory limit last set (ManageMemory)
	limitAt   int64         // the bytes in flight when the limit was last computed
	limitSkip int           // updates skipped since the limit was last computed
	idle      *time.Timer   // runs freeIfIdle
	armed     bool          // idle is set to fire
	idleAt    time.Time     // when reqs last fell to 0
	allocBase uint64        // heap bytes allocated when memory was last returned
	frees     int           // times memory was returned (for tests and logs)
	sample    []rtmetrics.Sample

	active atomic.Int32 // reqs, read without mu
}

const (
	sampleAllocs = iota // /gc/heap/allocs:bytes
	sampleLive          // /gc/heap/live:bytes
)

func newFlow(maxReqs int, maxBytes int64, manage bool) *flow {
	if maxReqs <= 0 {
		maxReqs = DefaultMaxInFlight
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxInFlightBytes
	}
	f := &flow{maxReqs: maxReqs, maxBytes: maxBytes, manage: manage, room: make(chan struct{}),
		sample: []rtmetrics.Sample{sampleAllocs: {Name: "/gc/heap/allocs:bytes"}, sampleLive: {Name: "/gc/heap/live:bytes"}}}
	f.allocBase = f.allocs()
	if manage {
		f.setLimitLocked()
	}
	return f
}

// allocs reads the runtime's metrics and returns the heap bytes allocated so far.
func (f *flow) allocs() uint64 {
	rtmetrics.Read(f.sample)
	return f.uint(sampleAllocs)
}

func (f *flow) uint(i int) uint64 {
	if f.sample[i].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return f.sample[i].Value.Uint64()
}

// acquire counts a request of n bytes as in flight. It never blocks.
func (f *flow) acquire(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs++
	f.active.Add(1)
	f.bytes += n
	if f.manage {
		f.moveLimitLocked()
	}
}

// waitRoom blocks while a bound is reached, or until stop is closed.
func (f *flow) waitRoom(stop <-chan struct{}) {
	for {
		f.mu.Lock()
		if f.reqs < f.maxReqs && f.bytes < f.maxBytes {
			f.mu.Unlock()
			return
		}
		f.waiting = true
		room := f.room
		f.mu.Unlock()
		select {
		case <-room:
		case <-stop:
			return
		}
	}
}

// release ends a request of n bytes.
func (f *flow) release(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs--
	f.active.Add(-1)
	f.bytes -= n
	if f.waiting {
		f.waiting = false
		close(f.room)
		f.room = make(chan struct{})
	}
	if f.manage {
		f.moveLimitLocked()
	}
	if f.reqs == 0 {
		// Idle: whether the burst allocated enough to be worth returning is asked once the
		// connection has stayed idle for freeIdle. Per request this costs a clock read: no
		// metrics read (about a µs), no timer moved (which wakes the runtime's poller).
		f.idleAt = time.Now()
		if !f.armed {
			f.armed = true
			if f.idle == nil {
				f.idle = time.AfterFunc(freeIdle, f.freeIfIdle)
			} else {
				f.idle.Reset(freeIdle)
			}
		}
	}
}

// freeIfIdle returns the heap to the operating system if the connection has been idle for
// freeIdle and more than freeAfterAlloc bytes were allocated since it was last returned.
func (f *flow) freeIfIdle() {
	f.mu.Lock()
	f.armed = false
	if f.reqs > 0 { // busy again: the next idle moment arms the timer
		f.mu.Unlock()
		return
	}
	if d := time.Since(f.idleAt); d < freeIdle { // idle again, but only since then
		f.armed = true
		f.idle.Reset(freeIdle - d)
		f.mu.Unlock()
		return
	}
	if f.allocs()-f.allocBase <= freeAfterAlloc {
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	debug.FreeOSMemory()
	f.mu.Lock()
	f.allocBase = f.allocs()
	f.frees++
	f.mu.Unlock()
}

// limitEvery: the soft memory limit is recomputed (the runtime's metrics read) when the bytes
// in flight moved by memStep/memPerByte/2 since it last was, or every limitEvery changes.
const limitEvery = 256

// moveLimitLocked recomputes the soft memory limit when the bytes in flight moved enough for it
// to matter (small requests come and go without it), and now and then for the live heap.
func (f *flow) moveLimitLocked() {
	d := f.bytes - f.limitAt
	if d < 0 {
		d = -d
	}
	if d*memPerByte < memStep/2 && f.limitSkip < limitEvery {
		f.limitSkip++
		return
	}
	f.setLimitLocked()
}

// setLimitLocked moves the soft memory limit with the live heap and the bytes in flight.
func (f *flow) setLimitLocked() {
	f.limitAt, f.limitSkip = f.bytes, 0
	rtmetrics.Read(f.sample)
	rest := max(0, int64(f.uint(sampleLive))-f.bytes) // live heap besides the requests
	limit := memBase + rest + memPerByte*f.bytes
	if f.limit > 0 && limit > f.limit-memStep && limit < f.limit+memStep {
		return
	}
	f.limit = limit
	debug.SetMemoryLimit(limit)
}

// inFlight returns the requests and bytes in flight.
func (f *flow) inFlight() (int, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs, f.bytes
}
