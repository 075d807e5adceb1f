// Package storetest is the conformance suite of the storage contract: every backend runs
// Run, and passes it, before ckptd may use it. It checks what the contract promises whatever
// the database: save, load, list, delete, prune and retention, verification and the fallback
// past corrupt checkpoints, pending writes, LangGraph rows, source manifests, import and
// export, concurrency and ordering, migration from the oldest schema a backend reads, and
// validation checkpoints with the compensation log (saga.go).
//
// A backend's own tests keep what only it has (SQLite: pragmas, WAL, damaged pages, query
// plans). To damage stored data the way a failing disk or a bug would, and to count stored
// rows, the suite reaches under the contract through the small Corrupter interface that the
// backend's test harness implements.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// Options is what a case asks of the database it opens.
type Options struct {
	// Options configure the backend; Path is left empty (the opener picks the database).
	store.Options
	// Same, when set, opens the database Same uses (Same may be closed): a restart, or a second
	// process sharing the database.
	Same store.Backend
	// Oldest opens a new database at the oldest schema the backend migrates from, holding
	// OldestCheckpoints (saved by that schema), and migrates it.
	Oldest bool
}

// Opener opens a backend for a case; it closes it when t ends. The backend it returns must
// implement Corrupter.
type Opener func(t *testing.T, o Options) store.Backend

// Corrupter reaches under the contract, for the suite only: it damages stored data in place
// and counts stored rows. A backend's test harness implements it on the backends its Opener
// returns. Every method fails t on a database error.
type Corrupter interface {
	// SetStateBytes replaces the bytes stored for checkpointID's state (as stored: compressed
	// or not), leaving its recorded encoding, size and SHA-256 as they are.
	SetStateBytes(t testing.TB, checkpointID string, stored []byte)
	// DropState deletes the stored bytes of checkpointID's state; the checkpoint stays.
	DropState(t testing.TB, checkpointID string)
	// SetLGValueBytes replaces the stored bytes of a LangGraph channel value.
	SetLGValueBytes(t testing.TB, thread, ns, channel, version string, stored []byte)
	// DropManifestEntry deletes a stored manifest entry; SetManifestEntry replaces its bytes.
	DropManifestEntry(t testing.TB, key []byte)
	SetManifestEntry(t testing.TB, key, data []byte)
	// SetManifestChunkKeys replaces the key list of a stored chunk; DropManifestChunks deletes
	// every stored chunk.
	SetManifestChunkKeys(t testing.TB, id, keys []byte)
	DropManifestChunks(t testing.TB)
	// SetManifestHeader and SetManifestChunkIDs replace what is stored of checkpointID's manifest.
	SetManifestHeader(t testing.TB, checkpointID string, header []byte)
	SetManifestChunkIDs(t testing.TB, checkpointID string, ids []byte)
	// ManifestRows checks the reference counts of the stored manifest rows against a recount
	// (every chunk a manifest lists exists and counts it, every entry a chunk lists exists and
	// counts it, nothing unlisted is left) and returns how many manifests, chunks and entries
	// are stored.
	ManifestRows(t testing.TB) (manifests, chunks, entries int)
	// LGRows counts the stored LangGraph checkpoints, values, pending writes and metadata index
	// rows.
	LGRows(t testing.TB) (checkpoints, values, writes, meta int)
	// SetChunkRaw replaces the bytes stored for the chunk at addr with raw, stored
	// uncompressed; DropChunk deletes the chunk (its bytes and its address), leaving whatever
	// lists it; SetChunkRefs sets its recorded reference count.
	SetChunkRaw(t testing.TB, addr chunk.Address, raw []byte)
	DropChunk(t testing.TB, addr chunk.Address)
	SetChunkRefs(t testing.TB, addr chunk.Address, refs int64)
	// ChunkRows checks the recorded reference counts of the stored runs and chunks against a
	// recount of their listings (the indexes of every chunked value, the stored runs) and
	// returns how many runs and chunks are stored.
	ChunkRows(t testing.TB) (runs, chunks int)
	// StopWrites makes the backend stop writing for reason (a store.Reason constant) as it does
	// when it detects that condition itself; how each backend detects it (a damaged page, a
	// removed file, SQLSTATE XX001) is tested with the backend.
	StopWrites(t testing.TB, reason, detail string)
}

// A case is one conformance check.
type testCase struct {
	name string
	run  func(t *testing.T, h *harness)
}

// cases lists every case; each file of the suite adds its own (init).
var cases []testCase

func add(cs ...testCase) { cases = append(cases, cs...) }

// Run runs every case against the backend open opens, each on its own database, and logs how
// many ran.
func Run(t *testing.T, open Opener) {
	t.Helper()
	name := ""
	ran, failed := 0, 0
	for _, c := range cases {
		ok := t.Run(c.name, func(t *testing.T) {
			h := &harness{open: open}
			c.run(t, h)
			if name == "" && h.first != nil {
				name = h.first.About().Name
			}
		})
		ran++
		if !ok {
			failed++
		}
	}
	t.Logf("storetest: %d cases ran on %s, %d failed", ran, name, failed)
}

// Count is the number of cases Run runs.
func Count() int { return len(cases) }

// harness opens backends for one case.
type harness struct {
	open  Opener
	first store.Backend
}

// db opens a new database with the options muts set.
func (h *harness) db(t *testing.T, muts ...func(*Options)) store.Backend {
	t.Helper()
	var o Options
	for _, m := range muts {
		m(&o)
	}
	b := h.open(t, o)
	if h.first == nil {
		h.first = b
	}
	return b
}

// reopen opens the database b uses again.
func (h *harness) reopen(t *testing.T, b store.Backend, muts ...func(*Options)) store.Backend {
	t.Helper()
	return h.db(t, append([]func(*Options){func(o *Options) { o.Same = b }}, muts...)...)
}

// corrupter is b's Corrupter; a backend without one fails the case (never skips it).
func corrupter(t *testing.T, b store.Backend) Corrupter {
	t.Helper()
	c, ok := b.(Corrupter)
	if !ok {
		t.Fatalf("storetest: the backend (%T) does not implement storetest.Corrupter", b)
	}
	return c
}

func withClock(c *Clock) func(*Options) { return func(o *Options) { o.Now = c.Now } }

func withRetention(r store.Retention) func(*Options) {
	return func(o *Options) { o.DefaultRetention = r }
}

// Clock is a settable Now for tests: strictly increasing, one microsecond per call.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at a fixed moment.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 11, 22, 3, 30, 0, 0, time.UTC)} }

// Now returns the next moment.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond)
	return c.t
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func mustSave(t testing.TB, b store.Backend, req store.SaveRequest) store.SaveResult {
	t.Helper()
	res, err := b.Save(context.Background(), req)
	require.NoError(t, err)
	return res
}

func strp(s string) *string { return &s }

var vocab = strings.Fields(`the agent tool call result user assistant message plan step search query document
	summary answer context memory retrieve function output input error retry node graph state value channel task
	model token prompt response chunk source citation analysis report draft review final update pending write`)

// CheckpointJSON builds realistic checkpoint-like JSON of about size bytes (compresses ~3x).
func CheckpointJSON(rng *rand.Rand, size int) []byte {
	var b strings.Builder
	b.WriteString(`{"channel_values":{"messages":[`)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `{"id":"%016x%016x","role":"%s","content":"`, rng.Uint64(), rng.Uint64(), role)
		n := 10 + rng.IntN(60)
		for w := 0; w < n; w++ {
			if w > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(vocab[rng.IntN(len(vocab))])
		}
		fmt.Fprintf(&b, `","tokens":%d,"ts":%d}`, rng.IntN(5000), 1700000000000+rng.Int64N(1e9))
	}
	fmt.Fprintf(&b, `]},"step":%d,"versions":{"messages":"%08x"}}`, rng.IntN(100), rng.Uint32())
	return []byte(b.String())
}

// RandBytes returns n incompressible bytes.
func RandBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// PendingTasksJSON is a JSON array of n LangGraph-like tasks.
func PendingTasksJSON(n int) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"task-%06d","name":"node_%d","path":["__pregel_pull","node_%d"],"args":{"x":%d,"note":"run the tool"}}`, i, i%17, i%17, i)
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}

// OldestCheckpoints are the checkpoints a database opened with Options.Oldest holds, as they
// were saved (deterministic: SQLite's testdata/store/v1.db was written from them).
func OldestCheckpoints() []store.SaveRequest {
	rng := rand.New(rand.NewPCG(42, 1))
	var out []store.SaveRequest
	for i := 0; i < 6; i++ {
		r := store.SaveRequest{
			WorkflowID:     fmt.Sprintf("fixture-wf-%d", i%2),
			CheckpointID:   fmt.Sprintf("fixture-ckpt-%d", i),
			Phase:          []store.Phase{store.PhaseBeforeStep, store.PhaseCompleted, store.PhaseFailed}[i%3],
			Step:           int64(i),
			StepName:       fmt.Sprintf("node_%d", i),
			CompletedTasks: json.RawMessage(`[{"id":"t1"}]`),
			PendingTasks:   json.RawMessage(`[]`),
			WorkflowHash:   "sha256:fixture",
			Metadata:       json.RawMessage(fmt.Sprintf(`{"source":"loop","i":%d}`, i)),
		}
		switch i % 3 {
		case 0:
			r.State, r.StateType = CheckpointJSON(rng, 16<<10), store.StateJSON // compressed
		case 1:
			r.State, r.StateType = []byte(fmt.Sprintf(`{"small":%d}`, i)), store.StateJSON
		case 2:
			r.State, r.StateType = RandBytes(rng, 300), store.StateBytes
		}
		if r.Phase == store.PhaseFailed {
			r.Error = &store.StepError{Message: "tool failed", Retryable: true}
		}
		if i == 4 {
			r.Namespace = "sub"
		}
		out = append(out, r)
	}
	return out
}
