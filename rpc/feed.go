package rpc

import (
	"sync"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// Saves and prunes other ckptd processes commit to a shared database (store.Feed: PostgreSQL)
// reach this connection's client as checkpoint/saved and checkpoint/pruned, like its own, once
// it opted in to either. They are queued here: the backend's listener must never wait for a
// slow client; past feedQueue waiting events the newest are dropped (with a warning).

const feedQueue = 4096

type feedState struct {
	once sync.Once
	ch   chan store.Event
}

// subscribeFeed starts forwarding other processes' events, once, if the backend has a Feed.
func (s *Server) subscribeFeed() {
	f, ok := s.store.(store.Feed)
	if !ok {
		return
	}
	s.feed.once.Do(func() {
		s.feed.ch = make(chan store.Event, feedQueue)
		go func() {
			for e := range s.feed.ch {
				switch {
				case e.Saved != nil:
					sv := e.Saved
					s.notify(protocol.NotifySaved, protocol.SavedEvent{CheckpointID: sv.CheckpointID, WorkflowID: sv.WorkflowID,
						Namespace: sv.Namespace, Seq: sv.Seq, Phase: string(sv.Phase), Step: sv.Step})
				case e.Pruned != nil:
					s.notify(protocol.NotifyPruned, protocol.PrunedEvent{WorkflowID: e.Pruned.WorkflowID,
						CheckpointIDs: e.Pruned.CheckpointIDs, Reason: e.Pruned.Reason})
				}
			}
		}()
		f.Subscribe(func(e store.Event) {
			select {
			case s.feed.ch <- e:
			default:
				s.log.Warn("notifications of other processes' changes dropped: the client reads too slowly")
			}
		})
	})
}
