// Package engine holds what ckptd's JSON-RPC server (package rpc) and its commands (cmd/ckptd)
// compute alike, written once: store nouns in the protocol's shapes (wire.go).
package engine
