package main

import (
	"fmt"
	"strconv"
)

// envHoldAfterBites names a test hook: CKPTD_TEST_HOLD_AFTER_BITES=N makes the process stop
// (block for good, writing nothing more) right after the Nth committed bite of long maintenance
// (prune, retention sweeps, workflow deletion and completion, import: store/bites.go), having
// said so on stderr. A crash test waits for that line and kills the process there: the kill
// falls between two bites by construction, not by timing.
const envHoldAfterBites = "CKPTD_TEST_HOLD_AFTER_BITES"

// holdLine is what the process writes on stderr when it holds.
const holdLine = "ckptd: holding after bite %d (" + envHoldAfterBites + ")\n"

// biteHook returns the store's AfterBite hook for the environment (nil without the variable).
func biteHook(e *env) func(int) {
	v := e.getenv(envHoldAfterBites)
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return nil
	}
	return func(k int) {
		if k == n {
			fmt.Fprintf(e.stderr, holdLine, k)
			select {}
		}
	}
}
