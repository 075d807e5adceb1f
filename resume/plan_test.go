package resume

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func codes(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Code)
	}
	return out
}

func TestDecide(t *testing.T) {
	cp := func(phase string, step int64) *Checkpoint {
		return &Checkpoint{ID: "c1", Phase: phase, Step: step, WorkflowHash: "h1", FormatVersion: 1}
	}
	tests := []struct {
		name     string
		in       Input
		start    int64
		retry    bool
		problems []string
		warnings []string
	}{
		{"completed starts at next", Input{Checkpoint: cp("completed", 2)}, 3, false, nil, nil},
		{"before_step reruns", Input{Checkpoint: cp("before_step", 2)}, 2, true, nil, nil},
		{"interrupted retries", Input{Checkpoint: cp("interrupted", 4)}, 4, true, nil, nil},
		{"failed retryable retries", Input{Checkpoint: &Checkpoint{ID: "c", Phase: "failed", Step: 1, Retryable: true}}, 1, true, nil, nil},
		{"failed not retryable is a problem", Input{Checkpoint: &Checkpoint{ID: "c", Phase: "failed", Step: 1, ErrorMessage: "boom"}}, 1, true, []string{CodeNotRetryable}, nil},
		{"hash mismatch", Input{Checkpoint: cp("completed", 0), CallerHash: "h2"}, 1, false, []string{CodeWorkflowHashMismatch}, nil},
		{"hash equal", Input{Checkpoint: cp("completed", 0), CallerHash: "h1"}, 1, false, nil, nil},
		{"no caller hash: no comparison", Input{Checkpoint: cp("completed", 0)}, 1, false, nil, nil},
		{"newer format", Input{Checkpoint: &Checkpoint{ID: "c", Phase: "completed", FormatVersion: 9}, MaxFormatVersion: 1}, 1, false, []string{CodeSchemaVersion}, nil},
		{"all problems collected", Input{
			Checkpoint:       &Checkpoint{ID: "c", Phase: "failed", Step: 5, WorkflowHash: "a", FormatVersion: 3},
			Corrupt:          []Corruption{{"c9", "sha256 mismatch"}},
			CallerHash:       "b",
			Completed:        true,
			MaxFormatVersion: 1,
			Drift:            "2 files changed",
		}, 5, true, []string{CodeCorrupt, CodeWorkflowCompleted, CodeSchemaVersion, CodeWorkflowHashMismatch, CodeDrift, CodeNotRetryable}, nil},
		{"drift as warning", Input{Checkpoint: cp("completed", 1), Drift: "x changed", DriftAsWarning: true}, 2, false, nil, []string{CodeDrift}},
		{"nothing intact", Input{Corrupt: []Corruption{{"c1", "bad"}}}, 0, false, []string{CodeCorrupt, CodeNoIntactCheckpoint}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, problems, warnings := Decide(tt.in)
			assert.Equal(t, tt.start, plan.StartStep)
			assert.Equal(t, tt.retry, plan.Retry)
			assert.Equal(t, tt.problems, codes(problems))
			assert.Equal(t, tt.warnings, codes(warnings))
			if tt.in.Checkpoint != nil {
				assert.NotEmpty(t, plan.Reason)
			}
		})
	}
}

func TestMismatchCarriesExpectedAndActual(t *testing.T) {
	_, problems, _ := Decide(Input{Checkpoint: &Checkpoint{ID: "c", Phase: "completed", WorkflowHash: "old"}, CallerHash: "new"})
	if assert.Len(t, problems, 1) {
		assert.Equal(t, "old", problems[0].Expected)
		assert.Equal(t, "new", problems[0].Actual)
		assert.Equal(t, "c", problems[0].CheckpointID)
	}
}
