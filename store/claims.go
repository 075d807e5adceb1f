package store

// Claims: handing a workflow over between workers (docs/protocol.md, "Claims"). A worker claims a
// workflow for a lease and gets a fencing token; it renews the lease while it works and releases
// the claim at the end. A claim whose lease ran out can be taken over by another worker, under a
// higher token. Every write of the workflow carries the writer's token, and the backend refuses
// it, inside the write's own transaction, unless CheckFence passes: a worker that lost its lease
// (paused, partitioned) can never overwrite the new owner's progress.
//
// The decisions are these plain functions, written once; a backend reads the claim row, reads
// its database's clock, decides, and writes the row back in one transaction. The clock is the
// database's, never a client's or a worker's: every process that shares the database then
// agrees on whether a lease has run out, however their own clocks are set.

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Limits of claims.
const (
	// MaxLease is the longest lease a claim or a renewal may ask for.
	MaxLease = 24 * time.Hour
	// MaxOwnerBytes bounds an owner name.
	MaxOwnerBytes = 512
)

// Claim is a workflow's claim as stored: who holds it, until when, under which fencing token.
// The same row names a LangGraph thread: a thread id is claimed like a workflow id.
type Claim struct {
	WorkflowID string
	// Owner holds the claim; "" when it was released (or never made).
	Owner string
	// Token is the fencing token of the latest claim, 0 when the workflow was never claimed. It
	// grows by one with every claim granted and never goes back: a release keeps it, and
	// nothing deletes the row.
	Token int64
	// ExpiresAt is when the lease ends (the database's clock, microseconds); zero when released.
	ExpiresAt time.Time
}

// Held reports whether the claim is held: made and not released (its lease may have run out).
func (c Claim) Held() bool { return c.Owner != "" }

// Live reports whether the claim is held and its lease still runs at now: now < ExpiresAt. At
// ExpiresAt exactly the lease has ended.
func (c Claim) Live(now time.Time) bool { return c.Owner != "" && now.Before(c.ExpiresAt) }

// Free reports whether the workflow can be claimed by anyone at now: never claimed, released,
// or its lease has run out.
func (c Claim) Free(now time.Time) bool { return !c.Live(now) }

// ErrClaimed matches every *ClaimedError.
var ErrClaimed = errors.New("claimed")

// ClaimedError refuses a claim, a renewal, a release or a write because of the workflow's claim.
type ClaimedError struct {
	// Claim is the workflow's claim as the decision saw it (Token 0: never claimed).
	Claim Claim
	// Token is the fencing token the refused call carried (0: none).
	Token int64
	// Reason says why, for people.
	Reason string
}

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("workflow %q: %s", e.Claim.WorkflowID, e.Reason)
}

// Is makes errors.Is(err, ErrClaimed) true.
func (e *ClaimedError) Is(target error) bool { return target == ErrClaimed }

func refused(cur Claim, token int64, format string, args ...any) error {
	return &ClaimedError{Claim: cur, Token: token, Reason: fmt.Sprintf(format, args...)}
}

// ts renders a claim's expiry for messages.
func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

// dbNow is the database's clock as claims keep it: UTC microseconds, like every stored time.
func dbNow(now time.Time) time.Time { return now.Truncate(time.Microsecond).UTC() }

// CheckLease validates a lease asked for by a claim or a renewal.
func CheckLease(lease time.Duration) error {
	switch {
	case lease <= 0:
		return Invalid("leaseSeconds", "must be > 0")
	case lease > MaxLease:
		return Invalid("leaseSeconds", "must be at most %d (%s)", int64(MaxLease/time.Second), MaxLease)
	}
	return nil
}

// CheckClaimID validates the workflow (or thread) id of a claim.
func CheckClaimID(id string) error {
	switch {
	case id == "":
		return Invalid("workflowId", "required")
	case len(id) > MaxWorkflowIDBytes:
		return Invalid("workflowId", "longer than %d bytes", MaxWorkflowIDBytes)
	case !utf8.ValidString(id):
		return Invalid("workflowId", "not valid UTF-8")
	}
	return nil
}

// CheckOwner validates an owner name.
func CheckOwner(owner string) error {
	switch {
	case owner == "":
		return Invalid("owner", "required")
	case len(owner) > MaxOwnerBytes:
		return Invalid("owner", "longer than %d bytes", MaxOwnerBytes)
	case !utf8.ValidString(owner):
		return Invalid("owner", "not valid UTF-8")
	}
	return nil
}

// CheckToken validates a fencing token given with a call (0: none given).
func CheckToken(token int64) error {
	if token < 0 {
		return Invalid("fencingToken", "must be >= 1")
	}
	return nil
}

// DecideClaim decides a claim of cur's workflow by owner for lease at now (the database's
// clock) and returns the claim to store. It is granted, under token cur.Token+1, when the
// workflow was never claimed, was released, its lease has run out (now >= ExpiresAt), or owner
// already holds it (a restarted worker need not wait for its own lease; whatever still holds
// the old token is fenced off by the new one). A live claim of another owner refuses it with a
// *ClaimedError naming that owner and the end of its lease.
func DecideClaim(cur Claim, owner string, lease time.Duration, now time.Time) (Claim, error) {
	if err := CheckOwner(owner); err != nil {
		return cur, err
	}
	if err := CheckLease(lease); err != nil {
		return cur, err
	}
	now = dbNow(now)
	if cur.Live(now) && cur.Owner != owner {
		return cur, refused(cur, 0, "claimed by %q until %s", cur.Owner, ts(cur.ExpiresAt))
	}
	return Claim{WorkflowID: cur.WorkflowID, Owner: owner, Token: cur.Token + 1, ExpiresAt: now.Add(lease)}, nil
}

// checkHolder refuses token unless it is cur's token and cur is held: the token of the latest
// claim, not released. Whether the lease has run out does not matter: until someone claims the
// workflow again (which raises the token) the holder may go on and renew.
func checkHolder(cur Claim, token int64) error {
	switch {
	case cur.Token == 0:
		return refused(cur, token, "fencing token %d: the workflow was never claimed", token)
	case token < cur.Token && cur.Held():
		return refused(cur, token, "fencing token %d is stale: the workflow was claimed again (token %d) by %q, until %s",
			token, cur.Token, cur.Owner, ts(cur.ExpiresAt))
	case token < cur.Token:
		return refused(cur, token, "fencing token %d is stale: the workflow was claimed again (token %d) since", token, cur.Token)
	case token > cur.Token:
		return refused(cur, token, "fencing token %d was never issued: the latest claim has token %d", token, cur.Token)
	case !cur.Held():
		return refused(cur, token, "the claim of fencing token %d was released", token)
	}
	return nil
}

// DecideRenew decides a renewal of cur by the holder of token for lease at now: the lease then
// ends lease after now, and never earlier than it already did (a renewal never shortens a
// lease, should the database's clock step back). A lease that has run out is renewed too when
// nobody claimed the workflow since. Any other token is refused (*ClaimedError).
func DecideRenew(cur Claim, token int64, lease time.Duration, now time.Time) (Claim, error) {
	if err := CheckLease(lease); err != nil {
		return cur, err
	}
	if err := CheckToken(token); err != nil {
		return cur, err
	}
	if err := checkHolder(cur, token); err != nil {
		return cur, err
	}
	next := cur
	if end := dbNow(now).Add(lease); end.After(next.ExpiresAt) {
		next.ExpiresAt = end
	}
	return next, nil
}

// DecideRelease decides a release of cur by the holder of token: the claim is then free, its
// token kept (the next claim gets a higher one). Releasing a claim already released under the
// same token changes nothing (released false); any other token is refused (*ClaimedError).
func DecideRelease(cur Claim, token int64) (next Claim, released bool, err error) {
	if err := CheckToken(token); err != nil {
		return cur, false, err
	}
	if cur.Token != 0 && token == cur.Token && !cur.Held() {
		return cur, false, nil
	}
	if err := checkHolder(cur, token); err != nil {
		return cur, false, err
	}
	return Claim{WorkflowID: cur.WorkflowID, Token: cur.Token}, true, nil
}

// CheckFence decides whether a write to cur's workflow carrying token (0: none) may go ahead at
// now. With a token: only the holder's (CheckFence refuses a stale, unknown or released token,
// and a token for a workflow never claimed). Without one: unless the claim is live (a workflow
// never claimed, released or whose lease ran out is written as if claims did not exist).
func CheckFence(cur Claim, token int64, now time.Time) error {
	if err := CheckToken(token); err != nil {
		return err
	}
	if token != 0 {
		return checkHolder(cur, token)
	}
	if cur.Live(dbNow(now)) {
		return refused(cur, 0, "claimed by %q until %s: a write must carry the claim's fencingToken", cur.Owner, ts(cur.ExpiresAt))
	}
	return nil
}
