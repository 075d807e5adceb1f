package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store/chunk/delta"
)

// BenchmarkGrowingState is the workload of issue #17, through the real binary over pipes: 300
// checkpoints (after a first one) of one workflow whose ~1 MB JSON state gains a ~1 KB message
// and changes one field per step, sent the way the clients send it (a wire delta against the
// previous checkpoint when that pays, else whole). In the same run, interleaved step by step so
// that both see the same machine load, the baseline: a 100 KB state sent whole at every step
// with all-new content (every byte new to the database). It reports, for the workload: the
// logical total, the bytes on disk after a clean shutdown and their ratio, the bytes through the
// pipe per save (frame header, body and attachment), the save p50/p95; for the baseline its p50
// and p95; and the ratio of the two p95s. Sizes are checked against the targets
// (disk <= 1.1 MB + 300 x 8 KB, pipe <= 16 KB per save); timings are reported, never checked.
//
// CKPTD_BASELINE_BIN, if set, runs the baseline daemon from that binary instead (e.g. a build
// of main, for "no worse than before"); CKPTD_PPROF_DIR=dir profiles each daemon into
// dir/workload and dir/baseline.
//
//	go test ./cmd/ckptd -run '^$' -bench BenchmarkGrowingState -benchtime 1x
func BenchmarkGrowingState(b *testing.B) {
	const steps = 300
	for b.Loop() {
		dir := b.TempDir()
		wdb := filepath.Join(dir, "workload.db")
		// CKPTD_PPROF_DIR=dir: each daemon profiles into a directory of its own
		prof := os.Getenv("CKPTD_PPROF_DIR")
		if prof != "" {
			b.Setenv("CKPTD_PPROF_DIR", filepath.Join(prof, "workload"))
		}
		work := startDaemonB(b, wdb, "--keep-last", "0")
		if prof != "" {
			b.Setenv("CKPTD_PPROF_DIR", filepath.Join(prof, "baseline"))
		}
		base := startBaseline(b, filepath.Join(dir, "baseline.db"))
		w := testgen.NewWorkload(31, 1<<20)
		var prevID string
		var prev []byte
		var logical, pipe int64
		var pipeMax int
		var workLat, baseLat []time.Duration
		deltas := 0
		for step := 0; step <= steps; step++ {
			st := w.State()
			logical += int64(len(st))
			params := map[string]any{"workflowId": "wf", "step": step, "stateAttachment": true, "stateType": "json"}
			att := st
			if prev != nil {
				kp, ks, middle := delta.Compute(prev, st)
				if delta.Pays(len(st), len(middle)) {
					sum := sha256.Sum256(st)
					params["stateDelta"] = map[string]any{"baseCheckpointId": prevID, "keepPrefix": kp, "keepSuffix": ks,
						"sha256": hex.EncodeToString(sum[:])}
					att = middle
					deltas++
				}
			}
			frame := saveFrameB(b, step+1, params, att)
			t0 := time.Now()
			work.rawB(b, frame)
			id := checkpointIDOf(b, work)
			if step > 0 {
				workLat = append(workLat, time.Since(t0))
				pipe += int64(len(frame))
				pipeMax = max(pipeMax, len(frame))
			}
			prevID, prev = id, st
			w.Advance()

			// the baseline's step: 100 KB of new content, whole
			bst := checkpointState(100<<10, int64(1_000_000+step))
			bframe := saveFrameB(b, step+1, map[string]any{"workflowId": "base", "step": step, "stateAttachment": true, "stateType": "json"}, bst)
			t0 = time.Now()
			base.rawB(b, bframe)
			checkpointIDOf(b, base)
			if step > 0 {
				baseLat = append(baseLat, time.Since(t0))
			}
		}
		workCPU, baseCPU := processCPU(work.cmd.Process.Pid), processCPU(base.cmd.Process.Pid)
		for _, d := range []*daemon{work, base} {
			d.rawB(b, framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":999999,"method":"shutdown"}`), nil, false))
			d.readB(b)
			if err := waitExit(d.cmd, 60*time.Second); err != nil {
				b.Fatal(err)
			}
		}
		disk := fileSize(wdb) + fileSize(wdb+"-wal")
		target := int64(1_100_000 + steps*8_000)
		wp50, wp95 := pct(workLat, 0.50), pct(workLat, 0.95)
		bp50, bp95 := pct(baseLat, 0.50), pct(baseLat, 0.95)
		b.ReportMetric(float64(logical)/1e6, "logical-MB")
		b.ReportMetric(float64(disk)/1e6, "disk-MB")
		b.ReportMetric(float64(logical)/float64(disk), "ratio")
		b.ReportMetric(float64(pipe)/steps, "pipe-B/save")
		b.ReportMetric(wp50, "save-p50-ms")
		b.ReportMetric(wp95, "save-p95-ms")
		b.ReportMetric(bp95, "base100KB-p95-ms")
		b.ReportMetric(wp95/bp95, "p95/base")
		b.ReportMetric(workCPU/(steps+1), "cpu-ms/save")
		b.ReportMetric(baseCPU/(steps+1), "base100KB-cpu-ms/save")
		b.Logf("workload: %d saves after the first (%d as deltas); logical %.1f MB; on disk %.2f MB (target %.2f MB), ratio %.0fx; "+
			"pipe %.0f B per save (max %d, target 16384); save p50 %.2f ms p95 %.2f ms; baseline (100 KB, new content, whole) "+
			"p50 %.2f ms p95 %.2f ms; p95 ratio %.2f; daemon CPU per save %.2f ms (baseline %.2f ms)", steps, deltas,
			float64(logical)/1e6, float64(disk)/1e6, float64(target)/1e6, float64(logical)/float64(disk), float64(pipe)/steps,
			pipeMax, wp50, wp95, bp50, bp95, wp95/bp95, workCPU/(steps+1), baseCPU/(steps+1))
		if disk > target {
			b.Errorf("on disk %d bytes, over the target %d", disk, target)
		}
		if float64(logical)/float64(disk) < 50 {
			b.Errorf("ratio %.1f, under 50", float64(logical)/float64(disk))
		}
		if pipeMax > 16<<10 {
			b.Errorf("a save sent %d bytes through the pipe, over 16 KB", pipeMax)
		}
	}
}

// startBaseline starts the baseline daemon: this build, or $CKPTD_BASELINE_BIN.
func startBaseline(b *testing.B, db string) *daemon {
	bin := os.Getenv("CKPTD_BASELINE_BIN")
	if bin == "" {
		return startDaemonB(b, db, "--keep-last", "0")
	}
	old := binPath
	binPath = bin
	defer func() { binPath = old }()
	if _, err := exec.LookPath(bin); err != nil {
		b.Fatalf("CKPTD_BASELINE_BIN: %v", err)
	}
	return startDaemonB(b, db, "--keep-last", "0")
}

func saveFrameB(b *testing.B, id int, params map[string]any, att []byte) []byte {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "checkpoint/save", "params": params})
	if err != nil {
		b.Fatal(err)
	}
	return framing.AppendFrame(nil, body, att, true)
}

// checkpointIDOf reads the next reply (a save's) and returns its checkpoint id.
func checkpointIDOf(b *testing.B, d *daemon) string {
	f, err := d.r.Next()
	if err != nil {
		b.Fatal(err)
	}
	var m struct {
		Result *struct {
			CheckpointID string `json:"checkpointId"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(f.Body, &m); err != nil || m.Result == nil {
		b.Fatalf("save failed: %s", f.Body)
	}
	return m.Result.CheckpointID
}

// processCPU is the user+system CPU time of process pid so far, in ms (Linux /proc; 0 elsewhere).
func processCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) * 1000 / 100 // clock ticks of 1/100 s (USER_HZ)
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func pct(lat []time.Duration, q float64) float64 {
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
}
