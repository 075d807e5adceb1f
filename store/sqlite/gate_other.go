//go:build !linux

package sqlite

// writeGate is Linux only (open-file-description locks); elsewhere writers rely on SQLite's
// busy handler alone.
type writeGate struct{}

func openGate(string) *writeGate { return nil }
func (*writeGate) enter() bool   { return false }
func (*writeGate) leave()        {}
func (*writeGate) close()        {}
