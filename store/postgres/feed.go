package postgres

// Saves and prunes cross processes and hosts through LISTEN/NOTIFY: every write transaction
// that saved or pruned checkpoints NOTIFYs them on the schema's channel ("ckptd:" + schema) (delivered at its commit, in
// commit order, never for a rolled-back one); a Store that has subscribers LISTENs on a
// connection of its own and hands them what other Stores committed.

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

const (
	maxPayload     = 7900 // NOTIFY's payload limit is 8000 bytes
	listenBackoff  = 100 * time.Millisecond
	listenMaxDelay = 5 * time.Second
)

type event = store.Event

// payload is what one NOTIFY carries: the sending Store's origin and its events.
type payload struct {
	Origin string      `json:"o"`
	Events []wireEvent `json:"e"`
}

type wireEvent struct {
	Saved  *wireSaved  `json:"s,omitempty"`
	Pruned *wirePruned `json:"p,omitempty"`
}

type wireSaved struct {
	CheckpointID string `json:"c"`
	WorkflowID   string `json:"w"`
	Namespace    string `json:"n,omitempty"`
	Seq          int64  `json:"q"`
	Phase        string `json:"p"`
	Step         int64  `json:"t"`
}

type wirePruned struct {
	WorkflowID    string   `json:"w"`
	CheckpointIDs []string `json:"i"`
	Reason        string   `json:"r"`
}

func toWire(e event) wireEvent {
	if e.Saved != nil {
		sv := e.Saved
		return wireEvent{Saved: &wireSaved{sv.CheckpointID, sv.WorkflowID, sv.Namespace, sv.Seq, string(sv.Phase), sv.Step}}
	}
	return wireEvent{Pruned: &wirePruned{e.Pruned.WorkflowID, e.Pruned.CheckpointIDs, e.Pruned.Reason}}
}

func (w wireEvent) event() (event, bool) {
	switch {
	case w.Saved != nil:
		sv := w.Saved
		return event{Saved: &store.SavedEvent{CheckpointID: sv.CheckpointID, WorkflowID: sv.WorkflowID, Namespace: sv.Namespace,
			Seq: sv.Seq, Phase: store.Phase(sv.Phase), Step: sv.Step}}, true
	case w.Pruned != nil:
		return event{Pruned: &store.PrunedEvent{WorkflowID: w.Pruned.WorkflowID, CheckpointIDs: w.Pruned.CheckpointIDs,
			Reason: w.Pruned.Reason}}, true
	}
	return event{}, false
}

// payloads encodes events into NOTIFY payloads of at most maxPayload bytes each, splitting the
// id lists of large prunes. An event that cannot fit alone (a save with a namespace of kilobytes)
// is left out, with a warning: notifications are best effort.
func (s *Store) payloads(events []event) []string {
	if len(events) == 0 {
		return nil
	}
	var out []string
	cur := payload{Origin: s.origin}
	size := func(p payload) int {
		b, _ := json.Marshal(p)
		return len(b)
	}
	flush := func() {
		if len(cur.Events) > 0 {
			b, _ := json.Marshal(cur)
			out = append(out, string(b))
			cur.Events = nil
		}
	}
	var add func(w wireEvent)
	add = func(w wireEvent) {
		cur.Events = append(cur.Events, w)
		if size(cur) <= maxPayload {
			return
		}
		cur.Events = cur.Events[:len(cur.Events)-1]
		flush()
		cur.Events = []wireEvent{w}
		if size(cur) <= maxPayload {
			return
		}
		cur.Events = nil
		if p := w.Pruned; p != nil && len(p.CheckpointIDs) > 1 {
			half := len(p.CheckpointIDs) / 2
			add(wireEvent{Pruned: &wirePruned{p.WorkflowID, p.CheckpointIDs[:half], p.Reason}})
			add(wireEvent{Pruned: &wirePruned{p.WorkflowID, p.CheckpointIDs[half:], p.Reason}})
			return
		}
		s.log.Warn("ckptd store: an event is too large to announce to other processes", "bytes", size(payload{Origin: s.origin, Events: []wireEvent{w}}))
	}
	for _, e := range events {
		add(toWire(e))
	}
	flush()
	return out
}

// feed is a Store's subscribers and its listening connection.
type feed struct {
	mu      sync.Mutex
	subs    map[int]func(event)
	next    int
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	ready   chan struct{} // closed once the first LISTEN ran (or the listener gave up)
}

// Subscribe calls f for the saves and prunes other processes (on any host) commit to the
// database, from the moment it returns until cancel is called (store.Feed). The first call
// starts listening; it waits (at most the connect timeout) until the listening connection is up.
func (s *Store) Subscribe(f func(store.Event)) (cancel func()) {
	fd := &s.feed
	fd.mu.Lock()
	if fd.subs == nil {
		fd.subs = map[int]func(event){}
	}
	id := fd.next
	fd.next++
	fd.subs[id] = f
	start := !fd.started && !s.isClosed()
	if start {
		fd.started = true
		ctx, c := context.WithCancel(context.Background())
		fd.cancel, fd.done, fd.ready = c, make(chan struct{}), make(chan struct{})
		go s.listen(ctx)
	}
	ready := fd.ready
	fd.mu.Unlock()
	if ready != nil {
		select {
		case <-ready:
		case <-time.After(s.cfg.ConnConfig.ConnectTimeout + time.Second):
			s.log.Warn("ckptd store: not listening for other processes' changes yet", "db", s.location)
		}
	}
	return func() {
		fd.mu.Lock()
		delete(fd.subs, id)
		fd.mu.Unlock()
	}
}

// listen keeps a connection LISTENing on the schema's channel and dispatches what arrives, reconnecting
// (with backoff) when the connection is lost, until ctx ends.
func (s *Store) listen(ctx context.Context) {
	fd := &s.feed
	defer close(fd.done)
	readyOnce := sync.OnceFunc(func() { close(fd.ready) })
	defer readyOnce()
	delay := listenBackoff
	for attempt := 0; ; attempt++ {
		err := s.listenOnce(ctx, readyOnce)
		if ctx.Err() != nil {
			return
		}
		if attempt == 0 || delay >= listenMaxDelay {
			s.log.Warn("ckptd store: listening for other processes' changes failed; retrying", "err", scrub(err, s.cfg.ConnConfig.Password))
		}
		if attempt > 2 {
			readyOnce() // do not keep Subscribe waiting while the database is unreachable
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if delay < listenMaxDelay {
			delay *= 2
		}
	}
}

func (s *Store) listenOnce(ctx context.Context, ready func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.cfg.ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(c)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return err
	}
	ready()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		s.dispatch(n.Payload)
	}
}

// dispatch hands the events of one payload to the subscribers, unless this Store sent it.
func (s *Store) dispatch(raw string) {
	var p payload
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		s.log.Debug("ckptd store: a notification does not decode", "err", err)
		return
	}
	if p.Origin == s.origin {
		return
	}
	fd := &s.feed
	fd.mu.Lock()
	subs := make([]func(event), 0, len(fd.subs))
	for _, f := range fd.subs {
		subs = append(subs, f)
	}
	fd.mu.Unlock()
	for _, w := range p.Events {
		e, ok := w.event()
		if !ok {
			continue
		}
		for _, f := range subs {
			f(e)
		}
	}
}

// stop ends listening (Close).
func (fd *feed) stop() {
	fd.mu.Lock()
	cancel, done := fd.cancel, fd.done
	fd.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
