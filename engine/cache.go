package engine

import (
	"sync"

	"github.com/ckptd/ckptd/drift"
)

// maxLastManifests bounds the newest-manifest cache (entries per workflow and root; a
// 10,000-file tree takes a few MB).
const maxLastManifests = 16

// driftState is the Engine's drift bookkeeping.
type driftState struct {
	mu      sync.Mutex
	last    map[lastKey]*lastManifest
	lastSeq uint64
	watches map[string]*Watch
	pending int // watches being set up, counted against maxDriftWatches
	closed  bool
	nextID  uint64
}

type lastKey struct{ workflowID, root string }

// lastManifest is the newest manifest seen of a tree, and the newest encoding saved of it.
type lastManifest struct {
	m    *drift.Manifest
	enc  *drift.EncodedManifest
	used uint64
}

func (d *driftState) lastFor(k lastKey) (*drift.Manifest, *drift.EncodedManifest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.last[k]
	if l == nil {
		return nil, nil
	}
	d.lastSeq++
	l.used = d.lastSeq
	return l.m, l.enc
}

// remember records m (and its encoding, if enc is not nil) as the newest manifest of k.
func (d *driftState) remember(k lastKey, m *drift.Manifest, enc *drift.EncodedManifest) {
	if m == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		d.last = map[lastKey]*lastManifest{}
	}
	d.lastSeq++
	l := d.last[k]
	if l == nil {
		l = &lastManifest{}
		d.last[k] = l
	}
	l.m, l.used = m, d.lastSeq
	if enc != nil {
		l.enc = enc
	}
	for len(d.last) > maxLastManifests { // evict the least recently used
		var oldest lastKey
		first := true
		for key, v := range d.last {
			if first || v.used < d.last[oldest].used {
				oldest, first = key, false
			}
		}
		delete(d.last, oldest)
	}
}
