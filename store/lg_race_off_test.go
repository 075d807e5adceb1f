//go:build !race

package store

const (
	raceEnabled = false
	lgScaleN    = 1000 // TestLGListScale checkpoints
)
