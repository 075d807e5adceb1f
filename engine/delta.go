package engine

import (
	"context"
	"fmt"

	"github.com/ckptd/ckptd/store"
	"github.com/ckptd/ckptd/store/chunk/delta"
)

// StateDelta is a state sent as a wire delta (checkpoint/save stateDelta, docs/protocol.md):
// the state of BaseCheckpointID with everything between its first KeepPrefix and its last
// KeepSuffix bytes replaced by the frame's attachment; SHA256 names the result.
type StateDelta struct {
	BaseCheckpointID string
	KeepPrefix       int64
	KeepSuffix       int64
	SHA256           string
}

// ApplyStateDelta rebuilds the state d describes, with middle (the attachment) between the kept
// bytes of its base, checking in this order (docs/storage.md, "Wire deltas"): that the base
// checkpoint exists (store.ErrNotFound: missing or pruned; a *store.CorruptError if its state
// fails verification), keepPrefix and keepSuffix against the base and sha256's form
// (*delta.Error), the rebuilt size against maxBytes (*store.TooLargeError), and the rebuilt
// state's SHA-256 (*delta.Error naming stateDelta.sha256). The base usually comes from the
// store's cache of each workflow's last state (store.StateCache), not from a read.
func (e *Engine) ApplyStateDelta(ctx context.Context, d StateDelta, middle []byte, maxBytes int64) ([]byte, error) {
	base, err := e.store.StateBase(ctx, d.BaseCheckpointID)
	if err != nil {
		return nil, err
	}
	const maxInt = int64(^uint(0) >> 1)
	kp, ks := int(min(max(d.KeepPrefix, -1), maxInt)), int(min(max(d.KeepSuffix, -1), maxInt))
	if err := delta.Check(len(base), kp, ks, d.SHA256); err != nil {
		return nil, err
	}
	if n := int64(kp) + int64(len(middle)) + int64(ks); n > maxBytes {
		return nil, fmt.Errorf("state rebuilt from stateDelta: %w", &store.TooLargeError{Limit: maxBytes, Size: n})
	}
	return delta.Apply(base, kp, ks, middle, d.SHA256)
}
