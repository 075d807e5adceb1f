package store

import (
	"encoding/json"
	"sort"
	"time"
)

// SelectExpired returns the ids (in seq order) of the checkpoints of one (workflow, namespace)
// that r deletes at now: those beyond the newest KeepLast (0: unlimited) and those older than
// MaxAgeSeconds (0: off). The newest checkpoint is never selected, nor the first (lowest seq) one
// with KeepFirst. IdleTTLSeconds is not handled here (it removes whole workflows).
func SelectExpired(cps []RetentionItem, r Retention, now time.Time) []string {
	if len(cps) < 2 || (r.KeepLast <= 0 && r.MaxAgeSeconds <= 0) {
		return nil
	}
	sorted := make([]RetentionItem, len(cps))
	copy(sorted, cps)
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].Seq < sorted[b].Seq })
	n := len(sorted)
	var out []string
	for i, c := range sorted {
		if i == n-1 || (r.KeepFirst && i == 0) {
			continue
		}
		old := r.MaxAgeSeconds > 0 && now.Sub(c.CreatedAt) > time.Duration(r.MaxAgeSeconds)*time.Second
		beyond := r.KeepLast > 0 && i < n-r.KeepLast
		if old || beyond {
			out = append(out, c.ID)
		}
	}
	return out
}

// Expired reports whether a workflow last saved to at updated has outlived r's idle TTL at now.
func (r Retention) Expired(updated, now time.Time) bool {
	return r.IdleTTLSeconds > 0 && now.Sub(updated) > time.Duration(r.IdleTTLSeconds)*time.Second
}

// Validate reports a negative field as an *InvalidError.
func (r Retention) Validate() error {
	switch {
	case r.KeepLast < 0:
		return Invalid("retention.keepLast", "must be >= 0 (0 = unlimited)")
	case r.MaxAgeSeconds < 0:
		return Invalid("retention.maxAgeSeconds", "must be >= 0 (0 = off)")
	case r.IdleTTLSeconds < 0:
		return Invalid("retention.idleTtlSeconds", "must be >= 0 (0 = off)")
	}
	return nil
}

// Retention is the policy an explicit prune applies to a workflow whose own (or the
// default) retention is own: the request's keepLast and olderThan when it gives either, with
// own's keepFirst; else own.
func (req PruneRequest) Retention(own Retention) Retention {
	if req.KeepLast > 0 || req.OlderThanSeconds > 0 {
		return Retention{KeepLast: req.KeepLast, MaxAgeSeconds: req.OlderThanSeconds, KeepFirst: own.KeepFirst}
	}
	return own
}

// Validate reports a negative field as an *InvalidError.
func (req PruneRequest) Validate() error {
	if req.KeepLast < 0 {
		return Invalid("keepLast", "must be >= 0")
	}
	if req.OlderThanSeconds < 0 {
		return Invalid("olderThanSeconds", "must be >= 0")
	}
	return nil
}

// DecodeRetention reads a stored retention (the JSON of a Retention).
func DecodeRetention(js []byte) (Retention, error) {
	var r Retention
	err := json.Unmarshal(js, &r)
	return r, err
}

// GroupBounds are what a bite of a prune reads of one (workflow, namespace) to decide, like
// SelectExpired, which of its checkpoints go, without reading them all: the group's newest seq,
// its oldest, and with KeepLast the seq of the KeepLast-th newest. A prune in bites reads them
// again in every bite, so that saves in between only add newer checkpoints to keep.
type GroupBounds struct {
	Newest int64 // the newest seq: never pruned
	First  int64 // the oldest seq: kept with KeepFirst
	// Boundary is, with KeepLast, the seq of the KeepLast-th newest checkpoint: those below it
	// are beyond KeepLast. 0: the group has fewer than KeepLast checkpoints (or no KeepLast).
	Boundary int64
}

// Expired reports whether r deletes the checkpoint it at now: SelectExpired's rule for one
// item of the group b describes.
func (b GroupBounds) Expired(it RetentionItem, r Retention, now time.Time) bool {
	if it.Seq >= b.Newest || (r.KeepFirst && it.Seq == b.First) {
		return false
	}
	old := r.MaxAgeSeconds > 0 && now.Sub(it.CreatedAt) > time.Duration(r.MaxAgeSeconds)*time.Second
	beyond := r.KeepLast > 0 && b.Boundary > 0 && it.Seq < b.Boundary
	return old || beyond
}

// Exhausted reports whether no checkpoint with a seq above after can be expired: the walk of
// the group in seq order may stop.
func (b GroupBounds) Exhausted(after int64, r Retention) bool {
	if after+1 >= b.Newest {
		return true
	}
	if r.MaxAgeSeconds > 0 {
		return false
	}
	return r.KeepLast <= 0 || b.Boundary == 0 || after+1 >= b.Boundary
}

// Prunes reports whether r can delete anything of a workflow holding count checkpoints.
func (r Retention) Prunes(count int64) bool {
	if count < 2 {
		return false
	}
	if r.MaxAgeSeconds > 0 {
		return true
	}
	return r.KeepLast > 0 && count > int64(r.KeepLast)
}
