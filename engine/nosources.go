package engine

import "sync"

// maxNoSources bounds the workflows remembered as having no configured sources.
const maxNoSources = 8192

// noSources remembers the workflows known to have no sources configured, so that their saves
// need not read the workflow's configuration first: such a save goes to the store with
// store.SaveRequest.AssumeNoSources, which its transaction checks. This process forgets a
// workflow when it configures its sources (Engine.SourcesConfigured), and when a save finds
// that another process did.
type noSources struct {
	mu  sync.Mutex
	set map[string]struct{}
	gen uint64 // bumped by every forget: a read begun before it must not add its answer
}

func (n *noSources) has(wf string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.set[wf]
	return ok
}

// generation is the value to give add for an answer read from now on.
func (n *noSources) generation() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gen
}

// add remembers that wf has no sources, as read after generation() returned gen.
func (n *noSources) add(wf string, gen uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if gen != n.gen {
		return // sources were configured meanwhile: the answer may be stale
	}
	if n.set == nil || len(n.set) >= maxNoSources {
		n.set = make(map[string]struct{}) // start over: rereading costs one read per workflow
	}
	n.set[wf] = struct{}{}
}

func (n *noSources) forget(wf string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gen++
	delete(n.set, wf)
}

// SourcesConfigured tells the engine that workflowID's sources were configured or removed (by
// workflow/configure): its next save reads them again.
func (e *Engine) SourcesConfigured(workflowID string) { e.noSources.forget(workflowID) }
