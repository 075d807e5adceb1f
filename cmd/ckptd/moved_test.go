package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDatabaseFileGone (#20 point 3): when the database's directory is removed, or another file
// is renamed over the database (or its WAL is deleted) while the daemon runs, no later save is
// acknowledged: each answers -32006 with a reason saying what happened, reads keep answering
// from the files the daemon still has open, and the daemon exits 1 at shutdown.
func TestDatabaseFileGone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		do     func(t *testing.T, path string) (check func(t *testing.T))
	}{
		{"directory removed", "database file removed", func(t *testing.T, path string) func(*testing.T) {
			require.NoError(t, os.RemoveAll(filepath.Dir(path)))
			return func(t *testing.T) { assert.NoDirExists(t, filepath.Dir(path)) }
		}},
		{"file replaced", "database file replaced", func(t *testing.T, path string) func(*testing.T) {
			other := filepath.Join(filepath.Dir(path), "other.db")
			d := startDaemon(t, other)
			d.saveState("wf-other", 0, []byte(`{"other":true}`))
			d.shutdownWait()
			want, err := os.ReadFile(other)
			require.NoError(t, err)
			require.NoError(t, os.Rename(other, path))
			return func(t *testing.T) {
				got, err := os.ReadFile(path)
				require.NoError(t, err)
				assert.True(t, bytes.Equal(want, got), "the file now at the path was written to")
			}
		}},
		{"WAL deleted", "database file removed", func(t *testing.T, path string) func(*testing.T) {
			require.NoError(t, os.Remove(path+"-wal"))
			return func(*testing.T) {}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state", "c.db")
			d := startDaemon(t, path, "--keep-last", "0")
			d.call("initialize", map[string]any{"clientName": "gone"}, nil, nil)
			type saved struct{ id, sha string }
			var acked []saved
			for i := 0; i < 5; i++ {
				st := markedState("BEFORE", 300+i)
				acked = append(acked, saved{d.saveState("wf", i, st), sha(st)})
			}
			check := tc.do(t, path)

			// a burst of pipelined saves, then single ones: none acknowledged
			var ids []int
			for i := 0; i < 20; i++ {
				ids = append(ids, d.send("checkpoint/save", map[string]any{"workflowId": "wf", "step": 10 + i, "state": map[string]any{"i": i}}, nil))
			}
			for range ids {
				m := d.response()
				require.NotNil(t, m.Error, "a save into a file that is gone was acknowledged: %s", m.Result)
				assert.Equal(t, -32006, m.Error.Code, m.Error.Message)
				var data struct{ Reason string }
				require.NoError(t, json.Unmarshal(m.Error.Data, &data))
				assert.Equal(t, tc.reason, data.Reason, m.Error.Message)
			}
			checkWritesRefused(t, d, tc.reason)

			// reads answer from what the daemon has
			for _, a := range acked {
				m := d.call("checkpoint/load", map[string]any{"checkpointId": a.id, "attachment": true}, nil, nil)
				assert.Equal(t, a.sha, sha(m.Attachment))
			}
			var list struct{ Checkpoints []map[string]any }
			d.call("checkpoint/list", map[string]any{"workflowId": "wf"}, nil, &list)
			assert.Len(t, list.Checkpoints, len(acked), "only the acknowledged saves are visible")

			d.call("shutdown", nil, nil, nil)
			var ee *exec.ExitError
			require.ErrorAs(t, waitExit(d.cmd, 20*time.Second), &ee, "exit 0 after acknowledged data went away")
			assert.Equal(t, 1, ee.ExitCode())
			assert.Contains(t, d.stderrText(), tc.reason)
			check(t)
		})
	}
}
