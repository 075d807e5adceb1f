package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
)

// TestContention runs two and four ckptd processes on one DB, each saving to shared and own
// workflows and pruning, and checks that no client ever sees an error (SQLITE_BUSY would surface
// as -32006), nothing acknowledged is lost or duplicated, and seq strictly increases per
// workflow. CKPTD_CONTENTION_SECONDS sets the duration (default 3; the long run used 30).
func TestContention(t *testing.T) {
	secs := envInt("CKPTD_CONTENTION_SECONDS", 3)
	if testing.Short() {
		secs = 1
	}
	for _, procs := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d-processes", procs), func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "shared.db")
			var wg sync.WaitGroup
			results := make([]contentionResult, procs)
			for p := 0; p < procs; p++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					results[p] = runContender(t, db, p, time.Duration(secs)*time.Second)
				}(p)
			}
			wg.Wait()
			var acked []ack
			errs, saves, prunes := 0, 0, 0
			for _, r := range results {
				acked = append(acked, r.acked...)
				errs += len(r.errors)
				saves += len(r.acked)
				prunes += r.prunes
				for _, e := range r.errors {
					t.Errorf("client saw an error: %s", e)
				}
			}
			t.Logf("%d processes, %ds: %d saves acknowledged, %d prunes, %d errors", procs, secs, saves, prunes, errs)
			verifyAcked(t, db, nil, 0)
			// every acknowledged save is there, once
			conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(5000)")
			require.NoError(t, err)
			defer conn.Close()
			var n int
			require.NoError(t, conn.QueryRow(`SELECT count(*) FROM checkpoints`).Scan(&n))
			require.Equal(t, len(acked), n, "checkpoints in DB vs acknowledged saves")
			byID := map[string]bool{}
			for _, a := range acked {
				require.False(t, byID[a.checkpointID], "checkpoint id %s acknowledged twice", a.checkpointID)
				byID[a.checkpointID] = true
			}
			// per process, in send order, seqs of each workflow strictly increase
			for _, r := range results {
				sort.Slice(r.acked, func(i, j int) bool { return r.acked[i].order < r.acked[j].order })
				seen := map[string]int64{}
				for _, a := range r.acked {
					require.Greater(t, a.seq, seen[a.workflow])
					seen[a.workflow] = a.seq
				}
			}
		})
	}
}

type contentionResult struct {
	acked  []ack
	errors []string
	prunes int
}

// runContender is one ckptd process saving pipelined for d, pruning every 25 saves.
func runContender(t *testing.T, db string, p int, d time.Duration) contentionResult {
	cmd := exec.Command(binPath, "--db", db, "--keep-last", "0", "--log-level", "error")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &syncWriter{w: &strings.Builder{}}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())

	var res contentionResult
	var mu sync.Mutex
	// at most 32 requests in flight per process, as a real pipelining client would do
	window := make(chan struct{}, 32)
	workflows := map[int]string{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := framing.NewReader(stdout, framing.Limits{})
		for {
			f, err := r.Next()
			if err != nil {
				return
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Result *struct {
					CheckpointID string `json:"checkpointId"`
					SHA256       string `json:"sha256"`
					Seq          int64  `json:"seq"`
				} `json:"result"`
				Error *rpcErr `json:"error"`
			}
			if err := json.Unmarshal(f.Body, &m); err != nil {
				continue
			}
			id, _ := strconv.Atoi(string(m.ID))
			select {
			case <-window:
			default:
			}
			mu.Lock()
			switch {
			case m.Error != nil:
				res.errors = append(res.errors, fmt.Sprintf("process %d request %d: %d %s", p, id, m.Error.Code, m.Error.Message))
			case m.Result != nil && m.Result.CheckpointID != "":
				res.acked = append(res.acked, ack{workflow: workflows[id], checkpointID: m.Result.CheckpointID, sha: m.Result.SHA256, seq: m.Result.Seq, order: id})
			}
			mu.Unlock()
		}
	}()
	deadline := time.Now().Add(d)
	for i := 1; time.Now().Before(deadline); i++ {
		window <- struct{}{}
		var frame []byte
		if i%25 == 0 {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/prune","params":{"keepLast":100000,"olderThanSeconds":3600}}`, i)
			frame = framing.AppendFrame(nil, []byte(body), nil, false)
			res.prunes++
		} else {
			wf := fmt.Sprintf("shared-%d", i%2)
			if i%3 == 0 {
				wf = fmt.Sprintf("own-%d", p)
			}
			mu.Lock()
			workflows[i] = wf
			mu.Unlock()
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":%q,"step":%d,"stateAttachment":true}}`, i, wf, i)
			frame = framing.AppendFrame(nil, []byte(body), checkpointState(2000+i%5000, int64(p*1_000_000+i)), true)
		}
		if _, err := stdin.Write(frame); err != nil {
			_ = cmd.Wait()
			res.errors = append(res.errors, fmt.Sprintf("process %d died: %v\nstderr:\n%s", p, err, stderr.w))
			<-done
			return res
		}
		if i%8 == 0 {
			time.Sleep(3 * time.Millisecond)
		}
	}
	// Wait for the replies before closing stdin, as a client that wants its answers does: at
	// the end of input the daemon gives what it has read a second, then cancels what has not
	// started (-32007), which under -race and four writers can be a queued save or two.
	for wait := time.Now().Add(60 * time.Second); len(window) > 0 && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	_ = stdin.Close()
	require.NoError(t, waitExit(cmd, 60*time.Second))
	<-done
	return res
}
