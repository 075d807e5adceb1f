package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/ckptd/ckptd/framing"
)

// ack is a save the daemon acknowledged before it was killed.
type ack struct {
	workflow     string
	checkpointID string
	sha          string
	seq          int64
	order        int // round*1e9 + request id: the order the saves were sent in
}

// TestCrashKillLoop SIGKILLs a daemon streaming saves from several workflows at random moments
// and checks after every restart that every acknowledged save loads intact, seqs are unique
// and increasing, and SQLite's integrity check passes. CKPTD_CRASH_KILLS sets the number of
// kills (default 12 in the normal suite; the long run used 250), CKPTD_CRASH_SEED the seed.
func TestCrashKillLoop(t *testing.T) {
	kills := envInt("CKPTD_CRASH_KILLS", 12)
	if testing.Short() {
		kills = 3
	}
	seed := int64(envInt("CKPTD_CRASH_SEED", 20261122))
	rng := rand.New(rand.NewSource(seed))
	db := filepath.Join(t.TempDir(), "crash.db")
	var all []ack
	totalSent := 0
	for round := 0; round < kills; round++ {
		acked, sent := saveUntilKilled(t, db, rng, round, false)
		totalSent += sent
		all = append(all, acked...)
		verifyAcked(t, db, acked, round)
	}
	verifyAcked(t, db, all, kills)
	t.Logf("seed %d: %d kills, %d saves sent, %d acknowledged, %d verified, 0 lost", seed, kills, totalSent, len(all), len(all))
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// saveUntilKilled streams pipelined saves and SIGKILLs the daemon after a random delay (counted
// from its first reply when afterFirstReply: a daemon that takes a while to start, as one on a
// PostgreSQL server does, is then killed mid-save rather than mid-start).
func saveUntilKilled(t *testing.T, db string, rng *rand.Rand, round int, afterFirstReply bool) (acked []ack, sent int) {
	cmd := exec.Command(binPath, "--db", db, "--keep-last", "0", "--log-level", "error")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	type sentSave struct{ workflow string }
	var mu sync.Mutex
	pending := map[int]sentSave{}
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	wrng := rand.New(rand.NewSource(rng.Int63())) // the writer's own: rand.Rand is not goroutine-safe
	go func() {
		defer close(writerDone)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			wf := fmt.Sprintf("wf-%d", i%4)
			size := 100 + wrng.Intn(20000)
			if i%3 == 0 {
				size = 100 << 10
			}
			state := checkpointState(size, int64(round*1_000_000+i))
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":%q,"step":%d,"stateAttachment":true}}`, i, wf, i)
			mu.Lock()
			pending[i] = sentSave{workflow: wf}
			sent++
			mu.Unlock()
			if _, err := stdin.Write(framing.AppendFrame(nil, []byte(body), state, true)); err != nil {
				return
			}
			if i%8 == 0 {
				time.Sleep(time.Duration(wrng.Intn(2000)) * time.Microsecond)
			}
		}
	}()
	readerDone := make(chan struct{})
	firstReply := make(chan struct{})
	go func() {
		defer close(readerDone)
		r := framing.NewReader(stdout, framing.Limits{})
		for first := true; ; first = false {
			f, err := r.Next()
			if err != nil {
				if first {
					close(firstReply)
				}
				return
			}
			if first {
				close(firstReply)
			}
			var m struct {
				ID     int `json:"id"`
				Result *struct {
					CheckpointID string `json:"checkpointId"`
					SHA256       string `json:"sha256"`
					Seq          int64  `json:"seq"`
				} `json:"result"`
				Error json.RawMessage `json:"error"`
			}
			if json.Unmarshal(f.Body, &m) != nil || m.Result == nil {
				continue
			}
			mu.Lock()
			s := pending[m.ID]
			mu.Unlock()
			acked = append(acked, ack{workflow: s.workflow, checkpointID: m.Result.CheckpointID, sha: m.Result.SHA256, seq: m.Result.Seq, order: round*1_000_000_000 + m.ID})
		}
	}()
	delay := time.Duration(5+rng.Intn(120)) * time.Millisecond
	if afterFirstReply {
		select {
		case <-firstReply:
		case <-time.After(30 * time.Second):
		}
		delay *= 3 // saves commit over a socket: a longer window lets some be acknowledged
	}
	time.Sleep(delay)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	close(stop)
	_ = stdin.Close()
	<-writerDone
	<-readerDone
	return acked, sent
}

// verifyAcked restarts the daemon and loads every acknowledged save, then checks seqs and integrity.
func verifyAcked(t *testing.T, db string, acked []ack, round int) {
	t.Helper()
	d := startDaemon(t, db, "--keep-last", "0")
	for _, a := range acked {
		id := d.send("checkpoint/load", map[string]any{"checkpointId": a.checkpointID, "attachment": true}, nil)
		m := d.response()
		require.Equal(t, strconv.Itoa(id), string(m.ID))
		require.Nil(t, m.Error, "round %d: acknowledged checkpoint %s lost or corrupt: %+v", round, a.checkpointID, m.Error)
		require.Equal(t, a.sha, sha(m.Attachment), "round %d: checkpoint %s changed", round, a.checkpointID)
	}
	_ = d.stdin.Close()
	require.NoError(t, waitExit(d.cmd, 20*time.Second))

	conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer conn.Close()
	var integrity string
	require.NoError(t, conn.QueryRow("PRAGMA integrity_check").Scan(&integrity))
	require.Equal(t, "ok", integrity, "round %d", round)
	var dups int
	require.NoError(t, conn.QueryRow(`SELECT count(*) FROM (SELECT workflow_id, seq FROM checkpoints GROUP BY workflow_id, seq HAVING count(*) > 1)`).Scan(&dups))
	require.Zero(t, dups, "round %d: duplicate seq numbers", round)
	// in the order the saves were sent, each workflow's seqs must strictly increase
	sorted := append([]ack(nil), acked...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].order < sorted[j].order })
	seen := map[string]int64{}
	for _, a := range sorted {
		require.Greater(t, a.seq, seen[a.workflow], "round %d: seq not increasing in %s", round, a.workflow)
		seen[a.workflow] = a.seq
	}
}
