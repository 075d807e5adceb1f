package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/internal/pgtest"
	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
	"github.com/ckptd/ckptd/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs the storage contract's conformance suite on PostgreSQL: every case on a
// database of its own in one throwaway cluster.
func TestConformance(t *testing.T) {
	storetest.Run(t, openConformance)
}

// openConformance opens a database for one storetest case: a new one, the one of o.Same (a
// second ckptd process on it, with its background work on), or one at schema version 1 holding
// storetest.OldestCheckpoints as that schema stored them, migrated on open.
func openConformance(t *testing.T, o storetest.Options) store.Backend {
	t.Helper()
	opts := Options{Options: o.Options, noBackground: true}
	switch {
	case o.Same != nil:
		opts.Path = o.Same.(*testBackend).url
		opts.noBackground = false
	case o.Oldest:
		opts.Path = pgtest.Database(t)
		writeV1(t, opts.Path, storetest.OldestCheckpoints())
	default:
		opts.Path = pgtest.Database(t)
	}
	s, err := Open(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	if o.Oldest {
		require.Equal(t, SchemaVersion, schemaVersionOf(t, opts.Path))
	}
	return &testBackend{Store: s, url: opts.Path}
}

// rawConn is a connection of the test's own to url, in the ckptd schema.
func rawConn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = DefaultSchema
	c, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func schemaVersionOf(t testing.TB, url string) int {
	var v int
	require.NoError(t, rawConn(t, url).QueryRow(context.Background(), `SELECT max(version) FROM schema_migrations`).Scan(&v))
	return v
}

// v1SaveSQL is how schema version 1 stored a checkpoint (frozen: saveSQL of that version).
const v1SaveSQL = `WITH wf AS (
	INSERT INTO workflows AS w (workflow_id, next_seq, created_at, updated_at) VALUES ($1, 2, $2, $2)
	ON CONFLICT (workflow_id) DO UPDATE SET next_seq = w.next_seq + 1, updated_at = $2, completed_at = NULL
	RETURNING w.next_seq - 1 AS seq
), st AS (
	INSERT INTO states AS s (hash, encoding, size, stored_size, refs, data)
	SELECT $3::bytea, $4, $5, $6, 1, $7::bytea WHERE $3::bytea IS NOT NULL
	ON CONFLICT (hash) DO UPDATE SET refs = s.refs + 1
	RETURNING s.stored_size, s.refs > 1 AS dedup
), ck AS (
	INSERT INTO checkpoints (checkpoint_id, workflow_id, namespace, seq, parent_id, phase, step, step_name, error,
		state_type, state_hash, size, stored_size, dedup, completed_count, pending_count, workflow_hash, created_at,
		format_version, content_hash, metadata, completed_tasks, pending_tasks)
	SELECT $8, $1, $9, wf.seq, $10, $11, $12, $13, $14, $15, $3::bytea, $5, coalesce(st.stored_size, 0),
		coalesce(st.dedup, false), $16, $17, $18, $2, $19, $20, $21, $22, $23
	FROM wf LEFT JOIN st ON true
	RETURNING id
)
INSERT INTO checkpoint_meta (key, value, ckpt) SELECT m.k, m.v, ck.id FROM ck, unnest($24::text[], $25::text[]) AS m(k, v)`

// writeV1 creates the ckptd schema at version 1 in the database at url and stores reqs the way
// that version did.
func writeV1(t *testing.T, url string, reqs []store.SaveRequest) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, Options{Options: store.Options{Path: url}, maxSchema: 1, noBackground: true})
	require.NoError(t, err)
	codec := s.codec
	defer s.Close()
	require.Equal(t, 1, schemaVersionOf(t, url))
	c := rawConn(t, url)
	for i, req := range reqs {
		sj := &saveJob{}
		require.NoError(t, sj.Prepare(req, &store.SavePolicy{Codec: codec, MaxStateBytes: store.DefaultMaxStateBytes,
			CompressThreshold: store.DefaultCompressThreshold}))
		created := time.Date(2026, 1, 2, 3, 4, 5, i*1000, time.UTC)
		_, err := c.Exec(ctx, v1SaveSQL, insertArgs(sj, created, 1)[:25]...) // without the validation (version 4)
		require.NoError(t, err)
	}
}

// testBackend is a Store with storetest's hooks, which work through a connection of their own.
type testBackend struct {
	*Store
	url string
}

var _ storetest.Corrupter = (*testBackend)(nil)

func (b *testBackend) exec(t testing.TB, wantRows int64, q string, args ...any) {
	t.Helper()
	ct, err := rawConn(t, b.url).Exec(context.Background(), q, args...)
	require.NoError(t, err)
	if wantRows >= 0 {
		require.Equal(t, wantRows, ct.RowsAffected(), "rows changed by %s", q)
	}
}

func (b *testBackend) SetStateBytes(t testing.TB, checkpointID string, stored []byte) {
	b.exec(t, 1, `UPDATE states SET data = $1 WHERE hash = (SELECT state_hash FROM checkpoints WHERE checkpoint_id = $2)`,
		stored, checkpointID)
}

func (b *testBackend) DropState(t testing.TB, checkpointID string) {
	b.exec(t, 1, `DELETE FROM states WHERE hash = (SELECT state_hash FROM checkpoints WHERE checkpoint_id = $1)`, checkpointID)
}

func (b *testBackend) SetLGValueBytes(t testing.TB, thread, ns, channel, version string, stored []byte) {
	b.exec(t, 1, `UPDATE lg_blobs SET data = $1 WHERE thread_id = $2 AND namespace = $3 AND channel = $4 AND version = $5`,
		stored, thread, ns, channel, version)
}

func (b *testBackend) DropManifestEntry(t testing.TB, key []byte) {
	b.exec(t, 1, `DELETE FROM drift_entries WHERE key = $1`, key)
}

func (b *testBackend) SetManifestEntry(t testing.TB, key, data []byte) {
	b.exec(t, 1, `UPDATE drift_entries SET data = $1 WHERE key = $2`, data, key)
}

func (b *testBackend) SetManifestChunkKeys(t testing.TB, id, keys []byte) {
	b.exec(t, 1, `UPDATE drift_chunks SET keys = $1 WHERE id = $2`, keys, id)
}

func (b *testBackend) DropManifestChunks(t testing.TB) { b.exec(t, -1, `DELETE FROM drift_chunks`) }

func (b *testBackend) SetManifestHeader(t testing.TB, checkpointID string, header []byte) {
	b.exec(t, 1, `UPDATE drift_manifests SET header = $1 WHERE ckpt = (SELECT id FROM checkpoints WHERE checkpoint_id = $2)`,
		header, checkpointID)
}

func (b *testBackend) SetManifestChunkIDs(t testing.TB, checkpointID string, ids []byte) {
	b.exec(t, 1, `UPDATE drift_manifests SET chunks = $1 WHERE ckpt = (SELECT id FROM checkpoints WHERE checkpoint_id = $2)`,
		ids, checkpointID)
}

func (b *testBackend) ManifestRows(t testing.TB) (manifests, chunks, entries int) {
	t.Helper()
	c := rawConn(t, b.url)
	ctx := context.Background()
	scan := func(q string, each func(rows pgx.Rows)) {
		rows, err := c.Query(ctx, q)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			each(rows)
		}
		require.NoError(t, rows.Err())
	}
	chunkRefs := map[string]int{}
	scan(`SELECT chunks FROM drift_manifests`, func(rows pgx.Rows) {
		var ids []byte
		require.NoError(t, rows.Scan(&ids))
		require.Zero(t, len(ids)%keyLen)
		for off := 0; off < len(ids); off += keyLen {
			chunkRefs[string(ids[off:off+keyLen])]++
		}
		manifests++
	})
	entryRefs := map[string]int{}
	scan(`SELECT id, refs, keys FROM drift_chunks`, func(rows pgx.Rows) {
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
	scan(`SELECT key, refs FROM drift_entries`, func(rows pgx.Rows) {
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
	c := rawConn(t, b.url)
	for _, q := range []struct {
		dst *int
		tbl string
	}{{&checkpoints, "lg_checkpoints"}, {&values, "lg_blobs"}, {&writes, "lg_writes"}, {&meta, "lg_meta"}} {
		require.NoError(t, c.QueryRow(context.Background(), "SELECT count(*) FROM "+q.tbl).Scan(q.dst))
	}
	return
}

// StopWrites stops writes as the store does when the server reports corruption (condition.go).
func (b *testBackend) StopWrites(t testing.TB, reason, detail string) {
	t.Helper()
	b.stopWrites(reason, detail)
}

func (b *testBackend) SetChunkRaw(t testing.TB, addr chunk.Address, raw []byte) {
	b.exec(t, 1, `UPDATE chunks SET encoding = 0, size = $1, data = $2 WHERE address = $3`, len(raw), raw, addr[:])
}

func (b *testBackend) DropChunk(t testing.TB, addr chunk.Address) {
	b.exec(t, 1, `DELETE FROM chunks WHERE address = $1`, addr[:])
}

func (b *testBackend) SetChunkRefs(t testing.TB, addr chunk.Address, refs int64) {
	b.exec(t, 1, `UPDATE chunks SET refs = $1 WHERE address = $2`, refs, addr[:])
}

// ChunkRows recounts the listings of runs (value indexes) and chunks (runs) on its own and
// compares them with the stored counts.
func (b *testBackend) ChunkRows(t testing.TB) (runs, chunks int) {
	t.Helper()
	c := rawConn(t, b.url)
	ctx := context.Background()
	scan := func(q string, each func(rows pgx.Rows)) {
		rows, err := c.Query(ctx, q)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			each(rows)
		}
		require.NoError(t, rows.Err())
	}
	runRefs, chunkRefs := chunk.Tally{}, chunk.Tally{}
	for _, q := range []string{`SELECT data FROM states WHERE encoding = 4`, `SELECT value FROM writes WHERE encoding = 4`,
		`SELECT data FROM lg_blobs WHERE encoding = 4`, `SELECT data FROM lg_writes WHERE encoding = 4`,
		`SELECT data FROM lg_staged WHERE encoding = 4`} {
		scan(q, func(rows pgx.Rows) {
			var idx []byte
			require.NoError(t, rows.Scan(&idx))
			addrs, err := chunk.DecodeAddresses(idx)
			require.NoError(t, err)
			runRefs.Add(1, addrs...)
		})
	}
	scan(`SELECT address, refs, data FROM chunk_runs`, func(rows pgx.Rows) {
		var addr, data []byte
		var refs int64
		require.NoError(t, rows.Scan(&addr, &refs, &data))
		require.Equal(t, runRefs[chunk.Address(addr)], refs, "refs of run %x", addr)
		delete(runRefs, chunk.Address(addr))
		list, err := chunk.DecodeRun(data)
		require.NoError(t, err)
		chunkRefs.AddRefs(1, list)
		runs++
	})
	require.Empty(t, runRefs, "runs listed but not stored")
	scan(`SELECT address, refs FROM chunks`, func(rows pgx.Rows) {
		var addr []byte
		var refs int64
		require.NoError(t, rows.Scan(&addr, &refs))
		require.Equal(t, chunkRefs[chunk.Address(addr)], refs, "refs of chunk %x", addr)
		delete(chunkRefs, chunk.Address(addr))
		chunks++
	})
	require.Empty(t, chunkRefs, "chunks listed but not stored")
	return runs, chunks
}
