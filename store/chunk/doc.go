// Package chunk cuts values (checkpoint states, LangGraph channel and pending-write values) into
// content-defined chunks, names each chunk by the SHA-256 of its bytes, and rebuilds values from
// their recipes, verifying every chunk and the whole value. It is backend-neutral logic: it stores
// nothing, compresses nothing (a backend compresses each chunk with its codec) and imports neither
// database/sql nor drift. docs/storage.md ("Chunked values") is the specification a backend
// follows: parameters, addressing, recipes and runs, verification, reference counting.
//
// Saving a value:
//
//	if chunk.Inline(len(v)) { /* store v whole, as before */ }
//	recipe, chunks := chunk.Split(v)   // chunks: store each new address once (compressed)
//	idx, runs := recipe.Runs()         // runs: store each new address once
//	// keep idx (size, SHA-256, run addresses) with the value's row
//
// Loading it:
//
//	recipe, err := chunk.Expand(idx, fetchRun)
//	v, err := chunk.Reassemble(recipe, fetchChunk)  // errors.Is(err, chunk.ErrCorrupt) on damage
package chunk
