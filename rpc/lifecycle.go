package rpc

import (
	"context"
	"fmt"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// knownEvents are the notifications a client may opt in to with initialize.
var knownEvents = []string{protocol.NotifySaved, protocol.NotifyPruned, protocol.NotifyCorrupted}

func (s *Server) initialize(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.InitializeParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	want := map[string]bool{}
	for i, ev := range p.Events {
		ok := ev == protocol.NotifyDriftChanged // always sent for drift/watch: accepted, nothing to opt in to
		for _, k := range knownEvents {
			ok = ok || k == ev
		}
		if !ok {
			return reply{}, invalidParams(sprintfField("events[%d]", i), "unknown event "+quote(ev)+"; known: checkpoint/saved, checkpoint/pruned, checkpoint/corrupted")
		}
		want[ev] = true
	}
	s.mu.Lock()
	s.events = want
	s.mu.Unlock()
	if want[protocol.NotifySaved] || want[protocol.NotifyPruned] {
		s.subscribeFeed() // a database shared with other processes: their saves and prunes too
	}
	if p.ClientName != "" {
		s.log.Info("client connected", "client", p.ClientName)
	}
	return reply{result: protocol.InitializeResult{
		ServerName:      "ckptd",
		ServerVersion:   s.opts.Version,
		ProtocolVersion: protocol.ProtocolVersion,
		DBPath:          s.store.About().Location,
		Capabilities: protocol.Capabilities{
			Attachments:   true,
			StateTypes:    []string{"json", "bytes"},
			MaxStateBytes: s.opts.MaxStateBytes,
			Durability:    s.opts.Durability,
			Events:        knownEvents,
			Drift:         true,
			LangGraph: protocol.LGCapabilities{
				PutValue:         true,
				Retention:        true,
				MetadataMatch:    []string{protocol.LGMatchJSON, protocol.LGMatchPython, protocol.LGMatchJS},
				MaxThreadIDBytes: store.MaxLGThreadIDBytes,
				ValueDeltas:      true,
			},
		},
	}}, nil
}

// shutdown stops taking requests, waits for every accepted one (cancelling what has not
// committed after the stop grace), answers, then ends Serve.
func (s *Server) shutdown(req *Request) {
	s.mu.Lock()
	already := s.closing
	s.mu.Unlock()
	s.beginStop()
	go func() {
		s.inflight.Wait()
		s.respond(req, reply{}, nil)
		if !already {
			close(s.shutdownDone)
		}
	}()
}

func (s *Server) stats(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.StatsParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	req := store.FootprintRequest{}
	if p.WorkflowID != nil {
		req.Workflows = []string{*p.WorkflowID}
	}
	if p.ThreadID != nil {
		req.Threads = []string{*p.ThreadID}
	}
	var storage *protocol.StorageStats
	var wfFoot, thFoot *protocol.Footprint
	fp, ferr := s.store.Footprints(ctx, req)
	switch {
	case ferr == nil:
		storage = &protocol.StorageStats{LogicalBytes: fp.Total.LogicalBytes, StoredBytes: fp.Total.StoredBytes,
			Ratio: fp.Total.Ratio(), Chunks: fp.Chunks, Runs: fp.Runs}
		if p.WorkflowID != nil {
			f, ok := fp.Workflows[*p.WorkflowID]
			if !ok {
				return reply{}, rpcError(protocol.CodeNotFound, fmt.Sprintf("workflow %q not found", *p.WorkflowID),
					map[string]string{"workflowId": *p.WorkflowID})
			}
			wfFoot = &protocol.Footprint{WorkflowID: *p.WorkflowID, LogicalBytes: f.LogicalBytes, StoredBytes: f.StoredBytes, Ratio: f.Ratio()}
		}
		if p.ThreadID != nil {
			f, ok := fp.Threads[*p.ThreadID]
			if !ok {
				return reply{}, rpcError(protocol.CodeNotFound, fmt.Sprintf("thread %q not found", *p.ThreadID),
					map[string]string{"threadId": *p.ThreadID})
			}
			thFoot = &protocol.Footprint{ThreadID: *p.ThreadID, LogicalBytes: f.LogicalBytes, StoredBytes: f.StoredBytes, Ratio: f.Ratio()}
		}
	case p.WorkflowID != nil || p.ThreadID != nil:
		return reply{}, storeError(ferr)
	default: // the totals are diagnostics: stats still answers
		s.log.Warn("stats: cannot add up the storage footprint", "error", ferr)
	}
	db, err := s.store.Stats(ctx)
	if err != nil {
		if s.store.Condition().Writable() {
			return reply{}, storeError(err)
		}
		// a damaged database may not count: stats still answers, saying why (writesStopped)
		s.log.Warn("stats: cannot count the database", "error", err)
		db.Path = s.store.About().Location
	}
	health, err := s.store.Health(ctx)
	if err != nil { // diagnostics only: stats still answers
		s.log.Warn("stats: cannot read the backend's health figures", "error", err)
	}
	var stopped *protocol.WritesStopped
	if c := s.store.Condition(); !c.Writable() {
		stopped = &protocol.WritesStopped{Reason: c.Reason, Detail: c.Detail, Since: c.Since.UTC()}
	}
	return reply{result: protocol.StatsResult{
		UptimeSeconds: time.Since(s.started).Seconds(),
		Counters:      s.metrics.counters(),
		Latency:       s.metrics.latencies(),
		DB: protocol.DBStats{
			Path:              db.Path,
			SizeBytes:         db.SizeBytes,
			WALBytes:          health.Figure("walBytes"),
			Workflows:         db.Workflows,
			Checkpoints:       db.Checkpoints,
			States:            db.States,
			StatesStoredBytes: db.StatesStoredBytes,
			Storage:           storage,
			Pragmas:           health.SettingsMap(),
			Compaction:        protocol.CompactionStats(s.store.CompactionStats()),
			BlobCache:         protocol.BlobCacheStats(s.store.BlobCacheStats()),
			ChunkCache:        protocol.BlobCacheStats(s.store.ChunkCacheStats()), // same figures as blobCache,
			WritesStopped:     stopped,
		},
		Workflow: wfFoot,
		Thread:   thFoot,
	}}, nil
}
