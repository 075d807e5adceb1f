package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/testgen"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// setPackedChunkRaw replaces the bytes of the chunk at addr with raw, stored uncompressed, in
// its pack (the chunks after it in the pack move): false if the chunk is not in a pack.
func setPackedChunkRaw(t testing.TB, path string, addr chunk.Address, raw []byte) bool {
	t.Helper()
	db := rawDB(t, path)
	tx, err := db.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var id int64
	var pack, off, n sql.NullInt64
	require.NoError(t, tx.QueryRow(`SELECT c.id, c.pack, c.pack_off, c.pack_len FROM chunks c JOIN chunk_addrs a ON a.id = c.id
		WHERE a.address = ?`, addr[:]).Scan(&id, &pack, &off, &n))
	if !pack.Valid {
		return false
	}
	var data []byte
	require.NoError(t, tx.QueryRow(`SELECT data FROM packs WHERE id = ?`, pack.Int64).Scan(&data))
	end := off.Int64 + n.Int64
	nd := append(append(append([]byte{}, data[:off.Int64]...), raw...), data[end:]...)
	_, err = tx.Exec(`UPDATE packs SET data = ? WHERE id = ?`, nd, pack.Int64)
	require.NoError(t, err)
	_, err = tx.Exec(`UPDATE chunks SET pack_off = pack_off + ? WHERE pack = ? AND pack_off >= ? AND id != ?`,
		int64(len(raw))-n.Int64, pack.Int64, end, id)
	require.NoError(t, err)
	_, err = tx.Exec(`UPDATE chunks SET encoding = 0, size = ?, pack_len = ? WHERE id = ?`, len(raw), len(raw), id)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return true
}

// dropEmptyPacks deletes the packs no chunk lies in any more.
func dropEmptyPacks(t testing.TB, path string) {
	t.Helper()
	_, err := rawDB(t, path).Exec(`DELETE FROM packs WHERE id NOT IN (SELECT pack FROM chunks WHERE pack IS NOT NULL)`)
	require.NoError(t, err)
}

// checkPacks checks what packs.go promises of the packs: every chunk in a pack lies inside it,
// no two overlap, no pack is without a chunk, and every pack's chunks hold at least half its
// bytes.
func checkPacks(t testing.TB, db querier) {
	t.Helper()
	type place struct{ off, n int64 }
	placed := map[int64][]place{}
	rows, err := db.Query(`SELECT pack, pack_off, pack_len, length(data) FROM chunks WHERE pack IS NOT NULL`)
	require.NoError(t, err)
	for rows.Next() {
		var pack, off, n, dl int64
		require.NoError(t, rows.Scan(&pack, &off, &n, &dl))
		require.Zero(t, dl, "a chunk in a pack keeps its bytes there only")
		placed[pack] = append(placed[pack], place{off, n})
	}
	require.NoError(t, rows.Err())
	rows.Close()
	sizes := map[int64]int64{}
	rows, err = db.Query(`SELECT id, length(data) FROM packs`)
	require.NoError(t, err)
	for rows.Next() {
		var id, n int64
		require.NoError(t, rows.Scan(&id, &n))
		sizes[id] = n
	}
	require.NoError(t, rows.Err())
	rows.Close()
	for pack, ps := range placed {
		size, ok := sizes[pack]
		require.True(t, ok, "pack %d of a chunk is missing", pack)
		sort.Slice(ps, func(i, j int) bool { return ps[i].off < ps[j].off })
		var live, end int64
		for _, p := range ps {
			require.GreaterOrEqual(t, p.off, end, "pack %d: chunks overlap", pack)
			end = p.off + p.n
			live += p.n
		}
		require.LessOrEqual(t, end, size, "pack %d: a chunk lies outside it", pack)
		require.GreaterOrEqual(t, 2*live, size, "pack %d: its chunks hold %d of its %d bytes", pack, live, size)
		require.LessOrEqual(t, size, int64(packMax), "pack %d", pack)
	}
	for id := range sizes {
		require.Contains(t, placed, id, "pack %d holds no chunk", id)
	}
}

// packFigures reads the packs' figures and the chunks stored in rows of their own.
func packFigures(t testing.TB, s *Store) (ps packTotals, single int) {
	t.Helper()
	ps, err := s.readPackTotals(context.Background())
	require.NoError(t, err)
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT count(*) FROM chunks WHERE pack IS NULL`).Scan(&single))
	return ps, single
}

// checkClean verifies s (no problem), recounts the chunk counts and the packs (ChunkRows) and
// the kept footprint, and loads every state of want byte for byte.
func checkClean(t *testing.T, s *Store, want map[string][]byte, what string) {
	t.Helper()
	ctx := context.Background()
	bad, err := s.Verify(ctx, nil)
	require.NoError(t, err, what)
	require.Empty(t, bad, what)
	(&testBackend{s}).ChunkRows(t)
	figs, err := s.CheckFigures(ctx)
	require.NoError(t, err, what)
	require.Empty(t, figs, what)
	for id, v := range want {
		cp, err := s.Load(ctx, id)
		require.NoError(t, err, "%s: load %s", what, id)
		require.True(t, bytes.Equal(v, cp.State), "%s: %s differs", what, id)
	}
}

// saveChunked saves v in wf and has it cut into chunks at once (new content is saved whole
// and cut by the compactor).
func saveChunked(t *testing.T, s *Store, wf string, v []byte) string {
	t.Helper()
	res := mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: v, StateType: store.StateBytes})
	require.NoError(t, s.Compact(context.Background()))
	return res.CheckpointID
}

// The new chunks of one value are stored together in packs of at most packMax bytes; a value
// that adds one chunk stores it in a row of its own; reads and the footprint see the same
// bytes either way.
func TestPacksHoldANewValuesChunks(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r := testgen.New(31)
	v := r.Bytes(400 << 10) // incompressible: ~200 chunks, ~400 KB stored
	id := saveChunked(t, s, "w", v)
	ps, single := packFigures(t, s)
	assert.Equal(t, int64(7), ps.Packs, "400 KB in packs of at most 64 KiB, of about equal sizes")
	assert.Equal(t, ps.Bytes, ps.Live, "nothing unlisted yet")
	assert.Zero(t, single)
	checkClean(t, s, map[string][]byte{id: v}, "one value")
	fp, err := s.Footprints(ctx, store.FootprintRequest{AllWorkflows: true})
	require.NoError(t, err)
	assert.Equal(t, fp.Total.StoredBytes, fp.Workflows["w"].StoredBytes)

	// an edit adds a chunk or two: a pack of two or a row of its own
	v2 := append(bytes.Clone(v), r.Bytes(100)...)
	id2 := saveChunked(t, s, "w", v2)
	ps2, single2 := packFigures(t, s)
	assert.LessOrEqual(t, ps2.Packs-ps.Packs+int64(single2), int64(2))
	checkClean(t, s, map[string][]byte{id: v, id2: v2}, "an edit")
}

// A pack's bytes go with the last of its chunks still stored, not before: a value sharing a few
// chunks of another's pack keeps them readable when the other goes, and a store of content whose
// chunks lie in a live pack lists them from there (no new bytes).
func TestPackFreedWithItsLastChunk(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r := testgen.New(7)
	a := r.Bytes(120 << 10) // two packs
	_, cs := chunk.Split(a)
	idA := saveChunked(t, s, "a", a)
	ps, _ := packFigures(t, s)
	require.Equal(t, int64(2), ps.Packs)
	// b: a's first half and then other bytes: it lists the first pack's chunks but the last
	half := 0
	for _, c := range cs[:len(cs)/2-1] {
		half += int(c.Size)
	}
	b := append(bytes.Clone(a[:half]), r.Bytes(30<<10)...)
	idB := saveChunked(t, s, "b", b)
	checkClean(t, s, map[string][]byte{idA: a, idB: b}, "a and b")

	_, err := s.DeleteWorkflow(ctx, "a")
	require.NoError(t, err)
	checkClean(t, s, map[string][]byte{idB: b}, "a deleted")
	ps2, _ := packFigures(t, s)
	assert.Less(t, ps2.Bytes-ps2.Live, ps2.Live, "unlisted bytes stay fewer than the listed ones")
	// a's second pack went whole, its first one stays for b (rewritten if b lists less than half)
	var firstLeft int
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT count(*) FROM chunks c JOIN chunk_addrs a ON a.id = c.id
		WHERE a.address = ? AND c.pack IS NOT NULL`, cs[0].Addr[:]).Scan(&firstLeft))
	assert.Equal(t, 1, firstLeft, "b's chunks stay in their pack")

	// a again: its chunks b lists are counted up where they are, the others stored anew
	before, _ := packFigures(t, s)
	idA2 := saveChunked(t, s, "a", a)
	after, _ := packFigures(t, s)
	assert.Less(t, after.Bytes-before.Bytes, int64(len(a)-half+4<<10), "b's chunks of a are not stored again")
	checkClean(t, s, map[string][]byte{idB: b, idA2: a}, "a again")

	for _, wf := range []string{"a", "b"} {
		_, err := s.DeleteWorkflow(ctx, wf)
		require.NoError(t, err)
	}
	checkClean(t, s, nil, "all deleted")
	ps3, single := packFigures(t, s)
	assert.Equal(t, packTotals{}, ps3)
	assert.Zero(t, single)
	fp, err := s.Footprints(ctx, store.FootprintRequest{})
	require.NoError(t, err)
	assert.Zero(t, fp.Total.StoredBytes)
}

// A pack whose listed chunks fall under half of its bytes is rewritten with only theirs; one
// chunk left gets a row of its own.
func TestPackRewrittenBelowHalf(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r := testgen.New(11)
	a := r.Bytes(40 << 10) // one pack of ~20 chunks
	_, cs := chunk.Split(a)
	require.Greater(t, len(cs), 8)
	saveChunked(t, s, "a", a)
	// b lists a's first third (and a new tail), c a's first chunk only
	third := 0
	for _, c := range cs[:len(cs)/3] {
		third += int(c.Size)
	}
	b := append(bytes.Clone(a[:third]), r.Bytes(9<<10)...)
	c := append(bytes.Clone(a[:cs[0].Size]), r.Bytes(9<<10)...)
	idB := saveChunked(t, s, "b", b)
	idC := saveChunked(t, s, "c", c)
	var packOf0 int64
	packOf := func(addr chunk.Address) (pack sql.NullInt64) {
		require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT c.pack FROM chunks c JOIN chunk_addrs a ON a.id = c.id
			WHERE a.address = ?`, addr[:]).Scan(&pack))
		return pack
	}
	packOf0 = packOf(cs[0].Addr).Int64
	var sizeBefore int64
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT length(data) FROM packs WHERE id = ?`, packOf0).Scan(&sizeBefore))

	_, err := s.DeleteWorkflow(ctx, "a")
	require.NoError(t, err)
	checkClean(t, s, map[string][]byte{idB: b, idC: c}, "a deleted")
	var sizeAfter int64
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT length(data) FROM packs WHERE id = ?`, packOf0).Scan(&sizeAfter))
	assert.Less(t, sizeAfter, sizeBefore/2, "rewritten with b's chunks only")

	_, err = s.DeleteWorkflow(ctx, "b")
	require.NoError(t, err)
	checkClean(t, s, map[string][]byte{idC: c}, "b deleted")
	assert.False(t, packOf(cs[0].Addr).Valid, "the one chunk left has a row of its own")
	var n int
	require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT count(*) FROM packs WHERE id = ?`, packOf0).Scan(&n))
	assert.Zero(t, n)
}

// Random saves (new content, edits, copies of other workflows' values, pending writes),
// deletes, prunes and workflow deletions: after every step each remaining value loads byte for
// byte, verify finds nothing, the counts match the listings, every pack keeps at least half its
// bytes listed and the kept footprint is the recount; with everything deleted nothing is left.
func TestPacksProperty(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t)
			r := testgen.New(seed)
			rng := rand.New(rand.NewPCG(seed, 99))
			want := map[string][]byte{}
			order := map[string][]string{}
			last := map[string][]byte{}
			wfs := []string{"w0", "w1", "w2"}
			steps := 60
			if testing.Short() {
				steps = 20
			}
			for step := 0; step < steps; step++ {
				wf := wfs[rng.IntN(len(wfs))]
				what := fmt.Sprintf("step %d on %s", step, wf)
				switch op := rng.IntN(10); {
				case op < 5 || last[wf] == nil: // an edit, new content, or another workflow's value edited
					var v []byte
					switch {
					case last[wf] == nil || op == 0:
						v = r.Bytes(8<<10 + rng.IntN(150<<10))
					case op == 1:
						src := last[wfs[rng.IntN(len(wfs))]]
						if src == nil {
							src = r.Bytes(20 << 10)
						}
						v = r.Edit(src, 2000, false).Apply(src)
					default:
						v = r.Edit(last[wf], []int{50, 3000, 40000}[rng.IntN(3)], false).Apply(last[wf])
					}
					if len(v) <= chunk.InlineMax {
						v = r.Bytes(10 << 10)
					}
					res := mustSave(t, s, store.SaveRequest{WorkflowID: wf, State: v, StateType: store.StateBytes})
					want[res.CheckpointID] = v
					order[wf] = append(order[wf], res.CheckpointID)
					last[wf] = v
				case op < 7 && len(order[wf]) > 0: // delete one
					ids := order[wf]
					k := rng.IntN(len(ids))
					_, err := s.Delete(ctx, ids[k])
					require.NoError(t, err)
					delete(want, ids[k])
					order[wf] = append(ids[:k:k], ids[k+1:]...)
				case op < 8: // prune to the newest two
					res, err := s.Prune(ctx, store.PruneRequest{WorkflowID: wf, KeepLast: 2})
					require.NoError(t, err)
					for _, id := range res.IDs[wf] {
						delete(want, id)
					}
					if n := len(order[wf]); n > 2 {
						order[wf] = order[wf][n-2:]
					}
				case op < 9 && len(order[wf]) > 0: // a large pending write
					ids := order[wf]
					val := r.Edit(last[wf], 500, false).Apply(last[wf])
					_, err := s.PutWrites(ctx, wf, "", ids[len(ids)-1], []store.Write{{TaskID: "t", Channel: "c", Idx: -1, Value: val, IsBytes: true}})
					require.NoError(t, err)
				default: // the workflow goes
					_, err := s.DeleteWorkflow(ctx, wf)
					require.NoError(t, err)
					for _, id := range order[wf] {
						delete(want, id)
					}
					order[wf], last[wf] = nil, nil
				}
				if step%3 == 0 {
					require.NoError(t, s.Compact(ctx))
				}
				checkClean(t, s, want, what)
			}
			for _, wf := range wfs {
				_, err := s.DeleteWorkflow(ctx, wf)
				require.NoError(t, err)
			}
			require.NoError(t, s.Compact(ctx))
			checkClean(t, s, nil, "all deleted")
			ps, single := packFigures(t, s)
			require.Equal(t, packTotals{}, ps)
			require.Zero(t, single)
		})
	}
}

// Several stores on one database (as several ckptd processes: each its own connections, one
// writer at a time through BEGIN IMMEDIATE) store and free values whose chunks share packs:
// every value kept loads, and the counts and packs are exact.
func TestPacksSeveralStores(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ckptd.db")
	stores := []*Store{openPath(t, path), openPath(t, path), openPath(t, path)}
	base := testgen.New(3).Bytes(200 << 10)
	var mu sync.Mutex
	kept := map[string][]byte{}
	var wg sync.WaitGroup
	for p, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := testgen.New(uint64(50 + p))
			wf := fmt.Sprintf("p%d", p)
			var mine []string
			mineV := map[string][]byte{}
			v := base
			for i := 0; i < 20; i++ {
				if i%4 == 0 {
					v = append(bytes.Clone(base[:len(base)/2]), r.Bytes(60<<10)...) // new chunks: packs
				} else {
					v = r.Edit(v, 4000, false).Apply(v)
				}
				res, err := s.Save(ctx, store.SaveRequest{WorkflowID: wf, State: v, StateType: store.StateBytes})
				if !assert.NoError(t, err) {
					return
				}
				if !assert.NoError(t, s.Compact(ctx)) {
					return
				}
				mine = append(mine, res.CheckpointID)
				mineV[res.CheckpointID] = v
				if i%3 == 2 {
					k := len(mine) / 2
					if _, err := s.Delete(ctx, mine[k]); !assert.NoError(t, err) {
						return
					}
					delete(mineV, mine[k])
					mine = append(mine[:k:k], mine[k+1:]...)
				}
			}
			mu.Lock()
			for id, v := range mineV {
				kept[id] = v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, s := range stores {
		checkClean(t, s, kept, "after the stores")
	}
	ps, _ := packFigures(t, stores[0])
	require.Positive(t, ps.Packs)
	for p := range stores {
		_, err := stores[p].DeleteWorkflow(ctx, fmt.Sprintf("p%d", p))
		require.NoError(t, err)
	}
	checkClean(t, stores[1], nil, "all deleted")
	ps, single := packFigures(t, stores[2])
	require.Equal(t, packTotals{}, ps)
	require.Zero(t, single)
}

// A database from before packs (schema step 17) keeps its chunk rows as they are: its values
// read and verify after the migration, new values go in packs beside them, and deleting
// everything frees both. (The old database is made by the migrations before packs and written
// by this build, which writes no packs there; a store opened below the latest schema prepares
// no writes by itself, so the test has it prepare them.)
func TestPacksMigrateOldChunks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := open(ctx, options(path, func(o *Options) { o.maxSchema = packsStep - 1 }))
	require.NoError(t, err)
	require.False(t, old.hasPacks(ctx))
	old.ws, err = prepareWriteStmts(ctx, old.wconn)
	require.NoError(t, err)
	r := testgen.New(5)
	a := r.Bytes(150 << 10)
	idA := saveChunked(t, old, "a", a)
	lg := r.Bytes(90 << 10)
	_, err = old.PutWrites(ctx, "a", "", idA, []store.Write{{TaskID: "t", Channel: "c", Value: lg, IsBytes: true}})
	require.NoError(t, err)
	bad, err := old.Verify(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, bad)
	require.NoError(t, old.Close())
	require.Equal(t, packsStep-1, userVersion(t, path))

	s := openPath(t, path)
	require.Equal(t, SchemaVersion, userVersion(t, path))
	ps, single := packFigures(t, s)
	require.Zero(t, ps.Packs)
	require.Positive(t, single)
	b := append(bytes.Clone(a[:100<<10]), r.Bytes(100<<10)...)
	idB := saveChunked(t, s, "b", b)
	ps, _ = packFigures(t, s)
	require.Positive(t, ps.Packs, "new chunks go in packs")
	checkClean(t, s, map[string][]byte{idA: a, idB: b}, "migrated")
	cp, err := s.Load(ctx, idA)
	require.NoError(t, err)
	require.Equal(t, lg, cp.PendingWrites[0].Value)

	_, err = s.DeleteWorkflow(ctx, "a")
	require.NoError(t, err)
	checkClean(t, s, map[string][]byte{idB: b}, "old value deleted")
	_, err = s.DeleteWorkflow(ctx, "b")
	require.NoError(t, err)
	checkClean(t, s, nil, "all deleted")
	ps, single = packFigures(t, s)
	require.Equal(t, packTotals{}, ps)
	require.Zero(t, single)
}

// Verify finds what can go wrong with packs: damaged bytes in a pack (the values listing the
// chunk are corrupt), a pack gone (its chunks have no bytes), a chunk placed outside its pack,
// a pack no chunk lies in (an orphan).
func TestVerifyPacks(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*Store, string, []chunk.Chunk, int64) {
		s := openTest(t)
		v := testgen.New(9).Bytes(100 << 10)
		id := saveChunked(t, s, "w", v)
		_, cs := chunk.Split(v)
		var pack int64
		require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT c.pack FROM chunks c JOIN chunk_addrs a ON a.id = c.id
			WHERE a.address = ?`, cs[1].Addr[:]).Scan(&pack))
		checkClean(t, s, map[string][]byte{id: v}, "saved")
		return s, id, cs, pack
	}
	problems := func(t *testing.T, s *Store) (named []string, db string) {
		bad, err := s.Verify(ctx, nil)
		require.NoError(t, err)
		var dbl []string
		for _, b := range bad {
			if b.CheckpointID != "" {
				named = append(named, b.CheckpointID+": "+b.Reason)
			} else {
				dbl = append(dbl, b.Reason)
			}
		}
		return named, strings.Join(dbl, "\n")
	}
	t.Run("damaged bytes", func(t *testing.T) {
		s, id, cs, pack := setup(t)
		var off int64
		require.NoError(t, rawDB(t, s.Path()).QueryRow(`SELECT c.pack_off FROM chunks c JOIN chunk_addrs a ON a.id = c.id
			WHERE a.address = ?`, cs[1].Addr[:]).Scan(&off))
		_, err := rawDB(t, s.Path()).Exec(`UPDATE packs SET data = substr(data, 1, ?1) || X'00' || substr(data, ?1 + 2) WHERE id = ?2`,
			off+10, pack)
		require.NoError(t, err)
		_, err = s.Load(ctx, id)
		var ce *store.CorruptError
		require.ErrorAs(t, err, &ce)
		assert.Contains(t, ce.Reason, cs[1].Addr.String())
		named, _ := problems(t, s)
		require.Len(t, named, 1)
		assert.Contains(t, named[0], id)
	})
	t.Run("pack gone", func(t *testing.T) {
		s, id, _, pack := setup(t)
		_, err := rawDB(t, s.Path()).Exec(`DELETE FROM packs WHERE id = ?`, pack)
		require.NoError(t, err)
		named, db := problems(t, s)
		require.Len(t, named, 1)
		assert.Contains(t, named[0], id)
		assert.Contains(t, named[0], "missing")
		assert.Contains(t, db, fmt.Sprintf("its pack %d is missing", pack))
		// deleting what lists its chunks works and leaves nothing behind
		_, err = s.DeleteWorkflow(ctx, "w")
		require.NoError(t, err)
		checkClean(t, s, nil, "deleted")
	})
	t.Run("outside its pack", func(t *testing.T) {
		s, id, cs, _ := setup(t)
		_, err := rawDB(t, s.Path()).Exec(`UPDATE chunks SET pack_off = pack_off + 100000 WHERE id = (SELECT id FROM chunk_addrs WHERE address = ?)`,
			cs[1].Addr[:])
		require.NoError(t, err)
		named, db := problems(t, s)
		require.Len(t, named, 1)
		assert.Contains(t, named[0], id)
		assert.Contains(t, db, cs[1].Addr.String()+" lies outside its pack")
	})
	t.Run("orphan", func(t *testing.T) {
		s, _, _, _ := setup(t)
		_, err := rawDB(t, s.Path()).Exec(`INSERT INTO packs(data) VALUES (randomblob(5000))`)
		require.NoError(t, err)
		named, db := problems(t, s)
		require.Empty(t, named)
		assert.Contains(t, db, "1 packs hold no stored chunk (orphans)")
	})
}

// packTotals is what the packs hold: their number and bytes, and the bytes of the chunks stored
// in them (the rest is the bytes of chunks no value lists any more, kept until the pack is
// settled: at most as many as Live).
type packTotals struct {
	Packs, Bytes, Live int64
}

// readPackTotals reads the packs' figures (zero on a database without packs).
func (s *Store) readPackTotals(ctx context.Context) (packTotals, error) {
	var ps packTotals
	if !s.hasPacks(ctx) {
		return ps, nil
	}
	err := s.readTx(ctx, func(tx *rtx) error {
		return tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM packs), (SELECT coalesce(sum(length(data)), 0) FROM packs),
			(SELECT coalesce(sum(pack_len), 0) FROM chunks WHERE pack IS NOT NULL)`).Scan(&ps.Packs, &ps.Bytes, &ps.Live)
	})
	if err != nil {
		return packTotals{}, wrapDB("read the packs' figures", err)
	}
	return ps, nil
}
