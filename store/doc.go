// Package store is ckptd's storage, backend-neutral: the nouns (checkpoints, workflows,
// LangGraph rows, source manifests as opaque records), the errors, the contract a backend
// implements (Backend and its roles, backend.go), and the logic every backend shares, written
// once: save preparation (validation, hashing, compression, metadata index rows, idempotency
// digest), state verification, canonical JSON, retention selection, LangGraph version and
// metadata handling, cursors and ancestor walks, manifest verification.
//
// It knows nothing of JSON-RPC, of drift, or of any database: backends live in their own
// packages (store/sqlite), and store/storetest is the conformance suite every backend runs.
package store
