package rpc

import (
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckptd/ckptd/protocol"
)

// metrics are the counters and latency samples reported by stats.
type metrics struct {
	saves, loads, failures, integrity, bytesIn, bytesOut, dedup, pruned, deltas atomic.Int64
	save, load                                                                  *latency
	// byMethod times every method from the moment it may start (after the requests it is
	// ordered behind) until its reply is written. Filled once in New, read-only afterwards.
	byMethod map[string]*latency
}

func newMetrics(methods []string) *metrics {
	m := &metrics{save: newLatency(4096), load: newLatency(4096), byMethod: map[string]*latency{}}
	for _, name := range methods {
		m.byMethod[name] = newLatency(1024)
	}
	return m
}

// latencies reports save and load (store time) plus every method that was called.
func (m *metrics) latencies() map[string]protocol.LatencyStats {
	out := map[string]protocol.LatencyStats{"save": m.save.stats(), "load": m.load.stats()}
	for name, l := range m.byMethod {
		if st := l.stats(); st.Count > 0 {
			out[name] = st
		}
	}
	return out
}

func (m *metrics) add(c *atomic.Int64, n int64) { c.Add(n) }

func (m *metrics) counters() protocol.Counters {
	return protocol.Counters{
		Saves:             m.saves.Load(),
		Loads:             m.loads.Load(),
		Failures:          m.failures.Load(),
		IntegrityFailures: m.integrity.Load(),
		BytesIn:           m.bytesIn.Load(),
		BytesOut:          m.bytesOut.Load(),
		Deduplicated:      m.dedup.Load(),
		Pruned:            m.pruned.Load(),
		DeltaSaves:        m.deltas.Load(),
	}
}

// latency keeps the most recent samples in a ring and the all-time count and maximum.
type latency struct {
	mu    sync.Mutex
	ring  []time.Duration
	next  int
	count int64
	max   time.Duration
}

func newLatency(n int) *latency { return &latency{ring: make([]time.Duration, 0, n)} }

func (l *latency) observe(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) < cap(l.ring) {
		l.ring = append(l.ring, d)
	} else {
		l.ring[l.next] = d
		l.next = (l.next + 1) % len(l.ring)
	}
	l.count++
	if d > l.max {
		l.max = d
	}
}

// stats reports percentiles over the retained window.
func (l *latency) stats() protocol.LatencyStats {
	l.mu.Lock()
	s := append([]time.Duration(nil), l.ring...)
	out := protocol.LatencyStats{Count: l.count, MaxMs: ms(l.max)}
	l.mu.Unlock()
	if len(s) == 0 {
		return out
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	pct := func(p float64) float64 { return ms(s[int(p*float64(len(s)-1))]) }
	out.P50Ms, out.P95Ms, out.P99Ms = pct(0.50), pct(0.95), pct(0.99)
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func sprintfField(format string, a ...any) string { return fmt.Sprintf(format, a...) }

func quote(s string) string { return strconv.Quote(s) }

func itoa(n int) string { return strconv.Itoa(n) }
