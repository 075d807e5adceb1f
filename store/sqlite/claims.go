package sqlite

// Claims (store.Claims): one row per claimed workflow or thread id in the claims table, never
// deleted. The decisions are package store's; here they run in the writer's IMMEDIATE
// transaction, which holds SQLite's write lock: no other process sharing the file can change
// the row, or write the workflow, between the decision and the commit. The clock is s.now: on
// SQLite the database's clock is the host's, shared by every process that opens the file.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ckptd/ckptd/store"
)

// claimRow reads id's claim in the writer's transaction (Token 0: never claimed).
func (s *Store) claimRow(ctx context.Context, w *wtx, id string) (store.Claim, error) {
	c := store.Claim{WorkflowID: id}
	var owner sql.NullString
	var exp sql.NullInt64
	err := w.queryRow(ctx, `SELECT token, owner, expires_at FROM claims WHERE workflow_id = ?`, id).Scan(&c.Token, &owner, &exp)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return c, nil
	case err != nil:
		return c, err
	}
	c.Owner = owner.String
	if exp.Valid {
		c.ExpiresAt = time.UnixMicro(exp.Int64).UTC()
	}
	return c, nil
}

// putClaim stores c; a token lower than the stored one is never written (the decisions never
// ask for it: this is the schema's own guard).
func (s *Store) putClaim(ctx context.Context, w *wtx, c store.Claim) error {
	var exp any
	if !c.ExpiresAt.IsZero() {
		exp = c.ExpiresAt.UnixMicro()
	}
	res, err := w.exec(ctx, `INSERT INTO claims(workflow_id, token, owner, expires_at) VALUES (?, ?, ?, ?)
		ON CONFLICT(workflow_id) DO UPDATE SET token = excluded.token, owner = excluded.owner, expires_at = excluded.expires_at
		WHERE excluded.token >= claims.token`, c.WorkflowID, c.Token, nullStr(c.Owner), exp)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("claim of %q: fencing token %d would go back", c.WorkflowID, c.Token)
	}
	return nil
}

// fence checks a write to id under token (0: none) in the writer's transaction (store.CheckFence).
func (s *Store) fence(ctx context.Context, w *wtx, id string, token int64) error {
	cur, err := s.claimRow(ctx, w, id)
	if err != nil {
		return err
	}
	// The clock only matters for a held claim: a write of a workflow never claimed (or
	// released) reads no clock, so saves take their times from s.now exactly as without claims.
	var now time.Time
	if cur.Held() {
		now = s.now()
	}
	return store.CheckFence(cur, token, now)
}

// changeClaim runs decide on workflowID's claim in the writer's transaction and stores what it
// returns.
func (s *Store) changeClaim(ctx context.Context, op, workflowID string, decide func(cur store.Claim, now time.Time) (store.Claim, error)) (store.Claim, error) {
	if err := store.CheckClaimID(workflowID); err != nil {
		return store.Claim{}, err
	}
	var out store.Claim
	err := s.do(ctx, func(ctx context.Context, w *wtx) error {
		cur, err := s.claimRow(ctx, w, workflowID)
		if err != nil {
			return err
		}
		next, err := decide(cur, s.now())
		if err != nil {
			return err
		}
		if next != cur {
			if err := s.putClaim(ctx, w, next); err != nil {
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

// ClaimOf reads workflowID's claim and the clock claims are decided by.
func (s *Store) ClaimOf(ctx context.Context, workflowID string) (store.Claim, time.Time, error) {
	c := store.Claim{WorkflowID: workflowID}
	var owner sql.NullString
	var exp sql.NullInt64
	err := s.retry(ctx, func() error {
		return s.rdb.QueryRowContext(ctx, `SELECT token, owner, expires_at FROM claims WHERE workflow_id = ?`, workflowID).
			Scan(&c.Token, &owner, &exp)
	})
	now := s.now()
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return c, now, nil
	case err != nil:
		return c, now, wrapDB(fmt.Sprintf("read the claim of workflow %q", workflowID), err)
	}
	c.Owner = owner.String
	if exp.Valid {
		c.ExpiresAt = time.UnixMicro(exp.Int64).UTC()
	}
	return c, now, nil
}
