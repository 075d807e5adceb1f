package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// Loads right after saves (the round trip of a client that saves, then reads back): every
// commit makes the pooled read connections drop their whole page cache (SQLite sees the WAL
// changed), so a read right after a save reads every page it needs again, from the WAL with
// pread(2): for a 1 KB checkpoint about 90 µs of a 140 µs load. The writer's connection keeps
// the pages it wrote. So a load of a checkpoint this store saved recently (by id, or the latest
// of a workflow and namespace it saved recently) runs on the writer's connection when the writer
// is idle (nothing queued, no batch running): hotRead. A batch queued meanwhile waits for that
// read to end (wmu). The same holds for LangGraph's reads right after a put (the Pregel loop
// puts, then reads the thread back with get_tuple and list): lg/get, and lg/list of one thread
// and namespace with a limit of at most lgHotListMax and no metadata filter, of a thread and
// namespace this store put lately (noteLGPut) run there too; longer lists stay on the pool, so
// that no read holds the writer off for long.
//
// What such a read returns is verified like any other (SHA-256 of the state). The pages it finds
// in the connection's memory are not read from the file again: damage done to the file under
// them by something other than SQLite (the checkpoint was written by this store moments ago) is
// found by the pooled connections, by another process, or by this connection once the idle
// store gave its page cache back (memory.go). Other checkpoints are read through the pool, from
// the file.

// maxRecent bounds the checkpoints and the (workflow, namespace) pairs remembered as saved
// recently by this store.
const maxRecent = 1024

// recentSaves remembers what this store saved lately: checkpoint ids and (workflow, namespace)
// pairs, the oldest forgotten first.
type recentSaves struct {
	mu   sync.Mutex
	keys map[string]struct{}
	ring []string
	next int
}

func (r *recentSaves) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = make(map[string]struct{}, maxRecent)
		r.ring = make([]string, maxRecent)
	}
	if _, ok := r.keys[key]; ok {
		return
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.keys, old)
	}
	r.ring[r.next] = key
	r.next = (r.next + 1) % maxRecent
	r.keys[key] = struct{}{}
}

func (r *recentSaves) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.keys[key]
	return ok
}

func recentCheckpoint(id string) string        { return "c\x00" + id }
func recentWorkflow(wf, ns string) string      { return "w\x00" + wf + "\x00" + ns }
func recentThread(thread, ns string) string    { return "t\x00" + thread + "\x00" + ns }
func (s *Store) savedRecently(key string) bool { return s.recent.has(key) }

// noteSaved remembers a committed save (writer goroutine, after the commit).
func (s *Store) noteSaved(sj *saveJob) {
	s.recent.add(recentCheckpoint(sj.res.CheckpointID))
	s.recent.add(recentWorkflow(sj.Req.WorkflowID, sj.Req.Namespace))
}

// noteLGPut remembers a LangGraph checkpoint put of (thread, ns): lg/get and lg/list of that
// thread and namespace read it on the writer's connection while it is idle (the Pregel loop's
// put, then get_tuple and list of the same thread). Called after the put's commit.
func (s *Store) noteLGPut(thread, ns string) { s.recent.add(recentThread(thread, ns)) }

// readTxHot is readTx for a load of one checkpoint: on the writer's connection when recent
// names what this store saved lately and the writer is idle (hotRead), else like readTx.
func (s *Store) readTxHot(ctx context.Context, recent string, f func(tx *rtx) error) error {
	hot := s.savedRecently(recent)
	return s.retry(ctx, func() error {
		var tx *rtx
		var end func()
		var err error
		if hot {
			if tx, end, err = s.hotRead(ctx); err != nil {
				return err
			}
		}
		if tx == nil {
			if tx, end, err = s.openRead(ctx, true); err != nil {
				return err
			}
		}
		defer end()
		return f(tx)
	})
}

// hotRead begins a read transaction on the writer's connection when the writer is idle: nil
// when it is not.
func (s *Store) hotRead(ctx context.Context) (*rtx, func(), error) {
	if s.ws == nil || !s.wmu.TryLock() {
		return nil, nil, nil
	}
	s.mu.Lock()
	idle := len(s.queue) == 0 && !s.closed
	s.mu.Unlock()
	if !idle {
		s.wmu.Unlock()
		return nil, nil, nil
	}
	if err := ctx.Err(); err != nil {
		s.wmu.Unlock()
		return nil, nil, err
	}
	if s.hot == nil {
		rc := &rconn{conn: s.wconn, stmts: map[string]*sql.Stmt{}}
		var err error
		if rc.begin, err = s.wconn.PrepareContext(bg, "BEGIN"); err == nil {
			rc.rollback, err = s.wconn.PrepareContext(bg, "ROLLBACK")
		}
		if err != nil {
			rc.closeStmts()
			s.wmu.Unlock()
			return nil, nil, nil // the pool will do
		}
		s.hot = rc
	}
	rc := s.hot
	s.noteRead()
	if _, err := rc.begin.ExecContext(bg); err != nil {
		s.wmu.Unlock()
		return nil, nil, err
	}
	s.lent.Add(1)
	end := func() {
		if _, err := rc.rollback.ExecContext(bg); err != nil {
			s.log.Warn("ckptd store: ending a read on the writer's connection failed", "err", err)
		}
		s.wmu.Unlock()
	}
	return &rtx{rc: rc}, end, nil
}
