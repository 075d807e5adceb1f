package store

import (
	"github.com/ckptd/ckptd/store/chunk"
)

// Footprint is what values take: their size as saved (LogicalBytes: every checkpoint's state,
// pending-write value, LangGraph row, counted as often as it was saved) and the bytes stored for
// them (StoredBytes: value rows, plus the distinct runs and chunks their indexes list, each
// counted once, compressed as stored). For a workflow or a thread the chunks it shares with
// others count in full: StoredBytes is what it would take alone. The database's total counts
// every stored byte once.
type Footprint struct {
	LogicalBytes int64
	StoredBytes  int64
}

// Ratio is LogicalBytes / StoredBytes (0 when nothing is stored).
func (f Footprint) Ratio() float64 {
	if f.StoredBytes <= 0 {
		return 0
	}
	return float64(f.LogicalBytes) / float64(f.StoredBytes)
}

// Add returns f + g.
func (f Footprint) Add(g Footprint) Footprint {
	return Footprint{LogicalBytes: f.LogicalBytes + g.LogicalBytes, StoredBytes: f.StoredBytes + g.StoredBytes}
}

// FootprintRequest names what Footprints reports besides the total.
type FootprintRequest struct {
	Workflows    []string // these workflows
	AllWorkflows bool     // every workflow
	Threads      []string // these LangGraph threads
	AllThreads   bool     // every thread
	// OmitTotal leaves the database's total (and the chunk and run counts) out. The total is
	// read from kept counters (a row or a few), so leaving it out saves little.
	OmitTotal bool
}

// FootprintReport answers Footprints: the database's total, per workflow and per thread asked
// for (an unknown one is absent), and how many chunks and runs are stored.
type FootprintReport struct {
	Total     Footprint
	Workflows map[string]Footprint
	Threads   map[string]Footprint
	Chunks    int64
	Runs      int64
}

// OwnerValues is what a backend reads of one owner's (workflow's, thread's) stored values for
// Footprints: the logical bytes, the bytes of its value rows (inline values, indexes) and the
// indexes of its chunked values (distinct values once: a state shared by two checkpoints of the
// workflow is one value).
type OwnerValues struct {
	Logical int64
	Rows    int64
	Indexes [][]byte
}

// OwnerFootprints computes the footprint of each owner: its logical bytes, and its rows plus
// the distinct runs and chunks its indexes list. runs returns the stored bytes of runs by
// address; chunkBytes the stored size of chunks by address (each fetched once for all owners).
// A malformed index, or a run or chunk not stored, counts nothing (Verify reports them).
func OwnerFootprints(owners map[string]*OwnerValues, runs BatchFetch[[]byte], chunkBytes BatchFetch[int64]) (map[string]Footprint, error) {
	ownerRuns := map[string]map[chunk.Address]struct{}{}
	allRuns := map[chunk.Address]struct{}{}
	for id, o := range owners {
		set := map[chunk.Address]struct{}{}
		for _, idx := range o.Indexes {
			addrs, err := chunk.DecodeAddresses(idx)
			if err != nil {
				continue
			}
			for _, a := range addrs {
				set[a] = struct{}{}
				allRuns[a] = struct{}{}
			}
		}
		ownerRuns[id] = set
	}
	runData, err := runs(keys(allRuns))
	if err != nil {
		return nil, err
	}
	runChunks := make(map[chunk.Address][]chunk.Ref, len(runData))
	allChunks := map[chunk.Address]struct{}{}
	for a, b := range runData {
		refs, err := chunk.DecodeRun(b)
		if err != nil {
			continue
		}
		runChunks[a] = refs
		for _, r := range refs {
			allChunks[r.Addr] = struct{}{}
		}
	}
	sizes, err := chunkBytes(keys(allChunks))
	if err != nil {
		return nil, err
	}
	out := make(map[string]Footprint, len(owners))
	for id, o := range owners {
		f := Footprint{LogicalBytes: o.Logical, StoredBytes: o.Rows}
		seen := map[chunk.Address]struct{}{}
		for a := range ownerRuns[id] {
			f.StoredBytes += int64(len(runData[a]))
			for _, r := range runChunks[a] {
				if _, ok := seen[r.Addr]; !ok {
					seen[r.Addr] = struct{}{}
					f.StoredBytes += sizes[r.Addr]
				}
			}
		}
		out[id] = f
	}
	return out, nil
}

func keys(m map[chunk.Address]struct{}) []chunk.Address {
	out := make([]chunk.Address, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	return out
}
