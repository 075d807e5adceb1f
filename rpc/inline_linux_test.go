//go:build linux

package rpc

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ckptd/ckptd/framing"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// TestQuickReadsRunInline: over OS pipes, a quick read with nothing else to read runs on the
// reading goroutine (no worker is started for it); a read that arrives while another request is
// waiting to be read, and a save, still hand the reading over so that nothing waits behind them.
func TestQuickReadsRunInline(t *testing.T) {
	st, err := sqlite.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "s.db")})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(st, Options{Version: "test"})
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(context.Background(), inR, outW)
		_ = outW.Close()
	}()
	defer func() {
		_ = inW.Close()
		<-done
		_ = outR.Close()
		_ = st.Close()
	}()
	fr := framing.NewReader(outR, framing.Limits{})
	send := func(id int, method, params string) {
		body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"` + method + `","params":` + params + `}`
		if _, err := inW.Write(framing.AppendFrame(nil, []byte(body), nil, false)); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() string {
		f, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		return string(f.Body)
	}
	for i := 1; i <= 20; i++ {
		send(i, "workflow/list", `{}`)
		if got := recv(); !strings.Contains(got, `"result"`) {
			t.Fatalf("workflow/list: %s", got)
		}
	}
	if n := srv.workers.started.Load(); n != 0 {
		t.Fatalf("%d workers started for reads answered one at a time", n)
	}
	// two requests sent together: the first one hands the reading over
	send(21, "workflow/list", `{}`)
	send(22, "workflow/list", `{}`)
	recv()
	recv()
	send(23, "checkpoint/save", `{"workflowId":"w","state":{}}`)
	if got := recv(); !strings.Contains(got, `"result"`) {
		t.Fatalf("save: %s", got)
	}
	if n := srv.workers.started.Load(); n == 0 {
		t.Fatal("no worker started: the reading never went on elsewhere")
	}
}
