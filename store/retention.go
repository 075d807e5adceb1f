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
