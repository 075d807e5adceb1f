package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
)

// SelectFloor is the cheapest read SQLite can answer through this driver: a prepared SELECT by
// primary key on an empty table, in process. Benchmarks set a store read against it, to tell
// what the store adds from what SQLite itself costs.
type SelectFloor struct {
	db  *sql.DB
	sel *sql.Stmt
}

// OpenSelectFloor creates the empty table in a new database file at path (WAL, synchronous FULL,
// one connection) and prepares the SELECT.
func OpenSelectFloor(path string) (*SelectFloor, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, fmt.Errorf("select floor: %w", err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)`); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("select floor: %w", err)
	}
	sel, err := db.Prepare(`SELECT id, v FROM t WHERE id = ?`)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("select floor: %w", err)
	}
	return &SelectFloor{db: db, sel: sel}, nil
}

// Run looks id up; it finds nothing, which is the point.
func (f *SelectFloor) Run(id int) error {
	var got int64
	var v []byte
	if err := f.sel.QueryRow(id).Scan(&got, &v); !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("select floor: %v", err)
	}
	return nil
}

// Close closes the statement and the database.
func (f *SelectFloor) Close() error {
	_ = f.sel.Close()
	return f.db.Close()
}
