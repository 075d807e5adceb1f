package main

import (
	"database/sql"
	"fmt"
	"math/rand"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/internal/testgen"
)

// TestCrashKillLoopChunks SIGKILLs a daemon at random moments while it saves growing states
// (stored as shared chunks) of several workflows, prunes them by retention on every save and by
// checkpoint/prune, and deletes whole workflows; and beside them puts the same states as
// LangGraph channel values, pending writes (replacing a special write each time) and staged
// values of several threads, pruned by the threads' retention and deleted by thread/delete.
// After every kill `ckptd verify` reassembles every value and recounts every reference: no
// dangling reference (a listed chunk that is gone) and no orphan (a stored chunk nothing lists)
// may be left, since every free happens in the transaction that removes the value (a pack's
// bytes too, with the last chunk stored in it). Once everything is deleted no chunk, run or pack
// is left.
// CKPTD_CRASH_KILLS sets the number of kills (default 10), CKPTD_CRASH_SEED the seed.
func TestCrashKillLoopChunks(t *testing.T) {
	kills := envInt("CKPTD_CRASH_KILLS", 10)
	if testing.Short() {
		kills = 3
	}
	seed := int64(envInt("CKPTD_CRASH_SEED", 20261127))
	rng := rand.New(rand.NewSource(seed))
	db := filepath.Join(t.TempDir(), "crash.db")
	workloads := make([]*testgen.Workload, 4)
	for i := range workloads {
		workloads[i] = testgen.NewWorkload(uint64(i), 96<<10) // states of ~100 KB sharing nothing across workflows
	}
	sent, maxChunks, maxCkpts, maxWrites, maxPacks := 0, 0, 0, 0, 0
	// the compactor cuts new content into chunks once the writer is idle: on a loaded machine a
	// round may be killed before it did, so rounds go on (up to 3x) until some chunks were stored
	for round := 0; round < kills || (maxChunks == 0 && round < 3*kills); round++ {
		sent += chunkSavesUntilKilled(t, db, rng, workloads)
		res := cliRun(t, nil, "verify", "--quiet", "--db", db)
		require.Equal(t, 0, res.code, "round %d: ckptd verify after a kill:\n%s%s", round, res.stdout, res.stderr)
		chunks, ckpts, packs := chunkCounts(t, db)
		maxChunks, maxCkpts, maxPacks = max(maxChunks, chunks), max(maxCkpts, ckpts), max(maxPacks, packs)
		maxWrites = max(maxWrites, chunkedLGWrites(t, db))
	}
	require.Positive(t, maxChunks, "no chunked state was ever committed: the loop tested nothing")
	require.Positive(t, maxWrites, "no chunked pending write (beside a chunked channel value) was ever committed")
	require.Positive(t, maxPacks, "no pack was ever committed")
	// delete everything: nothing may be left behind
	d := startDaemon(t, db, "--keep-last", "0")
	for i := range workloads {
		d.call("checkpoint/delete", map[string]any{"workflowId": fmt.Sprintf("wf-%d", i)}, nil, nil)
		d.call("thread/delete", map[string]any{"threadId": fmt.Sprintf("th-%d", i)}, nil, nil) // its staged values too
	}
	_ = d.stdin.Close()
	require.NoError(t, waitExit(d.cmd, 20*time.Second))
	res := cliRun(t, nil, "verify", "--quiet", "--db", db)
	require.Equal(t, 0, res.code, "%s%s", res.stdout, res.stderr)
	conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	require.NoError(t, err)
	defer conn.Close()
	var chunks, runs, states, lgRows, packs int
	require.NoError(t, conn.QueryRow(`SELECT (SELECT count(*) FROM chunk_addrs), (SELECT count(*) FROM run_addrs),
		(SELECT count(*) FROM states), (SELECT count(*) FROM lg_blobs) + (SELECT count(*) FROM lg_writes)
		+ (SELECT count(*) FROM lg_staged), (SELECT count(*) FROM packs)`).Scan(&chunks, &runs, &states, &lgRows, &packs))
	require.Zero(t, states)
	require.Zero(t, lgRows)
	require.Zero(t, runs, "runs left once nothing lists them")
	require.Zero(t, chunks, "chunks left once nothing lists them")
	require.Zero(t, packs, "packs left once nothing lists their chunks")
	t.Logf("seed %d: %d kills, %d requests sent, up to %d checkpoints, %d chunked LangGraph writes, %d chunks and %d packs stored, verify clean after each",
		seed, kills, sent, maxCkpts, maxWrites, maxChunks, maxPacks)
}

// chunkedLGWrites returns the LangGraph pending writes stored as chunks in db, if channel values
// stored as chunks are there too (0 otherwise).
func chunkedLGWrites(t *testing.T, db string) int {
	t.Helper()
	conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	require.NoError(t, err)
	defer conn.Close()
	var n, values int
	require.NoError(t, conn.QueryRow(`SELECT (SELECT count(*) FROM lg_writes WHERE encoding = 4),
		(SELECT count(*) FROM lg_blobs WHERE encoding = 4)`).Scan(&n, &values))
	if values == 0 {
		return 0
	}
	return n
}

// chunkCounts returns the chunks, checkpoints and packs stored in db.
func chunkCounts(t *testing.T, db string) (chunks, checkpoints, packs int) {
	t.Helper()
	conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.QueryRow(`SELECT (SELECT count(*) FROM chunk_addrs), (SELECT count(*) FROM checkpoints),
		(SELECT count(*) FROM packs)`).Scan(&chunks, &checkpoints, &packs))
	return chunks, checkpoints, packs
}

// chunkSavesUntilKilled streams saves (each workflow's state one step further), prunes and
// workflow deletes to a daemon with --keep-last 3 and SIGKILLs it after a random delay. It
// returns the requests sent.
func chunkSavesUntilKilled(t *testing.T, db string, rng *rand.Rand, workloads []*testgen.Workload) int {
	cmd := exec.Command(binPath, "--db", db, "--keep-last", "3", "--lg-keep-last", "3", "--log-level", "error")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	readerDone := make(chan struct{})
	enough := make(chan struct{}) // closed after `want` replies (or the end of the replies)
	want := 4 + rng.Intn(16)
	go func() { // drain the replies so that the daemon never blocks on its stdout
		defer close(readerDone)
		r := framing.NewReader(stdout, framing.Limits{})
		for n := 1; ; n++ {
			_, err := r.Next()
			if n == want || (err != nil && n < want) {
				close(enough)
			}
			if err != nil {
				return
			}
		}
	}()
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	wrng := rand.New(rand.NewSource(rng.Int63()))
	sent := 0
	go func() {
		defer close(writerDone)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := wrng.Intn(len(workloads))
			wf := fmt.Sprintf("wf-%d", k)
			th := fmt.Sprintf("th-%d", k)
			var frame []byte
			switch op := wrng.Intn(30); {
			case op >= 20 && op < 24: // a LangGraph put of the workflow's state as a channel value
				w := workloads[k]
				w.Advance()
				state := w.State()
				body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"lg/put","params":{"threadId":%q,"checkpointId":"c%09d",`+
					`"checkpoint":{"type":"json","offset":0,"length":2},"channelVersions":{"m":%d},`+
					`"blobs":[{"channel":"m","version":%d,"type":"bytes","offset":2,"length":%d}]}}`, i, th, i, i, i, len(state))
				frame = framing.AppendFrame(nil, body, append([]byte(`{}`), state...), true)
			case op >= 24 && op < 28: // its pending writes: one stored once, one special write replaced
				w := workloads[k]
				w.Advance()
				state := w.State()
				body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"lg/putWrites","params":{"threadId":%q,"checkpointId":"c%09d",`+
					`"taskId":"t%d","writes":[{"channel":"m","idx":0,"type":"bytes","offset":0,"length":%d},`+
					`{"channel":"__error__","idx":-1,"type":"bytes","offset":0,"length":%d}]}}`, i, th, i-wrng.Intn(4), wrng.Intn(2), len(state), len(state))
				frame = framing.AppendFrame(nil, body, state, true)
			case op == 28: // a staged value no put takes (thread/delete collects it)
				w := workloads[k]
				body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"lg/putValue","params":{"threadId":%q,"type":"bytes","offset":0,"length":%d}}`,
					i, th, len(w.State()))
				frame = framing.AppendFrame(nil, body, w.State(), true)
			case op == 29:
				frame = framing.AppendFrame(nil, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"thread/delete","params":{"threadId":%q}}`, i, th), nil, false)
			case op == 0:
				frame = framing.AppendFrame(nil, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"checkpoint/delete","params":{"workflowId":%q}}`, i, wf), nil, false)
			case op < 3:
				frame = framing.AppendFrame(nil, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"checkpoint/prune","params":{"workflowId":%q,"keepLast":1}}`, i, wf), nil, false)
			default:
				w := workloads[k]
				w.Advance()
				state := w.State()
				body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"checkpoint/save","params":{"workflowId":%q,"step":%d,"stateAttachment":true}}`, i, wf, i)
				frame = framing.AppendFrame(nil, body, state, true)
			}
			if _, err := stdin.Write(frame); err != nil {
				return
			}
			sent++
			if i%4 == 0 {
				time.Sleep(time.Duration(wrng.Intn(3000)) * time.Microsecond)
			}
		}
	}()
	// killed a random while after a random number of replies: mid-save, mid-prune, never
	// mid-start (a slow start, under -race, would leave nothing to check), and once edits of
	// states saved in this round (cut into chunks at once) may have been committed
	select {
	case <-enough:
	case <-time.After(60 * time.Second):
	}
	time.Sleep(time.Duration(rng.Intn(100)) * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	close(stop)
	_ = stdin.Close()
	<-writerDone
	<-readerDone
	return sent
}
