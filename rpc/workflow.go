package rpc

import (
	"context"
	"encoding/base64"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

func (s *Server) configure(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.ConfigureParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	sources, removeSources, perr := configureSources(p.Sources) // validated before anything is written
	if perr != nil {
		return reply{}, perr
	}
	sagaCfg, perr := sagaConfig(p.Validation, p.Compensation) // rpc/compensation.go
	if perr != nil {
		return reply{}, perr
	}
	var ret *store.Retention
	if p.Retention != nil {
		r := s.opts.DefaultRetention
		if v := p.Retention.KeepLast; v != nil {
			if *v < 0 {
				return reply{}, invalidParams("retention.keepLast", "must be >= 0 (0 = unlimited)")
			}
			r.KeepLast = *v
		}
		if v := p.Retention.MaxAgeSeconds; v != nil {
			if *v < 0 {
				return reply{}, invalidParams("retention.maxAgeSeconds", "must be >= 0 (0 = off)")
			}
			r.MaxAgeSeconds = *v
		}
		if v := p.Retention.KeepFirst; v != nil {
			r.KeepFirst = *v
		}
		if v := p.Retention.IdleTTLSeconds; v != nil {
			if *v < 0 {
				return reply{}, invalidParams("retention.idleTtlSeconds", "must be >= 0 (0 = off)")
			}
			r.IdleTTLSeconds = *v
		}
		ret = &r
	}
	eff, err := s.store.Configure(ctx, p.WorkflowID, ret)
	if err != nil {
		return reply{}, storeError(err)
	}
	if sources != nil || removeSources {
		err := s.store.SetWorkflowSources(ctx, p.WorkflowID, sources)
		s.engine.SourcesConfigured(p.WorkflowID) // the next save reads them
		if err != nil {
			return reply{}, storeError(err)
		}
	}
	if err := s.store.SetSagaConfig(ctx, p.WorkflowID, sagaCfg); err != nil {
		return reply{}, storeError(err)
	}
	cur, err := s.store.WorkflowSources(ctx, p.WorkflowID)
	if err != nil {
		return reply{}, storeError(err)
	}
	stored, err := s.store.SagaConfig(ctx, p.WorkflowID)
	if err != nil {
		return reply{}, storeError(err)
	}
	validation, compensation, err := configuredSaga(stored)
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.ConfigureResult{WorkflowID: p.WorkflowID, Retention: protocol.EffectiveRetention(eff), Sources: cur,
		Validation: validation, Compensation: compensation}}, nil
}

func (s *Server) complete(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.CompleteParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	token, perr := fencingToken(p.FencingToken)
	if perr != nil {
		return reply{}, perr
	}
	n, err := s.store.CompleteFenced(ctx, p.WorkflowID, p.Preserve, token)
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.CompleteResult{WorkflowID: p.WorkflowID, Deleted: n}}, nil
}

func (s *Server) workflowList(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.WorkflowListParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	f := store.WorkflowFilter{ResumableOnly: p.ResumableOnly, Claimable: p.Claimable, Order: p.Order, Cursor: p.Cursor}
	if p.Limit != nil {
		if *p.Limit < 1 || *p.Limit > store.MaxWorkflowPage {
			return reply{}, invalidParams("limit", fmt.Sprintf("must be between 1 and %d", store.MaxWorkflowPage))
		}
		f.Limit = *p.Limit
	}
	if f.Order == store.OrderStored { // a store-internal order, not on the wire
		return reply{}, invalidParams("order", `"stored" is not "updated" or "id"`)
	}
	page, err := s.store.ListWorkflows(ctx, f)
	if err != nil {
		return reply{}, storeError(err)
	}
	out := protocol.WorkflowListResult{Workflows: make([]protocol.WorkflowInfo, 0, len(page.Workflows)), Cursor: page.Cursor}
	for _, w := range page.Workflows {
		out.Workflows = append(out.Workflows, engine.WorkflowInfoOf(w))
	}
	return reply{result: out}, nil
}

func (s *Server) writesPut(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.WritesPutParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	if err := requireID("checkpointId", p.CheckpointID, maxCheckpointIDBytes); err != nil {
		return reply{}, err
	}
	if p.TaskID == "" {
		return reply{}, invalidParams("taskId", "required")
	}
	if p.Writes == nil {
		return reply{}, invalidParams("writes", "required (an array of {channel, value})")
	}
	token, perr := fencingToken(p.FencingToken)
	if perr != nil {
		return reply{}, perr
	}
	ws := make([]store.Write, 0, len(p.Writes))
	for i, w := range p.Writes {
		field := fmt.Sprintf("writes[%d]", i)
		if w.Channel == nil || *w.Channel == "" {
			return reply{}, invalidParams(field+".channel", "required")
		}
		sw := store.Write{TaskID: p.TaskID, TaskPath: p.TaskPath, Idx: int64(i), Channel: *w.Channel, Type: w.Type}
		if w.Idx != nil {
			sw.Idx = *w.Idx
		}
		switch {
		case w.Value != nil && w.ValueBase64 != nil:
			return reply{}, invalidParams(field+".value", "give either value or valueBase64, not both")
		case w.ValueBase64 != nil:
			b, err := base64.StdEncoding.DecodeString(*w.ValueBase64)
			if err != nil {
				return reply{}, invalidParams(field+".valueBase64", "not valid standard base64: "+err.Error())
			}
			sw.Value, sw.IsBytes = b, true
		default:
			sw.Value = w.Value
		}
		ws = append(ws, sw)
	}
	n, err := s.store.PutWritesFenced(ctx, p.WorkflowID, p.Namespace, p.CheckpointID, ws, token)
	if err != nil {
		return reply{}, storeErrorWith(err, "checkpointId", p.CheckpointID)
	}
	return reply{result: protocol.WritesPutResult{Stored: n}}, nil
}
