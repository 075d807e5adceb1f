package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDurabilityApplied checks through the binary that --durability really reaches SQLite: the
// stats result reports the settings read back from the connection every save commits through
// (docs/durability.md).
func TestDurabilityApplied(t *testing.T) {
	for _, tc := range []struct {
		sub                      string
		args                     []string
		name, synchronous, fsync string
	}{
		{"default", nil, "full", "2", "1"},
		{"full", []string{"--durability", "full"}, "full", "2", "1"},
		{"normal", []string{"--durability", "normal"}, "normal", "1", "0"},
	} {
		t.Run(tc.sub, func(t *testing.T) {
			d := startDaemon(t, filepath.Join(t.TempDir(), "c.db"), tc.args...)
			var init struct {
				Capabilities struct{ Durability string }
			}
			d.call("initialize", nil, nil, &init)
			assert.Equal(t, tc.name, init.Capabilities.Durability)
			d.call("checkpoint/save", map[string]any{"workflowId": "w", "state": 1}, nil, nil)
			var st struct {
				DB struct{ Pragmas map[string]string }
			}
			d.call("stats", nil, nil, &st)
			assert.Equal(t, map[string]string{
				"journal_mode":       "wal",
				"synchronous":        tc.synchronous, // 2 = FULL, 1 = NORMAL
				"fullfsync":          tc.fsync,
				"busy_timeout":       "5000",
				"auto_vacuum":        "2", // INCREMENTAL
				"wal_autocheckpoint": "0",
				"journal_size_limit": "67108864",
				"foreign_keys":       "0",
			}, st.DB.Pragmas)
			d.shutdownWait()
		})
	}
}
