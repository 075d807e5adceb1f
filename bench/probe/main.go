// Command probe measures where a ckptd request's time goes, against its floors, interleaved in
// one run so that machine noise hits every row alike:
//
//	echo       a raw round trip through a 15-line Go echo over the same kind of pipes (the
//	           transport floor)
//	unknown    ckptd, an unknown method: framing + JSON-RPC envelope + error reply
//	wflist     ckptd, workflow/list on an empty database (the trivial request)
//	save+load  ckptd, a 1 KB save then a load of it by id (states as attachments)
//	sql        in process: a prepared modernc SELECT on an empty table
//	workflows  in process: store.Workflows on an empty database
//
// With -base OLD, every ckptd op also runs against the binary OLD (its own daemons), in the same
// interleaved loop, and a second table gives new/old ratios of p50, p95 and daemon CPU: an A/B
// measured in one run, so that machine noise hits both sides alike. The CPU figures are
// interleaved too (chunks of requests, op after op, round after round).
//
// Round trips are timed from this process (Go client, raw frames, one request at a time). Then,
// op by op, the daemon's own CPU time per request is read from the kernel (the sum of
// /proc/PID/task/*/schedstat, nanoseconds), which a busy machine disturbs much less than wall
// time. Output: a table on stdout, and with -json the figures for bench/report.py.
//
// usage: go run ./bench/probe [-bin bin/ckptd] [-base old/ckptd] [-n 4000] [-json out.json] [-dir DIR]
//
// "probe echo" is the echo itself (the probe runs its own binary as the echo's process).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "echo" {
		echo()
		return
	}
	bin := flag.String("bin", "bin/ckptd", "ckptd binary")
	base := flag.String("base", "", "a baseline ckptd binary: its ops run interleaved with -bin's, with new/old ratios")
	n := flag.Int("n", 4000, "interleaved rounds")
	cpuN := flag.Int("cpu-n", 2000, "requests per op for the daemon CPU figures (0: skip)")
	jsonOut := flag.String("json", "", "write the figures as JSON here")
	dir := flag.String("dir", "", "directory for the databases (default: a temp dir)")
	durability := flag.String("durability", "full", "ckptd --durability")
	flag.StringVar(&profileDir, "pprof", "", "write the daemons' CPU, block and mutex profiles under this directory")
	flag.StringVar(&only, "ops", "", "comma-separated ops to run (default: all)")
	flag.Parse()
	if err := run(*bin, *base, *n, *cpuN, *jsonOut, *dir, *durability); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

var profileDir, only string

// echo is the transport floor: 15 lines that copy stdin to stdout as reads return.
func echo() {
	buf := make([]byte, 1<<20)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			if _, werr := os.Stdout.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// proc is a child process spoken to over pipes.
type proc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out io.Reader
	fr  *framing.Reader
	id  int
}

func start(name string, args ...string) (*proc, error) {
	cmd := exec.Command(name, args...)
	if profileDir != "" && name != os.Args[0] {
		cmd.Env = append(os.Environ(), "CKPTD_PPROF_DIR="+filepath.Join(profileDir, filepath.Base(strings.TrimSuffix(args[1], ".db"))))
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &proc{cmd: cmd, in: in, out: out, fr: framing.NewReader(out, framing.Limits{MaxBody: 1 << 30, MaxAttachment: 1 << 30})}, nil
}

func (p *proc) stop() {
	_ = p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// call sends one request and returns the reply frame.
func (p *proc) call(method, params string, att []byte) (framing.Frame, error) {
	p.id++
	body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(p.id) + `,"method":"` + method + `"`
	if params != "" {
		body += `,"params":` + params
	}
	body += "}"
	if _, err := p.in.Write(framing.AppendFrame(nil, []byte(body), att, att != nil)); err != nil {
		return framing.Frame{}, err
	}
	return p.fr.Next()
}

// cpuNanos is the process's CPU time so far, summed over its threads (schedstat: ns).
func cpuNanos(pid int) (int64, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			sum += v
		}
	}
	return sum, nil
}

type op struct {
	name  string
	what  string
	floor string // the row this one is compared with
	run   func(i int) error
	lat   []time.Duration
	cpu   float64 // daemon CPU µs per request (0: in process or not measured)
	pid   int
	base  *op // the same op against the baseline binary (-base)
}

func run(bin, base string, n, cpuN int, jsonOut, dir, durability string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "ckptd-probe-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx := context.Background()

	ec, err := start(self, "echo")
	if err != nil {
		return err
	}
	defer ec.stop()
	daemonArgs := func(db string) []string {
		return []string{"--db", filepath.Join(dir, db), "--durability", durability, "--keep-last", "0", "--log-level", "warn"}
	}
	// daemons starts a binary's two daemons: one on an empty database, one that saves.
	daemons := func(bin, tag string) (empty, saves *proc, err error) {
		if empty, err = start(bin, daemonArgs(tag+"empty.db")...); err != nil {
			return nil, nil, err
		}
		if saves, err = start(bin, daemonArgs(tag+"saves.db")...); err != nil {
			empty.stop()
			return nil, nil, err
		}
		for _, p := range []*proc{empty, saves} {
			if _, err := p.call("initialize", `{"clientName":"probe"}`, nil); err != nil {
				empty.stop()
				saves.stop()
				return nil, nil, err
			}
		}
		return empty, saves, nil
	}
	empty, saves, err := daemons(bin, "")
	if err != nil {
		return err
	}
	defer empty.stop()
	defer saves.stop()

	// In process: a prepared SELECT on an empty table, and store.Workflows on an empty database.
	floor, err := sqlite.OpenSelectFloor(filepath.Join(dir, "raw.db"))
	if err != nil {
		return err
	}
	defer floor.Close()
	st, err := sqlite.Open(ctx, store.Options{Path: filepath.Join(dir, "inproc.db"), Durability: durability})
	if err != nil {
		return err
	}
	defer st.Close()

	// The echo's message: the size of a small request frame.
	echoMsg := []byte(strings.Repeat("x", 200))
	echoBuf := make([]byte, len(echoMsg))
	state := []byte(`{"s":"` + strings.Repeat("abcdefghijklmnopqrstuvwxyz", 39) + `"}`) // 1,022 bytes of JSON
	letter := func(i int) int { return 6 + i%(len(state)-8) }
	// ckptdOps are the ops through a daemon of one binary.
	ckptdOps := func(empty, saves *proc) []*op {
		state := append([]byte(nil), state...)
		return []*op{
			{name: "unknown", what: "ckptd: unknown method (framing + envelope + error reply)", floor: "echo", pid: empty.cmd.Process.Pid,
				run: func(int) error { return expect(empty.call("no/such", `{}`, nil))("error") }},
			{name: "wflist", what: "ckptd: workflow/list, empty database", floor: "unknown", pid: empty.cmd.Process.Pid,
				run: func(int) error { return expect(empty.call("workflow/list", `{}`, nil))("result") }},
			{name: "saveload1k", what: "ckptd: 1 KB save + load by id (attachments)", floor: "unknown", pid: saves.cmd.Process.Pid,
				run: func(i int) error {
					state[letter(i)] = 'a' + byte((int(state[letter(i)])-'a'+1)%26) // a new state every time: no dedup
					f, err := saves.call("checkpoint/save", `{"workflowId":"probe","step":`+strconv.Itoa(i)+`,"stateAttachment":true,"stateType":"json"}`, state)
					if err := expect(f, err)("result"); err != nil {
						return err
					}
					var r struct {
						Result struct {
							CheckpointID string `json:"checkpointId"`
						} `json:"result"`
					}
					if err := json.Unmarshal(f.Body, &r); err != nil {
						return err
					}
					return expect(saves.call("checkpoint/load", `{"checkpointId":"`+r.Result.CheckpointID+`","attachment":true}`, nil))("result")
				}},
		}
	}
	ops := []*op{
		{name: "echo", what: "raw pipe round trip, Go echo, 200 bytes", pid: ec.cmd.Process.Pid, run: func(int) error {
			if _, err := ec.in.Write(echoMsg); err != nil {
				return err
			}
			_, err := io.ReadFull(ec.out, echoBuf)
			return err
		}},
		{name: "sql", what: "in process: prepared modernc SELECT, empty table", run: floor.Run},
		{name: "workflows", what: "in process: store.ListWorkflows, empty database", floor: "sql", run: func(int) error {
			_, err := st.ListWorkflows(ctx, store.WorkflowFilter{})
			return err
		}},
	}
	mine := ckptdOps(empty, saves)
	ops = append(append([]*op{ops[0]}, mine...), ops[1:]...) // echo, ckptd's ops, in process
	if base != "" {
		bEmpty, bSaves, err := daemons(base, "base-")
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		defer bEmpty.stop()
		defer bSaves.stop()
		for i, o := range ckptdOps(bEmpty, bSaves) {
			o.name = "base:" + o.name
			if o.floor != "" && o.floor != "echo" {
				o.floor = "base:" + o.floor
			}
			mine[i].base = o
			ops = append(ops, o)
		}
	}
	if only != "" {
		keep := ops[:0]
		for _, o := range ops {
			if strings.Contains(","+only+",", ","+strings.TrimPrefix(o.name, "base:")+",") {
				keep = append(keep, o)
			}
		}
		ops = keep
	}
	// Warm up, then interleave.
	for i := 0; i < 200; i++ {
		for _, o := range ops {
			if err := o.run(i); err != nil {
				return fmt.Errorf("%s: %w", o.name, err)
			}
		}
	}
	for i := 0; i < n; i++ {
		for _, o := range ops {
			t := time.Now()
			if err := o.run(1000 + i); err != nil {
				return fmt.Errorf("%s: %w", o.name, err)
			}
			o.lat = append(o.lat, time.Since(t))
		}
	}
	// The daemon's CPU per request (the client is idle meanwhile), in chunks: op after op, round
	// after round, so that a busy spell of the machine does not fall on one op alone.
	const cpuRounds = 10
	if cpuN > 0 {
		chunk := max(cpuN/cpuRounds, 1)
		total := map[*op]int64{}
		for r := 0; r < cpuRounds; r++ {
			for _, o := range ops {
				if o.pid == 0 {
					continue
				}
				before, err := cpuNanos(o.pid)
				if err != nil {
					return err
				}
				for i := 0; i < chunk; i++ {
					if err := o.run(100000 + r*chunk + i); err != nil {
						return fmt.Errorf("%s: %w", o.name, err)
					}
				}
				after, err := cpuNanos(o.pid)
				if err != nil {
					return err
				}
				total[o] += after - before
			}
		}
		for o, ns := range total {
			o.cpu = float64(ns) / float64(chunk*cpuRounds) / 1000
		}
	}
	return report(ops, n, jsonOut)
}

// expect checks that a reply frame carries member ("result" or "error").
func expect(f framing.Frame, err error) func(member string) error {
	return func(member string) error {
		if err != nil {
			return err
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(f.Body, &m); err != nil {
			return err
		}
		if _, ok := m[member]; !ok {
			return fmt.Errorf("want %s, got %s", member, f.Body)
		}
		return nil
	}
}

func pct(lat []time.Duration, q float64) float64 {
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[int(q*float64(len(s)-1))].Nanoseconds()) / 1000
}

type row struct {
	Name  string    `json:"name"`
	What  string    `json:"what"`
	Floor string    `json:"floor,omitempty"`
	P50   float64   `json:"p50_us"`
	P95   float64   `json:"p95_us"`
	P99   float64   `json:"p99_us"`
	CPU   float64   `json:"daemon_cpu_us,omitempty"`
	Ratio float64   `json:"p95_ratio_to_floor,omitempty"`
	Lat   []float64 `json:"lat_us"`
}

// abRow is an op's new/base ratios (-base).
type abRow struct {
	Name string  `json:"name"`
	P50  float64 `json:"p50_ratio"`
	P95  float64 `json:"p95_ratio"`
	CPU  float64 `json:"daemon_cpu_ratio,omitempty"`
}

func report(ops []*op, n int, jsonOut string) error {
	byName := map[string]*op{}
	for _, o := range ops {
		byName[o.name] = o
	}
	fmt.Printf("probe: %d interleaved rounds; round trips from a Go client (µs); daemon CPU per request from schedstat\n\n", n)
	fmt.Printf("| %-15s | %8s | %8s | %8s | %10s | %-9s | %6s | %s\n", "op", "p50", "p95", "p99", "daemon CPU", "vs", "p95 ×", "what")
	var rows []row
	for _, o := range ops {
		r := row{Name: o.name, What: o.what, Floor: o.floor, P50: pct(o.lat, .5), P95: pct(o.lat, .95), P99: pct(o.lat, .99), CPU: o.cpu}
		for _, d := range o.lat {
			r.Lat = append(r.Lat, float64(d.Nanoseconds())/1000)
		}
		ratio := ""
		if f := byName[o.floor]; f != nil {
			r.Ratio = r.P95 / pct(f.lat, .95)
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		cpu := "-"
		if o.cpu > 0 {
			cpu = fmt.Sprintf("%.1f", o.cpu)
		}
		fmt.Printf("| %-15s | %8.1f | %8.1f | %8.1f | %10s | %-9s | %6s | %s\n", o.name, r.P50, r.P95, r.P99, cpu, o.floor, ratio, o.what)
		rows = append(rows, r)
	}
	var ab []abRow
	for _, o := range ops {
		if o.base == nil {
			continue
		}
		if len(ab) == 0 {
			fmt.Printf("\nA/B against the baseline binary, same run (new / base; below 1 is faster):\n\n")
			fmt.Printf("| %-15s | %9s | %9s | %9s | %9s | %9s | %7s | %7s | %7s\n",
				"op", "p50 new", "p50 base", "p95 new", "p95 base", "CPU new", "CPU base", "p50 ×", "CPU ×")
		}
		r := abRow{Name: o.name, P50: pct(o.lat, .5) / pct(o.base.lat, .5), P95: pct(o.lat, .95) / pct(o.base.lat, .95)}
		if o.base.cpu > 0 {
			r.CPU = o.cpu / o.base.cpu
		}
		fmt.Printf("| %-15s | %9.1f | %9.1f | %9.1f | %9.1f | %9.1f | %8.1f | %7.2f | %7.2f\n", o.name,
			pct(o.lat, .5), pct(o.base.lat, .5), pct(o.lat, .95), pct(o.base.lat, .95), o.cpu, o.base.cpu, r.P50, r.CPU)
		ab = append(ab, r)
	}
	if jsonOut == "" {
		return nil
	}
	b, err := json.MarshalIndent(map[string]any{"rounds": n, "ops": rows, "ab": ab}, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(jsonOut, b, 0o644)
}
