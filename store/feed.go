package store

// Feed is an optional role of a backend whose database several ckptd processes, on several
// hosts, use at once (PostgreSQL): it reports what the other processes commit, so that each
// can tell its own clients. A backend shared only through a file on one host (SQLite) does not
// implement it; callers test for it with a type assertion.
type Feed interface {
	// Subscribe calls f for every checkpoint another process saves and every checkpoint it
	// prunes, from the moment Subscribe returns until cancel is called; events of one process
	// arrive in its commit order. f runs on one goroutine and must not block. Delivery is best
	// effort: what is committed while the backend cannot listen (its connection is down) is
	// not repeated.
	Subscribe(f func(Event)) (cancel func())
}

// Event is one change another process committed: exactly one field is set.
type Event struct {
	Saved  *SavedEvent
	Pruned *PrunedEvent
}

// SavedEvent: a checkpoint was saved (a new one: idempotent repeats are not announced).
type SavedEvent struct {
	CheckpointID string
	WorkflowID   string
	Namespace    string
	Seq          int64
	Phase        Phase
	Step         int64
}

// PrunedEvent: checkpoints of a workflow were removed by "retention", "prune", "idle" or
// "complete" (as SetOnPruned reports them).
type PrunedEvent struct {
	WorkflowID    string
	CheckpointIDs []string
	Reason        string
}
