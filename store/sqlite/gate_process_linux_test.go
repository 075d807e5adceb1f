//go:build linux

package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
)

// TestHelperProcessGate is the other process of TestWriteGateTwoProcesses: it opens the store
// at CKPTD_GATE_HELPER_DB, says "open", then follows the commands read from stdin ("save":
// one save, then "saved"; "hold": takes the write turn, then "held"; "release": gives it back,
// then "released") until stdin ends.
func TestHelperProcessGate(t *testing.T) {
	path := os.Getenv("CKPTD_GATE_HELPER_DB")
	if path == "" {
		t.Skip("helper process for TestWriteGateTwoProcesses")
	}
	ctx := context.Background()
	s, err := open(ctx, options(path))
	require.NoError(t, err)
	defer s.Close()
	fmt.Println("open")
	sc := bufio.NewScanner(os.Stdin)
	for i := 0; sc.Scan(); i++ {
		switch sc.Text() {
		case "save":
			_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "child", State: []byte(fmt.Sprintf(`{"i":%d}`, i))})
			require.NoError(t, err)
			fmt.Println("saved")
		case "hold":
			require.True(t, s.gate.enter(), "another process has the database open: the gate is taken")
			fmt.Println("held")
		case "release":
			s.gate.leave()
			fmt.Println("released")
		}
	}
}

// TestWriteGateTwoProcesses: a store skips the write gate only while no other process has the
// database open (gate_linux.go). With a second process on it, each one's saves wait while the
// other holds the write turn; once that process is gone, the store is alone again.
func TestWriteGateTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	path := filepath.Join(t.TempDir(), "ckptd.db")
	ctx := context.Background()
	s, err := open(ctx, options(path))
	require.NoError(t, err)
	defer s.Close()
	require.NotNil(t, s.gate)
	require.True(t, s.gate.alone(), "no other process yet")
	mustSave(t, s, store.SaveRequest{WorkflowID: "parent", State: []byte(`{"i":0}`)})

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessGate$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "CKPTD_GATE_HELPER_DB="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// expect waits for the child's next answer (the test runner's own lines are skipped).
	expect := func(want string, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "the helper process ended before saying %q: %s", want, errOut.String())
				if l == want {
					return
				}
			case <-deadline:
				t.Fatalf("the helper process did not say %q within %v", want, within)
			}
		}
	}
	// quiet: the child says nothing for d (its save waits for the write turn).
	quiet := func(d time.Duration) {
		t.Helper()
		select {
		case l := <-lines:
			require.NotEqual(t, "saved", l, "the other process saved while this one held the write turn")
		case <-time.After(d):
		}
	}
	send := func(cmdline string) {
		t.Helper()
		_, err := io.WriteString(stdin, cmdline+"\n")
		require.NoError(t, err)
	}
	expect("open", time.Minute)
	require.False(t, s.gate.alone(), "another process has the database open")

	// this process holds the write turn: the other's save waits for it
	require.True(t, s.gate.enter())
	send("save")
	quiet(500 * time.Millisecond)
	s.gate.leave()
	expect("saved", 30*time.Second)

	// the other process holds it: this one's save waits
	send("hold")
	expect("held", 30*time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := s.Save(ctx, store.SaveRequest{WorkflowID: "parent", State: []byte(`{"i":1}`)})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("saved while the other process held the write turn (err %v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	send("release")
	expect("released", 30*time.Second)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the save did not go on once the other process let go of the write turn")
	}

	// both saving at once, taking turns
	for i := 0; i < 20; i++ {
		send("save")
		mustSave(t, s, store.SaveRequest{WorkflowID: "parent", State: []byte(fmt.Sprintf(`{"i":%d}`, i+2))})
		expect("saved", 30*time.Second)
	}
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait(), errOut.String())
	require.True(t, s.gate.alone(), "the other process is gone")
	for wf, n := range map[string]int64{"parent": 22, "child": 21} {
		lr, err := s.LoadLatest(ctx, wf, "")
		require.NoError(t, err)
		require.Equal(t, n, lr.Seq, wf)
	}
}
