package sqlite

// Packs (schema step 17, docs/storage.md "Chunked values"): the chunks a store of one chunked
// value adds (refChunked) go together into rows of packs of up to packMax stored bytes, each
// chunk still compressed on its own and addressed as before; its chunks row keeps an empty data
// and says where its bytes are (pack, pack_off, pack_len). A chunk row of ~2 KiB takes a 4 KiB
// leaf page with one other at most, leaving a quarter of the chunk pages empty; a pack's bytes
// fill its overflow pages completely and leave only the leaf's small local part to share.
//
// Counting is unchanged: chunk_refs counts the listings of each chunk, and a chunk no run lists
// any more loses its rows (chunks, chunk_addrs, chunk_refs) as before. Its bytes stay in its pack
// until the pack is settled (settlePacks, in the same transaction): a pack none of whose chunks
// is stored any more is deleted; a pack whose stored chunks hold less than half of its bytes is
// rewritten with only theirs (one left: it becomes an ordinary chunk row). So every pack keeps at
// least half its bytes listed, and the bytes of unlisted chunks are never more than those of the
// listed chunks in packs. Every step runs in the writer's BEGIN IMMEDIATE transaction, a single
// writer across processes; readers see whole transactions, so a pack rewritten under an older
// reader's snapshot is still the old pack with the old offsets for it.
//
// Reads fetch each pack a value lists chunks of once (fetchChunks), and slice the chunks out.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk"
)

// packMax is the most stored bytes a pack holds (a chunk's stored bytes are at most
// chunk.MaxSize plus zstd's frame overhead, so a pack of two always fits). Larger packs would
// cost a read of one chunk more (a pack is read whole) for no gain in space: a pack's overflow
// pages are full whatever its size.
const packMax = 64 << 10

const (
	qPackIns        = `INSERT INTO packs(data) VALUES (?)`
	qChunkInsPacked = `INSERT INTO chunks(encoding, size, data, pack, pack_off, pack_len) VALUES (?, ?, X'', ?, ?, ?)`
	qPacksByID      = `SELECT p.id, p.data FROM json_each(?1) j CROSS JOIN packs p ON p.id = j.value`
	qPackLive       = `SELECT count(*), coalesce(sum(pack_len), 0), (SELECT length(data) FROM packs WHERE id = ?1)
		FROM chunks WHERE pack = ?1`
	qPackDel      = `DELETE FROM packs WHERE id = ?`
	qPackData     = `SELECT data FROM packs WHERE id = ?`
	qPackChunks   = `SELECT id, pack_off, pack_len FROM chunks WHERE pack = ? ORDER BY pack_off`
	qPackSet      = `UPDATE packs SET data = ? WHERE id = ?`
	qPackChunkOff = `UPDATE chunks SET pack_off = ? WHERE id = ?`
	qPackUnpack   = `UPDATE chunks SET data = ?, pack = NULL, pack_off = NULL, pack_len = NULL WHERE id = ?`
)

// packsFlag says whether the database has packs (schema step 17): always after a migration to
// the latest version; a database of an older ckptd opened read-only (a salvage) may not.
type packsFlag struct {
	once sync.Once
	has  bool
}

// hasPacks reports whether the database has packs (checked once).
func (s *Store) hasPacks(ctx context.Context) bool {
	s.packs.once.Do(func() {
		var n int
		err := s.readAuto(ctx, func(tx *rtx) error {
			return tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('chunks') WHERE name = 'pack'`).Scan(&n)
		})
		s.packs.has = err != nil || n > 0
	})
	return s.packs.has
}

// newChunk is a chunk refChunked stores: its address, listings and stored bytes.
type newChunk struct {
	addr chunk.Address
	refs int64
	data []byte
	enc  int
	size int
}

// insertChunks stores the new chunks of one value: in packs when there are several (and the
// database has packs), else each in a row of its own.
func (s *Store) insertChunks(ctx context.Context, w *wtx, cs []newChunk) error {
	if len(cs) < 2 || !s.hasPacks(ctx) {
		for _, c := range cs {
			if err := insertChunk(ctx, w, c); err != nil {
				return err
			}
		}
		return nil
	}
	for _, g := range packGroups(cs) {
		if len(g) == 1 {
			if err := insertChunk(ctx, w, g[0]); err != nil {
				return err
			}
			continue
		}
		if err := insertPack(ctx, w, g); err != nil {
			return err
		}
	}
	return nil
}

// packGroups splits cs into packs of at most packMax stored bytes, of about equal sizes (so that
// the last one is not a pack of one chunk when it can be helped).
func packGroups(cs []newChunk) [][]newChunk {
	total := 0
	for _, c := range cs {
		total += len(c.data)
	}
	k := (total + packMax - 1) / packMax
	target := (total + k - 1) / max(k, 1)
	var out [][]newChunk
	start, n := 0, 0
	for i, c := range cs {
		if i > start && (n+len(c.data) > packMax || n >= target) {
			out = append(out, cs[start:i])
			start, n = i, 0
		}
		n += len(c.data)
	}
	return append(out, cs[start:])
}

// insertChunk stores one chunk in a row of its own.
func insertChunk(ctx context.Context, w *wtx, c newChunk) error {
	res, err := w.exec(ctx, qChunkIns, c.enc, c.size, c.data)
	if err != nil {
		return err
	}
	id, _ := res.LastInsertId()
	return chunkKeys(ctx, w, c, id)
}

// insertPack stores cs (two or more) in one pack.
func insertPack(ctx context.Context, w *wtx, cs []newChunk) error {
	n := 0
	for _, c := range cs {
		n += len(c.data)
	}
	data := make([]byte, 0, n)
	for _, c := range cs {
		data = append(data, c.data...)
	}
	res, err := w.exec(ctx, qPackIns, data)
	if err != nil {
		return err
	}
	pack, _ := res.LastInsertId()
	off := 0
	for _, c := range cs {
		res, err := w.exec(ctx, qChunkInsPacked, c.enc, c.size, pack, off, len(c.data))
		if err != nil {
			return err
		}
		off += len(c.data)
		id, _ := res.LastInsertId()
		if err := chunkKeys(ctx, w, c, id); err != nil {
			return err
		}
	}
	return nil
}

// chunkKeys records the address and the count of the chunk stored as row id.
func chunkKeys(ctx context.Context, w *wtx, c newChunk, id int64) error {
	if _, err := w.exec(ctx, qChunkAddr, c.addr[:], id); err != nil {
		return err
	}
	w.s.known.learn(knownChunk, c.addr, id)
	_, err := w.exec(ctx, qChunkRefs, id, c.refs)
	return err
}

// settlePacks settles the packs that lost chunks in this job (ids): a pack with none left is
// deleted, a pack whose remaining chunks hold less than half of its bytes is rewritten with only
// theirs (with one left, that chunk gets a row of its own). Inside the writer's transaction.
func (s *Store) settlePacks(ctx context.Context, w *wtx, ids map[int64]bool) error {
	sorted := make([]int64, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	slices.Sort(sorted)
	for _, id := range sorted {
		var n, live int64
		var size sql.NullInt64
		if err := w.queryRow(ctx, qPackLive, id).Scan(&n, &live, &size); err != nil {
			return err
		}
		switch {
		case !size.Valid: // no such pack (verify reports the chunks that lost their bytes)
		case n == 0:
			if _, err := w.exec(ctx, qPackDel, id); err != nil {
				return err
			}
		case live*2 < size.Int64:
			if err := s.repack(ctx, w, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// repack rewrites pack id with only the bytes of the chunks stored in it; one chunk left gets a
// row of its own and the pack goes. A chunk whose recorded place is not inside the pack
// (damage) leaves the pack as it is, for verify to report.
func (s *Store) repack(ctx context.Context, w *wtx, id int64) error {
	var old []byte
	if err := w.queryRow(ctx, qPackData, id).Scan(&old); err != nil {
		return err
	}
	type place struct{ id, off, n int64 }
	var ps []place
	rows, err := w.query(ctx, qPackChunks, id)
	if err != nil {
		return err
	}
	err = eachRow(ctx, rows, func(rows *sql.Rows) error {
		var p place
		if err := rows.Scan(&p.id, &p.off, &p.n); err != nil {
			return err
		}
		ps = append(ps, p)
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.off < 0 || p.n < 0 || p.off+p.n > int64(len(old)) {
			s.log.Error("ckptd store: a chunk lies outside its pack; the pack is left as it is", "pack", id, "chunk row", p.id)
			return nil
		}
	}
	if len(ps) == 1 {
		p := ps[0]
		if _, err := w.exec(ctx, qPackUnpack, old[p.off:p.off+p.n], p.id); err != nil {
			return err
		}
		_, err := w.exec(ctx, qPackDel, id)
		return err
	}
	var data []byte
	for _, p := range ps {
		if off := int64(len(data)); off != p.off {
			if _, err := w.exec(ctx, qPackChunkOff, off, p.id); err != nil {
				return err
			}
		}
		data = append(data, old[p.off:p.off+p.n]...)
	}
	_, err = w.exec(ctx, qPackSet, data, id)
	return err
}

// chunkPlace is a stored chunk as the by-address query reads it: its row, and where its bytes
// are when they are in a pack.
type chunkPlace struct {
	row    store.ChunkRow
	pack   sql.NullInt64
	off, n int64
}

// fetchChunks returns the stored rows of as many of addrs as are stored (store.BatchFetch),
// through query: the chunk rows by address, then each pack they lie in once.
func (s *Store) fetchChunks(ctx context.Context, query queryFunc, addrs []chunk.Address) (map[chunk.Address]store.ChunkRow, error) {
	out := make(map[chunk.Address]store.ChunkRow, len(addrs))
	inPacks := map[chunk.Address]chunkPlace{}
	packIDs := map[int64]bool{}
	err := eachAddrRow(ctx, query, s.qChunksByAddr(ctx), addrs, func(rows *sql.Rows) error {
		var a []byte
		var p chunkPlace
		var off, n sql.NullInt64
		if err := rows.Scan(&a, &p.row.Enc, &p.row.Size, &p.row.Data, &p.pack, &off, &n); err != nil {
			return err
		}
		if len(a) != len(chunk.Address{}) {
			return nil
		}
		if !p.pack.Valid {
			out[chunk.Address(a)] = p.row
			return nil
		}
		p.off, p.n = off.Int64, n.Int64
		inPacks[chunk.Address(a)] = p
		packIDs[p.pack.Int64] = true
		return nil
	})
	if err != nil || len(inPacks) == 0 {
		return out, err
	}
	packs, err := fetchPacks(ctx, query, packIDs)
	if err != nil {
		return nil, err
	}
	for a, p := range inPacks {
		data, ok := packs[p.pack.Int64]
		if !ok {
			continue // missing: the value is corrupt
		}
		// a place outside the pack (damage) gives the bytes inside it: they do not decode or
		// do not hash to the address
		lo := min(max(p.off, 0), int64(len(data)))
		hi := min(max(p.off+p.n, lo), int64(len(data)))
		p.row.Data = data[lo:hi:hi]
		out[a] = p.row
	}
	return out, nil
}

// fetchPacks reads the packs ids, each once, in batches.
func fetchPacks(ctx context.Context, query queryFunc, ids map[int64]bool) (map[int64][]byte, error) {
	const batch = 4096
	all := make([]int64, 0, len(ids))
	for id := range ids {
		all = append(all, id)
	}
	slices.Sort(all)
	out := make(map[int64][]byte, len(all))
	for len(all) > 0 {
		n := min(len(all), batch)
		list, err := json.Marshal(all[:n])
		if err != nil {
			return nil, err
		}
		rows, err := query(ctx, qPacksByID, string(list))
		if err != nil {
			return nil, err
		}
		if err := eachRow(ctx, rows, func(rows *sql.Rows) error {
			var id int64
			var data []byte
			if err := rows.Scan(&id, &data); err != nil {
				return err
			}
			out[id] = data
			return nil
		}); err != nil {
			return nil, err
		}
		all = all[n:]
	}
	return out, nil
}

// qChunksByAddr is the by-address query of chunk rows with where their bytes are (NULLs on a
// database without packs).
func (s *Store) qChunksByAddr(ctx context.Context) string {
	if s.hasPacks(ctx) {
		return qChunksByAddr
	}
	return qChunksByAddrNoPacks
}

// auditPacks adds the problems of packs to audit: chunks whose pack is missing or too short
// (their values are reported corrupt too), packs no chunk lies in (orphans, never collected).
func (s *Store) auditPacks(ctx context.Context, tx *rtx, audit *store.RefAudit) error {
	if !s.hasPacks(ctx) {
		return nil
	}
	err := scanRows(ctx, tx, `SELECT a.address, c.pack, c.pack_off, c.pack_len, length(p.data) FROM chunks c
		JOIN chunk_addrs a ON a.id = c.id LEFT JOIN packs p ON p.id = c.pack WHERE c.pack IS NOT NULL`, func(rows *sql.Rows) error {
		var addr []byte
		var pack int64
		var off, n, size sql.NullInt64
		if err := rows.Scan(&addr, &pack, &off, &n, &size); err != nil {
			return err
		}
		what := fmt.Sprintf("chunk %x", addr)
		if len(addr) == len(chunk.Address{}) {
			what = "chunk " + chunk.Address(addr).String()
		}
		switch {
		case !size.Valid:
			audit.Problem(fmt.Sprintf("%s has no bytes (its pack %d is missing)", what, pack))
		case !off.Valid || !n.Valid || off.Int64 < 0 || n.Int64 < 0 || off.Int64+n.Int64 > size.Int64:
			audit.Problem(fmt.Sprintf("%s lies outside its pack %d (%d bytes)", what, pack, size.Int64))
		}
		return nil
	})
	if err != nil {
		return err
	}
	var orphans int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM packs WHERE id NOT IN (SELECT pack FROM chunks WHERE pack IS NOT NULL)`).
		Scan(&orphans); err != nil {
		return err
	}
	if orphans > 0 {
		audit.Problem(fmt.Sprintf("%d packs hold no stored chunk (orphans)", orphans))
	}
	return nil
}
