package engine

// Sources specs (a drift.Spec given to checkpoint/save or workflow/configure) and how their
// failures are said.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/ckptd/ckptd/drift"
)

// SourcesError is a sources spec that cannot be used, naming the field at fault (e.g.
// "sources.root"). Its text is the -32602 message: "invalid params: FIELD: REASON".
type SourcesError struct {
	Field  string
	Reason string
}

func (e *SourcesError) Error() string { return "invalid params: " + e.Field + ": " + e.Reason }

// UnavailableError says a source tree could not be read (fingerprinted, checked or watched)
// for a reason that is not the caller's input: Msg is the whole message, Err the cause.
type UnavailableError struct {
	Msg   string
	Err   error
	Limit *drift.LimitError // the bound a scan reached, if that was the cause
}

func (e *UnavailableError) Error() string { return e.Msg }
func (e *UnavailableError) Unwrap() error { return e.Err }

var specFieldRe = regexp.MustCompile(`\b(include|exclude)\[\d+\]|\blimits\.(maxFiles|maxBytes|timeoutMs)\b`)

// CheckSources validates a decoded sources spec (field names it in errors, as a *SourcesError).
// The root must be an existing directory; a relative root is taken relative to the working
// directory and returned absolute.
func CheckSources(field string, spec drift.Spec) (drift.Spec, error) {
	if err := spec.Validate(); err != nil {
		return drift.Spec{}, specError(field, spec.Root, err)
	}
	if abs, err := filepath.Abs(spec.Root); err == nil {
		spec.Root = abs
	}
	return spec, nil
}

// parseSources decodes and validates sources stored with workflow/configure (made by
// json.Marshal of a checked spec; the rpc package decodes the sources params itself).
func parseSources(field string, raw json.RawMessage) (drift.Spec, error) {
	if b := bytes.TrimSpace(raw); len(b) == 0 || b[0] != '{' {
		return drift.Spec{}, &SourcesError{field, "must be an object {root, include?, exclude?, gitignore?}"}
	}
	var spec drift.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return drift.Spec{}, &SourcesError{field, err.Error()}
	}
	return CheckSources(field, spec)
}

// specError maps a drift spec error to a *SourcesError naming the sources field at fault.
func specError(field, root string, err error) *SourcesError {
	msg := err.Error()
	switch {
	case errors.Is(err, drift.ErrRootNotFound):
		return &SourcesError{field + ".root", fmt.Sprintf("directory %s does not exist", strconv.Quote(root))}
	case errors.Is(err, drift.ErrRootNotDir):
		return &SourcesError{field + ".root", fmt.Sprintf("%s is not a directory", strconv.Quote(root))}
	case errors.Is(err, drift.ErrInvalidSpec):
		reason := strings.TrimPrefix(msg, drift.ErrInvalidSpec.Error()+": ")
		if m := specFieldRe.FindString(reason); m != "" {
			if field != "" {
				m = field + "." + m
			}
			return &SourcesError{m, reason}
		}
		if strings.HasPrefix(reason, "root") {
			if strings.TrimSpace(root) == "" {
				return &SourcesError{field + ".root", "required"}
			}
			return &SourcesError{field + ".root", reason}
		}
		return &SourcesError{field, reason}
	}
	return &SourcesError{field + ".root", msg}
}

// fingerprintError explains a scan/check failure: a *SourcesError for a bad spec or a root
// that is gone or on a pseudo file system, else an *UnavailableError. A bound reached names it
// (limitsField.maxFiles ...; the error's Limit says which, Value its value).
func fingerprintError(field, limitsField, root string, err error) error {
	var le *drift.LimitError
	switch {
	case errors.Is(err, drift.ErrRootNotFound), errors.Is(err, drift.ErrRootNotDir), errors.Is(err, drift.ErrInvalidSpec),
		errors.Is(err, drift.ErrRootPseudoFS):
		return specError(field, root, err)
	case errors.As(err, &le):
		return &UnavailableError{Msg: fmt.Sprintf("fingerprinting %s stopped at %s.%s = %d (raise it, or narrow include/exclude): %v",
			root, limitsField, le.Limit, le.Value, err), Err: err, Limit: le}
	}
	return &UnavailableError{Msg: fmt.Sprintf("fingerprinting %s: %v", root, err), Err: err}
}

// CheckLimits validates the limits param of drift/status and drift/watch (a *SourcesError
// naming limits.FIELD).
func CheckLimits(lim *drift.Limits) error {
	if err := lim.Validate(); err != nil {
		return specError("", "", err)
	}
	return nil
}

// limitsField names the limits that bounded a check: the request's, or the sources'.
func limitsField(explicit *drift.Limits) string {
	if explicit != nil {
		return "limits"
	}
	return "sources.limits"
}

// ConfiguredLimits returns the limits of a configured sources spec (workflow/configure) if it
// is on root, else nil.
func ConfiguredLimits(cfg json.RawMessage, root string) *drift.Limits {
	if len(cfg) == 0 {
		return nil
	}
	var spec drift.Spec
	if json.Unmarshal(cfg, &spec) != nil || spec.Root != root {
		return nil
	}
	return spec.Limits
}
