package rpc

// Validation checkpoints and the compensation log: compensation/register, rollback/plan,
// compensation/done, rollback/complete, and the validation params of checkpoint/save,
// checkpoint/list and workflow/configure. The composition lives in engine/saga.go, the rules
// in package saga.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/engine"
	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/saga"
	"github.com/ckptd/ckptd/store"
)

// compensationMethods are the compensation log's methods, all mutations: a plan begins (or
// continues) a rollback, so it is ordered like the registrations and saves around it.
func (s *Server) compensationMethods() map[string]method {
	return map[string]method{
		protocol.MethodCompensationRegister: {kindMutation, s.compensationRegister},
		protocol.MethodRollbackPlan:         {kindMutation, s.rollbackPlan},
		protocol.MethodCompensationDone:     {kindMutation, s.compensationDone},
		protocol.MethodRollbackComplete:     {kindMutation, s.rollbackComplete},
	}
}

// sagaError maps the saga use cases' errors onto the protocol's codes.
func sagaError(err error) *jsonrpc2.Error {
	if field, reason, ok := engine.IsSagaInput(err); ok {
		return invalidParams(field, reason)
	}
	var (
		me *engine.MissingError
		re *engine.RequiredError
		ue *saga.UnfinishedError
		pe *engine.PendingError
		ni *engine.NotInRollbackError
		ww *engine.WrongWorkflowError
	)
	switch {
	case errors.As(err, &me):
		return storeErrorWith(err, me.Key, me.Value)
	case errors.As(err, &re):
		return rpcError(protocol.CodeResumeInvalid, "validation failed: "+re.Problem.Message,
			map[string]any{"problems": []saga.Problem{re.Problem}})
	case errors.As(err, &ue):
		return rpcError(protocol.CodeConflict, err.Error(), map[string]any{"rollbackId": ue.Rollback.ID,
			"toCheckpointId": ue.Rollback.ToCheckpointID, "full": ue.Rollback.Full})
	case errors.As(err, &pe):
		return rpcError(protocol.CodeConflict, err.Error(), map[string]any{"rollbackId": pe.RollbackID, "pending": pe.Pending})
	case errors.As(err, &ni):
		return invalidParams("compensationId", err.Error())
	case errors.As(err, &ww):
		return invalidParams("toCheckpointId", "belongs to workflow "+quote(ww.WorkflowID)+", not "+quote(ww.Requested))
	}
	return engineError(err)
}

// parseConfidence reads validation.confidence: a JSON number, or one of the strings "NaN",
// "Infinity", "-Infinity" a client sends for values JSON has no number for (refused, naming
// the field, like any number outside [0, 1]).
func parseConfidence(raw json.RawMessage) (float64, *jsonrpc2.Error) {
	const field = "validation.confidence"
	var v float64
	switch jsonKind(raw) {
	case 0:
		return 0, invalidParams(field, "required (a number in [0, 1])")
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, invalidParams(field, "must be a number in [0, 1]")
		}
		switch strings.TrimPrefix(s, "+") {
		case "NaN", "nan":
			v = math.NaN()
		case "Infinity", "inf", "Inf":
			v = math.Inf(1)
		case "-Infinity", "-inf", "-Inf":
			v = math.Inf(-1)
		default:
			return 0, invalidParams(field, fmt.Sprintf("must be a number in [0, 1], not the string %s", strconv.Quote(s)))
		}
	default:
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, invalidParams(field, "must be a number in [0, 1]")
		}
		f, err := strconv.ParseFloat(n.String(), 64)
		if err != nil && !math.IsInf(f, 0) {
			return 0, invalidParams(field, "must be a number in [0, 1]")
		}
		v = f
	}
	if err := saga.CheckConfidence(field, v); err != nil {
		return 0, sagaError(err)
	}
	return v, nil
}

// validationInput validates checkpoint/save's validation param.
func validationInput(p *protocol.ValidationParams) (*engine.ValidationInput, *jsonrpc2.Error) {
	if p == nil {
		return nil, nil
	}
	conf, perr := parseConfidence(p.Confidence)
	if perr != nil {
		return nil, perr
	}
	if len(p.Message) > store.MaxCompensationTextBytes {
		return nil, invalidParams("validation.message", fmt.Sprintf("longer than %d bytes", store.MaxCompensationTextBytes))
	}
	in := &engine.ValidationInput{Confidence: conf, Message: p.Message}
	if jsonKind(p.Details) != 0 {
		if len(p.Details) > store.MaxCompensationActionBytes {
			return nil, invalidParams("validation.details", fmt.Sprintf("larger than %d bytes", store.MaxCompensationActionBytes))
		}
		in.Details = p.Details
	}
	return in, nil
}

// sagaConfig validates workflow/configure's validation and compensation params into the
// config members to store (nil: leave as is).
func sagaConfig(v *protocol.ValidationConfig, c *protocol.CompensationConfig) (store.SagaConfig, *jsonrpc2.Error) {
	var out store.SagaConfig
	if v != nil {
		cfg := saga.Config{MinConfidence: v.MinConfidence, WarningThreshold: v.WarningThreshold, RollbackOnFailure: v.RollbackOnFailure}
		if len(v.Steps) > 0 {
			cfg.Steps = make(map[string]saga.StepConfig, len(v.Steps))
			for name, st := range v.Steps {
				cfg.Steps[name] = saga.StepConfig(st)
			}
		}
		if err := cfg.Validate("validation"); err != nil {
			return out, sagaError(err)
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			return out, rpcError(protocol.CodeInternal, "internal error: "+err.Error(), nil)
		}
		out.Validation = b
	}
	if c != nil {
		cfg := saga.CompensationConfig{Required: c.Required}
		if cfg.Required == nil {
			cfg.Required = []string{}
		}
		if err := cfg.Validate("compensation"); err != nil {
			return out, sagaError(err)
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			return out, rpcError(protocol.CodeInternal, "internal error: "+err.Error(), nil)
		}
		out.Compensation = b
	}
	return out, nil
}

// configuredSaga renders the stored config for workflow/configure's result: each member once
// it was configured.
func configuredSaga(c store.SagaConfig) (*protocol.EffectiveValidation, *protocol.CompensationConfig, error) {
	v, comp, err := engine.SagaRules(c)
	if err != nil {
		return nil, nil, err
	}
	var ev *protocol.EffectiveValidation
	if c.Validation != nil {
		r := v.Rules("")
		ev = &protocol.EffectiveValidation{MinConfidence: r.Min, WarningThreshold: r.Warning, RollbackOnFailure: r.RollbackOnFailure}
		if len(v.Steps) > 0 {
			ev.Steps = make(map[string]protocol.StepValidationConfig, len(v.Steps))
			for name, st := range v.Steps {
				ev.Steps[name] = protocol.StepValidationConfig(st)
			}
		}
	}
	var cc *protocol.CompensationConfig
	if c.Compensation != nil {
		cc = &protocol.CompensationConfig{Required: comp.Required}
		if cc.Required == nil {
			cc.Required = []string{}
		}
	}
	return ev, cc, nil
}

func optionalID(field, v string, max int) *jsonrpc2.Error {
	if v == "" {
		return nil
	}
	return requireID(field, v, max)
}

func (s *Server) compensationRegister(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.CompensationRegisterParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	if err := optionalID("checkpointId", p.CheckpointID, maxCheckpointIDBytes); err != nil {
		return reply{}, err
	}
	if jsonKind(p.Action) == 0 {
		return reply{}, invalidParams("action", "required (the JSON your client runs to undo the side effect)")
	}
	if p.Description == nil {
		return reply{}, invalidParams("description", "required (what the action undoes, for people)")
	}
	for _, f := range []struct{ name, v string }{{"namespace", p.Namespace}, {"stepName", p.StepName}, {"taskId", p.TaskID}, {"description", *p.Description}} {
		if !utf8.ValidString(f.v) {
			return reply{}, invalidParams(f.name, "not valid UTF-8")
		}
	}
	comp, err := s.store.RegisterCompensation(ctx, store.CompensationRequest{WorkflowID: p.WorkflowID, Namespace: p.Namespace,
		CheckpointID: p.CheckpointID, StepName: p.StepName, TaskID: p.TaskID, Action: p.Action, Description: *p.Description})
	if err != nil {
		return reply{}, storeError(err)
	}
	return reply{result: protocol.CompensationRegisterResult{CompensationID: comp.CompensationID, Seq: comp.Seq}}, nil
}

func (s *Server) rollbackPlan(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.RollbackPlanParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if err := requireID("workflowId", p.WorkflowID, maxWorkflowIDBytes); err != nil {
		return reply{}, err
	}
	if err := optionalID("toCheckpointId", p.ToCheckpointID, maxCheckpointIDBytes); err != nil {
		return reply{}, err
	}
	if p.Full && p.ToCheckpointID != "" {
		return reply{}, invalidParams("full", "give either toCheckpointId or full: true, not both")
	}
	view, err := s.engine.PlanRollback(ctx, p.WorkflowID, p.Namespace, saga.Request{ToCheckpointID: p.ToCheckpointID, Full: p.Full})
	if err != nil {
		return reply{}, sagaError(err)
	}
	r := view.Rollback
	return reply{result: protocol.RollbackPlanResult{
		RollbackID:     r.RollbackID,
		WorkflowID:     r.WorkflowID,
		Namespace:      r.Namespace,
		ToCheckpointID: r.ToCheckpointID,
		Full:           r.Full(),
		CreatedAt:      engine.Timestamp(r.CreatedAt),
		Actions:        engine.RollbackActionsOf(view.Actions),
		Progress:       engine.ProgressOf(view.Progress),
	}}, nil
}

func (s *Server) compensationDone(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.CompensationDoneParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if p.CompensationID == "" {
		return reply{}, invalidParams("compensationId", "required")
	}
	if p.RollbackID == "" {
		return reply{}, invalidParams("rollbackId", "required (from rollback/plan)")
	}
	if p.OK == nil {
		return reply{}, invalidParams("ok", "required (true: the action ran; false: it failed, give error)")
	}
	if len(p.Error) > store.MaxCompensationTextBytes {
		return reply{}, invalidParams("error", fmt.Sprintf("longer than %d bytes", store.MaxCompensationTextBytes))
	}
	comp, remaining, err := s.engine.MarkDone(ctx, p.CompensationID, p.RollbackID, *p.OK, p.Error)
	if err != nil {
		if errors.Is(err, store.ErrConflict) { // the rollback is complete
			return reply{}, storeErrorWith(err, "rollbackId", p.RollbackID)
		}
		return reply{}, sagaError(err)
	}
	return reply{result: protocol.CompensationDoneResult{CompensationID: comp.CompensationID, Status: comp.Status, Remaining: remaining}}, nil
}

func (s *Server) rollbackComplete(ctx context.Context, c *call) (reply, *jsonrpc2.Error) {
	var p protocol.RollbackCompleteParams
	if err := decodeParams(c.params, &p); err != nil {
		return reply{}, err
	}
	if p.RollbackID == "" {
		return reply{}, invalidParams("rollbackId", "required (from rollback/plan)")
	}
	view, pruned, err := s.engine.CompleteRollback(ctx, p.RollbackID, p.Prune)
	if err != nil {
		return reply{}, sagaError(err)
	}
	return reply{result: protocol.RollbackCompleteResult{RollbackID: view.Rollback.RollbackID,
		Progress: engine.ProgressOf(view.Progress), Pruned: len(pruned)}}, nil
}

// resumeRollback renders a resume plan's rollback.
func resumeRollback(v *engine.RollbackView) *protocol.ResumeRollback {
	if v == nil {
		return nil
	}
	return &protocol.ResumeRollback{RollbackID: v.Rollback.RollbackID, ToCheckpointID: v.Rollback.ToCheckpointID,
		Full: v.Rollback.Full(), Actions: engine.RollbackActionsOf(v.Actions)}
}
