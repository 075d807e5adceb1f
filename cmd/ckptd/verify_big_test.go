package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// TestCLIVerifyBig (opt-in: CKPTD_BIG_VERIFY=1) builds a ~1 GB database, 1000 workflows × 10
// checkpoints × 100 KB of distinct, incompressible state, and times 'ckptd verify' on it. It
// checks the progress reporting and that verify finishes, and logs the throughput. Under -race
// it builds a normal binary for the timing. CKPTD_BIG_VERIFY_DIR keeps the database there.
//
//	CKPTD_BIG_VERIFY=1 go test ./cmd/ckptd -run TestCLIVerifyBig -v -timeout 30m
func TestCLIVerifyBig(t *testing.T) {
	if os.Getenv("CKPTD_BIG_VERIFY") != "1" {
		t.Skip("set CKPTD_BIG_VERIFY=1 to build a 1 GB database and time ckptd verify")
	}
	const workflows, perWorkflow, stateSize = 1000, 10, 100 << 10
	dir := os.Getenv("CKPTD_BIG_VERIFY_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "big.db")
	if _, err := os.Stat(path); err != nil {
		start := time.Now()
		st, err := sqlite.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
		require.NoError(t, err)
		var pending []*store.Pending
		for w := 0; w < workflows; w++ {
			for c := 0; c < perWorkflow; c++ {
				rng := rand.New(rand.NewChaCha8([32]byte{byte(w), byte(w >> 8), byte(c)}))
				state := make([]byte, stateSize)
				for i := 0; i+8 <= len(state); i += 8 {
					v := rng.Uint64()
					for k := 0; k < 8; k++ {
						state[i+k] = byte(v >> (8 * k))
					}
				}
				pending = append(pending, st.Enqueue(store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%04d", w),
					CheckpointID: fmt.Sprintf("wf-%04d-%02d", w, c), Step: int64(c), State: state, StateType: store.StateBytes}))
			}
			if len(pending) >= 200 {
				for _, p := range pending {
					_, err := p.Wait(context.Background())
					require.NoError(t, err)
				}
				pending = pending[:0]
			}
		}
		for _, p := range pending {
			_, err := p.Wait(context.Background())
			require.NoError(t, err)
		}
		require.NoError(t, st.Close())
		t.Logf("built %s in %s", path, time.Since(start).Round(time.Second))
	}
	fi, err := os.Stat(path)
	require.NoError(t, err)
	t.Logf("database: %.0f MB", float64(fi.Size())/1e6)

	bin := binPath
	if raceEnabled {
		bin = filepath.Join(t.TempDir(), "ckptd")
		out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	var stdout, stderr strings.Builder
	cmd := exec.Command(bin, "verify", "--db", path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	elapsed := time.Since(start)
	t.Logf("ckptd verify: %s, %.0f MB/s\nstdout: %sstderr:\n%s", elapsed.Round(time.Millisecond),
		float64(fi.Size())/1e6/elapsed.Seconds(), stdout.String(), stderr.String())
	assert.Contains(t, stdout.String(), fmt.Sprintf("ok: %d checkpoints, %d states", workflows*perWorkflow, workflows*perWorkflow))
	assert.Contains(t, stderr.String(), "verify: states 50% (5000/10000)")
	assert.Contains(t, stderr.String(), "verify: states 100% (10000/10000)")
	assert.Contains(t, stderr.String(), "verify: checking SQLite integrity")
}
