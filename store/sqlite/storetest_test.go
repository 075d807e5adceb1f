package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
	"github.com/ckptd/ckptd/store/storetest"
)

// TestConformance runs the storage contract's conformance suite on SQLite.
func TestConformance(t *testing.T) {
	storetest.Run(t, openConformance)
}

// openConformance opens a database for one storetest case: a new file, the file of o.Same (then
// with the background goroutines on, like a second ckptd), or a copy of the schema-v1 fixture.
func openConformance(t *testing.T, o storetest.Options) store.Backend {
	t.Helper()
	opts := Options{Options: o.Options, noBackground: true}
	switch {
	case o.Same != nil:
		opts.Path = o.Same.(*testBackend).Path()
		opts.noBackground, opts.ckptInterval = false, 20*time.Millisecond
	case o.Oldest:
		opts.Path = filepath.Join(t.TempDir(), "ckptd.db")
		copyFile(t, v1Fixture, opts.Path)
		require.Equal(t, 1, userVersion(t, opts.Path))
	default:
		opts.Path = filepath.Join(t.TempDir(), "ckptd.db")
	}
	s, err := open(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	if o.Oldest {
		require.Equal(t, SchemaVersion, userVersion(t, opts.Path))
	}
	return &testBackend{s}
}

// testBackend is a Store with storetest's hooks, which work on the file through a connection
// of their own.
type testBackend struct{ *Store }

var _ storetest.Corrupter = (*testBackend)(nil)

func (b *testBackend) exec(t testing.TB, wantRows int64, q string, args ...any) {
	t.Helper()
	res, err := rawDB(t, b.Path()).Exec(q, args...)
	require.NoError(t, err)
	if wantRows >= 0 {
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.Equal(t, wantRows, n, "rows changed by %s", q)
	}
}

func (b *testBackend) SetStateBytes(t testing.TB, checkpointID string, stored []byte) {
	b.exec(t, 1, `UPDATE states SET data = ? WHERE hash = (SELECT state_hash FROM checkpoints WHERE checkpoint_id = ?)`,
		stored, checkpointID)
}

func (b *testBackend) DropState(t testing.TB, checkpointID string) {
	b.exec(t, 1, `DELETE FROM states WHERE hash = (SELECT state_hash FROM checkpoints WHERE checkpoint_id = ?)`, checkpointID)
}

func (b *testBackend) SetLGValueBytes(t testing.TB, thread, ns, channel, version string, stored []byte) {
	b.exec(t, 1, `UPDATE lg_blobs SET data = ? WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ?`,
		stored, thread, ns, channel, version)
}

func (b *testBackend) DropManifestEntry(t testing.TB, key []byte) {
	b.exec(t, 1, `DELETE FROM drift_entries WHERE key = ?`, key)
}

func (b *testBackend) SetManifestEntry(t testing.TB, key, data []byte) {
	b.exec(t, 1, `UPDATE drift_entries SET data = ? WHERE key = ?`, data, key)
}

func (b *testBackend) SetManifestChunkKeys(t testing.TB, id, keys []byte) {
	b.exec(t, 1, `UPDATE drift_chunks SET keys = ? WHERE id = ?`, keys, id)
}

func (b *testBackend) DropManifestChunks(t testing.TB) { b.exec(t, -1, `DELETE FROM drift_chunks`) }

func (b *testBackend) SetManifestHeader(t testing.TB, checkpointID string, header []byte) {
	b.exec(t, 1, `UPDATE drift_manifests SET header = ? WHERE ckpt = (SELECT id FROM checkpoints WHERE checkpoint_id = ?)`,
		header, checkpointID)
}

func (b *testBackend) SetManifestChunkIDs(t testing.TB, checkpointID string, ids []byte) {
	b.exec(t, 1, `UPDATE drift_manifests SET chunks = ? WHERE ckpt = (SELECT id FROM checkpoints WHERE checkpoint_id = ?)`,
		ids, checkpointID)
}

func (b *testBackend) ManifestRows(t testing.TB) (manifests, chunks, entries int) {
	t.Helper()
	db, done := rawSnapshot(t, b.Path()) // retention may delete checkpoints meanwhile
	defer done()
	chunkRefs := map[string]int{}
	scan := func(q string, each func(rows *sql.Rows)) {
		rows, err := db.Query(q)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			each(rows)
		}
		require.NoError(t, rows.Err())
	}
	scan(`SELECT chunks FROM drift_manifests`, func(rows *sql.Rows) {
		var ids []byte
		require.NoError(t, rows.Scan(&ids))
		require.Zero(t, len(ids)%keyLen)
		for off := 0; off < len(ids); off += keyLen {
			chunkRefs[string(ids[off:off+keyLen])]++
		}
		manifests++
	})
	entryRefs := map[string]int{}
	scan(`SELECT id, refs, keys FROM drift_chunks`, func(rows *sql.Rows) {
		var id, keys []byte
		var refs int
		require.NoError(t, rows.Scan(&id, &refs, &keys))
		require.Equal(t, chunkRefs[string(id)], refs, "refs of chunk %x", id)
		delete(chunkRefs, string(id))
		for off := 0; off < len(keys); off += keyLen {
			entryRefs[string(keys[off:off+keyLen])]++
		}
		chunks++
	})
	require.Empty(t, chunkRefs, "chunks listed by manifests but missing")
	scan(`SELECT key, refs FROM drift_entries`, func(rows *sql.Rows) {
		var key []byte
		var refs int
		require.NoError(t, rows.Scan(&key, &refs))
		require.Equal(t, entryRefs[string(key)], refs, "refs of entry %x", key)
		delete(entryRefs, string(key))
		entries++
	})
	require.Empty(t, entryRefs, "entries listed by chunks but missing")
	return manifests, chunks, entries
}

func (b *testBackend) LGRows(t testing.TB) (checkpoints, values, writes, meta int) {
	t.Helper()
	db, done := rawSnapshot(t, b.Path())
	defer done()
	for _, q := range []struct {
		dst *int
		tbl string
	}{{&checkpoints, "lg_checkpoints"}, {&values, "lg_blobs"}, {&writes, "lg_writes"}, {&meta, "lg_meta"}} {
		require.NoError(t, db.QueryRow("SELECT count(*) FROM "+q.tbl).Scan(q.dst))
	}
	return
}

// StopWrites stops writes as the store does when it detects reason (health.go).
func (b *testBackend) StopWrites(t testing.TB, reason, detail string) {
	t.Helper()
	b.stopWrites(reason, detail)
}

func (b *testBackend) SetChunkRaw(t testing.TB, addr chunk.Address, raw []byte) {
	if setPackedChunkRaw(t, b.Path(), addr, raw) {
		return
	}
	b.exec(t, 1, `UPDATE chunks SET encoding = 0, size = ?, data = ? WHERE id = (SELECT id FROM chunk_addrs WHERE address = ?)`,
		len(raw), raw, addr[:])
}

func (b *testBackend) DropChunk(t testing.TB, addr chunk.Address) {
	defer dropEmptyPacks(t, b.Path()) // a pack of no chunk left is the chunk's bytes gone
	b.exec(t, 1, `DELETE FROM chunks WHERE id = (SELECT id FROM chunk_addrs WHERE address = ?)`, addr[:])
	b.exec(t, 1, `DELETE FROM chunk_refs WHERE id = (SELECT id FROM chunk_addrs WHERE address = ?)`, addr[:])
	b.exec(t, 1, `DELETE FROM chunk_addrs WHERE address = ?`, addr[:])
}

func (b *testBackend) SetChunkRefs(t testing.TB, addr chunk.Address, refs int64) {
	b.exec(t, 1, `UPDATE chunk_refs SET refs = ? WHERE id = (SELECT id FROM chunk_addrs WHERE address = ?)`, refs, addr[:])
}

// ChunkRows recounts the listings of runs (value indexes) and chunks (runs) on its own and
// compares them with the stored counts.
func (b *testBackend) ChunkRows(t testing.TB) (runs, chunks int) {
	t.Helper()
	// the idle writer's jobs (ref_log, compaction) may move counts between the tables while
	// the recount reads them
	db, done := rawSnapshot(t, b.Path())
	defer done()
	runRefs, chunkRefs := chunk.Tally{}, chunk.Tally{}
	scan := func(q string, each func(rows *sql.Rows)) {
		rows, err := db.Query(q)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			each(rows)
		}
		require.NoError(t, rows.Err())
	}
	for _, q := range []string{`SELECT data FROM states WHERE encoding = 4`, `SELECT value FROM writes WHERE encoding = 4`,
		`SELECT data FROM lg_blobs WHERE encoding = 4`, `SELECT data FROM lg_writes WHERE encoding = 4`,
		`SELECT data FROM lg_staged WHERE encoding = 4`} {
		scan(q, func(rows *sql.Rows) {
			var idx []byte
			require.NoError(t, rows.Scan(&idx))
			addrs, err := chunk.DecodeAddresses(idx)
			require.NoError(t, err)
			runRefs.Add(1, addrs...)
		})
	}
	// a count is the stored one plus the listings waiting in ref_log (reflog.go)
	pending := [2]map[int64]int64{{}, {}}
	scan(`SELECT kind, ids FROM ref_log`, func(rows *sql.Rows) {
		var kind int
		var ids []byte
		require.NoError(t, rows.Scan(&kind, &ids))
		require.NoError(t, decodeUps(ids, pending[kind]))
	})
	scan(`SELECT a.address, a.id, r.refs, d.data FROM run_addrs a JOIN run_refs r ON r.id = a.id JOIN runs d ON d.id = a.id`, func(rows *sql.Rows) {
		var addr, data []byte
		var id, refs int64
		require.NoError(t, rows.Scan(&addr, &id, &refs, &data))
		refs += pending[knownRun][id]
		require.Equal(t, runRefs[chunk.Address(addr)], refs, "refs of run %x", addr)
		delete(runRefs, chunk.Address(addr))
		list, err := chunk.DecodeRun(data)
		require.NoError(t, err)
		chunkRefs.AddRefs(1, list)
		runs++
	})
	require.Empty(t, runRefs, "runs listed but not stored")
	scan(`SELECT a.address, a.id, r.refs FROM chunk_addrs a JOIN chunk_refs r ON r.id = a.id JOIN chunks c ON c.id = a.id`, func(rows *sql.Rows) {
		var addr []byte
		var id, refs int64
		require.NoError(t, rows.Scan(&addr, &id, &refs))
		refs += pending[knownChunk][id]
		require.Equal(t, chunkRefs[chunk.Address(addr)], refs, "refs of chunk %x", addr)
		delete(chunkRefs, chunk.Address(addr))
		chunks++
	})
	require.Empty(t, chunkRefs, "chunks listed but not stored")
	for _, q := range []string{`SELECT (SELECT count(*) FROM runs) - (SELECT count(*) FROM run_addrs)`,
		`SELECT (SELECT count(*) FROM run_refs) - (SELECT count(*) FROM run_addrs)`,
		`SELECT (SELECT count(*) FROM chunks) - (SELECT count(*) FROM chunk_addrs)`,
		`SELECT (SELECT count(*) FROM chunk_refs) - (SELECT count(*) FROM chunk_addrs)`} {
		var n int
		require.NoError(t, db.QueryRow(q).Scan(&n))
		require.Zero(t, n, "rows without an address: %s", q)
	}
	checkPacks(t, db)
	return runs, chunks
}
