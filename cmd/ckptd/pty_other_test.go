//go:build !linux

package main

import "testing"

func cliRunTTY(t *testing.T, which string, args ...string) cliResult {
	t.Skip("terminal tests need Linux pseudo-terminals")
	return cliResult{}
}
