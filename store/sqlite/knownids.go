package sqlite

import (
	"context"
	"database/sql"

	"github.com/ckptd/ckptd/store/chunk"
)

// knownIDs remembers the row ids of the runs and chunks the writer met lately (address → id),
// so that listing a value's runs and chunks (wtx.listUp) and counting them down
// (flushReleases) look up by address only the ones it has not met. A state that grows by a step lists ~38 runs, all but one or two of
// them listed by the previous step's state too: without this, a save read every one of their
// ids again (a lookup of a random 32-byte key each, ~10 µs in modernc SQLite: 0.7 ms of a save
// of #17's workload).
//
// An entry is a fact about the database: "the run (chunk) with this address is stored as this
// row id". Only the writer goroutine uses it, inside its transactions, and every way the fact
// can stop being true is covered:
//   - this store deletes the row (flushReleases): the entry goes at once (forget), committed or
//     not;
//   - a transaction, a job's savepoint, or a savepoint inside a job (a dry run: wtx.mark and
//     restore) that inserted the row is rolled back: what a job learns is staged and kept only
//     once the job succeeded, and what a batch learns only once it committed;
//   - another connection (another process) commits: PRAGMA data_version, read at the start of
//     each write transaction (the write lock is held from then on), differs from the one read
//     at the start of the previous one, and everything is dropped.
//
// A wrong entry would count another row's listings (its id may be handed out again):
// TestKnownIDsOtherConnection and TestKnownIDsBatchJobRolledBack find a run or chunk freed while
// listed when the last rule, or the second, is taken out.
type knownIDs struct {
	runs, chunks map[chunk.Address]int64 // committed
	// learned in the open transaction: batch (jobs that succeeded), job (the running job)
	batch, job   [2]map[chunk.Address]int64
	version      int64 // PRAGMA data_version at the start of the last transaction
	versionKnown bool
}

// knownKind says which table an address is of.
type knownKind int

const (
	knownRun knownKind = iota
	knownChunk
)

// knownIDsMax bounds each map: past it, the committed entries start over (a 1 MB state lists
// ~40 runs and ~500 chunks, so this holds the working set of many workflows and threads).
const knownIDsMax = 1 << 16

func (k *knownIDs) committed(kind knownKind) map[chunk.Address]int64 {
	if kind == knownRun {
		return k.runs
	}
	return k.chunks
}

// begin starts a write transaction: it drops everything when another connection committed since
// the last one began (or when it cannot tell).
func (k *knownIDs) begin(ctx context.Context, dataVersion *sql.Stmt) {
	k.batch, k.job = [2]map[chunk.Address]int64{}, [2]map[chunk.Address]int64{}
	var v int64
	if err := dataVersion.QueryRowContext(ctx).Scan(&v); err != nil || !k.versionKnown || v != k.version {
		k.runs, k.chunks = nil, nil
	}
	k.version, k.versionKnown = v, true
}

// get returns the id of address a, if known.
func (k *knownIDs) get(kind knownKind, a chunk.Address) (int64, bool) {
	if id, ok := k.job[kind][a]; ok {
		return id, true
	}
	if id, ok := k.batch[kind][a]; ok {
		return id, true
	}
	id, ok := k.committed(kind)[a]
	return id, ok
}

// learn notes that address a is stored as row id (read or inserted by the running job).
func (k *knownIDs) learn(kind knownKind, a chunk.Address, id int64) {
	if k.job[kind] == nil {
		k.job[kind] = map[chunk.Address]int64{}
	}
	k.job[kind][a] = id
}

// forget drops address a everywhere (its row is deleted, or an id was found wrong).
func (k *knownIDs) forget(kind knownKind, a chunk.Address) {
	delete(k.job[kind], a)
	delete(k.batch[kind], a)
	delete(k.committed(kind), a)
}

// jobDone keeps what the job learned (ok) or drops it (the job was rolled back).
func (k *knownIDs) jobDone(ok bool) {
	for kind, m := range k.job {
		if ok && len(m) > 0 {
			if k.batch[kind] == nil {
				k.batch[kind] = m
			} else {
				for a, id := range m {
					k.batch[kind][a] = id
				}
			}
		}
		k.job[kind] = nil
	}
}

// commit keeps what the committed transaction learned.
func (k *knownIDs) commit() {
	for kind, m := range k.batch {
		if len(m) == 0 {
			continue
		}
		dst := &k.runs
		if knownKind(kind) == knownChunk {
			dst = &k.chunks
		}
		if *dst == nil || len(*dst)+len(m) > knownIDsMax {
			*dst = make(map[chunk.Address]int64, len(m))
		}
		for a, id := range m {
			(*dst)[a] = id
		}
	}
	k.batch = [2]map[chunk.Address]int64{}
}

// rollback drops what the transaction learned.
func (k *knownIDs) rollback() {
	k.batch, k.job = [2]map[chunk.Address]int64{}, [2]map[chunk.Address]int64{}
}

// reset drops everything (the writer connection was replaced, the store closes).
func (k *knownIDs) reset() {
	*k = knownIDs{}
}
