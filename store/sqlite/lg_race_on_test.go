//go:build race

package sqlite

const (
	raceEnabled = true
	lgScaleN    = 200 // TestLGListScale checkpoints (the race detector slows SQLite ~10x)
)
