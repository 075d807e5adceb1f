package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// TestLGDeleteKilledBetweenBites: a daemon SIGKILLed in the middle of a large thread/delete (done
// in bites) leaves a database that verifies, with the thread partly deleted and everything else
// intact; the same call again finishes the job.
func TestLGDeleteKilledBetweenBites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "ckptd.db")
	st, err := sqlite.Open(ctx, store.Options{Path: db, Durability: store.DurabilityNormal})
	require.NoError(t, err)
	const n = 40 * store.BiteUnits
	put := func(thread string, i int, parent string) string {
		id := fmt.Sprintf("c%06d", i)
		vj, _ := json.Marshal(map[string]any{"m": fmt.Sprint(i + 1)})
		p, _ := st.LGPut(store.LGPutRequest{ThreadID: thread, CheckpointID: id, ParentID: parent, Type: "json",
			Checkpoint: []byte(`{}`), ChannelVersions: vj, Metadata: json.RawMessage(fmt.Sprintf(`{"step":%d}`, i)),
			Blobs: []store.LGBlob{{Channel: "m", Version: fmt.Sprintf("%q", fmt.Sprint(i+1)), Type: "json", Data: []byte(fmt.Sprintf(`"value %d"`, i))}}})
		require.NoError(t, p.Wait(ctx))
		w, _ := st.LGPutWrites(thread, "", id, []store.LGWrite{{TaskID: "t", Channel: "m", Type: "json", Data: []byte(`"w"`)}})
		require.NoError(t, w.Wait(ctx))
		return id
	}
	parent := ""
	for i := 0; i < n; i++ {
		parent = put("big", i, parent)
	}
	put("other", 0, "")
	require.NoError(t, st.Close())

	count := func(q string, args ...any) int {
		t.Helper()
		raw, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(5000)")
		require.NoError(t, err)
		defer raw.Close()
		var k int
		require.NoError(t, raw.QueryRow(q, args...).Scan(&k))
		return k
	}

	cmd := exec.Command(binPath, "--db", db, "--log-level", "error")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := framing.NewReader(stdout, framing.Limits{})
	_, err = stdin.Write(framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`), nil, false))
	require.NoError(t, err)
	_, err = r.Next()
	require.NoError(t, err)
	_, err = stdin.Write(framing.AppendFrame(nil, []byte(`{"jsonrpc":"2.0","id":2,"method":"thread/delete","params":{"threadId":"big"}}`), nil, false))
	require.NoError(t, err)
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := count(`SELECT count(*) FROM lg_checkpoints WHERE thread_id = 'big'`)
		if left < n-store.BiteUnits { // a few bites in
			require.Positive(t, left, "the delete finished before it could be killed: make the thread larger")
			break
		}
		require.True(t, time.Now().Before(deadline), "no bite committed")
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	// consistent: verifies; the thread's remaining checkpoints are its newest, each with its
	// value and writes; the other thread is intact
	res := cliRun(t, nil, "verify", "--db", db)
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	left := count(`SELECT count(*) FROM lg_checkpoints WHERE thread_id = 'big'`)
	require.Positive(t, left)
	require.Equal(t, fmt.Sprintf("c%06d", n-left), countString(t, db, `SELECT min(checkpoint_id) FROM lg_checkpoints WHERE thread_id = 'big'`), "oldest first")
	require.Equal(t, left, count(`SELECT count(*) FROM lg_writes WHERE thread_id = 'big'`))
	require.Equal(t, left, count(`SELECT count(*) FROM lg_meta m JOIN lg_checkpoints c ON c.id = m.ckpt WHERE c.thread_id = 'big'`))
	require.Equal(t, n, count(`SELECT count(*) FROM lg_blobs WHERE thread_id = 'big'`), "values go last")
	st, err = sqlite.Open(ctx, store.Options{Path: db})
	require.NoError(t, err)
	defer st.Close()
	got, err := st.LGGet(ctx, "big", "", "")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("c%06d", n-1), got.CheckpointID)
	require.Equal(t, fmt.Sprintf(`"value %d"`, n-1), string(got.Blobs[0].Data))

	// running it again finishes the job, and counts what was left exactly
	deleted, err := st.LGDeleteThread(ctx, "big")
	require.NoError(t, err)
	require.Equal(t, left, deleted)
	require.NoError(t, st.Close())
	require.Zero(t, count(`SELECT count(*) FROM lg_checkpoints WHERE thread_id = 'big'`)+count(`SELECT count(*) FROM lg_blobs WHERE thread_id = 'big'`)+
		count(`SELECT count(*) FROM lg_writes WHERE thread_id = 'big'`)+count(`SELECT count(*) FROM lg_threads WHERE thread_id = 'big'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM lg_checkpoints WHERE thread_id = 'other'`))
	res = cliRun(t, nil, "verify", "--db", db)
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
}

func countString(t *testing.T, db, q string) string {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	require.NoError(t, err)
	defer raw.Close()
	var s string
	require.NoError(t, raw.QueryRow(q).Scan(&s))
	return s
}
