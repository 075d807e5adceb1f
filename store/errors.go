package store

import (
	"errors"
	"fmt"
	"strconv"
)

// Errors a backend returns; callers test them with errors.Is / errors.As.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrTooLarge    = errors.New("too large")
	ErrUnavailable = errors.New("storage unavailable")
	ErrClosed      = errors.New("store closed")
)

// CorruptError says a stored checkpoint failed verification.
type CorruptError struct {
	CheckpointID string
	WorkflowID   string // the checkpoint's workflow, when it could be read
	Reason       string
	// AlsoCorrupt: loading a workflow's latest checkpoint found every one corrupt; this one is
	// the newest, AlsoCorrupt the older ones, newest first.
	AlsoCorrupt []Recovery
}

func (e *CorruptError) Error() string {
	return "checkpoint " + e.CheckpointID + " is corrupt: " + e.Reason
}

// InvalidError says a request carried a value the store cannot accept.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return "invalid " + e.Field + ": " + e.Reason }

// Invalid returns an *InvalidError for field.
func Invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// TooLargeError says a state exceeds Options.MaxStateBytes. It matches ErrTooLarge with errors.Is.
type TooLargeError struct {
	Limit int64
	Size  int64
}

func (e *TooLargeError) Error() string {
	return "state of " + strconv.FormatInt(e.Size, 10) + " bytes exceeds the limit of " +
		strconv.FormatInt(e.Limit, 10) + " bytes: " + ErrTooLarge.Error()
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }
