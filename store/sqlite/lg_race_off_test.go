//go:build !race

package sqlite

const (
	raceEnabled = false
	lgScaleN    = 1000 // TestLGListScale checkpoints
)
