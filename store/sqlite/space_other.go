//go:build !unix

package sqlite

// freeBytes cannot tell on this system.
func freeBytes(string) (uint64, bool) { return 0, false }
