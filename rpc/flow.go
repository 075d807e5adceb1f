package rpc

import (
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
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
// follows the bytes in flight (memBase + memPerByte × bytes), so the heap does not grow to
// several times what the requests in flight need (serve runs with GOGC=400).

const (
	// DefaultMaxInFlight and DefaultMaxInFlightBytes are the bounds used when Options leave them 0.
	DefaultMaxInFlight      = 64
	DefaultMaxInFlightBytes = 16 << 20

	freeAfterAlloc = 16 << 20
	freeIdle       = 100 * time.Millisecond

	memBase    = 24 << 20
	memPerByte = 3
	memStep    = 4 << 20 // the limit is updated when the bytes in flight moved this much
)

type flow struct {
	maxReqs  int
	maxBytes int64
	manage   bool // Options.ManageMemory

	mu        sync.Mutex
	reqs      int
	bytes     int64
	room      chan struct{} // closed (and replaced) whenever something is released
	limitFor  int64         // the bytes in flight the memory limit was last set for
	idle      *time.Timer
	allocBase uint64 // heap bytes allocated when memory was last returned
	frees     int    // times memory was returned (for tests and logs)
	sample    []rtmetrics.Sample
}

func newFlow(maxReqs int, maxBytes int64, manage bool) *flow {
	if maxReqs <= 0 {
		maxReqs = DefaultMaxInFlight
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxInFlightBytes
	}
	f := &flow{maxReqs: maxReqs, maxBytes: maxBytes, manage: manage, room: make(chan struct{}),
		sample: []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}, limitFor: -1}
	f.allocBase = f.allocs()
	if manage {
		f.setLimitLocked()
	}
	return f
}

func (f *flow) allocs() uint64 {
	rtmetrics.Read(f.sample)
	if f.sample[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return f.sample[0].Value.Uint64()
}

// acquire counts a request of n bytes as in flight. It never blocks.
func (f *flow) acquire(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs++
	f.bytes += n
	if f.idle != nil {
		f.idle.Stop()
	}
	if f.manage {
		f.setLimitLocked()
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
	f.bytes -= n
	close(f.room)
	f.room = make(chan struct{})
	if f.manage {
		f.setLimitLocked()
	}
	if f.reqs == 0 && f.allocs()-f.allocBase > freeAfterAlloc {
		if f.idle == nil {
			f.idle = time.AfterFunc(freeIdle, f.freeIfIdle)
		} else {
			f.idle.Reset(freeIdle)
		}
	}
}

// freeIfIdle returns the heap to the operating system if no request arrived meanwhile.
func (f *flow) freeIfIdle() {
	f.mu.Lock()
	if f.reqs > 0 {
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

// setLimitLocked moves the soft memory limit with the bytes in flight.
func (f *flow) setLimitLocked() {
	if f.limitFor >= 0 && f.bytes > f.limitFor-memStep && f.bytes < f.limitFor+memStep {
		return
	}
	f.limitFor = f.bytes
	debug.SetMemoryLimit(memBase + memPerByte*f.bytes)
}

// inFlight returns the requests and bytes in flight.
func (f *flow) inFlight() (int, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs, f.bytes
}
