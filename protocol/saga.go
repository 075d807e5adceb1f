package protocol

import "encoding/json"

// Validation checkpoints and the compensation log (docs/protocol.md, "Validation and
// compensation").

// Method names of the compensation log (binding).
const (
	MethodCompensationRegister = "compensation/register"
	MethodCompensationDone     = "compensation/done"
	MethodRollbackPlan         = "rollback/plan"
	MethodRollbackComplete     = "rollback/complete"
)

// ValidationParams is checkpoint/save's validation param: the step's own score of its result.
type ValidationParams struct {
	// Confidence is a number in [0, 1]. Raw, so that a client that cannot send NaN or an
	// infinity as a JSON number (none can) may send it as the string "NaN", "Infinity" or
	// "-Infinity" and get -32602 naming the field rather than a parse error.
	Confidence json.RawMessage `json:"confidence"`
	Message    string          `json:"message"`
	Details    json.RawMessage `json:"details"` // any JSON, stored and returned as sent
}

// ValidationThresholds are the thresholds a confidence was classified against.
type ValidationThresholds struct {
	Min     float64 `json:"min"`
	Warning float64 `json:"warning"`
}

// Recommendation is where a failed validation recommends rolling back to: kind "to_checkpoint"
// (with checkpointId) or "full".
type Recommendation struct {
	Kind         string `json:"kind"`
	CheckpointID string `json:"checkpointId,omitempty"`
}

// ValidationResult is checkpoint/save's validation result.
type ValidationResult struct {
	Status         string               `json:"status"` // passed | warning | failed
	Confidence     float64              `json:"confidence"`
	Thresholds     ValidationThresholds `json:"thresholds"`
	Recommendation *Recommendation      `json:"recommendation,omitempty"`
}

// ValidationInfo is the validation stored with a checkpoint (its summary's validation).
type ValidationInfo struct {
	Status     string               `json:"status"`
	Confidence float64              `json:"confidence"`
	Thresholds ValidationThresholds `json:"thresholds"`
	Message    string               `json:"message,omitempty"`
	Details    json.RawMessage      `json:"details,omitempty"`
}

// StepValidationConfig overrides a workflow's validation rules for one step.
type StepValidationConfig struct {
	MinConfidence     *float64 `json:"minConfidence,omitempty"`
	WarningThreshold  *float64 `json:"warningThreshold,omitempty"`
	RollbackOnFailure *bool    `json:"rollbackOnFailure,omitempty"`
}

// ValidationConfig is workflow/configure's validation param (absent fields: the defaults).
type ValidationConfig struct {
	MinConfidence     *float64                        `json:"minConfidence,omitempty"`
	WarningThreshold  *float64                        `json:"warningThreshold,omitempty"`
	RollbackOnFailure *bool                           `json:"rollbackOnFailure,omitempty"`
	Steps             map[string]StepValidationConfig `json:"steps,omitempty"`
}

// EffectiveValidation is the validation config in force (workflow/configure's result).
type EffectiveValidation struct {
	MinConfidence     float64                         `json:"minConfidence"`
	WarningThreshold  float64                         `json:"warningThreshold"`
	RollbackOnFailure bool                            `json:"rollbackOnFailure"`
	Steps             map[string]StepValidationConfig `json:"steps,omitempty"`
}

// CompensationConfig is workflow/configure's compensation param.
type CompensationConfig struct {
	// Required names the steps whose completed checkpoint needs a registered compensation.
	Required []string `json:"required"`
}

// CompensationRegisterParams are compensation/register's params.
type CompensationRegisterParams struct {
	WorkflowID   string          `json:"workflowId"`
	Namespace    string          `json:"namespace"`
	CheckpointID string          `json:"checkpointId"`
	StepName     string          `json:"stepName"`
	TaskID       string          `json:"taskId"`
	Action       json.RawMessage `json:"action"` // opaque JSON the client knows how to run
	Description  *string         `json:"description"`
}

// CompensationRegisterResult answers compensation/register.
type CompensationRegisterResult struct {
	CompensationID string `json:"compensationId"`
	Seq            int64  `json:"seq"`
}

// RollbackAction is one compensation of a rollback.
type RollbackAction struct {
	CompensationID string          `json:"compensationId"`
	Seq            int64           `json:"seq"`
	Action         json.RawMessage `json:"action"`
	Description    string          `json:"description"`
	Status         string          `json:"status"` // pending | failed | done
	StepName       string          `json:"stepName,omitempty"`
	TaskID         string          `json:"taskId,omitempty"`
	CheckpointID   string          `json:"checkpointId,omitempty"`
	Error          string          `json:"error,omitempty"` // the last failure reported
}

// RollbackProgress counts a rollback's compensations by status.
type RollbackProgress struct {
	Total   int `json:"total"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Pending int `json:"pending"`
}

// RollbackPlanParams are rollback/plan's params.
type RollbackPlanParams struct {
	WorkflowID     string `json:"workflowId"`
	Namespace      string `json:"namespace"`
	ToCheckpointID string `json:"toCheckpointId"`
	Full           bool   `json:"full"`
}

// RollbackPlanResult answers rollback/plan: the actions still to run, newest registration first.
type RollbackPlanResult struct {
	RollbackID     string           `json:"rollbackId"`
	WorkflowID     string           `json:"workflowId"`
	Namespace      string           `json:"namespace"`
	ToCheckpointID string           `json:"toCheckpointId,omitempty"`
	Full           bool             `json:"full"`
	CreatedAt      string           `json:"createdAt"`
	Actions        []RollbackAction `json:"actions"`
	Progress       RollbackProgress `json:"progress"`
}

// CompensationDoneParams are compensation/done's params.
type CompensationDoneParams struct {
	CompensationID string `json:"compensationId"`
	RollbackID     string `json:"rollbackId"`
	OK             *bool  `json:"ok"`
	Error          string `json:"error"`
}

// CompensationDoneResult answers compensation/done.
type CompensationDoneResult struct {
	CompensationID string `json:"compensationId"`
	Status         string `json:"status"`
	// Remaining counts the rollback's actions not done yet (pending or failed).
	Remaining int `json:"remaining"`
}

// RollbackCompleteParams are rollback/complete's params.
type RollbackCompleteParams struct {
	RollbackID string `json:"rollbackId"`
	Prune      bool   `json:"prune"`
}

// RollbackCompleteResult answers rollback/complete.
type RollbackCompleteResult struct {
	RollbackID string           `json:"rollbackId"`
	Progress   RollbackProgress `json:"progress"`
	// Pruned counts the rolled-back checkpoints deleted (prune: true).
	Pruned int `json:"pruned"`
}

// ResumeRollback is resume/plan's rollback: the compensations to run before resuming.
type ResumeRollback struct {
	// RollbackID names the unfinished rollback being continued, if one is.
	RollbackID     string           `json:"rollbackId,omitempty"`
	ToCheckpointID string           `json:"toCheckpointId,omitempty"`
	Full           bool             `json:"full"`
	Actions        []RollbackAction `json:"actions"`
}
