package store

// Retention of LangGraph threads (docs/protocol.md, "lg/configure"): opt-in, LangGraph's full
// history stays the default. A thread's policy is its own (lg/configure with its threadId, or
// the retention a saver sends with its puts), else the database's (lg/configure without
// threadId), else the daemon's (--lg-keep-last, --lg-idle-ttl). KeepLast, KeepFirst and
// MaxAgeSeconds apply per (thread, namespace) after each put; IdleTTLSeconds deletes a thread
// no put has touched for that long, in the backends' sweeps. Nothing a kept checkpoint's
// delta-channel replay needs is removed (SelectLGKeep), nor the checkpoint a put names as its
// parent.
//
// Deleting runs in bites (store/bites.go): bounded transactions, so that the writers of other threads
// interleave; a crash between bites leaves a consistent database and running the same call
// again finishes the job.

import "time"

// LGPrunes reports whether r deletes checkpoints of a thread (not just idle threads).
func LGPrunes(r Retention) bool { return r.KeepLast > 0 || r.MaxAgeSeconds > 0 }

// LGEffectiveRetention is a thread's policy: its own, else the database's, else the daemon's.
func LGEffectiveRetention(own, database *Retention, daemon Retention) Retention {
	switch {
	case own != nil:
		return *own
	case database != nil:
		return *database
	}
	return daemon
}

// LGRetentionRoots returns the checkpoints of one (thread, namespace) (nodes, newest first) that
// r keeps for themselves at now: the latest always; the newest KeepLast (0: all); none older than
// MaxAgeSeconds but the latest; the oldest with KeepFirst; and those whose ids protect names (a
// put's parent). The delta closure (SelectLGKeep) adds what their replays need.
func LGRetentionRoots(nodes []*LGNode, r Retention, now time.Time, protect ...string) []*LGNode {
	var roots []*LGNode
	last := len(nodes) - 1
	for i, n := range nodes {
		keep := i == 0 || (r.KeepFirst && i == last)
		if !keep {
			old := r.MaxAgeSeconds > 0 && !n.Created.IsZero() && now.Sub(n.Created) > time.Duration(r.MaxAgeSeconds)*time.Second
			beyond := r.KeepLast > 0 && i >= r.KeepLast
			keep = !old && !beyond
		}
		if !keep {
			for _, p := range protect {
				if p != "" && p == n.ID {
					keep = true
				}
			}
		}
		if keep {
			roots = append(roots, n)
		}
	}
	return roots
}

// LGPlan is what a prune of one (thread, namespace) deletes: Drop, oldest first, and the values
// no kept checkpoint refers to once they are gone (GC, decided by the backend from Kept).
type LGPlan struct {
	Thread, Namespace string
	Kept, Drop        []*LGNode
}

// PlanLGRetention decides what r deletes of one (thread, namespace) (nodes newest first).
func PlanLGRetention(thread, ns string, nodes []*LGNode, r Retention, now time.Time, v LGPruneView, protect ...string) (LGPlan, error) {
	plan := LGPlan{Thread: thread, Namespace: ns}
	if len(nodes) == 0 {
		return plan, nil
	}
	keep, err := SelectLGKeep(nodes, LGRetentionRoots(nodes, r, now, protect...), v)
	if err != nil {
		return plan, err
	}
	plan.Kept, plan.Drop = SplitKept(nodes, keep)
	reverseNodes(plan.Drop)
	return plan, nil
}

// PlanLGKeepLatest decides what a keep_latest prune deletes of one (thread, namespace).
func PlanLGKeepLatest(thread, ns string, nodes []*LGNode, v LGPruneView) (LGPlan, error) {
	plan := LGPlan{Thread: thread, Namespace: ns}
	keep, err := SelectKeepLatest(nodes, v)
	if err != nil {
		return plan, err
	}
	plan.Kept, plan.Drop = SplitKept(nodes, keep)
	reverseNodes(plan.Drop)
	return plan, nil
}

func reverseNodes(ns []*LGNode) {
	for i, j := 0, len(ns)-1; i < j; i, j = i+1, j-1 {
		ns[i], ns[j] = ns[j], ns[i]
	}
}

// LGIdleThread is a thread no put has touched for a while (LGIdleThreads).
type LGIdleThread struct {
	ThreadID  string
	UpdatedAt time.Time // its last put
	// IdleTTLSeconds is its effective idle TTL (0: never expires); ExpiresAt is when it expires
	// (zero without a TTL).
	IdleTTLSeconds int64
	ExpiresAt      time.Time
}

// LGStagedTTL is how long a value staged by LGStageValue waits for the put that names it before
// the sweeps collect it.
const LGStagedTTL = time.Hour

// Where a thread's effective retention comes from (LGRetentionInfo.Source).
const (
	LGRetentionThread   = "thread"
	LGRetentionDatabase = "database"
	LGRetentionDaemon   = "daemon"
)

// LGRetentionInfo is a thread's effective retention and where it comes from.
type LGRetentionInfo struct {
	Retention Retention
	Source    string // LGRetentionThread, LGRetentionDatabase or LGRetentionDaemon
}

// LGSweepResult reports a sweep of idle threads or a bitten deletion.
type LGSweepResult struct {
	Threads     []string // threads deleted
	Checkpoints int      // checkpoints deleted with them
}
