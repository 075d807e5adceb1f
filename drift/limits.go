package drift

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults and ceilings of Limits.
const (
	DefaultMaxFiles = 1_000_000
	DefaultMaxBytes = 4 << 30 // 4 GiB
	DefaultTimeout  = 2 * time.Minute

	MaxMaxFiles  = 100_000_000
	MaxMaxBytes  = 1 << 50 // 1 PiB
	MaxTimeoutMs = 3_600_000
)

// Limits bound one scan, check or watch (re)scan of a tree; a zero field takes its default.
// Every bound is checked while the tree is walked and while a file is hashed, so a scan stops
// within milliseconds of reaching one (or of its context's cancellation).
type Limits struct {
	// MaxFiles bounds the files, symlinks and directories the scan records (default 1,000,000);
	// a directory listing more names than that reaches it too.
	MaxFiles int64 `json:"maxFiles,omitempty"`
	// MaxBytes bounds the file content hashed: the size of every file read, holes of sparse
	// files included (they are hashed as the zeros they read as, without being read from
	// disk). Files whose stat data did not change since the previous fingerprint are not read
	// and do not count. A file that would pass the bound fails the scan before it is read.
	// Default 4 GiB.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// TimeoutMs bounds the scan's wall time (default 120,000: 2 minutes).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`

	given uint8 // fields present in the JSON it was decoded from (an explicit 0 is an error)
}

const (
	givenMaxFiles = 1 << iota
	givenMaxBytes
	givenTimeout
)

// UnmarshalJSON decodes limits, remembering which fields were given.
func (l *Limits) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] != '{' && !bytes.Equal(t, []byte("null")) {
		kind := map[byte]string{'"': "string", '[': "array", 't': "bool", 'f': "bool"}[t[0]]
		if kind == "" {
			kind = "number"
		}
		return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeFor[Limits]()}
	}
	var p struct {
		MaxFiles  *int64 `json:"maxFiles"`
		MaxBytes  *int64 `json:"maxBytes"`
		TimeoutMs *int64 `json:"timeoutMs"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*l = Limits{}
	if p.MaxFiles != nil {
		l.MaxFiles, l.given = *p.MaxFiles, l.given|givenMaxFiles
	}
	if p.MaxBytes != nil {
		l.MaxBytes, l.given = *p.MaxBytes, l.given|givenMaxBytes
	}
	if p.TimeoutMs != nil {
		l.TimeoutMs, l.given = *p.TimeoutMs, l.given|givenTimeout
	}
	return nil
}

// Validate checks each field is 0 (the default; not when given explicitly in JSON) or
// within [1, ceiling]. Errors wrap ErrInvalidSpec and name the field: "limits.maxFiles ...".
func (l *Limits) Validate() error {
	if l == nil {
		return nil
	}
	for _, f := range []struct {
		name      string
		v, max    int64
		givenFlag uint8
	}{
		{"maxFiles", l.MaxFiles, MaxMaxFiles, givenMaxFiles},
		{"maxBytes", l.MaxBytes, MaxMaxBytes, givenMaxBytes},
		{"timeoutMs", l.TimeoutMs, MaxTimeoutMs, givenTimeout},
	} {
		if f.v < 0 || f.v > f.max || (f.v == 0 && l.given&f.givenFlag != 0) {
			return fmt.Errorf("%w: limits.%s must be between 1 and %d (got %d)", ErrInvalidSpec, f.name, f.max, f.v)
		}
	}
	return nil
}

// resolved returns l with the defaults filled in.
func (l *Limits) resolved() Limits {
	r := Limits{MaxFiles: DefaultMaxFiles, MaxBytes: DefaultMaxBytes, TimeoutMs: DefaultTimeout.Milliseconds()}
	if l == nil {
		return r
	}
	if l.MaxFiles > 0 {
		r.MaxFiles = l.MaxFiles
	}
	if l.MaxBytes > 0 {
		r.MaxBytes = l.MaxBytes
	}
	if l.TimeoutMs > 0 {
		r.TimeoutMs = l.TimeoutMs
	}
	return r
}

// ErrLimit matches every *LimitError.
var ErrLimit = errors.New("drift scan bound reached")

// LimitError says a scan stopped at one of its Limits.
type LimitError struct {
	Root  string
	Limit string // "maxFiles", "maxBytes" or "timeoutMs": the field of Limits
	Value int64  // the bound
	Path  string // maxBytes: the file that would have passed it; maxFiles: a directory listing more names
}

func (e *LimitError) Error() string {
	var what string
	switch e.Limit {
	case "maxFiles":
		what = fmt.Sprintf("more than %d files, symlinks and directories", e.Value)
		if e.Path != "" {
			what = fmt.Sprintf("directory %s lists more than %d names", e.Path, e.Value)
		}
	case "maxBytes":
		what = fmt.Sprintf("more than %d bytes of file content to hash", e.Value)
		if e.Path != "" {
			what += " (at " + e.Path + ")"
		}
	case "timeoutMs":
		what = fmt.Sprintf("not done within %v", time.Duration(e.Value)*time.Millisecond)
	}
	return fmt.Sprintf("scan of %s stopped: %s (limits.%s = %d)", e.Root, what, e.Limit, e.Value)
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// ErrResource matches a scan or watch that failed because the process ran out of a resource
// (file descriptors, memory, inotify instances): not a property of the tree, retry later.
var ErrResource = errors.New("out of a system resource")

type resourceError struct {
	op   string
	err  error
	hint string // which limit was hit, " (...)"
}

func newResourceError(op string, err error) *resourceError {
	return &resourceError{op: op, err: err, hint: resourceHint(err)}
}

func (e *resourceError) Error() string { return e.op + ": " + e.err.Error() + e.hint }
func (e *resourceError) Unwrap() []error {
	return []error{e.err, ErrResource}
}

// faultFunc is the fault-injection hook of tests: a non-nil error is returned instead of
// doing op on path (relative to the root; "" is the root). nil in production.
type faultFunc func(op, path string) error

// Fault-injection points.
const (
	opOpenDir     = "open-dir"
	opReadDir     = "readdir"
	opOpenFile    = "open-file"
	opRead        = "read"
	opStat        = "stat"
	opInotifyInit = "inotify-init"
	opInotifyAdd  = "inotify-add"
	opInotifyRead = "inotify-read"
	opSync        = "sync"
)

// scanCtl is the shared state of one bounded scan: the budget of files and bytes, the
// deadline, cancellation, the first fatal error, and what could not be read.
type scanCtl struct {
	root  string
	lim   Limits
	fault faultFunc

	ctx     context.Context
	cancel  context.CancelFunc
	stopAft func() bool

	stop  atomic.Bool // set once the scan must end (error, bound, cancellation)
	files atomic.Int64
	bytes atomic.Int64

	mu         sync.Mutex
	err        error
	unreadable map[string]bool
}

// newScanCtl starts the clock of a scan of root bounded by lim (nil: the defaults).
func newScanCtl(ctx context.Context, root string, lim *Limits, fault faultFunc) *scanCtl {
	c := &scanCtl{root: root, lim: lim.resolved(), fault: fault}
	timeout := time.Duration(c.lim.TimeoutMs) * time.Millisecond
	c.ctx, c.cancel = context.WithTimeoutCause(ctx, timeout,
		&LimitError{Root: root, Limit: "timeoutMs", Value: c.lim.TimeoutMs})
	c.stopAft = context.AfterFunc(c.ctx, func() { c.stop.Store(true) })
	return c
}

// stopped reports whether the scan must end now; it is one atomic load.
func (c *scanCtl) stopped() bool { return c != nil && c.stop.Load() }

// fail records the scan's first fatal error and stops it.
func (c *scanCtl) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.stop.Store(true)
}

// addFiles counts n recorded paths; false (and the scan failed) past MaxFiles.
func (c *scanCtl) addFiles(n int64) bool {
	if c == nil {
		return true
	}
	if c.files.Add(n) > c.lim.MaxFiles {
		c.fail(&LimitError{Root: c.root, Limit: "maxFiles", Value: c.lim.MaxFiles})
		return false
	}
	return true
}

// reserveBytes counts a file of n bytes about to be hashed; false (and the scan failed)
// when it would pass MaxBytes.
func (c *scanCtl) reserveBytes(n int64, rel string) bool {
	if c == nil {
		return true
	}
	if c.bytes.Add(n) > c.lim.MaxBytes {
		c.fail(&LimitError{Root: c.root, Limit: "maxBytes", Value: c.lim.MaxBytes, Path: rel})
		return false
	}
	return true
}

// inject consults the fault hook.
func (c *scanCtl) inject(op, path string) error {
	if c == nil || c.fault == nil {
		return nil
	}
	return c.fault(op, path)
}

// noteUnreadable records a path (a directory as "dir/", the root as "./") whose current
// state could not be read.
func (c *scanCtl) noteUnreadable(p string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.unreadable == nil {
		c.unreadable = map[string]bool{}
	}
	c.unreadable[p] = true
	c.mu.Unlock()
}

func dirKey(rel string) string {
	if rel == "" {
		return "./"
	}
	return rel + "/"
}

// pathErr handles an error met on a path: a resource error fails the scan (true: stop
// working on it); anything else is for the caller to record.
func (c *scanCtl) pathErr(rel string, err error) bool {
	if isResource(err) {
		c.fail(newResourceError("drift scan of "+c.root+": "+displayRel(rel), err))
		return true
	}
	return false
}

func displayRel(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// finish releases the scan's timer and returns why it failed, if it did: its first fatal
// error, a bound, or the cancellation of the caller's context.
func (c *scanCtl) finish() error {
	c.stopAft()
	defer c.cancel()
	return c.errNow()
}

// errNow is why the scan stopped, nil while it runs.
func (c *scanCtl) errNow() error {
	if !c.stop.Load() && c.ctx.Err() == nil {
		return nil
	}
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	var le *LimitError
	if cause := context.Cause(c.ctx); errors.As(cause, &le) {
		return le
	}
	if err := c.ctx.Err(); err != nil {
		return fmt.Errorf("drift scan of %s: %w", c.root, err)
	}
	return nil
}

// restart gives a full scan that replaces a failed quick check a fresh budget (the clock
// keeps running).
func (c *scanCtl) restart() {
	c.files.Store(0)
	c.bytes.Store(0)
	c.mu.Lock()
	c.unreadable = nil
	c.mu.Unlock()
}

// unreadablePaths returns what could not be read, sorted.
func (c *scanCtl) unreadablePaths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.unreadable))
	for p := range c.unreadable {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
