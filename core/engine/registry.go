package engine

import (
	"sync"
	"sync/atomic"

	runs "github.com/sandtrap/sandtrap/core/run"
)

// Registry maps sandbox ids (handed to bindings) to sandboxes, so a pipeline request
// names each stage's sandbox instead of re-sending its policy.
var (
	regMu  sync.RWMutex
	reg    = map[uint64]*Sandbox{}
	nextID atomic.Uint64
)

// Register gives s an id for use in pipeline requests.
func Register(s *Sandbox) uint64 {
	id := nextID.Add(1)
	regMu.Lock()
	reg[id] = s
	regMu.Unlock()
	s.id = id
	return id
}

// Unregister forgets s.
func Unregister(s *Sandbox) {
	regMu.Lock()
	delete(reg, s.id)
	regMu.Unlock()
}

func lookup(id uint64) *Sandbox {
	regMu.RLock()
	defer regMu.RUnlock()
	return reg[id]
}

// runHost is the sandbox of a registry id as a run's host (nil: none).
func runHost(id uint64) runs.Host {
	if s := lookup(id); s != nil {
		return s
	}
	return nil
}
