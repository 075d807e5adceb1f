package main

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// damagedDB is a database saved through the daemon: workflows whose states sit on pages of
// their own (markedState, 3000 bytes each), so that one page of the file can be wrecked.
type damagedDB struct {
	path   string
	ids    map[string]string // marker -> checkpoint id
	states map[string][]byte // marker -> state
}

func buildDamagedFixture(t *testing.T) *damagedDB {
	t.Helper()
	db := &damagedDB{path: filepath.Join(t.TempDir(), "c.db"), ids: map[string]string{}, states: map[string][]byte{}}
	d := startDaemon(t, db.path, "--keep-last", "0")
	for i := 0; i < 12; i++ {
		if i == 6 { // in the middle: later saves append to other pages
			db.states["VICTIM-MARKER"] = markedState("VICTIM-MARKER", 3000)
			db.ids["VICTIM-MARKER"] = d.saveState("wf-victim", 0, db.states["VICTIM-MARKER"])
		}
		marker := "KEEP-" + string(rune('A'+i)) + "-MARKER"
		wf := "wf-" + string(rune('a'+i%3))
		db.states[marker] = markedState(marker, 3000)
		db.ids[marker] = d.saveState(wf, i, db.states[marker])
	}
	d.shutdownWait()
	return db
}

// wreckPage overwrites the whole page of path holding marker with random bytes.
func wreckPage(t *testing.T, path, marker string, seed int64) {
	t.Helper()
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	pageSize := dbPageSize(t, path)
	at := bytes.Index(file, []byte(marker))
	require.Positive(t, at, "marker %s not in the file", marker)
	page := at / pageSize * pageSize
	require.NotZero(t, page)
	rand.New(rand.NewSource(seed)).Read(file[page : page+pageSize])
	require.NoError(t, os.WriteFile(path, file, 0o600))
}

// TestDamagedDatabaseNotWritten (#19 point 9): with one page of the file overwritten, serve
// opens the database, finds the damage (the open-time quick check), stops writing: every write
// answers -32006 with reason "database damaged" and a message saying what to do, reads of what
// is intact keep working, stats says so, the file is not modified, and the exit status is 1.
// The same happens when the damage is first met by a statement while serving.
func TestDamagedDatabaseNotWritten(t *testing.T) {
	fx := buildDamagedFixture(t)

	t.Run("found at open", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "damaged.db")
		copyFile(t, fx.path, path)
		wreckPage(t, path, "VICTIM-MARKER", 1)
		before, err := os.ReadFile(path)
		require.NoError(t, err)

		d := startDaemon(t, path, "--keep-last", "0")
		d.call("initialize", map[string]any{"clientName": "damaged"}, nil, nil)
		checkWritesRefused(t, d, "database damaged")
		assert.Contains(t, d.stderrText(), "ckptd recover --db "+path)

		// reads of what is intact still work
		for marker, id := range fx.ids {
			if marker == "VICTIM-MARKER" {
				continue
			}
			m := d.call("checkpoint/load", map[string]any{"checkpointId": id, "attachment": true}, nil, nil)
			assert.Equal(t, sha(fx.states[marker]), sha(m.Attachment), marker)
		}
		e := d.callErr("checkpoint/load", map[string]any{"checkpointId": fx.ids["VICTIM-MARKER"]}, nil)
		assert.Equal(t, -32002, e.Code, e.Message)
		var list struct{ Checkpoints []map[string]any }
		d.call("checkpoint/list", map[string]any{"workflowId": "wf-a"}, nil, &list)
		assert.Len(t, list.Checkpoints, 4)

		d.call("shutdown", nil, nil, nil)
		var ee *exec.ExitError
		require.ErrorAs(t, waitExit(d.cmd, 20*time.Second), &ee, "a damaged database must not exit 0")
		assert.Equal(t, 1, ee.ExitCode())
		assert.Contains(t, d.stderrText(), "database damaged")
		after, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(before, after), "the damaged database file was written to")
	})

	t.Run("found by a statement", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "later.db")
		copyFile(t, fx.path, path)
		d := startDaemon(t, path, "--keep-last", "0")
		d.call("initialize", map[string]any{"clientName": "damaged"}, nil, nil)
		id := d.saveState("wf-a", 100, markedState("BEFORE-DAMAGE", 500)) // writes work until then
		m := d.call("checkpoint/load", map[string]any{"checkpointId": id, "attachment": true}, nil, nil)
		require.Equal(t, sha(markedState("BEFORE-DAMAGE", 500)), sha(m.Attachment))

		// wreck the b-tree header of the page holding the victim's state, which no read
		// connection has cached: the next read of it gets SQLITE_CORRUPT
		file, err := os.ReadFile(path)
		require.NoError(t, err)
		pageSize := dbPageSize(t, path)
		at := bytes.Index(file, []byte("VICTIM-MARKER"))
		require.Positive(t, at)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte{0x6b}, int64(at/pageSize*pageSize))
		require.NoError(t, err)
		require.NoError(t, f.Close())

		e := d.callErr("checkpoint/load", map[string]any{"checkpointId": fx.ids["VICTIM-MARKER"]}, nil)
		assert.Equal(t, -32002, e.Code, e.Message)
		checkWritesRefused(t, d, "database damaged")
		d.call("shutdown", nil, nil, nil)
		var ee *exec.ExitError
		require.ErrorAs(t, waitExit(d.cmd, 20*time.Second), &ee)
	})
}

// checkWritesRefused: stats reports the stopped writes, and every kind of write answers -32006
// with data.reason = reason.
func checkWritesRefused(t *testing.T, d *daemon, reason string) {
	t.Helper()
	var st struct {
		DB struct {
			WritesStopped *struct{ Reason, Detail string } `json:"writesStopped"`
		} `json:"db"`
	}
	d.call("stats", nil, nil, &st)
	require.NotNil(t, st.DB.WritesStopped, "stats must say writes stopped")
	assert.Equal(t, reason, st.DB.WritesStopped.Reason)
	assert.NotEmpty(t, st.DB.WritesStopped.Detail)
	for _, w := range []struct {
		method string
		params map[string]any
		att    []byte
	}{
		{"checkpoint/save", map[string]any{"workflowId": "wf-a", "step": 99, "state": map[string]any{"x": 1}}, nil},
		{"checkpoint/save", map[string]any{"workflowId": "wf-new", "stateAttachment": true, "stateType": "bytes"}, randomBytes(100 << 10)},
		{"checkpoint/delete", map[string]any{"checkpointId": "no-such"}, nil},
		{"checkpoint/prune", map[string]any{"keepLast": 1}, nil},
		{"workflow/configure", map[string]any{"workflowId": "wf-a", "retention": map[string]any{"keepLast": 3}}, nil},
		{"workflow/complete", map[string]any{"workflowId": "wf-a", "preserve": true}, nil},
		{"lg/put", map[string]any{"threadId": "t", "checkpointId": "1", "checkpoint": map[string]any{"type": "json", "offset": 0, "length": 2},
			"channelVersions": map[string]any{}}, []byte("{}")},
	} {
		e := d.callErr(w.method, w.params, w.att)
		require.Equal(t, -32006, e.Code, "%s: %s", w.method, e.Message)
		var data struct{ Reason string }
		require.NoError(t, json.Unmarshal(e.Data, &data), "%s data: %s", w.method, e.Data)
		assert.Equal(t, reason, data.Reason, w.method)
		if reason == "database damaged" {
			assert.Contains(t, e.Message, "ckptd recover", "%s: the message says what to do", w.method)
		}
		assert.False(t, strings.Contains(e.Message, "internal error"), e.Message)
	}
}
