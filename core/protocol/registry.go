package protocol

import (
	"sort"
	"sync"
)

// OpFunc handles a request of a registered op for a target T (the engine's
// sandbox). It gets the request as it came (its own decoding: values it forwards
// stay raw msgpack) and returns the response and its error kind ("" when the call
// itself succeeded).
type OpFunc[T any] func(t T, req []byte) ([]byte, string)

// Registry holds the ops that packages outside the engine add to the protocol
// (core/session registers the cooperative sandbox's and map-reduce's), next to
// the ops the engine decodes itself (Core).
type Registry[T any] struct {
	Core []string // the engine's own ops, listed first in KnownOps
	mu   sync.RWMutex
	ops  map[string]OpFunc[T]
}

// Register adds an op (from an init function).
func (r *Registry[T]) Register(name string, fn OpFunc[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ops == nil {
		r.ops = map[string]OpFunc[T]{}
	}
	r.ops[name] = fn
}

// Lookup is the registered op name (nil: none).
func (r *Registry[T]) Lookup(name string) OpFunc[T] {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.ops[name]
}

// KnownOps lists every op: the core ones, then the registered ones sorted.
func (r *Registry[T]) KnownOps() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := append([]string{}, r.Core...)
	for k := range r.ops {
		out = append(out, k)
	}
	sort.Strings(out[len(r.Core):])
	return out
}
