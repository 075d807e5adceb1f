package delta

import (
	"encoding/json"
	"testing"

	"github.com/ckptd/ckptd/internal/testgen"
)

// BenchmarkCompute: the sender's cost per save, a 1 MiB value with a 1 KB insertion in the
// middle (both affix scans run over the whole value).
func BenchmarkCompute(b *testing.B) {
	r := testgen.New(1)
	prev := r.JSON(1 << 20)
	e := testgen.Edit{Pos: len(prev) / 2, Ins: r.Text(1000)}
	next := e.Apply(prev)
	b.SetBytes(int64(len(next)))
	for b.Loop() {
		Compute(prev, next)
	}
}

// BenchmarkApply: the receiver's cost, dominated by the SHA-256 of the rebuilt 1 MiB value.
func BenchmarkApply(b *testing.B) {
	prev, kp, ks, middle, sha := insertionDelta(b, 2, 2)
	for b.Loop() {
		if _, err := Apply(prev, kp, ks, middle, sha); err != nil {
			b.Fatal(err)
		}
	}
}

// stateDelta is the wire object, to measure what a delta adds to the save's JSON.
type stateDelta struct {
	BaseCheckpointID string `json:"baseCheckpointId"`
	KeepPrefix       int    `json:"keepPrefix"`
	KeepSuffix       int    `json:"keepSuffix"`
	SHA256           string `json:"sha256"`
}

// BenchmarkWorkloadWire: the workload (300 saves of a ~1 MB JSON state gaining a ~1 KB
// message and changing one field per step) as a client following Pays sends it: bytes through the
// pipe per save (attachment plus the stateDelta object; the rest of the save's JSON is the same
// with or without deltas) against full sends. field-near: the changed field follows the message
// list; field-far: it precedes it, so the middle spans the whole list and the delta does not pay.
func BenchmarkWorkloadWire(b *testing.B) {
	const steps = 300
	for _, far := range []bool{false, true} {
		name := map[bool]string{false: "field-near", true: "field-far"}[far]
		b.Run(name, func(b *testing.B) {
			var sent, full, worst, deltas int
			for b.Loop() {
				sent, full, worst, deltas = 0, 0, 0, 0
				w := testgen.NewWorkload(31, 1<<20)
				w.FieldFirst = far
				prev := w.State()
				for step := 1; step <= steps; step++ {
					w.Advance()
					next := w.State()
					kp, ks, middle := Compute(prev, next)
					n := len(next)
					if Pays(len(next), len(middle)) {
						obj, err := json.Marshal(stateDelta{"0193a5c2-7e00-7a11-8d2e-000000000003", kp, ks, hexSHA(next)})
						if err != nil {
							b.Fatal(err)
						}
						n = len(middle) + len(`,"stateDelta":`) + len(obj)
						deltas++
					}
					sent += n
					full += len(next)
					worst = max(worst, n)
					prev = next
				}
			}
			b.ReportMetric(float64(sent)/steps, "sent-B/save")
			b.ReportMetric(float64(worst), "max-sent-B/save")
			b.ReportMetric(float64(full)/steps, "full-B/save")
			b.ReportMetric(float64(deltas)/steps*100, "%deltas")
			b.Logf("%s: %d saves, delta sent for %d; per save %.0f B through the pipe (max %d), %.0f B full",
				name, steps, deltas, float64(sent)/steps, worst, float64(full)/steps)
		})
	}
}

// BenchmarkRebuild: the receiver's copy alone (no hashing), a 1 MiB value with a 1 KB insertion
// at a third of it, as a grown message list before a long document puts it: what a delta save
// spends before the cut.
func BenchmarkRebuild(b *testing.B) {
	prev, kp, ks, middle, sha := insertionDelta(b, 3, 3)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Rebuild(prev, nil, kp, ks, middle, sha); err != nil {
			b.Fatal(err)
		}
	}
}

// insertionDelta is the delta of a 1 MiB JSON value (seed) gaining 1,000 bytes at 1/at of it:
// the base, keepPrefix, keepSuffix, the middle and the new value's SHA-256 (hex). It sets the
// benchmark's bytes to the new value's size.
func insertionDelta(b *testing.B, seed uint64, at int) (prev []byte, kp, ks int, middle []byte, sha string) {
	r := testgen.New(seed)
	prev = r.JSON(1 << 20)
	next := testgen.Edit{Pos: len(prev) / at, Ins: r.Text(1000)}.Apply(prev)
	kp, ks, middle = Compute(prev, next)
	b.SetBytes(int64(len(next)))
	return prev, kp, ks, middle, hexSHA(next)
}
