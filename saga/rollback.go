package saga

import (
	"fmt"
	"sort"
)

// Recommendation kinds (binding wire values).
const (
	KindToCheckpoint = "to_checkpoint"
	KindFull         = "full"
)

// Recommendation is where a failed validation recommends rolling back to. ckptd never rolls
// back by itself.
type Recommendation struct {
	Kind         string `json:"kind"`
	CheckpointID string `json:"checkpointId,omitempty"`
}

// Candidate is a checkpoint of the workflow and namespace and its stored validation status
// ("" when it was saved without one).
type Candidate struct {
	CheckpointID string
	Seq          int64
	Status       Status
}

// Target returns the rollback target among cands: the newest (highest Seq) checkpoint older
// than before (before <= 0: any) that carries a validation that did not fail (passed or
// warning). A checkpoint saved without a validation is no target: nothing vouches for its
// state. ok is false when there is none: the rollback is a full one.
func Target(cands []Candidate, before int64) (best Candidate, ok bool) {
	for _, c := range cands {
		if before > 0 && c.Seq >= before {
			continue
		}
		if c.Status != Passed && c.Status != Warning {
			continue
		}
		if !ok || c.Seq > best.Seq {
			best, ok = c, true
		}
	}
	return best, ok
}

// Recommend returns the recommendation of a validation classified status under rules, for the
// checkpoint saved with seq, given earlier checkpoints of its workflow and namespace: none
// unless the validation failed and the step's rules roll back on failure; then the newest
// earlier checkpoint whose validation did not fail, or a full rollback when there is none.
func Recommend(status Status, rules Rules, seq int64, earlier []Candidate) *Recommendation {
	if status != Failed || !rules.RollbackOnFailure {
		return nil
	}
	if c, ok := Target(earlier, seq); ok {
		return &Recommendation{Kind: KindToCheckpoint, CheckpointID: c.CheckpointID}
	}
	return &Recommendation{Kind: KindFull}
}

// CompStatus is the state of a registered compensation (binding wire values).
type CompStatus string

const (
	CompPending CompStatus = "pending" // registered, not run by a rollback yet
	CompDone    CompStatus = "done"    // run by a rollback, which reported success
	CompFailed  CompStatus = "failed"  // run by a rollback, which reported a failure: run again
)

// Compensation is what the rollback logic needs of a registered compensation.
type Compensation struct {
	ID  string
	Seq int64 // registration order within the workflow
	// AfterSeq is the workflow's newest checkpoint seq when it was registered: it was
	// registered after every checkpoint with seq <= AfterSeq.
	AfterSeq int64
	Status   CompStatus
}

// Scope is what one rollback covers of its workflow and namespace's compensations: those
// registered after its target checkpoint (AfterSeq >= ToSeq; ToSeq 0: every one, a full
// rollback) and no later than the rollback was planned (Seq <= MaxSeq).
type Scope struct {
	ToSeq  int64
	MaxSeq int64
}

// Covers reports whether c belongs to the rollback.
func (s Scope) Covers(c Compensation) bool { return c.AfterSeq >= s.ToSeq && c.Seq <= s.MaxSeq }

// ToRun returns the compensations of comps that the scope covers and that are not done, in the
// order a rollback runs them: the reverse of their registration order. A compensation marked
// done never comes back; a failed one does (its rollback must run it again).
func ToRun(comps []Compensation, s Scope) []Compensation {
	var out []Compensation
	for _, c := range comps {
		if s.Covers(c) && c.Status != CompDone {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Seq > out[b].Seq })
	return out
}

// Progress counts the compensations a rollback covers by status.
type Progress struct {
	Total   int `json:"total"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Pending int `json:"pending"`
}

// Count returns the progress of the rollback with scope s over comps.
func Count(comps []Compensation, s Scope) Progress {
	var p Progress
	for _, c := range comps {
		if !s.Covers(c) {
			continue
		}
		p.Total++
		switch c.Status {
		case CompDone:
			p.Done++
		case CompFailed:
			p.Failed++
		default:
			p.Pending++
		}
	}
	return p
}

// Rollback is an unfinished rollback as stored.
type Rollback struct {
	ID             string
	ToCheckpointID string // "" for a full rollback
	Full           bool
}

// Request is what rollback/plan asks for: a target checkpoint, a full rollback, or neither
// (continue the unfinished rollback, else roll back to the default target).
type Request struct {
	ToCheckpointID string
	Full           bool
}

// Decision is what rollback/plan does.
type Decision struct {
	// Reuse: continue the unfinished rollback (same rollbackId, only the remaining actions).
	Reuse bool
	// Otherwise a new rollback to ToCheckpointID, or Full.
	ToCheckpointID string
	Full           bool
}

// UnfinishedError refuses a rollback to another target while one is unfinished.
type UnfinishedError struct {
	Rollback Rollback
}

func (e *UnfinishedError) Error() string {
	to := "a full rollback"
	if !e.Rollback.Full {
		to = "a rollback to checkpoint " + e.Rollback.ToCheckpointID
	}
	return fmt.Sprintf("rollback %s (%s) is unfinished: run its remaining actions and rollback/complete it first", e.Rollback.ID, to)
}

// Choose decides a rollback/plan: with an unfinished rollback, the same one when req names no
// target or its target (an *UnfinishedError for another); without, the requested target, else
// def (the newest checkpoint whose validation did not fail), else a full rollback.
func Choose(req Request, unfinished *Rollback, def *Candidate) (Decision, error) {
	if unfinished != nil {
		same := (req.Full && unfinished.Full) || (req.ToCheckpointID != "" && req.ToCheckpointID == unfinished.ToCheckpointID)
		if same || (!req.Full && req.ToCheckpointID == "") {
			return Decision{Reuse: true, ToCheckpointID: unfinished.ToCheckpointID, Full: unfinished.Full}, nil
		}
		return Decision{}, &UnfinishedError{Rollback: *unfinished}
	}
	switch {
	case req.Full:
		return Decision{Full: true}, nil
	case req.ToCheckpointID != "":
		return Decision{ToCheckpointID: req.ToCheckpointID}, nil
	case def != nil:
		return Decision{ToCheckpointID: def.CheckpointID}, nil
	}
	return Decision{Full: true}, nil
}

// CompensationConfig is a workflow's compensation config as configured and stored.
type CompensationConfig struct {
	// Required names the steps whose completed checkpoint needs a registered compensation.
	Required []string `json:"required"`
}

// Validate checks every required step name is given (field: the config's own name).
func (c CompensationConfig) Validate(field string) error {
	for i, name := range c.Required {
		if name == "" {
			return &FieldError{Field: fmt.Sprintf("%s.required[%d]", field, i), Reason: "a step name must not be empty"}
		}
	}
	return nil
}

// Requires reports whether step must register a compensation.
func (c CompensationConfig) Requires(step string) bool {
	for _, name := range c.Required {
		if name == step {
			return true
		}
	}
	return false
}

// Problem codes of the saga checks (the problems of a -32005 error).
const CodeCompensationRequired = "compensation_required"

// Problem is a reason to refuse a save, in the shape of resume/plan's problems.
type Problem struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	StepName string `json:"stepName,omitempty"`
}

// CheckRequired returns the problem of saving phase for step when the config requires a
// compensation for it and none was registered: only a completed checkpoint of a required
// step needs one.
func CheckRequired(c CompensationConfig, phase, step string, registered bool) *Problem {
	if phase != "completed" || step == "" || registered || !c.Requires(step) {
		return nil
	}
	return &Problem{
		Code:     CodeCompensationRequired,
		Message:  fmt.Sprintf("step %q must register a compensation (compensation/register) before it saves completed", step),
		StepName: step,
	}
}
