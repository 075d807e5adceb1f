// Package saga is the pure logic of validation checkpoints and the compensation log: how a
// step's confidence is classified against the workflow's thresholds (with per-step overrides and
// defaults), which checkpoint a failed validation recommends rolling back to, which registered
// compensations a rollback must run and in what order, and whether a step that must register a
// compensation did. It does no I/O: package engine gathers the facts from the store and calls it.
package saga

import (
	"fmt"
	"math"
	"sort"
	"strconv"
)

// Status is the classification of a step's validation (binding wire values).
type Status string

const (
	Passed  Status = "passed"
	Warning Status = "warning"
	Failed  Status = "failed"
)

// Valid reports whether s is one of the three statuses.
func (s Status) Valid() bool {
	switch s {
	case Passed, Warning, Failed:
		return true
	}
	return false
}

// Defaults of a workflow's validation config (docs/protocol.md, workflow/configure).
const (
	DefaultMinConfidence     = 0.7
	DefaultWarningThreshold  = 0.85
	DefaultRollbackOnFailure = true
)

// Thresholds is what a confidence is compared with.
type Thresholds struct {
	Min     float64 `json:"min"`
	Warning float64 `json:"warning"`
}

// Rules are the validation rules in force for one step.
type Rules struct {
	Thresholds
	RollbackOnFailure bool
}

// StepConfig overrides the workflow's rules for one step; nil fields inherit them.
type StepConfig struct {
	MinConfidence     *float64 `json:"minConfidence,omitempty"`
	WarningThreshold  *float64 `json:"warningThreshold,omitempty"`
	RollbackOnFailure *bool    `json:"rollbackOnFailure,omitempty"`
}

// Config is a workflow's validation config as configured; nil fields take the defaults. Its
// JSON form is the one stored (and the wire's).
type Config struct {
	MinConfidence     *float64              `json:"minConfidence,omitempty"`
	WarningThreshold  *float64              `json:"warningThreshold,omitempty"`
	RollbackOnFailure *bool                 `json:"rollbackOnFailure,omitempty"`
	Steps             map[string]StepConfig `json:"steps,omitempty"`
}

// FieldError says which field of a config or a validation is wrong (the RPC answers -32602
// naming Field).
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Rules returns the rules in force for step: the step's overrides, else the workflow's
// settings, else the defaults.
func (c Config) Rules(step string) Rules {
	r := Rules{Thresholds: Thresholds{Min: DefaultMinConfidence, Warning: DefaultWarningThreshold}, RollbackOnFailure: DefaultRollbackOnFailure}
	if c.MinConfidence != nil {
		r.Min = *c.MinConfidence
	}
	if c.WarningThreshold != nil {
		r.Warning = *c.WarningThreshold
	}
	if c.RollbackOnFailure != nil {
		r.RollbackOnFailure = *c.RollbackOnFailure
	}
	if s, ok := c.Steps[step]; ok {
		if s.MinConfidence != nil {
			r.Min = *s.MinConfidence
		}
		if s.WarningThreshold != nil {
			r.Warning = *s.WarningThreshold
		}
		if s.RollbackOnFailure != nil {
			r.RollbackOnFailure = *s.RollbackOnFailure
		}
	}
	return r
}

// Validate checks every threshold is a number in [0, 1] and that, for the workflow and for each
// step, the minimum confidence in force does not exceed the warning threshold in force. field
// is the config's own name ("validation"); errors name the field inside it.
func (c Config) Validate(field string) error {
	check := func(name string, v *float64) error {
		if v == nil {
			return nil
		}
		return checkUnit(field+"."+name, *v)
	}
	if err := check("minConfidence", c.MinConfidence); err != nil {
		return err
	}
	if err := check("warningThreshold", c.WarningThreshold); err != nil {
		return err
	}
	global := Config{MinConfidence: c.MinConfidence, WarningThreshold: c.WarningThreshold}
	if r := global.Rules(""); r.Min > r.Warning {
		return &FieldError{Field: field + ".minConfidence", Reason: fmt.Sprintf("%s is above warningThreshold %s", num(r.Min), num(r.Warning))}
	}
	names := make([]string, 0, len(c.Steps))
	for name := range c.Steps {
		names = append(names, name)
	}
	sort.Strings(names) // the first bad step in a stable order
	for _, name := range names {
		s := c.Steps[name]
		prefix := field + ".steps." + name
		if name == "" {
			return &FieldError{Field: field + ".steps", Reason: "a step name must not be empty"}
		}
		if err := check("steps."+name+".minConfidence", s.MinConfidence); err != nil {
			return err
		}
		if err := check("steps."+name+".warningThreshold", s.WarningThreshold); err != nil {
			return err
		}
		if r := c.Rules(name); r.Min > r.Warning {
			return &FieldError{Field: prefix + ".minConfidence", Reason: fmt.Sprintf("%s is above the step's warningThreshold %s", num(r.Min), num(r.Warning))}
		}
	}
	return nil
}

// CheckConfidence refuses a confidence that is not a number in [0, 1] (NaN, infinities, out of
// range), naming field.
func CheckConfidence(field string, v float64) error { return checkUnit(field, v) }

func checkUnit(field string, v float64) error {
	switch {
	case math.IsNaN(v):
		return &FieldError{Field: field, Reason: "NaN is not a number in [0, 1]"}
	case math.IsInf(v, 0):
		return &FieldError{Field: field, Reason: num(v) + " is not a number in [0, 1]"}
	case v < 0 || v > 1:
		return &FieldError{Field: field, Reason: num(v) + " is out of range [0, 1]"}
	}
	return nil
}

func num(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "Infinity"
	case math.IsInf(v, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Classify classifies a confidence against the thresholds: at or above Warning it passed, at or
// above Min it is a warning, below Min it failed. A confidence that is not a number in [0, 1]
// is an error (naming "validation.confidence").
func Classify(confidence float64, t Thresholds) (Status, error) {
	if err := CheckConfidence("validation.confidence", confidence); err != nil {
		return "", err
	}
	switch {
	case confidence >= t.Warning:
		return Passed, nil
	case confidence >= t.Min:
		return Warning, nil
	}
	return Failed, nil
}
