package postgres

// Claims (store.Claims) on PostgreSQL, where the workers that hand a workflow over run on many
// hosts. One row per claimed workflow or thread id in the claims table, never deleted, so that
// its fencing token never goes back. The decisions are package store's; here each runs in a
// writer transaction that holds the advisory locks of the id as a workflow and as a LangGraph
// thread (the claim fences both), the same locks every write of that workflow or thread takes
// before it reads the claim in its own transaction. So between a decision and its commit no
// process on any host can change the claim or write the workflow, and a write commits either
// before a take-over or not at all.
//
// The clock is the server's clock_timestamp(), read in the statement that reads the claim: every
// ckptd process on every host then agrees on whether a lease has run out, however their own
// clocks are set (and a transaction that waited for a lock does not decide on the time it began).

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ckptd/ckptd/store"
)

// claimSQL reads the claim of $1 (no row: never claimed) with the server's clock.
const claimSQL = `SELECT clock_timestamp(), k.token, k.owner, k.expires_at
	FROM (VALUES (1)) AS one LEFT JOIN claims k ON k.workflow_id = $1`

// scanClaim reads a row of claimSQL.
func scanClaim(row pgx.Row, id string) (store.Claim, time.Time, error) {
	c := store.Claim{WorkflowID: id}
	var now time.Time
	var token *int64
	var owner *string
	var exp *time.Time
	if err := row.Scan(&now, &token, &owner, &exp); err != nil {
		return c, now, err
	}
	if token != nil {
		c.Token = *token
	}
	if owner != nil {
		c.Owner = *owner
	}
	if exp != nil {
		c.ExpiresAt = exp.UTC()
	}
	return c, now.UTC(), nil
}

// claimLocks are the advisory locks a change of id's claim takes: those of every write it fences.
func claimLocks(id string) []int64 { return []int64{wfKey(id), threadKey(id)} }

// fenceCheck is a claim read queued in a write's batch, decided once the batch has run.
type fenceCheck struct {
	id    string
	token int64
	cur   store.Claim
	now   time.Time
	err   error // reading the row
	read  bool
}

// queueFence queues the read of id's claim at the head of a write's batch: the write's
// statements then run in the same round trip, and the job fails (its savepoint rolled back,
// nothing of it stored) if check refuses.
func queueFence(b *pgx.Batch, id string, token int64) *fenceCheck {
	f := &fenceCheck{id: id, token: token}
	b.Queue(claimSQL, id).QueryRow(func(row pgx.Row) error {
		f.cur, f.now, f.err = scanClaim(row, id)
		f.read = true
		return f.err
	})
	return f
}

// check decides the write (store.CheckFence).
func (f *fenceCheck) check() error {
	switch {
	case f.err != nil:
		return f.err
	case !f.read:
		return fmt.Errorf("the claim of %q was not read", f.id)
	}
	return store.CheckFence(f.cur, f.token, f.now)
}

// fence checks a write to id under token (0: none) in the writer's transaction, in a round trip
// of its own.
func (s *Store) fence(ctx context.Context, w *wtx, id string, token int64) error {
	cur, now, err := scanClaim(w.queryRow(ctx, claimSQL, id), id)
	if err != nil {
		return err
	}
	return store.CheckFence(cur, token, now)
}

// putClaim stores c. A token lower than the stored one is never written (the decisions never ask
// for it: this is the table's own guard).
func putClaim(ctx context.Context, w *wtx, c store.Claim) error {
	var exp any
	if !c.ExpiresAt.IsZero() {
		exp = c.ExpiresAt
	}
	ct, err := w.exec(ctx, `INSERT INTO claims AS k (workflow_id, token, owner, expires_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (workflow_id) DO UPDATE SET token = excluded.token, owner = excluded.owner, expires_at = excluded.expires_at
		WHERE excluded.token >= k.token`, c.WorkflowID, c.Token, nullStr(c.Owner), exp)
	if err != nil {
		return err
	}
	if ct.RowsAffected() != 1 {
		return fmt.Errorf("claim of %q: fencing token %d would go back", c.WorkflowID, c.Token)
	}
	return nil
}

// changeClaim runs decide on workflowID's claim, against the server's clock, in a writer
// transaction holding the id's locks, and stores what it returns.
func (s *Store) changeClaim(ctx context.Context, op, workflowID string, decide func(cur store.Claim, now time.Time) (store.Claim, error)) (store.Claim, error) {
	if err := store.CheckClaimID(workflowID); err != nil {
		return store.Claim{}, err
	}
	if err := noNUL("workflowId", workflowID); err != nil {
		return store.Claim{}, err
	}
	var out store.Claim
	err := s.do(ctx, claimLocks(workflowID), func(ctx context.Context, w *wtx) error {
		cur, now, err := scanClaim(w.queryRow(ctx, claimSQL, workflowID), workflowID)
		if err != nil {
			return err
		}
		next, err := decide(cur, now)
		if err != nil {
			return err
		}
		if next != cur {
			if err := putClaim(ctx, w, next); err != nil {
				return err
			}
		}
		out = next
		return nil
	})
	if err != nil {
		return store.Claim{}, wrapDB(fmt.Sprintf("%s workflow %q", op, workflowID), err)
	}
	return out, nil
}

// Claim claims workflowID for owner for lease (store.DecideClaim).
func (s *Store) Claim(ctx context.Context, workflowID, owner string, lease time.Duration) (store.Claim, error) {
	if err := store.CheckOwner(owner); err != nil {
		return store.Claim{}, err
	}
	if err := noNUL("owner", owner); err != nil {
		return store.Claim{}, err
	}
	if err := store.CheckLease(lease); err != nil {
		return store.Claim{}, err
	}
	return s.changeClaim(ctx, "claim", workflowID, func(cur store.Claim, now time.Time) (store.Claim, error) {
		return store.DecideClaim(cur, owner, lease, now)
	})
}

// Renew extends the lease of the holder of token (store.DecideRenew).
func (s *Store) Renew(ctx context.Context, workflowID string, token int64, lease time.Duration) (store.Claim, error) {
	if err := store.CheckLease(lease); err != nil {
		return store.Claim{}, err
	}
	return s.changeClaim(ctx, "renew the claim of", workflowID, func(cur store.Claim, now time.Time) (store.Claim, error) {
		return store.DecideRenew(cur, token, lease, now)
	})
}

// Release frees the claim of the holder of token (store.DecideRelease).
func (s *Store) Release(ctx context.Context, workflowID string, token int64) (bool, error) {
	released := false
	_, err := s.changeClaim(ctx, "release the claim of", workflowID, func(cur store.Claim, now time.Time) (store.Claim, error) {
		next, ok, err := store.DecideRelease(cur, token)
		released = ok
		return next, err
	})
	return released, err
}

// ClaimOf reads workflowID's claim and the server's clock.
func (s *Store) ClaimOf(ctx context.Context, workflowID string) (store.Claim, time.Time, error) {
	var c store.Claim
	var now time.Time
	if s.isClosed() {
		return store.Claim{WorkflowID: workflowID}, now, store.ErrClosed
	}
	err := s.retry(ctx, func() (err error) {
		c, now, err = scanClaim(s.pool.QueryRow(ctx, claimSQL, workflowID), workflowID)
		return err
	})
	if err != nil {
		return store.Claim{WorkflowID: workflowID}, now, wrapDB(fmt.Sprintf("read the claim of workflow %q", workflowID), err)
	}
	return c, now, nil
}

// Claimable summarises the resumable workflows whose claim is free now, least recently updated
// first (at most limit; 0: all), page by page through ListWorkflows.
func (s *Store) Claimable(ctx context.Context, limit int) ([]store.WorkflowInfo, error) {
	if limit < 0 {
		return nil, invalid("limit", "must be >= 0")
	}
	return store.ClaimableWorkflows(ctx, s, limit)
}

// PutWritesFenced is PutWrites under fencing token (0: none), checked in its transaction.
func (s *Store) PutWritesFenced(ctx context.Context, workflowID, namespace, checkpointID string, writes []store.Write, token int64) (int, error) {
	if err := store.CheckToken(token); err != nil {
		return 0, err
	}
	return s.putWrites(ctx, workflowID, namespace, checkpointID, writes, token)
}

// CompleteFenced is Complete under fencing token (0: none), checked in its transaction.
func (s *Store) CompleteFenced(ctx context.Context, workflowID string, preserve bool, token int64) (int, error) {
	if err := store.CheckToken(token); err != nil {
		return 0, err
	}
	return s.complete(ctx, workflowID, preserve, token)
}
