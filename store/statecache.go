package store

import (
	"container/list"
	"sync"

	"github.com/ckptd/ckptd/jsonvalid"
	"github.com/ckptd/ckptd/store/chunk"
	"github.com/ckptd/ckptd/store/chunk/delta"
)

// DefaultStateCacheBytes bounds a backend's StateCache unless Options says otherwise: like the
// LangGraph value cache, small enough for the daemon's memory at rest (#18), large enough for a
// few workflows' megabyte states.
const DefaultStateCacheBytes = 16 << 20

// StateCache keeps the last state saved of each (workflow, namespace), for every backend: the
// base the next save of that workflow is probably an edit of. A save cuts its state starting
// from it (chunk.SplitFrom: only around the change) and compresses only the chunks it does not
// have; a wire delta (checkpoint/save stateDelta) names it as its base and is rebuilt from here
// without reading the database. Entries are content-addressed (the state's SHA-256 is checked
// against the checkpoint's row before an entry stands for a checkpoint), so a stale entry is
// never wrong, only useless. Values are shared: callers must not modify them. Least recently
// used workflows go first once over max bytes.
type StateCache struct {
	mu   sync.Mutex
	max  int64
	size int64
	lru  *list.List // of *StateEntry, most recent first
	byWF map[wfKey]*list.Element
	byID map[string]*list.Element
}

type wfKey struct{ workflowID, namespace string }

// StateEntry is a state a StateCache keeps.
type StateEntry struct {
	CheckpointID string
	WorkflowID   string
	Namespace    string
	SHA256       [32]byte
	Value        []byte
	Recipe       *chunk.Recipe // nil when the value was not cut (stored whole, to be chunked later)
	Marks        *ValueMarks   // nil: none
}

// ValueMarks are what the receiver of a wire delta learned about the value while checking it,
// kept with the cached state so that a delta against it checks only around its change: the
// SHA-256 states of its prefixes (delta.HashMarks) and its JSON parser states (jsonvalid.Marks).
// Either may be nil. They never decide what is stored: a mark that does not fit makes a check
// start from the beginning, and a wrong one could only fail a check that should pass.
type ValueMarks struct {
	Hash *delta.HashMarks
	JSON *jsonvalid.Marks
}

// DeltaBase is the base of a wire delta: the value, with the marks kept with it (nil: none).
type DeltaBase struct {
	Value []byte
	Marks *ValueMarks
}

// Base is e as the base of the next value's chunking.
func (e *StateEntry) Base() *ValueBase {
	if e == nil {
		return nil
	}
	return &ValueBase{Value: e.Value, Recipe: e.Recipe}
}

// NewStateCache returns a cache of at most max bytes; nil (every call a no-op) when max <= 0.
func NewStateCache(max int64) *StateCache {
	if max <= 0 {
		return nil
	}
	return &StateCache{max: max, lru: list.New(), byWF: map[wfKey]*list.Element{}, byID: map[string]*list.Element{}}
}

// cost is what an entry counts against the cache's size: its bytes and its recipe.
func (e *StateEntry) cost() int64 {
	n := int64(len(e.Value)) + 256
	if e.Recipe != nil {
		n += int64(len(e.Recipe.Chunks)) * 40
	}
	return n
}

// Put makes e the last state of its workflow and namespace, replacing the previous one. Values
// larger than half the cache are not kept (and drop the previous entry).
func (c *StateCache) Put(e *StateEntry) {
	if c == nil {
		return
	}
	k := wfKey{e.WorkflowID, e.Namespace}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byWF[k]; ok {
		c.remove(el)
	}
	if e.cost() > c.max/2 {
		return
	}
	el := c.lru.PushFront(e)
	c.byWF[k] = el
	c.byID[e.CheckpointID] = el
	c.size += e.cost()
	for c.size > c.max {
		c.remove(c.lru.Back())
	}
}

func (c *StateCache) remove(el *list.Element) {
	e := el.Value.(*StateEntry)
	c.lru.Remove(el)
	delete(c.byWF, wfKey{e.WorkflowID, e.Namespace})
	if c.byID[e.CheckpointID] == el {
		delete(c.byID, e.CheckpointID)
	}
	c.size -= e.cost()
}

// Last returns the last state saved of (workflowID, namespace), or nil.
func (c *StateCache) Last(workflowID, namespace string) *StateEntry {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byWF[wfKey{workflowID, namespace}]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*StateEntry)
}

// ByID returns the state of checkpointID if it is the last one of its workflow kept here, or
// nil.
func (c *StateCache) ByID(checkpointID string) *StateEntry {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[checkpointID]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*StateEntry)
}

// Forget drops the entries of workflowID (all namespaces): its checkpoints were deleted.
func (c *StateCache) Forget(workflowID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, el := range c.byWF {
		if k.workflowID == workflowID {
			c.remove(el)
		}
	}
}

// Base returns the state of checkpointID as the base of a wire delta: from the cache when it
// holds that checkpoint's state (stateSHA, the SHA-256 its row records, nil for a checkpoint
// without state: the empty base), else load's (a verified load of the checkpoint).
func (c *StateCache) Base(checkpointID string, stateSHA []byte, load func() ([]byte, error)) (DeltaBase, error) {
	if stateSHA == nil {
		return DeltaBase{Value: []byte{}}, nil
	}
	if e := c.ByID(checkpointID); e != nil && len(stateSHA) == len(e.SHA256) && [32]byte(stateSHA) == e.SHA256 {
		return DeltaBase{Value: e.Value, Marks: e.Marks}, nil
	}
	v, err := load()
	return DeltaBase{Value: v}, err
}
