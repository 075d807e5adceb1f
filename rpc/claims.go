package rpc

// Claims (docs/protocol.md, "Claims"): workflow/claim, workflow/renew, workflow/release, and the
// fencingToken param of the writes. The decisions are the store's (store/claims.go), taken in
// the database against its own clock.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// claimMethods are registered with the LangGraph family (rpc/langgraph.go).
func (s *Server) claimMethods() map[string]method {
	return map[string]method{
		protocol.MethodClaim:   {kindMutation, s.claim},
		protocol.MethodRenew:   {kindMutation, s.renew},
		protocol.MethodRelease: {kindMutation, s.release},
	}
}

// fencingToken validates an optional fencingToken param: 0 when absent.
func fencingToken(v *int64) (int64, *jsonrpc2.Error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, invalidParams("fencingToken", "must be >= 1 (the token workflow/claim returned)")
	}
	return *v, nil
}

// requiredToken validates a fencingToken param that must be present.
func requiredToken(v *int64) (int64, *jsonrpc2.Error) {
	if v == nil {
		return 0, invalidParams("fencingToken", "required (the token workflow/claim returned)")
	}
	return fencingToken(v)
}

// leaseParam validates leaseSeconds.
func leaseParam(v *int64) (time.Duration, *jsonrpc2.Error) {
	max := int64(store.MaxLease / time.Second)
	switch {
	case v == nil:
		return 0, invalidParams("leaseSeconds", "required")
	case *v < 1 || *v > max:
		return 0, invalidParams("leaseSeconds", fmt.Sprintf("must be between 1 and %d", max))
	}
	return time.Duration(*v) * time.Second, nil
}

// claimedError is the -32008 error of a refusal: the claim as the refusal saw it.
func claimedError(ce *store.ClaimedError) *jsonrpc2.Error {
	data := protocol.ClaimedData{WorkflowID: ce.Claim.WorkflowID, Reason: ce.Reason}
	if ce.Claim.Held() {
		owner, exp := ce.Claim.Owner, engine.Timestamp(ce.Claim.ExpiresAt)
		data.Owner, data.ExpiresAt = &owner, &exp
	}
	return rpcError(protocol.CodeClaimed, "claimed: "+ce.Error(), data)
}

func claimResult(c store.Claim) protocol.ClaimResult {
	return protocol.ClaimResult{WorkflowID: c.WorkflowID, Owner: c.Owner, ExpiresAt: engine.Timestamp(c.ExpiresAt), FencingToken: c.Token}
}

func (s *Server) claim(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.ClaimParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	if err := requireID("owner", p.Owner, store.MaxOwnerBytes); err != nil {
		return reply{}, err
	}
	lease, perr := leaseParam(p.LeaseSeconds)
	if perr != nil {
		return reply{}, perr
	}
	cl, err := s.store.Claim(ctx, p.WorkflowID, p.Owner, lease)
	if err != nil {
		return reply{}, storeError(err)
	}
	s.log.Debug("workflow claimed", "workflowId", cl.WorkflowID, "owner", cl.Owner, "fencingToken", cl.Token)
	return reply{result: claimResult(cl)}, nil
}

func (s *Server) renew(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.RenewParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	token, perr := requiredToken(p.FencingToken)
	if perr != nil {
		return reply{}, perr
	}
	lease, perr := leaseParam(p.LeaseSeconds)
	if perr != nil {
		return reply{}, perr
	}
	cl, err := s.store.Renew(ctx, p.WorkflowID, token, lease)
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: claimResult(cl)}, nil
}

func (s *Server) release(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.ReleaseParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	token, perr := requiredToken(p.FencingToken)
	if perr != nil {
		return reply{}, perr
	}
	ok, err := s.store.Release(ctx, p.WorkflowID, token)
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.ReleaseResult{WorkflowID: p.WorkflowID, FencingToken: token, Released: ok}}, nil
}

// asClaimed maps a *store.ClaimedError inside err (storeError's first case).
func asClaimed(err error) *jsonrpc2.Error {
	var ce *store.ClaimedError
	if errors.As(err, &ce) {
		return claimedError(ce)
	}
	return nil
}
