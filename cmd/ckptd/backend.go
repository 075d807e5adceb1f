package main

import (
	"context"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/sqlite"
)

// openBackend opens the database opts.Path names with the backend that serves it: today every
// --db is a SQLite file path (PostgreSQL URLs come with #15).
func openBackend(ctx context.Context, opts store.Options) (store.Backend, error) {
	return sqlite.Open(ctx, opts)
}
