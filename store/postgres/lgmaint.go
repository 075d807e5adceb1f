package postgres

// LangGraph maintenance, as SQLite's (store/sqlite/lgmaint.go): deletion, copy, prune, retention
// and idle expiry of threads, deleting in bites (store.Bite) that each hold the thread's
// advisory lock, so that a prune never collects a value a put of another process is committing.

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// lgInlineNodes bounds the checkpoints of a (thread, namespace) that a put's transaction reads
// to apply its retention; a larger one is brought down in bites after the put.
const lgInlineNodes = 2 * store.BiteUnits

// lgq runs the reads of the maintenance code in a read snapshot or the writer's transaction.
type lgq struct {
	ctx      context.Context
	query    func(q string, args ...any) (pgx.Rows, error)
	queryRow func(q string, args ...any) pgx.Row
}

func wq(ctx context.Context, w *wtx) lgq {
	return lgq{ctx,
		func(q string, args ...any) (pgx.Rows, error) { return w.query(ctx, q, args...) },
		func(q string, args ...any) pgx.Row { return w.queryRow(ctx, q, args...) }}
}

func rq(ctx context.Context, tx pgx.Tx) lgq {
	return lgq{ctx,
		func(q string, args ...any) (pgx.Rows, error) { return tx.Query(ctx, q, args...) },
		func(q string, args ...any) pgx.Row { return tx.QueryRow(ctx, q, args...) }}
}

// wtxQuerier is the writer's transaction as a querier (lgNode).
type wtxQuerier struct{ w *wtx }

func (q wtxQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return q.w.query(ctx, sql, args...)
}

func (q wtxQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return q.w.queryRow(ctx, sql, args...)
}

func (w *wtx) querier(context.Context) querier { return wtxQuerier{w} }

// nodes reads every checkpoint of (thread, ns), newest first, and the highest row id among them.
func (q lgq) nodes(thread, ns string) ([]*store.LGNode, int64, error) {
	rows, err := q.query(`SELECT id, checkpoint_id, parent_id, channel_versions, value_refs, created_at FROM lg_checkpoints
		WHERE thread_id = $1 AND namespace = $2 ORDER BY checkpoint_id DESC`, thread, ns)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []*store.LGNode
	var maxID int64
	for rows.Next() {
		var rowid int64
		var id, versions string
		var parent, refs *string
		var created time.Time
		if err := rows.Scan(&rowid, &id, &parent, &versions, &refs, &created); err != nil {
			return nil, 0, err
		}
		n, err := store.NewLGNode(rowid, id, deref(parent), []byte(versions), refBytes(refs))
		if err != nil {
			return nil, 0, err
		}
		n.Created = created.UTC()
		out = append(out, n)
		maxID = max(maxID, rowid)
	}
	return out, maxID, rows.Err()
}

// generation is the highest checkpoint row id of (thread, ns): a put since a plan changes it.
func (q lgq) generation(thread, ns string) (int64, error) {
	var g *int64
	err := q.queryRow(`SELECT max(id) FROM lg_checkpoints WHERE thread_id = $1 AND namespace = $2`, thread, ns).Scan(&g)
	if g == nil {
		return 0, err
	}
	return *g, err
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
		rows, err := v.q.query(`SELECT channel, version, variant, type FROM lg_blobs WHERE thread_id = $1 AND namespace = $2`, v.thread, v.ns)
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
		rows, err := v.q.query(`SELECT DISTINCT checkpoint_id, channel FROM lg_writes WHERE thread_id = $1 AND namespace = $2 AND idx >= 0`, v.thread, v.ns)
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
// pending writes; it returns how many were still there.
func lgDeleteNodes(ctx context.Context, w *wtx, thread, ns string, nodes []*store.LGNode) (int, error) {
	if len(nodes) == 0 {
		return 0, nil
	}
	keys := make([]int64, len(nodes))
	for i, n := range nodes {
		keys[i] = n.Key
	}
	rows, err := w.query(ctx, `DELETE FROM lg_checkpoints WHERE id = ANY($1) RETURNING checkpoint_id`, keys)
	if err != nil {
		return 0, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	w.queue(`DELETE FROM lg_meta WHERE ckpt = ANY($1)`, keys)
	_, err = w.lgDeleteRows(ctx, `DELETE FROM lg_writes WHERE thread_id = $1 AND namespace = $2 AND checkpoint_id = ANY($3)`, thread, ns, ids)
	return len(ids), err
}

// lgDeleteValues removes the values of (thread, ns) keys names that none of kept refers to.
func lgDeleteValues(ctx context.Context, w *wtx, thread, ns string, keys map[store.LGRefKey]bool, kept []*store.LGNode) error {
	ref := store.LGReferenced(kept)
	var chs, vers []string
	var vars []int32
	for k := range keys {
		if !ref[k] {
			chs, vers, vars = append(chs, k.Channel), append(vers, k.Version), append(vars, int32(k.Variant))
		}
	}
	if len(chs) == 0 {
		return nil
	}
	_, err := w.lgDeleteRows(ctx, `DELETE FROM lg_blobs b USING unnest($3::text[], $4::text[], $5::int[]) AS k(c, v, r)
		WHERE b.thread_id = $1 AND b.namespace = $2 AND b.channel = k.c AND b.version = k.v AND b.variant = k.r`,
		thread, ns, chs, vers, vars)
	return err
}

// lgBites runs step in bounded write transactions holding thread's lock until it reports done.
func (s *Store) lgBites(ctx context.Context, op, thread string, step func(ctx context.Context, w *wtx) (done bool, err error)) error {
	for {
		done := false
		var took time.Duration
		err := s.lgDo(ctx, op, threadKeys(thread), func(ctx context.Context, w *wtx) error {
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

// lgPruneNS deletes what plan decides of (thread, ns), in bites; a bite that finds a checkpoint
// stored since the plan makes a new plan. Then the values and writes nothing refers to go. It
// returns the checkpoints deleted.
func (s *Store) lgPruneNS(ctx context.Context, thread, ns string, plan func(nodes []*store.LGNode, v store.LGPruneView) (store.LGPlan, error)) (int, error) {
	deleted := 0
	for {
		var p store.LGPlan
		var gen int64
		err := s.readTx(ctx, func(tx pgx.Tx) error {
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
			return deleted, lgErr("plan a prune", err)
		}
		stale := false
		err = s.lgBites(ctx, "prune thread "+thread, thread, func(ctx context.Context, w *wtx) (bool, error) {
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

// lgCollect deletes, in bites, the values of (thread, ns) no checkpoint refers to and the writes
// of checkpoints that do not exist.
func (s *Store) lgCollect(ctx context.Context, thread, ns string) error {
	for {
		var values, writes []int64
		var gen int64
		err := s.readTx(ctx, func(tx pgx.Tx) error {
			q := rq(ctx, tx)
			nodes, g, err := q.nodes(thread, ns)
			if err != nil {
				return err
			}
			gen = g
			ref := store.LGReferenced(nodes)
			rows, err := q.query(`SELECT id, channel, version, variant FROM lg_blobs WHERE thread_id = $1 AND namespace = $2`, thread, ns)
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
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			ids := map[string]bool{}
			for _, n := range nodes {
				ids[n.ID] = true
			}
			rows, err = q.query(`SELECT id, checkpoint_id FROM lg_writes WHERE thread_id = $1 AND namespace = $2`, thread, ns)
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
			return lgErr("plan a collection", err)
		}
		if len(values) == 0 && len(writes) == 0 {
			return nil
		}
		stale := false
		err = s.lgBites(ctx, "collect thread "+thread, thread, func(ctx context.Context, w *wtx) (bool, error) {
			g, err := wq(ctx, w).generation(thread, ns)
			if err != nil {
				return false, err
			}
			if g != gen {
				stale = true
				return true, nil
			}
			if len(values) > 0 {
				chunk := values[:min(len(values), store.BiteUnits)]
				values = values[len(chunk):]
				_, err := w.lgDeleteRows(ctx, `DELETE FROM lg_blobs WHERE id = ANY($1)`, chunk)
				return len(values)+len(writes) == 0, err
			}
			chunk := writes[:min(len(writes), store.BiteUnits)]
			writes = writes[len(chunk):]
			_, err = w.lgDeleteRows(ctx, `DELETE FROM lg_writes w WHERE w.id = ANY($1) AND NOT EXISTS (SELECT 1 FROM lg_checkpoints c
				WHERE c.thread_id = w.thread_id AND c.namespace = w.namespace AND c.checkpoint_id = w.checkpoint_id)`, chunk)
			return len(writes) == 0, err
		})
		if err != nil || !stale {
			return err
		}
	}
}

func lgNamespaces(q lgq, thread string) ([]string, error) {
	return q.strings(`SELECT namespace FROM lg_checkpoints WHERE thread_id = $1
		UNION SELECT namespace FROM lg_blobs WHERE thread_id = $1
		UNION SELECT namespace FROM lg_writes WHERE thread_id = $1`, thread)
}

// lgDeleteThread deletes every row of thread in bites: checkpoints oldest first (with their
// metadata rows and writes), then the remaining writes, values and staged values, then the
// thread's row. still, if not nil, is asked before each bite whether to go on. It returns the
// checkpoints deleted and whether the thread is gone.
func (s *Store) lgDeleteThread(ctx context.Context, thread string, still func(q lgq) (bool, error)) (int, bool, error) {
	n := 0
	stage := 0
	gone := false
	err := s.lgBites(ctx, "delete thread "+thread, thread, func(ctx context.Context, w *wtx) (bool, error) {
		if still != nil {
			ok, err := still(wq(ctx, w))
			if err != nil || !ok {
				return true, err
			}
		}
		switch stage {
		case 0:
			rows, err := w.query(ctx, `SELECT id, namespace, checkpoint_id FROM lg_checkpoints WHERE thread_id = $1
				ORDER BY checkpoint_id LIMIT $2`, thread, store.BiteUnits)
			if err != nil {
				return false, err
			}
			byNS := map[string][]*store.LGNode{}
			var order []string
			count := 0
			for rows.Next() {
				nd := &store.LGNode{}
				var ns string
				if err := rows.Scan(&nd.Key, &ns, &nd.ID); err != nil {
					rows.Close()
					return false, err
				}
				if _, ok := byNS[ns]; !ok {
					order = append(order, ns)
				}
				byNS[ns] = append(byNS[ns], nd)
				count++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return false, err
			}
			for _, ns := range order {
				k, err := lgDeleteNodes(ctx, w, thread, ns, byNS[ns])
				if err != nil {
					return false, err
				}
				n += k
			}
			if count < store.BiteUnits {
				stage++
			}
			return false, nil
		case 1, 2, 3:
			table := []string{"lg_writes", "lg_blobs", "lg_staged"}[stage-1]
			q := `DELETE FROM ` + table + ` WHERE id IN (SELECT id FROM ` + table + ` WHERE thread_id = $1 LIMIT $2)`
			k, err := w.lgDeleteRows(ctx, q, thread, store.BiteUnits) // every table's chunked values released
			if err != nil {
				return false, err
			}
			if k < store.BiteUnits {
				stage++
			}
			return false, nil
		}
		_, err := w.exec(ctx, `DELETE FROM lg_threads WHERE thread_id = $1`, thread)
		gone = err == nil
		return true, err
	})
	return n, gone, err
}

func (s *Store) lgDo(ctx context.Context, op string, locks []int64, fn func(ctx context.Context, w *wtx) error) error {
	return lgErr(op, s.do(ctx, locks, fn))
}

func threadKeys(threads ...string) []int64 {
	keys := make([]int64, len(threads))
	for i, t := range threads {
		keys[i] = threadKey(t)
	}
	slices.Sort(keys)
	return keys
}

// LGDeleteThread deletes every LangGraph checkpoint, write and blob of thread, in bites; it
// returns the number of checkpoints deleted.
func (s *Store) LGDeleteThread(ctx context.Context, thread string) (int, error) {
	if err := store.CheckLGThread("threadId", thread); err != nil {
		return 0, err
	}
	n, _, err := s.lgDeleteThread(ctx, thread, nil)
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
		if err := s.readTx(ctx, func(tx pgx.Tx) error {
			var err error
			nss, err = lgNamespaces(rq(ctx, tx), thread)
			return err
		}); err != nil {
			return n, lgErr("prune threads", err)
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
	err = s.lgDo(ctx, "delete for runs", nil, func(ctx context.Context, w *wtx) error {
		n = 0
		threads, err := workflowIDs(ctx, w, `SELECT DISTINCT c.thread_id FROM lg_meta m JOIN lg_checkpoints c ON c.id = m.ckpt
			WHERE m.key = 'run_id' AND m.vhash = ANY($1)`, hashes)
		if err != nil || len(threads) == 0 {
			return err
		}
		if err := w.lock(ctx, threadKeys(threads...)); err != nil {
			return err
		}
		type pair struct{ thread, ns string }
		affected := map[pair][]*store.LGNode{}
		var order []pair
		rows, err := w.query(ctx, `SELECT c.id, c.thread_id, c.namespace, c.checkpoint_id, c.channel_versions, c.value_refs FROM lg_meta m
			JOIN lg_checkpoints c ON c.id = m.ckpt WHERE m.key = 'run_id' AND m.vhash = ANY($1) AND c.thread_id = ANY($2)
			ORDER BY m.vhash, c.id`, hashes, threads)
		if err != nil {
			return err
		}
		for rows.Next() {
			var key int64
			var p pair
			var id, versions string
			var refs *string
			if err := rows.Scan(&key, &p.thread, &p.ns, &id, &versions, &refs); err != nil {
				rows.Close()
				return err
			}
			nd, err := store.NewLGNode(key, id, "", []byte(versions), refBytes(refs))
			if err != nil {
				rows.Close()
				return err
			}
			if _, ok := affected[p]; !ok {
				order = append(order, p)
			}
			affected[p] = append(affected[p], nd)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
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
	if err := noNUL("targetThreadId", dst); err != nil {
		return 0, err
	}
	n := 0
	err := s.lgDo(ctx, "copy thread "+src, threadKeys(src, dst), func(ctx context.Context, w *wtx) error {
		n = 0
		type vk struct {
			ns string
			k  store.LGRefKey
		}
		remap := map[vk]int{}
		rows, err := w.query(ctx, `SELECT namespace, channel, version, variant, type, size, sha256, id FROM lg_blobs
			WHERE thread_id = $1 ORDER BY id`, src)
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
			var size int64
			if err := rows.Scan(&b.ns, &b.ch, &b.ver, &b.variant, &b.typ, &size, &b.p.SHA, &b.id); err != nil {
				rows.Close()
				return err
			}
			b.p.Size = int(size)
			blobs = append(blobs, b)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, b := range blobs {
			rs, err := w.query(ctx, `SELECT variant, type, size, sha256 FROM lg_blobs WHERE thread_id = $1 AND namespace = $2
				AND channel = $3 AND version = $4`, dst, b.ns, b.ch, b.ver)
			if err != nil {
				return err
			}
			var stored []store.LGStoredValue
			for rs.Next() {
				var v store.LGStoredValue
				if err := rs.Scan(&v.Variant, &v.Type, &v.Size, &v.SHA); err != nil {
					rs.Close()
					return err
				}
				stored = append(stored, v)
			}
			rs.Close()
			if err := rs.Err(); err != nil {
				return err
			}
			match, next := store.LGMatchVariant(stored, b.typ, b.p)
			if match < 0 {
				if len(stored) == 0 {
					next = b.variant
				}
				var index []byte
				if err := w.queryRow(ctx, `INSERT INTO lg_blobs (thread_id, namespace, channel, version, variant, type, encoding, size, sha256, data)
					SELECT $1, namespace, channel, version, $2, type, encoding, size, sha256, data FROM lg_blobs WHERE id = $3
					RETURNING CASE WHEN encoding = 4 THEN data END`, dst, next, b.id).Scan(&index); err != nil {
					return err
				}
				if index != nil { // a chunked value: one more listing of its runs
					if err := refIndex(ctx, w, index); err != nil {
						return err
					}
				}
				match = next
			}
			remap[vk{b.ns, store.LGRefKey{Channel: b.ch, Version: b.ver, Variant: b.variant}}] = match
		}
		rows, err = w.query(ctx, `SELECT id, namespace, checkpoint_id, channel_versions, value_refs, created_at FROM lg_checkpoints
			WHERE thread_id = $1 ORDER BY id`, src)
		if err != nil {
			return err
		}
		type cpRow struct {
			ns      string
			nd      *store.LGNode
			created time.Time
		}
		var cps []cpRow
		for rows.Next() {
			var c cpRow
			var key int64
			var id, versions string
			var refs *string
			if err := rows.Scan(&key, &c.ns, &id, &versions, &refs, &c.created); err != nil {
				rows.Close()
				return err
			}
			if c.nd, err = store.NewLGNode(key, id, "", []byte(versions), refBytes(refs)); err != nil {
				rows.Close()
				return err
			}
			cps = append(cps, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var newest time.Time
		for _, c := range cps {
			refs := map[string]int{}
			for _, cv := range c.nd.Versions {
				v := c.nd.Variant(cv.Channel)
				if m, ok := remap[vk{c.ns, store.LGRefKey{Channel: cv.Channel, Version: cv.Version, Variant: v}}]; ok {
					v = m
				}
				refs[cv.Channel] = v
			}
			var rowid int64
			if err := w.queryRow(ctx, `INSERT INTO lg_checkpoints (thread_id, namespace, checkpoint_id, parent_id, created_at,
				channel_versions, metadata, type, encoding, size, sha256, data, value_refs)
				SELECT $1, namespace, checkpoint_id, parent_id, created_at, channel_versions, metadata, type, encoding, size, sha256, data, $2
				FROM lg_checkpoints WHERE id = $3
				ON CONFLICT (thread_id, namespace, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
				created_at = excluded.created_at, channel_versions = excluded.channel_versions, metadata = excluded.metadata,
				type = excluded.type, encoding = excluded.encoding, size = excluded.size, sha256 = excluded.sha256,
				data = excluded.data, value_refs = excluded.value_refs RETURNING id`,
				dst, nullText(store.EncodeValueRefs(refs)), c.nd.Key).Scan(&rowid); err != nil {
				return err
			}
			w.queue(`DELETE FROM lg_meta WHERE ckpt = $1`, rowid)
			w.queue(`INSERT INTO lg_meta (key, vhash, checkpoint_id, ckpt) SELECT key, vhash, checkpoint_id, $1
				FROM lg_meta WHERE ckpt = $2`, rowid, c.nd.Key)
			if c.created.After(newest) {
				newest = c.created
			}
			n++
		}
		// chunked writes: every copied one is one more listing of its runs, then dst's that the
		// copy replaced are released
		var replaced [][]byte
		rows, err = w.query(ctx, `SELECT d.data FROM lg_writes d JOIN lg_writes s ON s.thread_id = $1
			AND s.namespace = d.namespace AND s.checkpoint_id = d.checkpoint_id AND s.task_id = d.task_id AND s.idx = d.idx
			WHERE d.thread_id = $2 AND d.encoding = 4`, src, dst)
		if err != nil {
			return err
		}
		if err := eachRow(rows, func(rows pgx.Rows) error {
			var idx []byte
			if err := rows.Scan(&idx); err != nil {
				return err
			}
			replaced = append(replaced, idx)
			return nil
		}); err != nil {
			return err
		}
		if _, err := w.exec(ctx, `INSERT INTO lg_writes (thread_id, namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding, size, sha256, data)
			SELECT $2, namespace, checkpoint_id, task_id, idx, task_path, channel, type, encoding, size, sha256, data
			FROM lg_writes WHERE thread_id = $1 ORDER BY id
			ON CONFLICT (thread_id, namespace, checkpoint_id, task_id, idx) DO UPDATE SET task_path = excluded.task_path,
			channel = excluded.channel, type = excluded.type, encoding = excluded.encoding, size = excluded.size,
			sha256 = excluded.sha256, data = excluded.data`, src, dst); err != nil {
			return err
		}
		if err := w.refSelected(ctx, `SELECT data FROM lg_writes WHERE thread_id = $1 AND encoding = 4`, src); err != nil {
			return err
		}
		if len(replaced) > 0 {
			if _, err := s.releaseIndexes(ctx, w, replaced); err != nil {
				return err
			}
		}
		if n > 0 {
			_, err := w.exec(ctx, lgTouchThreadSQL, dst, newest)
			return err
		}
		return nil
	})
	return n, err
}

// lgTouchThreadSQL records that thread $1 holds checkpoints stored up to $2 without changing its
// retention: a copy or an import.
const lgTouchThreadSQL = `INSERT INTO lg_threads (thread_id, updated_at) VALUES ($1, $2)
	ON CONFLICT (thread_id) DO UPDATE SET updated_at = GREATEST(lg_threads.updated_at, excluded.updated_at),
	expires_at = lg_threads.expires_at + GREATEST(interval '0', excluded.updated_at - lg_threads.updated_at)`

// ---------------------------------------------------------------------------------------------
// Retention

// queueLGTouch queues the statement recording a put in its thread's row (when, and the
// retention it carries), reading back the thread's own retention into own.
func queueLGTouch(b *pgx.Batch, p *store.LGPrepared, own **string) {
	r := &p.Req
	var js *string
	var ttl int64
	if r.Retention != nil {
		bs, _ := json.Marshal(r.Retention)
		str := string(bs)
		js, ttl = &str, r.Retention.IdleTTLSeconds
	}
	b.Queue(`INSERT INTO lg_threads (thread_id, updated_at, retention, expires_at)
		VALUES ($1, $2::timestamptz, $3, CASE WHEN $4::bigint > 0 THEN $2::timestamptz + make_interval(secs => $4::bigint) END)
		ON CONFLICT (thread_id) DO UPDATE SET updated_at = GREATEST(lg_threads.updated_at, excluded.updated_at),
		retention = coalesce(excluded.retention, lg_threads.retention),
		expires_at = CASE
			WHEN excluded.retention IS NOT NULL THEN CASE WHEN $4::bigint > 0
				THEN GREATEST(lg_threads.updated_at, excluded.updated_at) + make_interval(secs => $4::bigint) END
			ELSE lg_threads.expires_at + GREATEST(interval '0', excluded.updated_at - lg_threads.updated_at) END
		RETURNING retention`, r.ThreadID, time.UnixMicro(p.Micros).UTC(), js, ttl).
		QueryRow(func(row pgx.Row) error { return row.Scan(own) })
}

// lgRetainAfterTouch applies the put's thread's retention (own: its own, stored) to the put's
// (thread, namespace).
func (s *Store) lgRetainAfterTouch(ctx context.Context, w *wtx, p *store.LGPrepared, own *string) error {
	pol, err := s.lgPolicy(wq(ctx, w), own)
	if err != nil || !store.LGPrunes(pol.Retention) {
		return err
	}
	r := &p.Req
	return s.lgRetainAfterPut(ctx, w, r.ThreadID, r.Namespace, r.ParentID, pol.Retention)
}

// lgPolicy is a thread's effective retention given its own (stored JSON, or nil).
func (s *Store) lgPolicy(q lgq, own *string) (store.LGRetentionInfo, error) {
	if own != nil {
		r, err := store.DecodeRetention([]byte(*own))
		if err == nil {
			return store.LGRetentionInfo{Retention: r, Source: store.LGRetentionThread}, nil
		}
		s.log.Warn("ckptd store: bad stored thread retention, using the default", "err", err)
	}
	var js string
	err := q.queryRow(`SELECT value FROM lg_config WHERE name = 'retention'`).Scan(&js)
	switch {
	case noRows(err):
	case err != nil:
		return store.LGRetentionInfo{}, err
	default:
		r, err := store.DecodeRetention([]byte(js))
		if err == nil {
			return store.LGRetentionInfo{Retention: r, Source: store.LGRetentionDatabase}, nil
		}
		s.log.Warn("ckptd store: bad stored LangGraph retention, using the daemon's", "err", err)
	}
	return store.LGRetentionInfo{Retention: s.opts.LGDefaultRetention, Source: store.LGRetentionDaemon}, nil
}

// lgRetainAfterPut applies r to (thread, ns) after a put whose parent is parentID: when the
// namespace is small, the first bite here, in the put's transaction; the rest (or all of a large
// one) in bites after it.
func (s *Store) lgRetainAfterPut(ctx context.Context, w *wtx, thread, ns, parentID string, r store.Retention) error {
	q := wq(ctx, w)
	var count int
	// counting stops past what decides (at most keepLast: nothing to do; beyond lgInlineNodes: later)
	if err := q.queryRow(`SELECT count(*) FROM (SELECT 1 FROM lg_checkpoints WHERE thread_id = $1 AND namespace = $2 LIMIT $3) AS c`,
		thread, ns, max(r.KeepLast, lgInlineNodes)+1).Scan(&count); err != nil {
		return err
	}
	if r.MaxAgeSeconds <= 0 && count <= r.KeepLast {
		return nil
	}
	if count > lgInlineNodes {
		s.lgRetainLater(thread, ns, parentID, r)
		return nil
	}
	nodes, _, err := q.nodes(thread, ns)
	if err != nil {
		return err
	}
	plan, err := store.PlanLGRetention(thread, ns, nodes, r, s.now(), q.view(thread, ns), parentID)
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
		s.lgRetainLater(thread, ns, parentID, r)
	}
	return nil
}

// lgRetainLater brings (thread, ns) down to r in bites, in the background, once at a time per
// (thread, ns).
func (s *Store) lgRetainLater(thread, ns, parentID string, r store.Retention) {
	key := thread + "\x00" + ns
	if _, busy := s.retaining.LoadOrStore(key, true); busy {
		return
	}
	s.lgBackground(func(ctx context.Context) {
		defer s.retaining.Delete(key)
		_, err := s.lgPruneNS(ctx, thread, ns, func(nodes []*store.LGNode, v store.LGPruneView) (store.LGPlan, error) {
			return store.PlanLGRetention(thread, ns, nodes, r, s.now(), v, parentID)
		})
		if err != nil && !errors.Is(err, store.ErrClosed) && !errors.Is(err, context.Canceled) {
			s.log.Warn("ckptd store: LangGraph retention failed", "threadId", thread, "namespace", ns, "err", err)
		}
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
		if err := noNUL("threadId", *thread); err != nil {
			return store.LGRetentionInfo{}, err
		}
	}
	if r != nil {
		if err := r.Validate(); err != nil {
			return store.LGRetentionInfo{}, err
		}
	}
	if r != nil || inherit {
		var locks []int64
		if thread != nil {
			locks = threadKeys(*thread)
		}
		err := s.lgDo(ctx, "configure LangGraph retention", locks, func(ctx context.Context, w *wtx) error {
			var js *string
			var ttl int64
			if r != nil {
				b, err := json.Marshal(r)
				if err != nil {
					return err
				}
				str := string(b)
				js, ttl = &str, r.IdleTTLSeconds
			}
			var err error
			switch {
			case thread == nil && r == nil:
				_, err = w.exec(ctx, `DELETE FROM lg_config WHERE name = 'retention'`)
			case thread == nil:
				_, err = w.exec(ctx, `INSERT INTO lg_config (name, value) VALUES ('retention', $1)
					ON CONFLICT (name) DO UPDATE SET value = excluded.value`, *js)
			case r == nil:
				_, err = w.exec(ctx, `UPDATE lg_threads SET retention = NULL, expires_at = NULL WHERE thread_id = $1`, *thread)
			default:
				_, err = w.exec(ctx, `INSERT INTO lg_threads (thread_id, updated_at, retention, expires_at)
					VALUES ($1, $2::timestamptz, $3, CASE WHEN $4::bigint > 0 THEN $2::timestamptz + make_interval(secs => $4::bigint) END)
					ON CONFLICT (thread_id) DO UPDATE SET retention = excluded.retention,
					expires_at = CASE WHEN $4::bigint > 0 THEN lg_threads.updated_at + make_interval(secs => $4::bigint) END`,
					*thread, s.now().UTC(), *js, ttl)
			}
			return err
		})
		if err != nil {
			return store.LGRetentionInfo{}, err
		}
	}
	var info store.LGRetentionInfo
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		q := rq(ctx, tx)
		var own *string
		if thread != nil {
			if err := q.queryRow(`SELECT retention FROM lg_threads WHERE thread_id = $1`, *thread).Scan(&own); err != nil && !noRows(err) {
				return err
			}
		}
		var err error
		info, err = s.lgPolicy(q, own)
		return err
	})
	return info, lgErr("configure LangGraph retention", err)
}

// LGIdleThreads lists the threads whose last put is older than before, oldest first (at most
// limit, 0: all), with their effective idle TTL and when they expire.
func (s *Store) LGIdleThreads(ctx context.Context, before time.Time, limit int) ([]store.LGIdleThread, error) {
	var out []store.LGIdleThread
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		out = nil
		q := rq(ctx, tx)
		def, err := s.lgPolicy(q, nil)
		if err != nil {
			return err
		}
		var lim any
		if limit > 0 {
			lim = limit
		}
		rows, err := tx.Query(ctx, `SELECT thread_id, updated_at, retention FROM lg_threads WHERE updated_at < $1
			ORDER BY updated_at, thread_id LIMIT $2`, before.UTC(), lim)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t store.LGIdleThread
			var own *string
			if err := rows.Scan(&t.ThreadID, &t.UpdatedAt, &own); err != nil {
				return err
			}
			t.UpdatedAt = t.UpdatedAt.UTC()
			ttl := def.Retention.IdleTTLSeconds
			if own != nil {
				r, _ := store.DecodeRetention([]byte(*own))
				ttl = r.IdleTTLSeconds
			}
			if ttl > 0 {
				t.IdleTTLSeconds = ttl
				t.ExpiresAt = t.UpdatedAt.Add(time.Duration(ttl) * time.Second)
			}
			out = append(out, t)
		}
		return rows.Err()
	})
	return out, lgErr("list idle threads", err)
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
		updated time.Time
	}
	var cands []cand
	now := s.now().UTC()
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		cands = nil
		q := rq(ctx, tx)
		def, err := s.lgPolicy(q, nil)
		if err != nil {
			return err
		}
		scan := func(qs string, args ...any) error {
			rows, err := tx.Query(ctx, qs, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var c cand
				if err := rows.Scan(&c.thread, &c.updated); err != nil {
					return err
				}
				cands = append(cands, c)
			}
			return rows.Err()
		}
		if err := scan(`SELECT thread_id, updated_at FROM lg_threads WHERE expires_at IS NOT NULL AND expires_at < $1 ORDER BY expires_at`, now); err != nil {
			return err
		}
		if ttl := def.Retention.IdleTTLSeconds; ttl > 0 {
			return scan(`SELECT thread_id, updated_at FROM lg_threads WHERE updated_at < $1 AND retention IS NULL ORDER BY updated_at`,
				now.Add(-time.Duration(ttl)*time.Second))
		}
		return nil
	})
	if err != nil {
		return res, lgErr("find idle threads", err)
	}
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		begun := false
		n, deleted, err := s.lgDeleteThread(ctx, c.thread, func(q lgq) (bool, error) {
			// still idle: no put since the sweep looked (a put makes it live again; the deletion
			// itself only lowers the update time, and drops the row with the thread's last row)
			var updated time.Time
			err := q.queryRow(`SELECT updated_at FROM lg_threads WHERE thread_id = $1`, c.thread).Scan(&updated)
			if noRows(err) {
				return begun, nil // gone with our deletion so far, or deleted by someone else
			}
			begun = err == nil && !updated.After(c.updated)
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
	}
	return res, nil
}

// lgCollectStaged deletes, in bites, staged values stored before before.
func (s *Store) lgCollectStaged(ctx context.Context, before time.Time) error {
	for {
		var k int64
		err := s.lgDo(ctx, "collect staged values", nil, func(ctx context.Context, w *wtx) error {
			var err error
			k, err = w.lgDeleteRows(ctx, `DELETE FROM lg_staged WHERE id IN (SELECT id FROM lg_staged WHERE created_at < $1
				ORDER BY created_at LIMIT $2)`, before.UTC(), store.BiteUnits)
			return err
		})
		if err != nil || k < store.BiteUnits {
			return err
		}
	}
}

// lgDropOwnStaged deletes the staged values this store stored and no put took (at Close).
func (s *Store) lgDropOwnStaged(ctx context.Context) {
	var ids []int64
	s.staged.Range(func(k, _ any) bool {
		ids = append(ids, k.(int64))
		return true
	})
	if len(ids) == 0 {
		return
	}
	if err := s.lgDo(ctx, "drop staged values", nil, func(ctx context.Context, w *wtx) error {
		_, err := w.lgDeleteRows(ctx, `DELETE FROM lg_staged WHERE id = ANY($1)`, ids)
		return err
	}); err != nil {
		s.log.Warn("ckptd store: dropping unused staged values failed (collected later)", "err", err)
	}
}
