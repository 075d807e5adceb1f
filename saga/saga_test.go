package saga

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func f(v float64) *float64 { return &v }
func b(v bool) *bool       { return &v }

func TestClassifyThresholds(t *testing.T) {
	def := Config{}.Rules("any").Thresholds
	require.Equal(t, Thresholds{Min: 0.7, Warning: 0.85}, def, "defaults")
	for _, tc := range []struct {
		name string
		conf float64
		t    Thresholds
		want Status
		err  string // field error reason, if any
	}{
		{"exactly at the warning threshold passes", 0.85, def, Passed, ""},
		{"just below the warning threshold warns", math.Nextafter(0.85, 0), def, Warning, ""},
		{"exactly at the minimum warns", 0.7, def, Warning, ""},
		{"just below the minimum fails", math.Nextafter(0.7, 0), def, Failed, ""},
		{"one passes", 1, def, Passed, ""},
		{"zero fails", 0, def, Failed, ""},
		{"zero passes when every threshold is zero", 0, Thresholds{Min: 0, Warning: 0}, Passed, ""},
		{"min equal to warning: at it passes", 0.5, Thresholds{Min: 0.5, Warning: 0.5}, Passed, ""},
		{"min equal to warning: below it fails", 0.49, Thresholds{Min: 0.5, Warning: 0.5}, Failed, ""},
		{"one with thresholds at one passes", 1, Thresholds{Min: 1, Warning: 1}, Passed, ""},
		{"NaN", math.NaN(), def, "", "NaN is not a number in [0, 1]"},
		{"+Inf", math.Inf(1), def, "", "Infinity is not a number in [0, 1]"},
		{"-Inf", math.Inf(-1), def, "", "-Infinity is not a number in [0, 1]"},
		{"negative", -0.01, def, "", "-0.01 is out of range [0, 1]"},
		{"above one", 1.0000001, def, "", "1.0000001 is out of range [0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Classify(tc.conf, tc.t)
			if tc.err != "" {
				var fe *FieldError
				require.True(t, errors.As(err, &fe), "%v", err)
				assert.Equal(t, "validation.confidence", fe.Field)
				assert.Equal(t, tc.err, fe.Reason)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestRulesOverridesAndDefaults(t *testing.T) {
	cfg := Config{
		MinConfidence: f(0.6),
		Steps: map[string]StepConfig{
			"search": {MinConfidence: f(0.3), WarningThreshold: f(0.5)},
			"edit":   {RollbackOnFailure: b(false)},
			"strict": {WarningThreshold: f(0.99)},
		},
	}
	for _, tc := range []struct {
		cfg  Config
		step string
		want Rules
	}{
		{Config{}, "x", Rules{Thresholds{0.7, 0.85}, true}},
		{cfg, "other", Rules{Thresholds{0.6, 0.85}, true}},
		{cfg, "search", Rules{Thresholds{0.3, 0.5}, true}},
		{cfg, "edit", Rules{Thresholds{0.6, 0.85}, false}},
		{cfg, "strict", Rules{Thresholds{0.6, 0.99}, true}},
		{Config{RollbackOnFailure: b(false), Steps: map[string]StepConfig{"s": {RollbackOnFailure: b(true)}}}, "s", Rules{Thresholds{0.7, 0.85}, true}},
		{Config{RollbackOnFailure: b(false), Steps: map[string]StepConfig{"s": {RollbackOnFailure: b(true)}}}, "t", Rules{Thresholds{0.7, 0.85}, false}},
	} {
		assert.Equal(t, tc.want, tc.cfg.Rules(tc.step), "step %q", tc.step)
	}

	// the same confidence classifies differently per step
	for step, want := range map[string]Status{"search": Passed, "other": Failed, "strict": Failed, "edit": Failed} {
		got, err := Classify(0.55, cfg.Rules(step).Thresholds)
		require.NoError(t, err)
		assert.Equal(t, want, got, step)
	}
	got, err := Classify(0.4, cfg.Rules("search").Thresholds)
	require.NoError(t, err)
	assert.Equal(t, Warning, got, "0.4 is between search's 0.3 and 0.5")
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		field  string
		reason string
	}{
		{"empty is the defaults", Config{}, "", ""},
		{"edges", Config{MinConfidence: f(0), WarningThreshold: f(1)}, "", ""},
		{"equal", Config{MinConfidence: f(0.8), WarningThreshold: f(0.8)}, "", ""},
		{"NaN min", Config{MinConfidence: f(math.NaN())}, "validation.minConfidence", "NaN is not a number in [0, 1]"},
		{"warning above one", Config{WarningThreshold: f(1.5)}, "validation.warningThreshold", "1.5 is out of range [0, 1]"},
		{"min above the default warning", Config{MinConfidence: f(0.9)}, "validation.minConfidence", "0.9 is above warningThreshold 0.85"},
		{"step out of range", Config{Steps: map[string]StepConfig{"s": {MinConfidence: f(-1)}}}, "validation.steps.s.minConfidence", "-1 is out of range [0, 1]"},
		{"step infinite", Config{Steps: map[string]StepConfig{"s": {WarningThreshold: f(math.Inf(1))}}}, "validation.steps.s.warningThreshold", "Infinity is not a number in [0, 1]"},
		{"step warning below the workflow min", Config{Steps: map[string]StepConfig{"s": {WarningThreshold: f(0.5)}}}, "validation.steps.s.minConfidence", "0.7 is above the step's warningThreshold 0.5"},
		{"step lowers both", Config{Steps: map[string]StepConfig{"s": {MinConfidence: f(0.2), WarningThreshold: f(0.5)}}}, "", ""},
		{"empty step name", Config{Steps: map[string]StepConfig{"": {}}}, "validation.steps", "a step name must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate("validation")
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, tc.field, fe.Field)
			assert.Equal(t, tc.reason, fe.Reason)
		})
	}
}

func TestRecommend(t *testing.T) {
	on := Rules{Thresholds{0.7, 0.85}, true}
	off := Rules{Thresholds{0.7, 0.85}, false}
	c := func(id string, seq int64, s Status) Candidate { return Candidate{id, seq, s} }
	for _, tc := range []struct {
		name    string
		status  Status
		rules   Rules
		seq     int64
		earlier []Candidate
		want    *Recommendation
	}{
		{"passed: none", Passed, on, 5, []Candidate{c("a", 1, Passed)}, nil},
		{"warning: none", Warning, on, 5, []Candidate{c("a", 1, Passed)}, nil},
		{"failed without rollbackOnFailure: none", Failed, off, 5, []Candidate{c("a", 1, Passed)}, nil},
		{"failed, no earlier checkpoint: full", Failed, on, 1, nil, &Recommendation{Kind: KindFull}},
		{"failed: the newest earlier passed", Failed, on, 6, []Candidate{c("a", 1, Passed), c("b", 3, Passed), c("x", 5, "")},
			&Recommendation{Kind: KindToCheckpoint, CheckpointID: "b"}},
		{"a warning is a target", Failed, on, 6, []Candidate{c("a", 1, Passed), c("w", 4, Warning)},
			&Recommendation{Kind: KindToCheckpoint, CheckpointID: "w"}},
		{"earlier failures are skipped", Failed, on, 9, []Candidate{c("a", 1, Passed), c("b", 3, Warning), c("f1", 5, Failed), c("f2", 7, Failed)},
			&Recommendation{Kind: KindToCheckpoint, CheckpointID: "b"}},
		{"every earlier one failed: full", Failed, on, 9, []Candidate{c("f0", 2, Failed), c("f1", 5, Failed)}, &Recommendation{Kind: KindFull}},
		{"only unvalidated earlier checkpoints: full", Failed, on, 9, []Candidate{c("x", 2, ""), c("y", 5, "")}, &Recommendation{Kind: KindFull}},
		{"later checkpoints are no target", Failed, on, 4, []Candidate{c("a", 1, Passed), c("later", 6, Passed)},
			&Recommendation{Kind: KindToCheckpoint, CheckpointID: "a"}},
		{"itself is no target", Failed, on, 4, []Candidate{c("self", 4, Passed)}, &Recommendation{Kind: KindFull}},
		{"order of the input does not matter", Failed, on, 9, []Candidate{c("b", 3, Passed), c("f", 8, Failed), c("a", 1, Passed)},
			&Recommendation{Kind: KindToCheckpoint, CheckpointID: "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Recommend(tc.status, tc.rules, tc.seq, tc.earlier))
		})
	}
	// Target without a bound: the newest good checkpoint of all
	got, ok := Target([]Candidate{c("a", 1, Passed), c("f", 8, Failed), c("b", 3, Warning)}, 0)
	require.True(t, ok)
	assert.Equal(t, "b", got.CheckpointID)
	_, ok = Target([]Candidate{c("f", 8, Failed)}, 0)
	assert.False(t, ok)
}

func TestToRunReverseRegistrationOrder(t *testing.T) {
	comps := []Compensation{
		{ID: "c1", Seq: 1, AfterSeq: 0, Status: CompDone},
		{ID: "c2", Seq: 2, AfterSeq: 2, Status: CompPending},
		{ID: "c3", Seq: 3, AfterSeq: 4, Status: CompPending},
		{ID: "c4", Seq: 4, AfterSeq: 4, Status: CompFailed},
		{ID: "c5", Seq: 5, AfterSeq: 6, Status: CompDone},
		{ID: "c6", Seq: 6, AfterSeq: 8, Status: CompPending},
		{ID: "c7", Seq: 7, AfterSeq: 9, Status: CompPending}, // registered after the rollback was planned
	}
	ids := func(cs []Compensation) []string {
		out := []string{}
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		scope Scope
		want  []string
		prog  Progress
	}{
		{"full", Scope{ToSeq: 0, MaxSeq: 6}, []string{"c6", "c4", "c3", "c2"}, Progress{Total: 6, Done: 2, Failed: 1, Pending: 3}},
		{"after checkpoint seq 4", Scope{ToSeq: 4, MaxSeq: 6}, []string{"c6", "c4", "c3"}, Progress{Total: 4, Done: 1, Failed: 1, Pending: 2}},
		{"after checkpoint seq 3 (registered at 4 counts)", Scope{ToSeq: 3, MaxSeq: 6}, []string{"c6", "c4", "c3"}, Progress{Total: 4, Done: 1, Failed: 1, Pending: 2}},
		{"after the newest checkpoint", Scope{ToSeq: 9, MaxSeq: 7}, []string{"c7"}, Progress{Total: 1, Pending: 1}},
		{"later registrations are not in the scope", Scope{ToSeq: 8, MaxSeq: 6}, []string{"c6"}, Progress{Total: 1, Pending: 1}},
		{"nothing after", Scope{ToSeq: 10, MaxSeq: 7}, []string{}, Progress{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ids(ToRun(comps, tc.scope)))
			assert.Equal(t, tc.prog, Count(comps, tc.scope))
		})
	}
	// marking done shrinks the plan and never brings an action back
	comps[5].Status = CompDone
	comps[2].Status = CompDone
	assert.Equal(t, []string{"c4", "c2"}, ids(ToRun(comps, Scope{MaxSeq: 6})))
}

func TestChooseRollback(t *testing.T) {
	def := &Candidate{CheckpointID: "good", Seq: 3, Status: Passed}
	un := &Rollback{ID: "r1", ToCheckpointID: "good"}
	full := &Rollback{ID: "r2", Full: true}
	for _, tc := range []struct {
		name       string
		req        Request
		unfinished *Rollback
		def        *Candidate
		want       Decision
		conflict   bool
	}{
		{"default target", Request{}, nil, def, Decision{ToCheckpointID: "good"}, false},
		{"no good checkpoint: full", Request{}, nil, nil, Decision{Full: true}, false},
		{"explicit target", Request{ToCheckpointID: "c-1"}, nil, def, Decision{ToCheckpointID: "c-1"}, false},
		{"explicit full", Request{Full: true}, nil, def, Decision{Full: true}, false},
		{"unfinished, no target: continue", Request{}, un, def, Decision{Reuse: true, ToCheckpointID: "good"}, false},
		{"unfinished, same target: continue", Request{ToCheckpointID: "good"}, un, nil, Decision{Reuse: true, ToCheckpointID: "good"}, false},
		{"unfinished full, full again: continue", Request{Full: true}, full, def, Decision{Reuse: true, Full: true}, false},
		{"unfinished, another target: refused", Request{ToCheckpointID: "other"}, un, def, Decision{}, true},
		{"unfinished, full instead: refused", Request{Full: true}, un, def, Decision{}, true},
		{"unfinished full, a target instead: refused", Request{ToCheckpointID: "good"}, full, def, Decision{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Choose(tc.req, tc.unfinished, tc.def)
			if tc.conflict {
				var ue *UnfinishedError
				require.True(t, errors.As(err, &ue), "%v", err)
				assert.Equal(t, tc.unfinished.ID, ue.Rollback.ID)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCheckRequired(t *testing.T) {
	cfg := CompensationConfig{Required: []string{"write", "deploy"}}
	for _, tc := range []struct {
		name       string
		cfg        CompensationConfig
		phase      string
		step       string
		registered bool
		problem    bool
	}{
		{"required, none registered", cfg, "completed", "write", false, true},
		{"required, registered", cfg, "completed", "write", true, false},
		{"not required", cfg, "completed", "read", false, false},
		{"before_step needs none yet", cfg, "before_step", "write", false, false},
		{"failed needs none", cfg, "failed", "deploy", false, false},
		{"interrupted needs none", cfg, "interrupted", "deploy", false, false},
		{"no step name", cfg, "completed", "", false, false},
		{"nothing configured", CompensationConfig{}, "completed", "write", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := CheckRequired(tc.cfg, tc.phase, tc.step, tc.registered)
			if !tc.problem {
				assert.Nil(t, p)
				return
			}
			require.NotNil(t, p)
			assert.Equal(t, CodeCompensationRequired, p.Code)
			assert.Equal(t, tc.step, p.StepName)
			assert.Contains(t, p.Message, `"`+tc.step+`"`)
		})
	}
	var fe *FieldError
	require.True(t, errors.As(CompensationConfig{Required: []string{"a", ""}}.Validate("compensation"), &fe))
	assert.Equal(t, "compensation.required[1]", fe.Field)
	assert.NoError(t, cfg.Validate("compensation"))
}
