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

// Why a backend stops accepting writes (Condition.Reason, and the reason of the -32006 error
// that refuses a write on the wire). Short and stable: clients may match them.
const (
	// ReasonDamaged: the database reported corruption (a damaged page, not a SQLite file any
	// more). Writing could spread the damage; reads of what is intact keep working.
	ReasonDamaged = "database damaged"
	// ReasonRemoved: the database file was deleted (or its directory) while open: whatever is
	// written now is gone once the process exits.
	ReasonRemoved = "database file removed"
	// ReasonReplaced: another file now sits at the database's path (renamed over it): writes
	// would go to a file no one else can open.
	ReasonReplaced = "database file replaced"
	// ReasonDiskFull: the disk was full when the database was opened, so it was opened
	// read-only.
	ReasonDiskFull = "disk full"
	// ReasonReadOnly: the backend was opened read-only on purpose (a tool that only reads,
	// such as ckptd recover reading a damaged database).
	ReasonReadOnly = "opened read-only"
)

// UnavailableError is a write refused because of the backend's Condition: Reason is one of the
// Reason constants, Detail says what was seen and what to do. It matches ErrUnavailable with
// errors.Is.
type UnavailableError struct {
	Reason string
	Detail string
}

func (e *UnavailableError) Error() string {
	if e.Detail == "" {
		return e.Reason
	}
	return e.Reason + ": " + e.Detail
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }
