// Package resume decides where a workflow must start again after a crash. It is pure logic:
// the caller gathers the facts (the chosen checkpoint, corrupt ones, the caller's workflow
// hash, drift) and Decide turns them into a plan and a list of every problem found.
package resume

import "fmt"

// Problem codes, binding (see docs/protocol.md, resume/plan).
const (
	CodeCorrupt              = "corrupt"
	CodeSchemaVersion        = "schema_version"
	CodeWorkflowHashMismatch = "workflow_hash_mismatch"
	CodeNotRetryable         = "not_retryable"
	CodeWorkflowCompleted    = "workflow_completed"
	CodeDrift                = "drift"
	CodeNoIntactCheckpoint   = "no_intact_checkpoint"
)

// Problem is one reason not to resume blindly.
type Problem struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	CheckpointID string `json:"checkpointId,omitempty"`
	Expected     string `json:"expected,omitempty"`
	Actual       string `json:"actual,omitempty"`
}

// Checkpoint is what Decide needs to know of the checkpoint to resume from.
type Checkpoint struct {
	ID            string
	Phase         string // before_step | completed | failed | interrupted
	Step          int64
	ErrorMessage  string
	Retryable     bool
	WorkflowHash  string
	FormatVersion int
}

// Corruption names a checkpoint that failed verification.
type Corruption struct {
	CheckpointID string
	Reason       string
}

// Input gathers the facts for one decision.
type Input struct {
	// Checkpoint is the checkpoint the plan starts from (the requested or latest one if intact,
	// else the newest intact earlier one); nil when no intact checkpoint exists.
	Checkpoint *Checkpoint
	// Corrupt lists the requested/latest checkpoint and any newer ones that failed verification.
	Corrupt []Corruption
	// CallerHash is the caller's current workflow hash; empty means "don't compare".
	CallerHash string
	// Completed says the workflow was marked completed.
	Completed bool
	// MaxFormatVersion is the newest checkpoint format this build reads.
	MaxFormatVersion int
	// Drift, when non-empty, describes source drift since the checkpoint; DriftAsWarning keeps
	// it out of the blocking problems.
	Drift          string
	DriftAsWarning bool
}

// Plan says where to start.
type Plan struct {
	StartStep int64  `json:"startStep"`
	Retry     bool   `json:"retry"`
	Reason    string `json:"reason"`
}

// Decide computes the plan and every problem (blocking ones in problems, advisory ones in
// warnings). With no intact checkpoint the plan is the zero Plan and problems say why.
func Decide(in Input) (plan Plan, problems, warnings []Problem) {
	for _, c := range in.Corrupt {
		problems = append(problems, Problem{
			Code:         CodeCorrupt,
			Message:      fmt.Sprintf("checkpoint %s failed verification: %s", c.CheckpointID, c.Reason),
			CheckpointID: c.CheckpointID,
		})
	}
	if in.Completed {
		problems = append(problems, Problem{Code: CodeWorkflowCompleted, Message: "the workflow was marked completed"})
	}
	cp := in.Checkpoint
	if cp == nil {
		problems = append(problems, Problem{Code: CodeNoIntactCheckpoint, Message: "no intact checkpoint to resume from"})
		return Plan{}, problems, warnings
	}
	if in.MaxFormatVersion > 0 && cp.FormatVersion > in.MaxFormatVersion {
		problems = append(problems, Problem{
			Code:         CodeSchemaVersion,
			Message:      fmt.Sprintf("checkpoint format %d is newer than this ckptd reads (%d)", cp.FormatVersion, in.MaxFormatVersion),
			CheckpointID: cp.ID,
			Expected:     fmt.Sprint(in.MaxFormatVersion),
			Actual:       fmt.Sprint(cp.FormatVersion),
		})
	}
	if in.CallerHash != "" && cp.WorkflowHash != "" && in.CallerHash != cp.WorkflowHash {
		problems = append(problems, Problem{
			Code:         CodeWorkflowHashMismatch,
			Message:      "the workflow definition changed since the checkpoint was saved",
			CheckpointID: cp.ID,
			Expected:     cp.WorkflowHash,
			Actual:       in.CallerHash,
		})
	}
	if in.Drift != "" {
		p := Problem{Code: CodeDrift, Message: in.Drift, CheckpointID: cp.ID}
		if in.DriftAsWarning {
			warnings = append(warnings, p)
		} else {
			problems = append(problems, p)
		}
	}
	switch cp.Phase {
	case "completed":
		plan = Plan{StartStep: cp.Step + 1, Reason: fmt.Sprintf("step %d completed; start at step %d", cp.Step, cp.Step+1)}
	case "before_step":
		plan = Plan{StartStep: cp.Step, Retry: true, Reason: fmt.Sprintf("step %d started but did not finish; run it again", cp.Step)}
	case "interrupted":
		plan = Plan{StartStep: cp.Step, Retry: true, Reason: fmt.Sprintf("step %d was interrupted; retry it", cp.Step)}
	case "failed":
		plan = Plan{StartStep: cp.Step, Retry: true}
		if cp.Retryable {
			plan.Reason = fmt.Sprintf("step %d failed with a retryable error; retry it", cp.Step)
		} else {
			plan.Reason = fmt.Sprintf("step %d failed with a non-retryable error", cp.Step)
			msg := fmt.Sprintf("step %d failed and its error is not retryable", cp.Step)
			if cp.ErrorMessage != "" {
				msg += ": " + cp.ErrorMessage
			}
			problems = append(problems, Problem{Code: CodeNotRetryable, Message: msg, CheckpointID: cp.ID})
		}
	default:
		plan = Plan{StartStep: cp.Step, Retry: true, Reason: fmt.Sprintf("unknown phase %q; run step %d again", cp.Phase, cp.Step)}
	}
	return plan, problems, warnings
}
