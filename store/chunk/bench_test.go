package chunk

import (
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ckptd/ckptd/internal/testgen"
)

func benchInputs() []goldenInput {
	r := testgen.New(21)
	return []goldenInput{
		{"json", r.JSON(1 << 20)},
		{"random", r.Bytes(1 << 20)},
		{"binary", r.Binary(1 << 20)},
	}
}

// BenchmarkChunking: cut points only (Boundaries) and the whole Split (cuts, chunk addresses and
// the value's SHA-256) of 1 MiB values; reports MB/s and the mean chunk size.
func BenchmarkChunking(b *testing.B) {
	for _, in := range benchInputs() {
		b.Run("boundaries/"+in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			var n int
			for b.Loop() {
				n = len(Boundaries(in.data))
			}
			b.ReportMetric(float64(len(in.data))/float64(n), "B/chunk")
		})
		b.Run("split/"+in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			for b.Loop() {
				Split(in.data)
			}
		})
	}
}

// BenchmarkReassemble: Expand and Reassemble of a 1 MiB value from memory (every chunk and run
// checked, then the whole value): the verification cost a load adds to the backend's reads.
func BenchmarkReassemble(b *testing.B) {
	in := benchInputs()[0].data
	m := newMemStore()
	idx, _, _ := m.put(in)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := m.get(idx); err != nil {
			b.Fatal(err)
		}
	}
}

// compressedSize is what a backend's codec stores for b: zstd (fastest level, as store/codec.go)
// when that saves at least 1/8, else b raw.
func compressedSize(enc *zstd.Encoder, b []byte) int {
	if n := len(enc.EncodeAll(b, nil)); n <= len(b)-len(b)/8 {
		return n
	}
	return len(b)
}

// rowOverhead is an estimate of what one new chunk or run row costs a backend beyond its data
// (SQLite: the row header, the 32-byte address in the table and again in its unique index, the
// reference count). The backend's own benchmark measures the real file.
const rowOverhead = 96

// BenchmarkWorkload is the workload of issue #17: 300 checkpoints of one workflow whose ~1 MB JSON
// state gains a ~1 KB message and changes one field per step. It projects the storage of chunked
// values (new chunks compressed, new runs, each checkpoint's index, rowOverhead per new row)
// against the target 1.1 MB + 300 × 8 KB, and against today's storage measured in the same run
// (every state compressed whole), and counts the reference-count updates a backend makes per save
// (the value's runs, plus the chunks of its new runs). field-near: the changed field follows the message list;
// field-far: it precedes it (two edits ~700 KB apart).
func BenchmarkWorkload(b *testing.B) {
	const steps, size = 300, 1 << 20
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false),
		zstd.WithEncoderConcurrency(1))
	if err != nil {
		b.Fatal(err)
	}
	defer enc.Close()
	for _, far := range []bool{false, true} {
		name := map[bool]string{false: "field-near", true: "field-far"}[far]
		b.Run(name, func(b *testing.B) {
			var logical, first, chunkRaw, chunkStored, runStored, indexStored, flat, rows, today, refs int64
			for b.Loop() {
				logical, first, chunkRaw, chunkStored, runStored, indexStored, flat, rows, today, refs = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
				w := testgen.NewWorkload(31, size)
				w.FieldFirst = far
				chunks := map[Address]bool{}
				runs := map[Address]bool{}
				for step := 0; step <= steps; step++ {
					v := w.State()
					logical += int64(len(v))
					rec, cs := Split(v)
					var stored int64
					for _, c := range cs {
						if !chunks[c.Addr] {
							chunks[c.Addr] = true
							if step > 0 {
								chunkRaw += int64(c.Size)
							}
							stored += int64(compressedSize(enc, c.Data)) + rowOverhead
							rows++
						}
					}
					idx, rs := rec.Runs()
					for _, r := range rs {
						if !runs[r.Addr] {
							runs[r.Addr] = true
							stored += int64(len(r.Data)) + rowOverhead
							rows++
							if step > 0 {
								runStored += int64(len(r.Data)) + rowOverhead
								refs += int64(len(r.Refs)) // the new run's chunks gain a reference each
							}
						}
					}
					stored += int64(len(idx.Runs) * len(Address{}))
					if step == 0 {
						first = stored
					} else {
						chunkStored += stored - int64(len(idx.Runs)*len(Address{}))
						indexStored += int64(len(idx.Runs) * len(Address{}))
						refs += int64(len(idx.Runs)) // the value's runs gain a reference each
						flat += int64(len(rec.Chunks) * (len(Address{}) + 2))
					}
					if step%10 == 0 { // today: every state compressed whole; sampled, scaled by 10
						today += 10 * int64(compressedSize(enc, v))
					}
					w.Advance()
				}
				chunkStored -= runStored
			}
			total := first + chunkStored + runStored + indexStored
			target := int64(1_100_000 + steps*8_000)
			per := func(n int64) float64 { return float64(n) / steps }
			b.ReportMetric(float64(logical)/1e6, "logical-MB")
			b.ReportMetric(float64(total)/1e6, "stored-MB")
			b.ReportMetric(float64(target)/1e6, "target-MB")
			b.ReportMetric(float64(logical)/float64(total), "ratio")
			b.ReportMetric(per(chunkRaw), "new-chunk-B/step")
			b.ReportMetric(per(chunkStored+runStored+indexStored), "stored-B/step")
			b.ReportMetric(float64(today)/1e6, "today-MB")
			b.ReportMetric(per(refs), "ref-updates/step")
			b.Logf("%s: %d steps, logical %.1f MB; step 0 stored %.0f KB; per step: new chunks %.0f B raw, "+
				"%.0f B stored (compressed + rows), new runs %.0f B, index %.0f B, total %.0f B (a flat recipe "+
				"would be %.0f B alone); projected %.2f MB vs target %.2f MB; ratio %.0f×; today (whole states, "+
				"zstd) %.1f MB; %d rows; %.0f reference updates per step",
				name, steps, float64(logical)/1e6, float64(first)/1e3, per(chunkRaw), per(chunkStored),
				per(runStored), per(indexStored), per(chunkStored+runStored+indexStored), per(flat),
				float64(total)/1e6, float64(target)/1e6, float64(logical)/float64(total), float64(today)/1e6, rows, per(refs))
			if total > target {
				b.Errorf("projected %d bytes exceed the target %d", total, target)
			}
		})
	}
}
