package main

import (
	"context"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/postgres"
	"github.com/ckptd/ckptd/store/sqlite"
)

// openBackend opens the database opts.Path names with the backend that serves it: a
// postgres:// or postgresql:// URL is a PostgreSQL database, anything else a SQLite file path.
// Without create, a database that holds no checkpoints yet is refused instead of being set up
// (the inspection commands: a mistyped --db must not leave a new database behind).
func openBackend(ctx context.Context, opts store.Options, create bool) (store.Backend, error) {
	if postgres.IsURL(opts.Path) {
		return postgres.Open(ctx, postgres.Options{Options: opts, MustExist: !create})
	}
	return sqlite.Open(ctx, opts)
}

// isURL reports whether a --db value is a database URL rather than a file path.
func isURL(db string) bool { return postgres.IsURL(db) }

// displayDB is how a --db value appears in logs, errors and output: a URL without its password.
func displayDB(db string) string {
	if isURL(db) {
		return postgres.Redact(db)
	}
	return db
}
