package rpc

import (
	"fmt"
	"io"
	"runtime"
	"sync"
)

// outQueue writes the frames of replies made concurrently together: the replies of a batch of
// saves committed at once go out in one or two write(2)s instead of one each. One goroutine at
// a time writes (the flusher), everything queued until then in one round; frames queued while it
// writes go out in the next round, written by one of their own goroutines. Every caller returns
// once its frame is written (or failed), with that write's error.
//
// A frame is queued under mu as segments: its small parts copied into buf, its large parts
// (states, attachments over copyMax) referenced where they are, which is safe because their
// owner waits until they are written.
type outQueue struct {
	mu   sync.Mutex
	cond sync.Cond // signalled after every round
	busy bool      // a flusher is writing a round
	// othersBusy, if set, reports whether other requests are being handled (their replies may
	// join the next round); it must not take mu.
	othersBusy func() bool

	buf    []byte     // small bytes of the queued frames
	segs   []outSeg   // the queued bytes in order
	frames []*outDone // the queued frames, answered after the round that writes them

	// the previous round's slices, reused
	spareBuf    []byte
	spareSegs   []outSeg
	spareFrames []*outDone
	free        []*outDone // outcomes read by their frame's writer, reused
}

// outSeg is a run of queued bytes for one stream: buf[lo:hi], or big.
type outSeg struct {
	stream io.Writer
	lo, hi int
	big    []byte
}

// outDone is a queued frame's outcome.
type outDone struct {
	done bool
	err  error
}

// maxSpare is the largest output buffer kept for the next round.
const maxSpare = copyMax + 4<<10

// begin starts a frame for stream: it locks the queue until finish.
func (q *outQueue) begin(stream io.Writer) *outDone {
	q.mu.Lock()
	if q.cond.L == nil {
		q.cond.L = &q.mu
	}
	q.segs = append(q.segs, outSeg{stream: stream, lo: len(q.buf), hi: len(q.buf)})
	if n := len(q.free); n > 0 {
		f := q.free[n-1]
		q.free = q.free[:n-1]
		return f
	}
	return &outDone{}
}

// add appends b to the frame being queued.
func (q *outQueue) add(stream io.Writer, b []byte) {
	if len(b) == 0 {
		return
	}
	last := &q.segs[len(q.segs)-1]
	if len(b) <= copyMax {
		if last.big != nil || last.stream != stream {
			q.segs = append(q.segs, outSeg{stream: stream, lo: len(q.buf), hi: len(q.buf)})
			last = &q.segs[len(q.segs)-1]
		}
		q.buf = append(q.buf, b...)
		last.hi = len(q.buf)
		return
	}
	if last.big == nil {
		last.hi = len(q.buf)
	}
	q.segs = append(q.segs, outSeg{stream: stream, big: b})
	q.segs = append(q.segs, outSeg{stream: stream, lo: len(q.buf), hi: len(q.buf)})
}

// finish queues the frame begun with f, unlocks the queue and waits until it is written.
func (q *outQueue) finish(f *outDone) error {
	last := &q.segs[len(q.segs)-1]
	if last.big == nil {
		last.hi = len(q.buf)
	}
	q.frames = append(q.frames, f)
	for !f.done {
		if !q.busy {
			q.flush()
			continue
		}
		q.cond.Wait()
	}
	err := f.err
	*f = outDone{}
	if len(q.free) < 64 {
		q.free = append(q.free, f)
	}
	q.mu.Unlock()
	return err
}

// flush writes one round: everything queued. Called and returns with mu held.
func (q *outQueue) flush() {
	q.busy = true
	// Let the goroutines that are ready to run go first: the other replies of a batch of saves
	// committed together were woken with this one, and queue their frames in this round. A lone
	// request does not wait for anything.
	q.mu.Unlock()
	if q.othersBusy != nil && q.othersBusy() {
		runtime.Gosched()
	}
	q.mu.Lock()
	buf, segs, frames := q.buf, q.segs, q.frames
	q.buf, q.segs, q.frames = q.spareBuf[:0], q.spareSegs[:0], q.spareFrames[:0]
	q.spareBuf, q.spareSegs, q.spareFrames = nil, nil, nil
	q.mu.Unlock()

	err := safeWriteSegs(buf, segs)

	q.mu.Lock()
	for _, f := range frames {
		f.done, f.err = true, err
	}
	clear(frames)
	clear(segs)
	q.spareFrames, q.spareSegs = frames[:0], segs[:0]
	if cap(buf) <= maxSpare {
		q.spareBuf = buf[:0]
	}
	q.busy = false
	q.cond.Broadcast()
}

// safeWriteSegs is writeSegs with a panic of a writer turned into the round's error: the queue
// must never stay busy.
func safeWriteSegs(buf []byte, segs []outSeg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("writing the output panicked: %v", p)
		}
	}()
	return writeSegs(buf, segs)
}

// writeSegs writes segs (small runs from buf) in order: runs of small segments of one stream
// in one Write, large ones from where they are; then flushes each stream that buffers.
func writeSegs(buf []byte, segs []outSeg) error {
	var err error
	for i := 0; i < len(segs) && err == nil; {
		sg := segs[i]
		var b []byte
		if sg.big != nil {
			b = sg.big
			i++
		} else {
			lo, hi := sg.lo, sg.hi
			for i++; i < len(segs) && segs[i].big == nil && segs[i].stream == sg.stream && segs[i].lo == hi; i++ {
				hi = segs[i].hi
			}
			b = buf[lo:hi]
		}
		if len(b) > 0 {
			_, err = sg.stream.Write(b)
		}
		if f, ok := sg.stream.(interface{ Flush() error }); ok && err == nil && (i == len(segs) || segs[i].stream != sg.stream) {
			err = f.Flush()
		}
	}
	return err
}
