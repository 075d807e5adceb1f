package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"time"
)

// Workflow list orders (WorkflowFilter.Order).
const (
	// OrderUpdated lists the most recently updated workflows first (ties: workflowId
	// descending). The default. A workflow saved between two pages moves ahead of the cursor:
	// it is never listed twice, and may be missed by a listing under way.
	OrderUpdated = "updated"
	// OrderID lists workflows by workflowId, ascending (byte order): every workflow that exists
	// from the first page to the last is listed exactly once.
	OrderID = "id"
	// OrderStored lists the largest workflows (stored bytes) first, one page only (no cursor):
	// for reports (ckptd stats), not on the wire.
	OrderStored = "stored"
)

// Workflow list page sizes.
const (
	DefaultWorkflowPage = 1000
	MaxWorkflowPage     = MaxListLimit
)

// WorkflowFilter selects one page of workflows (Workflows.ListWorkflows).
type WorkflowFilter struct {
	// ResumableOnly keeps the workflows with checkpoints that are not completed.
	ResumableOnly bool
	// Claimable keeps the resumable workflows whose claim is free at the database's clock
	// (Claim.Free), least recently updated first with Order "" (OrderUpdated is refused: it
	// means newest first); OrderID lists them by id.
	Claimable bool
	Order     string // OrderUpdated (""), OrderID, OrderStored
	Limit     int    // 0: DefaultWorkflowPage; at most MaxWorkflowPage
	Cursor    string // from the previous page's WorkflowPage.Cursor; "" : the first page
}

// WorkflowPage is one page of ListWorkflows.
type WorkflowPage struct {
	Workflows []WorkflowInfo
	// Cursor continues the listing after this page; "" when no workflow follows.
	Cursor string
}

// WorkflowKey is a workflow's position in a listing: what a cursor holds.
type WorkflowKey struct {
	UpdatedAt time.Time // unused by OrderID
	ID        string
}

// workflowCursorKinds tag a cursor with the listing it continues: a cursor of one order given
// to another would skip or repeat workflows.
const (
	cursorUpdated   = "u"
	cursorID        = "i"
	cursorClaimable = "c"
	cursorClaimByID = "k"
)

func (f WorkflowFilter) cursorKind() string {
	switch {
	case f.Claimable && f.Order == OrderID:
		return cursorClaimByID
	case f.Claimable:
		return cursorClaimable
	case f.Order == OrderID:
		return cursorID
	}
	return cursorUpdated
}

// Normalize checks f and fills its defaults: an *InvalidError names the field at fault.
func (f *WorkflowFilter) Normalize() error {
	switch f.Order {
	case "":
	case OrderUpdated:
		if f.Claimable {
			return Invalid("order", `claimable workflows are listed least recently updated first: give "id" or leave order out`)
		}
	case OrderID:
	case OrderStored:
		if f.Cursor != "" || f.Claimable || f.ResumableOnly {
			return Invalid("order", `"stored" lists one page of every workflow`)
		}
	default:
		return Invalid("order", `%q is not "updated" or "id"`, f.Order)
	}
	if f.Claimable {
		f.ResumableOnly = true
	}
	switch {
	case f.Limit == 0:
		f.Limit = DefaultWorkflowPage
	case f.Limit < 0 || f.Limit > MaxWorkflowPage:
		return Invalid("limit", "must be between 1 and %d", MaxWorkflowPage)
	}
	return nil
}

// Ascending reports whether f's listing walks its keys upwards (ids, claimable by age).
func (f WorkflowFilter) Ascending() bool { return f.Order == OrderID || f.Claimable }

// EncodeCursor is the opaque cursor continuing f's listing after k.
func (f WorkflowFilter) EncodeCursor(k WorkflowKey) string {
	v := []any{f.cursorKind(), k.ID}
	if f.Order != OrderID {
		v = append(v, k.UpdatedAt.UnixMicro())
	}
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor reads f.Cursor: nil for the first page, an *InvalidError for anything that is
// not a cursor of the same listing.
func (f WorkflowFilter) DecodeCursor() (*WorkflowKey, error) {
	if f.Cursor == "" {
		return nil, nil
	}
	bad := Invalid("cursor", "not a cursor from workflow/list with this order and filter")
	b, err := base64.RawURLEncoding.DecodeString(f.Cursor)
	if err != nil {
		return nil, bad
	}
	var v []json.RawMessage
	var kind string
	var k WorkflowKey
	if json.Unmarshal(b, &v) != nil || len(v) < 2 || json.Unmarshal(v[0], &kind) != nil || kind != f.cursorKind() ||
		json.Unmarshal(v[1], &k.ID) != nil {
		return nil, bad
	}
	if f.Order == OrderID {
		if len(v) != 2 {
			return nil, bad
		}
		return &k, nil
	}
	var micros int64
	if len(v) != 3 || json.Unmarshal(v[2], &micros) != nil {
		return nil, bad
	}
	k.UpdatedAt = time.UnixMicro(micros).UTC()
	return &k, nil
}

// Page finishes a page read with one row more than f.Limit asked for: it drops the extra row
// and sets the cursor when there was one.
func (f WorkflowFilter) Page(ws []WorkflowInfo) WorkflowPage {
	if len(ws) <= f.Limit || f.Order == OrderStored {
		if len(ws) > f.Limit {
			ws = ws[:f.Limit]
		}
		return WorkflowPage{Workflows: ws}
	}
	ws = ws[:f.Limit]
	last := ws[len(ws)-1]
	return WorkflowPage{Workflows: ws, Cursor: f.EncodeCursor(WorkflowKey{UpdatedAt: last.UpdatedAt, ID: last.WorkflowID})}
}

// WorkflowLister is what AllWorkflows needs of a backend.
type WorkflowLister interface {
	ListWorkflows(ctx context.Context, f WorkflowFilter) (WorkflowPage, error)
}

// AllWorkflows lists every workflow (resumableOnly: the resumable ones), most recently updated
// first, page by page: for tools and tests that want them all.
func AllWorkflows(ctx context.Context, b WorkflowLister, resumableOnly bool) ([]WorkflowInfo, error) {
	var out []WorkflowInfo
	f := WorkflowFilter{ResumableOnly: resumableOnly, Limit: MaxWorkflowPage}
	for {
		p, err := b.ListWorkflows(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Workflows...)
		if p.Cursor == "" {
			return out, nil
		}
		f.Cursor = p.Cursor
	}
}

// ClaimableWorkflows lists the claimable workflows (WorkflowFilter.Claimable), least recently
// updated first, at most limit of them (0: all), page by page.
func ClaimableWorkflows(ctx context.Context, b WorkflowLister, limit int) ([]WorkflowInfo, error) {
	var out []WorkflowInfo
	f := WorkflowFilter{Claimable: true, Limit: MaxWorkflowPage}
	for {
		if limit > 0 {
			f.Limit = min(MaxWorkflowPage, limit-len(out))
		}
		p, err := b.ListWorkflows(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Workflows...)
		if p.Cursor == "" || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
		f.Cursor = p.Cursor
	}
}

// LGThreadList is one page of LangGraph threads (LangGraph.ListLGThreads), most recently
// updated first (ties: by threadId), those without checkpoints last: LGThreads' order.
type LGThreadList struct {
	Threads []LGThread
	// Cursor continues the listing after this page; "" when no thread follows.
	Cursor string
	// Total is the number of threads with checkpoints.
	Total int
}

// EncodeLGThreadCursor is the opaque cursor continuing a thread listing after t.
func EncodeLGThreadCursor(t LGThread) string {
	var micros int64 // 0: a thread without checkpoints (sorted last)
	if !t.UpdatedAt.IsZero() {
		micros = t.UpdatedAt.UnixMicro()
	}
	b, _ := json.Marshal([]any{"t", t.ThreadID, micros})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeLGThreadCursor reads EncodeLGThreadCursor's cursor: the position after a thread (nil
// for ""), an *InvalidError for anything else.
func DecodeLGThreadCursor(c string) (*WorkflowKey, error) {
	if c == "" {
		return nil, nil
	}
	bad := Invalid("cursor", "not a cursor of a LangGraph thread listing")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, bad
	}
	var v []json.RawMessage
	var kind string
	var k WorkflowKey
	var micros int64
	if json.Unmarshal(b, &v) != nil || len(v) != 3 || json.Unmarshal(v[0], &kind) != nil || kind != "t" ||
		json.Unmarshal(v[1], &k.ID) != nil || json.Unmarshal(v[2], &micros) != nil {
		return nil, bad
	}
	k.UpdatedAt = time.UnixMicro(micros).UTC()
	return &k, nil
}
