package postgres

// The store's condition (store.Condition). PostgreSQL keeps its own files, so the SQLite
// backend's file checks have no counterpart here; what remains is corruption: when the server
// reports that data or an index is corrupted (SQLSTATE XX001 data_corrupted, XX002
// index_corrupted), this process stops writing for good, so that it does not build on damaged
// pages, and keeps answering the reads that still work.

import (
	"fmt"
	"time"

	"github.com/ckptd/ckptd/store"
)

// Condition reports whether the store still accepts writes (store.Condition).
func (s *Store) Condition() store.Condition {
	if c := s.cond.Load(); c != nil {
		return *c
	}
	return store.Condition{}
}

// stopWrites records why the store stops writing; the first reason wins. It logs once.
func (s *Store) stopWrites(reason, detail string) {
	c := &store.Condition{Reason: reason, Detail: detail, Since: time.Now()}
	if !s.cond.CompareAndSwap(nil, c) {
		return
	}
	s.log.Error("ckptd store: writes stopped", "reason", reason, "detail", detail, "db", s.location)
}

// isDamaged reports the server saying that stored data or an index is corrupted.
func isDamaged(err error) bool {
	switch sqlState(err) {
	case "XX001", "XX002":
		return true
	}
	return false
}

// observe looks at an error a statement returned: corruption reported by the server stops
// writes. It returns err unchanged.
func (s *Store) observe(err error) error {
	if err != nil && isDamaged(err) {
		s.stopWrites(store.ReasonDamaged, fmt.Sprintf("PostgreSQL reports corrupted data (%v); ckptd no longer "+
			"writes to %s and answers reads from what is intact. Check the database with pg_amcheck, restore "+
			"it from a backup or rebuild the damaged index (REINDEX), then restart ckptd", err, s.location))
	}
	return err
}
