package sqlite

// LangGraph maintenance: deletion, copy, prune, retention and idle expiry of threads
// (store/lgretention.go). Deleting runs in bites: bounded write transactions (store.Bite), so
// that saves and puts of other threads interleave; each bite leaves a consistent database
// (a checkpoint goes with its metadata rows and writes, a value only once nothing refers to it)
// and running the same call again finishes the job.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ckptd/ckptd/store"
)

// lgInlineNodes bounds the checkpoints of a (thread, namespace) that a put's transaction reads
// to apply its retention; a larger one is brought down in bites after the put.
const lgInlineNodes = 2 * store.BiteUnits

// lgq runs the reads of the maintenance code in a read snapshot or in the writer's transaction.
type lgq struct {
	ctx      context.Context
	query    func(q string, args ...any) (*sql.Rows, error)
	queryRow func(q string, args ...any) *sql.Row
}

func wq(ctx context.Context, w *wtx) lgq {
	return lgq{ctx,
		func(q string, args ...any) (*sql.Rows, error) { return w.query(ctx, q, args...) },
		func(q string, args ...any) *sql.Row { return w.queryRow(ctx, q, args...) }}
}

func rq(ctx context.Context, tx *rtx) lgq {
	return lgq{ctx,
		func(q string, args ...any) (*sql.Rows, error) { return tx.cached(ctx, q, args...) },
		func(q string, args ...any) *sql.Row { return tx.cachedRow(ctx, q, args...) }}
}

// nodes reads every checkpoint of (thread, ns) (at most limit[0] of them when given), newest
// first, and the highest row id among them.
func (q lgq) nodes(thread, ns string, limit ...int) ([]*store.LGNode, int64, error) {
	lim := -1
	if len(limit) > 0 {
		lim = limit[0]
	}
	rows, err := q.query(`SELECT id, checkpoint_id, parent_id, channel_versions, value_refs, created_at FROM lg_checkpoints
		INDEXED BY lg_checkpoints_key WHERE thread_id = ? AND namespace = ? ORDER BY checkpoint_id DESC LIMIT ?`, thread, ns, lim)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []*store.LGNode
	var maxID int64
	for rows.Next() {
		var rowid, created int64
		var id, versions string
		var parent sql.NullString
		var refs []byte
		if err := rows.Scan(&rowid, &id, &parent, &versions, &refs, &created); err != nil {
			return nil, 0, err
		}
		n, err := store.NewLGNode(rowid, id, parent.String, []byte(versions), refs)
		if err != nil {
			return nil, 0, err
		}
		n.Created = time.UnixMicro(created).UTC()
		out = append(out, n)
		maxID = max(maxID, rowid)
	}
	return out, maxID, rows.Err()
}

// generation is the highest checkpoint row id of (thread, ns): a put since a plan changes it.
func (q lgq) generation(thread, ns string) (int64, error) {
	var g sql.NullInt64
	err := q.queryRow(`SELECT max(id) FROM lg_checkpoints INDEXED BY lg_checkpoints_key WHERE thread_id = ? AND namespace = ?`,
		thread, ns).Scan(&g)
	return g.Int64, err
}

func (q lgq) strings(query string, args ...any) ([]string, error) {
	rows, err := q.query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// view is (thread, ns) for store.SelectLGKeep.
func (q lgq) view(thread, ns string) *lgPruneView { return &lgPruneView{q: q, thread: thread, ns: ns} }

// lgPruneView is one (thread, namespace), for store.SelectLGKeep: it reads the heads of the
// namespace's values and writes once, on first use (a plan walks many checkpoints).
type lgPruneView struct {
	q          lgq
	thread, ns string
	values     map[store.LGRefKey]bool // key -> has a non-empty value
	written    map[string][]string     // checkpoint id -> channels its regular writes write
}

func (v *lgPruneView) HasValue(ch, ver string, variant int) (bool, error) {
	if v.values == nil {
		v.values = map[store.LGRefKey]bool{}
		rows, err := v.q.query(`SELECT channel, version, variant, type FROM lg_blobs WHERE thread_id = ? AND namespace = ?`, v.thread, v.ns)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		for rows.Next() {
			var k store.LGRefKey
			var typ string
			if err := rows.Scan(&k.Channel, &k.Version, &k.Variant, &typ); err != nil {
				return false, err
			}
			v.values[k] = typ != store.LGEmptyType
		}
		if err := rows.Err(); err != nil {
			return false, err
		}
	}
	return v.values[store.LGRefKey{Channel: ch, Version: ver, Variant: variant}], nil
}

func (v *lgPruneView) Written(id string) ([]string, error) {
	if v.written == nil {
		v.written = map[string][]string{}
		rows, err := v.q.query(`SELECT DISTINCT checkpoint_id, channel FROM lg_writes WHERE thread_id = ? AND namespace = ? AND idx >= 0`, v.thread, v.ns)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var cp, ch string
			if err := rows.Scan(&cp, &ch); err != nil {
				return nil, err
			}
			v.written[cp] = append(v.written[cp], ch)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return v.written[id], nil
}

// lgDeleteNodes removes checkpoints (by row id) of (thread, ns) with their metadata rows and
// pending writes, a few statements for the lot; it returns how many were still there. The pages
// freed are reused; lgVacuum returns them to the file system once a deletion is over.
func lgDeleteNodes(ctx context.Context, w *wtx, thread, ns string, nodes []*store.LGNode) (int, error) {
	n := 0
	for len(nodes) > 0 {
		chunk := nodes[:min(len(nodes), store.BiteUnits)]
		nodes = nodes[len(chunk):]
		keys := make([]any, 0, len(chunk)+2)
		keys = append(keys, thread, ns)
		for _, nd := range chunk {
			keys = append(keys, nd.Key)
		}
		in := `(?` + strings.Repeat(`,?`, len(chunk)-1) + `)`
		rows, err := w.conn.QueryContext(ctx, `DELETE FROM lg_checkpoints WHERE thread_id = ? AND namespace = ? AND id IN `+in+` RETURNING checkpoint_id`, keys...)
		if err != nil {
			return n, err
		}
		ids := []any{thread, ns}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return n, err
			}
			ids = append(ids, id)
		}
		if err := rows.Close(); err != nil {
			return n, err
		}
		if len(ids) == 2 {
			continue
		}
		n += len(ids) - 2
		if _, err := w.conn.ExecContext(ctx, `DELETE FROM lg_meta WHERE ckpt IN `+in, keys[2:]...); err != nil {
			return n, err
		}
		if err := w.releaseRows(w.conn.QueryContext(ctx, `DELETE FROM lg_writes WHERE thread_id = ? AND namespace = ? AND checkpoint_id IN (?`+
			strings.Repeat(`,?`, len(ids)-3)+`) RETURNING CASE WHEN encoding = 4 THEN data END`, ids...)); err != nil {
			return n, err
		}
	}
	if n > 0 {
		w.s.deletes.Add(uint64(n))
	}
	return n, nil
}

// lgDeleteValues removes the values of (thread, ns) keys names that none of kept refers to.
func lgDeleteValues(ctx context.Context, w *wtx, thread, ns string, keys map[store.LGRefKey]bool, kept []*store.LGNode) error {
	ref := store.LGReferenced(kept)
	for k := range keys {
		if ref[k] {
			continue
		}
		if _, err := w.lgDeleteRows(ctx, `DELETE FROM lg_blobs WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ? AND variant = ?`,
			thread, ns, k.Channel, k.Version, k.Variant); err != nil {
			return err
		}
	}
	return nil
}

// lgBites runs step in bounded write transactions until it reports done: each bite calls step
// with a chunk of store.BiteUnits units, again while the bite has time left (store.Bite), and counts it (store.Bites).
func (s *Store) lgBites(ctx context.Context, op string, step func(ctx context.Context, w *wtx) (done bool, err error)) error {
	for {
		done := false
		var took time.Duration
		err := s.lgWait(ctx, op, func(ctx context.Context, w *wtx) error {
			b := s.bites.Start()
			start := time.Now()
			defer func() { took = time.Since(start) }()
			for {
				var err error
				if done, err = step(ctx, w); err != nil || done || b.Spend(store.BiteUnits) {
					return err
				}
			}
		})
		if err != nil {
			return err
		}
		s.bites.Committed()
		if done {
			return nil
		}
		if err := store.Pace(ctx, took); err != nil { // background work leaves room to the writers
			return err
		}
	}
}

// lgPruneNS deletes what plan decides of (thread, ns), in bites. The plan is made from a read
// snapshot; a bite that finds a checkpoint stored since (a put) makes a new plan. Then the values
// and writes nothing refers to go, in bites too. It returns the checkpoints deleted.
func (s *Store) lgPruneNS(ctx context.Context, thread, ns string, plan func(nodes []*store.LGNode, v store.LGPruneView) (store.LGPlan, error)) (int, error) {
	deleted := 0
	for {
		var p store.LGPlan
		var gen int64
		err := s.readTx(ctx, func(tx *rtx) error {
			q := rq(ctx, tx)
			nodes, g, err := q.nodes(thread, ns)
			if err != nil {
				return err
			}
			gen = g
			p, err = plan(nodes, q.view(thread, ns))
			return err
		})
		if err != nil {
			return deleted, wrapLG("plan a prune", err)
		}
		stale := false
		err = s.lgBites(ctx, "prune thread "+thread, func(ctx context.Context, w *wtx) (bool, error) {
			g, err := wq(ctx, w).generation(thread, ns)
			if err != nil {
				return false, err
			}
			if g != gen {
				stale = true
				return true, nil
			}
			chunk := p.Drop[:min(len(p.Drop), store.BiteUnits)]
			p.Drop = p.Drop[len(chunk):]
			n, err := lgDeleteNodes(ctx, w, thread, ns, chunk)
			deleted += n
			return len(p.Drop) == 0, err
		})
		if err != nil {
			return deleted, err
		}
		if !stale {
			break
		}
	}
	return deleted, s.lgCollect(ctx, thread, ns)
}

// lgCollect deletes, in bites, the values of (thread, ns) no checkpoint refers to and the
// writes of checkpoints that do not exist (put_writes does not require its checkpoint).
func (s *Store) lgCollect(ctx context.Context, thread, ns string) error {
	for {
		var values, writes []int64
		var gen int64
		err := s.readTx(ctx, func(tx *rtx) error {
			q := rq(ctx, tx)
			nodes, g, err := q.nodes(thread, ns)
			if err != nil {
				return err
			}
			gen = g
			ref := store.LGReferenced(nodes)
			rows, err := q.query(`SELECT id, channel, version, variant FROM lg_blobs WHERE thread_id = ? AND namespace = ?`, thread, ns)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id int64
				var k store.LGRefKey
				if err := rows.Scan(&id, &k.Channel, &k.Version, &k.Variant); err != nil {
					rows.Close()
					return err
				}
				if !ref[k] {
					values = append(values, id)
				}
			}
			if err := rows.Close(); err != nil {
				return err
			}
			ids := map[string]bool{}
			for _, n := range nodes {
				ids[n.ID] = true
			}
			rows, err = q.query(`SELECT id, checkpoint_id FROM lg_writes WHERE thread_id = ? AND namespace = ?`, thread, ns)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				var cp string
				if err := rows.Scan(&id, &cp); err != nil {
					return err
				}
				if !ids[cp] {
					writes = append(writes, id)
				}
			}
			return rows.Err()
		})
		if err != nil {
			return wrapLG("plan a collection", err)
		}
		if len(values) == 0 && len(writes) == 0 {
			return nil
		}
		stale := false
		err = s.lgBites(ctx, "collect thread "+thread, func(ctx context.Context, w *wtx) (bool, error) {
			g, err := wq(ctx, w).generation(thread, ns)
			if err != nil {
				return false, err
			}
			if g != gen {
				stale = true
				return true, nil
			}
			for k := 0; k < store.BiteUnits && len(values)+len(writes) > 0; k++ {
				if len(values) > 0 {
					if _, err := w.lgDeleteRows(ctx, `DELETE FROM lg_blobs WHERE id = ?`, values[0]); err != nil {
						return false, err
					}
					values = values[1:]
					continue
				}
				// a write whose checkpoint a put stored since the plan stays
				if _, err := w.lgDeleteRows(ctx, `DELETE FROM lg_writes WHERE id = ? AND NOT EXISTS (SELECT 1 FROM lg_checkpoints c
					WHERE c.thread_id = lg_writes.thread_id AND c.namespace = lg_writes.namespace AND c.checkpoint_id = lg_writes.checkpoint_id)`,
					writes[0]); err != nil {
					return false, err
				}
				writes = writes[1:]
			}
			return len(values)+len(writes) == 0, nil
		})
		if err != nil || !stale {
			return err
		}
	}
}

// lgVacuum returns the free pages of the file to the file system, in bites (at most 256 pages
// moved per transaction), once a deletion is over.
func (s *Store) lgVacuum(ctx context.Context) {
	for {
		done := false
		err := s.do(ctx, func(ctx context.Context, w *wtx) error {
			var free int64
			if err := w.queryRow(ctx, `PRAGMA freelist_count`).Scan(&free); err != nil {
				return err
			}
			if free == 0 {
				done = true
				return nil
			}
			done = free <= 256
			_, err := w.exec(ctx, `PRAGMA incremental_vacuum(256)`)
			return err
		})
		if err != nil {
			if !errors.Is(err, store.ErrClosed) && !errors.Is(err, context.Canceled) {
				s.log.Warn("ckptd store: incremental_vacuum failed", "err", err)
			}
			return
		}
		if done {
			return
		}
	}
}

// wrapLG passes store errors through and wraps database ones.
func wrapLG(op string, err error) error {
	var ie *store.InvalidError
	var ce *store.CorruptError
	if err == nil || errors.As(err, &ie) || errors.As(err, &ce) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return wrapDB(op, err)
}

func lgNamespaces(q lgq, thread string) ([]string, error) {
	return q.strings(`SELECT DISTINCT namespace FROM lg_checkpoints INDEXED BY lg_checkpoints_key WHERE thread_id = ?
		UNION SELECT DISTINCT namespace FROM lg_blobs WHERE thread_id = ?
		UNION SELECT DISTINCT namespace FROM lg_writes WHERE thread_id = ?`, thread, thread, thread)
}

// lgDeleteThread deletes every row of thread in bites: checkpoints oldest first (with their
// metadata rows and writes), then the remaining writes, values and staged values, then the
// thread's row. still, if not nil, is asked before each bite whether to go on (the idle sweep:
// the thread is still idle). It returns the checkpoints deleted and whether the thread is gone.
func (s *Store) lgDeleteThread(ctx context.Context, thread string, still func(q lgq) (bool, error)) (int, bool, error) {
	n := 0
	stage := 0
	gone := false
	err := s.lgBites(ctx, "delete thread "+thread, func(ctx context.Context, w *wtx) (bool, error) {
		if still != nil {
			ok, err := still(wq(ctx, w))
			if err != nil || !ok {
				return true, err
			}
		}
		switch stage {
		case 0:
			rows, err := w.query(ctx, `SELECT id, namespace, checkpoint_id FROM lg_checkpoints INDEXED BY lg_checkpoints_thread
				WHERE thread_id = ? ORDER BY checkpoint_id LIMIT ?`, thread, store.BiteUnits)
			if err != nil {
				return false, err
			}
			type row struct {
				ns string
				nd *store.LGNode
			}
			var batch []row
			for rows.Next() {
				var r row
				r.nd = &store.LGNode{}
				if err := rows.Scan(&r.nd.Key, &r.ns, &r.nd.ID); err != nil {
					rows.Close()
					return false, err
				}
				batch = append(batch, r)
			}
			if err := rows.Close(); err != nil {
				return false, err
			}
			byNS := map[string][]*store.LGNode{}
			var order []string
			for _, r := range batch {
				if _, ok := byNS[r.ns]; !ok {
					order = append(order, r.ns)
				}
				byNS[r.ns] = append(byNS[r.ns], r.nd)
			}
			for _, ns := range order {
				k, err := lgDeleteNodes(ctx, w, thread, ns, byNS[ns])
				if err != nil {
					return false, err
				}
				n += k
			}
			if len(batch) < store.BiteUnits {
				stage++
			}
			return false, nil
		case 1, 2, 3:
			table := []string{"lg_writes", "lg_blobs", "lg_staged"}[stage-1]
			q := `DELETE FROM ` + table + ` WHERE id IN (SELECT id FROM ` + table + ` WHERE thread_id = ? LIMIT ?)`
			k, err := w.lgDeleteRows(ctx, q, thread, store.BiteUnits) // every table's chunked values released
			if err != nil {
				return false, err
			}
			if k < store.BiteUnits {
				stage++
			}
			return false, nil
		}
		_, err := w.exec(ctx, `DELETE FROM lg_threads WHERE thread_id = ?`, thread)
		gone = err == nil
		return true, err
	})
	return n, gone, err
}

func (s *Store) lgWait(ctx context.Context, op string, fn func(ctx context.Context, w *wtx) error) error {
	return wrapLG(op, s.do(ctx, fn))
}

// LGDeleteThread deletes every LangGraph checkpoint, write and blob of thread, in bites; it
// returns the number of checkpoints deleted.
func (s *Store) LGDeleteThread(ctx context.Context, thread string) (int, error) {
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return 0, err
	}
	n, _, err := s.lgDeleteThread(ctx, thread, nil)
	if n > 0 {
		s.lgVacuum(ctx)
	}
	return n, err
}

// LGPrune prunes threads: strategy "delete" removes them; "keep_latest" keeps, per namespace,
// the latest checkpoint plus the ancestors a delta-channel replay of it needs. It works in bites
// and returns the number of checkpoints deleted.
func (s *Store) LGPrune(ctx context.Context, threads []string, strategy string) (int, error) {
	if err := store.CheckLGPrune(strategy); err != nil {
		return 0, err
	}
	n := 0
	for _, thread := range threads {
		if strategy == "delete" {
			k, _, err := s.lgDeleteThread(ctx, thread, nil)
			n += k
			if err != nil {
				return n, err
			}
			continue
		}
		var nss []string
		if err := s.readTx(ctx, func(tx *rtx) error {
			var err error
			nss, err = lgNamespaces(rq(ctx, tx), thread)
			return err
		}); err != nil {
			return n, wrapLG("prune threads", err)
		}
		for _, ns := range nss {
			k, err := s.lgPruneNS(ctx, thread, ns, func(nodes []*store.LGNode, v store.LGPruneView) (store.LGPlan, error) {
				return store.PlanLGKeepLatest(thread, ns, nodes, v)
			})
			n += k
			if err != nil {
				return n, err
			}
		}
	}
	if n > 0 {
		s.lgVacuum(ctx)
	}
	return n, nil
}

// LGDeleteForRuns deletes every LangGraph checkpoint whose metadata.run_id is one of runIDs, with
// its writes and the blobs nothing left refers to. It returns the number deleted.
func (s *Store) LGDeleteForRuns(ctx context.Context, runIDs []string) (int, error) {
	hashes, err := store.LGRunHashes(runIDs)
	if err != nil {
		return 0, err
	}
	n := 0
	err = s.lgWait(ctx, "delete for runs", func(ctx context.Context, w *wtx) error {
		n = 0
		type pair struct{ thread, ns string }
		affected := map[pair][]*store.LGNode{}
		var order []pair
		for _, h := range hashes {
			rows, err := w.query(ctx, `SELECT c.id, c.thread_id, c.namespace, c.checkpoint_id, c.channel_versions, c.value_refs FROM lg_meta m
				CROSS JOIN lg_checkpoints c WHERE m.key = 'run_id' AND m.vhash = ? AND c.id = m.ckpt`, h)
			if err != nil {
				return err
			}
			for rows.Next() {
				var key int64
				var p pair
				var id, versions string
				var refs []byte
				if err := rows.Scan(&key, &p.thread, &p.ns, &id, &versions, &refs); err != nil {
					rows.Close()
					return err
				}
				nd, err := store.NewLGNode(key, id, "", []byte(versions), refs)
				if err != nil {
					rows.Close()
					return err
				}
				if _, ok := affected[p]; !ok {
					order = append(order, p)
				}
				affected[p] = append(affected[p], nd)
			}
			if err := rows.Close(); err != nil {
				return err
			}
		}
		for _, p := range order {
			k, err := lgDeleteNodes(ctx, w, p.thread, p.ns, affected[p])
			if err != nil {
				return err
			}
			n += k
			rest, _, err := wq(ctx, w).nodes(p.thread, p.ns)
			if err != nil {
				return err
			}
			if err := lgDeleteValues(ctx, w, p.thread, p.ns, store.LGReferenced(affected[p]), rest); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// LGCopyThread copies every checkpoint, write and value of src to dst (same ids), in one
// transaction; dst checkpoints and writes with the same keys are overwritten. A value whose
// (channel, version) dst already holds with other bytes becomes another variant there, so that
// dst's own checkpoints keep reading theirs. It returns the number of checkpoints copied.
func (s *Store) LGCopyThread(ctx context.Context, src, dst string) (int, error) {
	if err := store.CheckLGCopy(src, dst); err != nil {
		return 0, err
	}
	n := 0
	err := s.lgWait(ctx, "copy thread "+src, func(ctx context.Context, w *wtx) error {
		n = 0
		// values: src variant -> dst variant
		type vk struct {
			ns string
			k  store.LGRefKey
		}
		remap := map[vk]int{}
		rows, err := w.query(ctx, `SELECT namespace, channel, version, variant, type, encoding, size, sha256, id FROM lg_blobs
			WHERE thread_id = ? ORDER BY id`, src)
		if err != nil {
			return err
		}
		type blobRow struct {
			ns, ch, ver, typ string
			variant          int
			p                store.Packed
			id               int64
		}
		var blobs []blobRow
		for rows.Next() {
			var b blobRow
			var enc int
			var size int64
			if err := rows.Scan(&b.ns, &b.ch, &b.ver, &b.variant, &b.typ, &enc, &size, &b.p.SHA, &b.id); err != nil {
				rows.Close()
				return err
			}
			b.p.Enc, b.p.Size = enc, int(size)
			blobs = append(blobs, b)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, b := range blobs {
			var stored []store.LGStoredValue
			rs, err := w.query(ctx, `SELECT variant, type, size, sha256 FROM lg_blobs WHERE thread_id = ? AND namespace = ? AND channel = ? AND version = ?`,
				dst, b.ns, b.ch, b.ver)
			if err != nil {
				return err
			}
			for rs.Next() {
				var v store.LGStoredValue
				if err := rs.Scan(&v.Variant, &v.Type, &v.Size, &v.SHA); err != nil {
					rs.Close()
					return err
				}
				stored = append(stored, v)
			}
			if err := rs.Close(); err != nil {
				return err
			}
			match, next := store.LGMatchVariant(stored, b.typ, b.p)
			if match < 0 {
				if len(stored) == 0 {
					next = b.variant // keep the numbering when dst has none of this version
				}
				var index []byte
				if err := w.queryRow(ctx, `INSERT INTO lg_blobs(thread_id, namespace, channel, version, variant, type, encoding, size, sha256, data)
					SELECT ?, namespace, channel, version, ?, type, encoding, size, sha256, data FROM lg_blobs WHERE id = ?
					RETURNING CASE WHEN encoding = 4 THEN data END`, dst, next, b.id).Scan(&index); err != nil {
					return err
				}
				if index != nil { // a chunked value: one more listing of its runs
					if err := s.refIndex(ctx, w, index); err != nil {
						return err
					}
				}
				match = next
			}
			remap[vk{b.ns, store.LGRefKey{Channel: b.ch, Version: b.ver, Variant: b.variant}}] = match
		}
		// checkpoints, their value refs remapped
		rows, err = w.query(ctx, `SELECT id, namespace, checkpoint_id, channel_versions, value_refs, created_at FROM lg_checkpoints
			WHERE thread_id = ? ORDER BY id`, src)
		if err != nil {
			return err
		}
		type cpRow struct {
			ns      string
			nd      *store.LGNode
			created int64
		}
		var cps []cpRow
		for rows.Next() {
			var c cpRow
			var key int64
			var id, versions string
			var refs []byte
			if err := rows.Scan(&key, &c.ns, &id, &versions, &refs, &c.created); err != nil {
				rows.Close()
				return err
			}
			if c.nd, err = store.NewLGNode(key, id, "", []byte(versions), refs); err != nil {
				rows.Close()
				return err
			}
			cps = append(cps, c)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		var newest int64
		for _, c := range cps {
			refs := map[string]int{}
			for _, cv := range c.nd.Versions {
				if v, ok := remap[vk{c.ns, store.LGRefKey{Channel: cv.Channel, Version: cv.Version, Variant: c.nd.Variant(cv.Channel)}}]; ok {
					refs[cv.Channel] = v
				} else {
					refs[cv.Channel] = c.nd.Variant(cv.Channel)
				}
			}
			var rowid int64
			if err := w.queryRow(ctx, `INSERT INTO lg_checkpoints(thread_id, namespace, checkpoint_id, parent_id, created_at,
				channel_versions, metadata, type, encoding, size, sha256, data, value_refs)
				SELECT ?, namespace, checkpoint_id, parent_id, created_at, channel_versions, metadata, type, encoding, size, sha256, data, ?
				FROM lg_checkpoints WHERE id = ?
				ON CONFLICT(thread_id, namespace, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
				created_at = excluded.created_at, channel_versions = excluded.channel_versions, metadata = excluded.metadata,
				type = excluded.type, encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256,
				data = excluded.data, value_refs = excluded.value_refs RETURNING id`,
				dst, nullBytes(store.EncodeValueRefs(refs)), c.nd.Key).Scan(&rowid); err != nil {
				return err
			}
			if _, err := w.exec(ctx, `DELETE FROM lg_meta WHERE ckpt = ?`, rowid); err != nil {
				return err
			}
			if _, err := w.exec(ctx, `INSERT INTO lg_meta(key, vhash, checkpoint_id, ckpt) SELECT key, vhash, checkpoint_id, ?
				FROM lg_meta WHERE ckpt = ?`, rowid, c.nd.Key); err != nil {
				return err
			}
			newest = max(newest, c.created)
			n++
		}
		// chunked writes: dst's that the copy replaces are released, every copied one is one
		// more listing of its runs
		if err := w.releaseRows(w.query(ctx, `SELECT d.data FROM lg_writes d JOIN lg_writes s ON s.thread_id = ?1
			AND s.namespace = d.namespace AND s.checkpoint_id = d.checkpoint_id AND s.task_id = d.task_id AND s.idx = d.idx
			WHERE d.thread_id = ?2 AND d.encoding = 4`, src, dst)); err != nil {
			return err
		}
		if _, err := w.exec(ctx, `INSERT INTO lg_writes(thread_id, namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding, size, sha256, data)
			SELECT ?2, namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding, size, sha256, data
			FROM lg_writes WHERE thread_id = ?1 ORDER BY id
			ON CONFLICT(thread_id, namespace, checkpoint_id, task_id, idx) DO UPDATE SET task_path = excluded.task_path,
			channel = excluded.channel, type = excluded.type, encoding = excluded.encoding, size = excluded.size,
			sha256 = excluded.sha256, data = excluded.data`, src, dst); err != nil {
			return err
		}
		rows, err = w.query(ctx, `SELECT data FROM lg_writes WHERE thread_id = ? AND encoding = 4`, src)
		if err != nil {
			return err
		}
		var copied [][]byte
		for rows.Next() {
			var index []byte
			if err := rows.Scan(&index); err != nil {
				rows.Close()
				return err
			}
			copied = append(copied, index)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, index := range copied {
			if err := s.refIndex(ctx, w, index); err != nil {
				return err
			}
		}
		if n > 0 {
			return lgTouchThread(ctx, w, dst, newest)
		}
		return nil
	})
	return n, err
}

// lgTouchThread records that thread holds checkpoints stored up to at (unix micros) without
// changing its retention: a copy or an import.
func lgTouchThread(ctx context.Context, w *wtx, thread string, at int64) error {
	_, err := w.exec(ctx, `INSERT INTO lg_threads(thread_id, updated_at) VALUES (?, ?)
		ON CONFLICT(thread_id) DO UPDATE SET updated_at = max(lg_threads.updated_at, excluded.updated_at),
		expires_at = CASE WHEN lg_threads.expires_at IS NULL THEN NULL
			ELSE lg_threads.expires_at + max(0, excluded.updated_at - lg_threads.updated_at) END`, thread, at)
	return err
}

// ---------------------------------------------------------------------------------------------
// Retention

const lgTouchSQL = `INSERT INTO lg_threads(thread_id, updated_at, retention, expires_at)
	VALUES (?1, ?2, ?3, CASE WHEN ?4 > 0 THEN ?2 + ?4 * 1000000 END)
	ON CONFLICT(thread_id) DO UPDATE SET updated_at = max(lg_threads.updated_at, excluded.updated_at),
	retention = coalesce(excluded.retention, lg_threads.retention),
	expires_at = CASE
		WHEN excluded.retention IS NOT NULL THEN CASE WHEN ?4 > 0 THEN max(lg_threads.updated_at, excluded.updated_at) + ?4 * 1000000 END
		WHEN lg_threads.expires_at IS NULL THEN NULL
		ELSE lg_threads.expires_at + max(0, excluded.updated_at - lg_threads.updated_at) END
	RETURNING retention`

// lgTouch records a put in its thread's row (when, and the retention it carries) and applies the
// thread's retention to the put's (thread, namespace): a small one in this transaction (so that
// whoever reads after the put's acknowledgement sees it applied), a larger one in bites after it.
func (s *Store) lgTouch(ctx context.Context, w *wtx, p *store.LGPrepared) error {
	r := &p.Req
	var js any
	var ttl int64
	if r.Retention != nil {
		b, err := json.Marshal(r.Retention)
		if err != nil {
			return err
		}
		js, ttl = string(b), r.Retention.IdleTTLSeconds
	}
	var own sql.NullString
	if err := w.queryRow(ctx, lgTouchSQL, r.ThreadID, p.Micros, js, ttl).Scan(&own); err != nil {
		return err
	}
	pol, err := s.lgPolicy(wq(ctx, w), own)
	if err != nil || !store.LGPrunes(pol.Retention) {
		return err
	}
	return s.lgRetainAfterPut(ctx, w, r.ThreadID, r.Namespace, []string{r.ParentID}, pol.Retention)
}

// lgPolicy is a thread's effective retention given its own (stored JSON, or NULL).
func (s *Store) lgPolicy(q lgq, own sql.NullString) (store.LGRetentionInfo, error) {
	if own.Valid {
		r, err := store.DecodeRetention([]byte(own.String))
		if err == nil {
			return store.LGRetentionInfo{Retention: r, Source: store.LGRetentionThread}, nil
		}
		s.log.Warn("ckptd store: bad stored thread retention, using the default", "err", err)
	}
	db, err := s.lgDatabaseRetention(q)
	if err != nil {
		return store.LGRetentionInfo{}, err
	}
	if db != nil {
		return store.LGRetentionInfo{Retention: *db, Source: store.LGRetentionDatabase}, nil
	}
	return store.LGRetentionInfo{Retention: s.opts.LGDefaultRetention, Source: store.LGRetentionDaemon}, nil
}

func (s *Store) lgDatabaseRetention(q lgq) (*store.Retention, error) {
	var js string
	err := q.queryRow(`SELECT value FROM lg_config WHERE name = 'retention'`).Scan(&js)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r, err := store.DecodeRetention([]byte(js))
	if err != nil {
		s.log.Warn("ckptd store: bad stored LangGraph retention, using the daemon's", "err", err)
		return nil, nil
	}
	return &r, nil
}

// lgRetainAfterPut applies r to (thread, ns) after puts whose parents are parents: when the
// namespace is small, the first bite here; the rest (or all of a large one) in bites after it.
func (s *Store) lgRetainAfterPut(ctx context.Context, w *wtx, thread, ns string, parents []string, r store.Retention) error {
	q := wq(ctx, w)
	if r.MaxAgeSeconds <= 0 {
		// nothing to do while the namespace holds at most keepLast checkpoints: the index alone says
		var over int
		err := q.queryRow(`SELECT count(*) FROM (SELECT 1 FROM lg_checkpoints INDEXED BY lg_checkpoints_key
			WHERE thread_id = ? AND namespace = ? LIMIT ?)`, thread, ns, r.KeepLast+1).Scan(&over)
		if err != nil || over <= r.KeepLast {
			return err
		}
	}
	nodes, _, err := q.nodes(thread, ns, lgInlineNodes+1)
	if err != nil {
		return err
	}
	if len(nodes) > lgInlineNodes {
		s.lgRetainLater(thread, ns, parents, r)
		return nil
	}
	plan, err := store.PlanLGRetention(thread, ns, nodes, r, s.now(), q.view(thread, ns), parents...)
	if err != nil || len(plan.Drop) == 0 {
		return err
	}
	later := len(plan.Drop) > store.BiteUnits
	drop := plan.Drop[:min(len(plan.Drop), store.BiteUnits)]
	if _, err := lgDeleteNodes(ctx, w, thread, ns, drop); err != nil {
		return err
	}
	kept := plan.Kept
	if later {
		kept = append(kept, plan.Drop[len(drop):]...)
	}
	if err := lgDeleteValues(ctx, w, thread, ns, store.LGReferenced(drop), kept); err != nil {
		return err
	}
	if later {
		s.lgRetainLater(thread, ns, parents, r)
	}
	return nil
}

// lgRetainLater brings (thread, ns) down to r in bites, in the background, once at a time per
// (thread, ns).
func (s *Store) lgRetainLater(thread, ns string, parents []string, r store.Retention) {
	key := thread + "\x00" + ns
	if _, busy := s.retaining.LoadOrStore(key, true); busy {
		return
	}
	s.lgBackground(func(ctx context.Context) {
		defer s.retaining.Delete(key)
		_, err := s.lgPruneNS(ctx, thread, ns, func(nodes []*store.LGNode, v store.LGPruneView) (store.LGPlan, error) {
			return store.PlanLGRetention(thread, ns, nodes, r, s.now(), v, parents...)
		})
		if err != nil && !errors.Is(err, store.ErrClosed) && !errors.Is(err, context.Canceled) {
			s.log.Warn("ckptd store: LangGraph retention failed", "threadId", thread, "namespace", ns, "err", err)
		}
		s.lgVacuum(ctx)
	})
}

// lgBackground runs f on a goroutine the store waits for at Close (f's context ends then).
func (s *Store) lgBackground(f func(ctx context.Context)) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.bgWG.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bgWG.Done()
		ctx, cancel := context.WithCancel(store.Paced(context.Background()))
		defer cancel()
		go func() {
			select {
			case <-s.stopBG:
				cancel()
			case <-ctx.Done():
			}
		}()
		f(ctx)
	}()
}

// LGConfigure sets (r not nil) or removes (inherit) the own retention of thread, or with a nil
// thread the database's retention for threads without their own, and returns the effective
// retention. A thread's new retention applies from its next put (idle expiry: the next sweep).
func (s *Store) LGConfigure(ctx context.Context, thread *string, r *store.Retention, inherit bool) (store.LGRetentionInfo, error) {
	if thread != nil {
		if err := store.CheckLGThread("threadId", *thread); err != nil {
			return store.LGRetentionInfo{}, err
		}
	}
	if r != nil {
		if err := r.Validate(); err != nil {
			return store.LGRetentionInfo{}, err
		}
	}
	if r != nil || inherit {
		err := s.lgWait(ctx, "configure LangGraph retention", func(ctx context.Context, w *wtx) error {
			var js any
			var ttl int64
			if r != nil {
				b, err := json.Marshal(r)
				if err != nil {
					return err
				}
				js, ttl = string(b), r.IdleTTLSeconds
			}
			if thread == nil {
				if r == nil {
					_, err := w.exec(ctx, `DELETE FROM lg_config WHERE name = 'retention'`)
					return err
				}
				_, err := w.exec(ctx, `INSERT INTO lg_config(name, value) VALUES ('retention', ?)
					ON CONFLICT(name) DO UPDATE SET value = excluded.value`, js)
				return err
			}
			if r == nil {
				_, err := w.exec(ctx, `UPDATE lg_threads SET retention = NULL, expires_at = NULL WHERE thread_id = ?`, *thread)
				return err
			}
			_, err := w.exec(ctx, `INSERT INTO lg_threads(thread_id, updated_at, retention, expires_at)
				VALUES (?1, ?2, ?3, CASE WHEN ?4 > 0 THEN ?2 + ?4 * 1000000 END)
				ON CONFLICT(thread_id) DO UPDATE SET retention = excluded.retention,
				expires_at = CASE WHEN ?4 > 0 THEN lg_threads.updated_at + ?4 * 1000000 END`,
				*thread, s.now().UnixMicro(), js, ttl)
			return err
		})
		if err != nil {
			return store.LGRetentionInfo{}, err
		}
	}
	var info store.LGRetentionInfo
	err := s.readTx(ctx, func(tx *rtx) error {
		q := rq(ctx, tx)
		var own sql.NullString
		if thread != nil {
			err := q.queryRow(`SELECT retention FROM lg_threads WHERE thread_id = ?`, *thread).Scan(&own)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		var err error
		info, err = s.lgPolicy(q, own)
		return err
	})
	return info, wrapLG("configure LangGraph retention", err)
}

// LGIdleThreads lists the threads whose last put is older than before, oldest first (at most
// limit, 0: all), with their effective idle TTL and when they expire.
func (s *Store) LGIdleThreads(ctx context.Context, before time.Time, limit int) ([]store.LGIdleThread, error) {
	var out []store.LGIdleThread
	err := s.readTx(ctx, func(tx *rtx) error {
		out = nil
		q := rq(ctx, tx)
		def, err := s.lgPolicy(q, sql.NullString{})
		if err != nil {
			return err
		}
		lim := -1
		if limit > 0 {
			lim = limit
		}
		return scanRows(ctx, tx, `SELECT thread_id, updated_at, retention, expires_at FROM lg_threads INDEXED BY lg_threads_updated
			WHERE updated_at < ? ORDER BY updated_at LIMIT ?`, func(rows *sql.Rows) error {
			var t store.LGIdleThread
			var updated int64
			var own sql.NullString
			var expires sql.NullInt64
			if err := rows.Scan(&t.ThreadID, &updated, &own, &expires); err != nil {
				return err
			}
			t.UpdatedAt = time.UnixMicro(updated).UTC()
			ttl := def.Retention.IdleTTLSeconds
			if own.Valid {
				r, _ := store.DecodeRetention([]byte(own.String))
				ttl = r.IdleTTLSeconds
			}
			if ttl > 0 {
				t.IdleTTLSeconds = ttl
				t.ExpiresAt = t.UpdatedAt.Add(time.Duration(ttl) * time.Second)
			}
			out = append(out, t)
			return nil
		}, before.UnixMicro(), lim)
	})
	return out, wrapLG("list idle threads", err)
}

// LGExpireIdle deletes, in bites, the threads no put has touched for longer than their idle TTL
// (their own retention's, else the database's or the daemon's), and staged values no put took.
func (s *Store) LGExpireIdle(ctx context.Context) (store.LGSweepResult, error) {
	var res store.LGSweepResult
	if err := s.lgCollectStaged(ctx, s.now().Add(-store.LGStagedTTL)); err != nil {
		return res, err
	}
	type cand struct {
		thread  string
		updated int64
	}
	var cands []cand
	now := s.now()
	err := s.readTx(ctx, func(tx *rtx) error {
		cands = nil
		q := rq(ctx, tx)
		def, err := s.lgPolicy(q, sql.NullString{})
		if err != nil {
			return err
		}
		scan := func(rows *sql.Rows) error {
			var c cand
			if err := rows.Scan(&c.thread, &c.updated); err != nil {
				return err
			}
			cands = append(cands, c)
			return nil
		}
		if err := scanRows(ctx, tx, `SELECT thread_id, updated_at FROM lg_threads INDEXED BY lg_threads_expires
			WHERE expires_at IS NOT NULL AND expires_at < ? ORDER BY expires_at`, scan, now.UnixMicro()); err != nil {
			return err
		}
		if ttl := def.Retention.IdleTTLSeconds; ttl > 0 {
			return scanRows(ctx, tx, `SELECT thread_id, updated_at FROM lg_threads INDEXED BY lg_threads_updated
				WHERE updated_at < ? AND retention IS NULL ORDER BY updated_at`, scan,
				now.Add(-time.Duration(ttl)*time.Second).UnixMicro())
		}
		return nil
	})
	if err != nil {
		return res, wrapLG("find idle threads", err)
	}
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		begun := false
		n, deleted, err := s.lgDeleteThread(ctx, c.thread, func(q lgq) (bool, error) {
			// still idle: no put since the sweep looked (a put makes it live again; the deletion
			// itself only lowers the update time, and drops the row with the thread's last row)
			var updated int64
			err := q.queryRow(`SELECT updated_at FROM lg_threads WHERE thread_id = ?`, c.thread).Scan(&updated)
			if errors.Is(err, sql.ErrNoRows) {
				return begun, nil // gone with our deletion so far, or deleted by someone else
			}
			begun = err == nil && updated <= c.updated
			return begun, err
		})
		res.Checkpoints += n
		if err != nil {
			return res, err
		}
		if deleted {
			res.Threads = append(res.Threads, c.thread)
		}
	}
	if len(res.Threads) > 0 {
		s.log.Info("ckptd store: idle LangGraph threads deleted", "threads", len(res.Threads), "checkpoints", res.Checkpoints)
		s.lgVacuum(ctx)
	}
	return res, nil
}

// lgCollectStaged deletes, in bites, staged values stored before before.
func (s *Store) lgCollectStaged(ctx context.Context, before time.Time) error {
	return s.lgBites(ctx, "collect staged values", func(ctx context.Context, w *wtx) (bool, error) {
		k, err := w.lgDeleteRows(ctx, `DELETE FROM lg_staged WHERE id IN (SELECT id FROM lg_staged INDEXED BY lg_staged_created
			WHERE created_at < ? LIMIT ?)`, before.UnixMicro(), store.BiteUnits)
		if err != nil {
			return false, err
		}
		return k < store.BiteUnits, nil
	})
}

// lgDropOwnStaged deletes the staged values this store stored and no put took (at Close).
func (s *Store) lgDropOwnStaged(ctx context.Context) {
	var ids []any
	s.staged.Range(func(k, _ any) bool {
		ids = append(ids, k)
		return true
	})
	if len(ids) == 0 {
		return
	}
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), 500)]
			ids = ids[len(chunk):]
			if err := w.releaseRows(w.conn.QueryContext(ctx, `DELETE FROM lg_staged WHERE id IN (?`+strings.Repeat(`,?`, len(chunk)-1)+`)
				RETURNING CASE WHEN encoding = 4 THEN data END`, chunk...)); err != nil {
				return err
			}
		}
		w.vacuumAfter()
		return nil
	})
	if err != nil {
		s.log.Warn("ckptd store: dropping unused staged values failed (collected later)", "err", fmt.Sprint(err))
	}
}
