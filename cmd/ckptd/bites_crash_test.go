package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// killAfterBites runs ckptd with args, holding after its nth committed bite of long maintenance
// (CKPTD_TEST_HOLD_AFTER_BITES), and SIGKILLs it there: the kill falls between two bites by
// construction. It fails the test if the command ends before holding.
func killAfterBites(t *testing.T, n int, args ...string) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = cliEnv(t, []string{fmt.Sprintf("%s=%d", envHoldAfterBites, n)})
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	held := make(chan string, 1)
	go func() {
		var seen strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "ckptd: holding after bite") {
				held <- line
				return
			}
			seen.WriteString(line + "\n")
		}
		held <- "ended: " + seen.String()
	}()
	select {
	case line := <-held:
		require.Equal(t, fmt.Sprintf("ckptd: holding after bite %d (%s)", n, envHoldAfterBites), line)
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("ckptd never held")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
}

// requireVerifies runs ckptd verify: every state, the integrity check and the kept figures.
func requireVerifies(t *testing.T, path string) {
	t.Helper()
	res := cliRun(t, nil, "verify", "--json", "--quiet", "--db", path)
	require.Equal(t, exitOK, res.code, res.stdout+res.stderr)
	var rep struct{ OK bool }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep))
	require.True(t, rep.OK, res.stdout)
}

// countCheckpoints counts the database's checkpoints per workflow, through the store.
func countCheckpoints(t *testing.T, path string) map[string]int {
	t.Helper()
	st, err := sqlite.OpenReadOnly(context.Background(), store.Options{Path: path})
	require.NoError(t, err)
	defer st.Close()
	wfs, err := store.AllWorkflows(context.Background(), st, false)
	require.NoError(t, err)
	out := map[string]int{}
	for _, w := range wfs {
		out[w.WorkflowID] = w.Count
	}
	return out
}

// TestMaintenanceKilledBetweenBites (#22): a prune, a workflow deletion and an import of a large
// archive, SIGKILLed between two of their bites, leave a database that verifies (states,
// integrity, kept figures) holding exactly what the committed bites did; running the same
// command again finishes the job, with results that add up to the whole.
func TestMaintenanceKilledBetweenBites(t *testing.T) {
	t.Parallel()
	const wfs, per, keep = 120, 24, 5
	db := newCLIDB(t, nil)
	var ps []*storePending
	for w := 0; w < wfs; w++ {
		for i := 0; i < per; i++ {
			ps = append(ps, &storePending{p: db.st.Enqueue(store.SaveRequest{WorkflowID: fmt.Sprintf("wf-%03d", w),
				Namespace: []string{"", "sub"}[i%2], State: []byte(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)), StateType: store.StateJSON})})
		}
	}
	for _, p := range ps {
		p.wait(t)
	}
	db.close()
	total := wfs * per
	want := wfs * (per - 2*keep) // keep the newest 5 of each namespace

	// prune, killed after its second bite
	killAfterBites(t, 2, "prune", "--keep-last", fmt.Sprint(keep), "--db", db.path)
	requireVerifies(t, db.path)
	left := 0
	for _, n := range countCheckpoints(t, db.path) {
		left += n
	}
	done := total - left
	require.Positive(t, done, "the committed bites' deletions are kept")
	require.Less(t, done, want, "killed part-way")
	res := cliRun(t, nil, "prune", "--keep-last", fmt.Sprint(keep), "--json", "--db", db.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	var pr struct{ Deleted int }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &pr))
	require.Equal(t, want-done, pr.Deleted, "the rerun deletes the rest")
	for wf, n := range countCheckpoints(t, db.path) {
		require.Equal(t, 2*keep, n, wf)
	}
	requireVerifies(t, db.path)

	// a workflow deleted in bites, killed after the first: its newest checkpoints are left
	big := newCLIDB(t, nil)
	ps = ps[:0]
	for i := 0; i < 700; i++ {
		ps = append(ps, &storePending{p: big.st.Enqueue(store.SaveRequest{WorkflowID: "big", CheckpointID: fmt.Sprintf("b-%04d", i),
			State: []byte(fmt.Sprintf(`{"i":%d}`, i)), StateType: store.StateJSON})})
	}
	for _, p := range ps {
		p.wait(t)
	}
	big.close()
	archive := exportTo(t, big, "big", "big.ckpt")
	killAfterBites(t, 1, "rm", "--workflow", "big", "--db", big.path)
	requireVerifies(t, big.path)
	n := countCheckpoints(t, big.path)["big"]
	require.Positive(t, n)
	require.Less(t, n, 700)
	res = cliRun(t, nil, "rm", "--workflow", "big", "--db", big.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.NotContains(t, countCheckpoints(t, big.path), "big")
	requireVerifies(t, big.path)

	// an import killed after its second bite keeps what those wrote; importing again adds the rest
	dst := newCLIDB(t, nil)
	dst.close()
	killAfterBites(t, 2, "import", archive, "--db", dst.path)
	requireVerifies(t, dst.path)
	n = countCheckpoints(t, dst.path)["big"]
	require.Positive(t, n)
	require.Less(t, n, 700)
	res = cliRun(t, nil, "import", archive, "--json", "--db", dst.path)
	require.Equal(t, exitOK, res.code, res.stderr)
	var ir struct{ Imported, Skipped int }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &ir))
	require.Equal(t, n, ir.Skipped)
	require.Equal(t, 700-n, ir.Imported)
	require.Equal(t, 700, countCheckpoints(t, dst.path)["big"])
	requireVerifies(t, dst.path)
}
