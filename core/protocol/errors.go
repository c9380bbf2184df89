package protocol

import (
	"fmt"

	"github.com/sandtrap/sandtrap/core/policy"
)

// Error kinds, stable across the C ABI and the bindings.
const (
	KindInvalidRequest = "invalid_request"
	KindInvalidPolicy  = "invalid_policy"
	KindIsolation      = "isolation_unavailable"
	KindNotFound       = "not_found"
	KindSpawn          = "spawn_failed"
	KindTimeout        = "timeout"
	KindCancelled      = "cancelled"
	KindKilled         = "killed" // a popen'd run its owner killed (a result)
	KindCPUTime        = "cpu_time_limit"
	KindMemory         = "memory_limit"
	KindDisk           = "disk_limit"    // a result: the workdir's copy-on-write layer reached max_disk
	KindCommit         = "commit_failed" // a result, or the commit op: the workdir's changes could not all be applied
	KindStageFailed    = "stage_failed"  // a pipeline stage other than the last failed (a result)
	KindForked         = "forked_child"
	KindClosed         = "closed"
	KindInternal       = "internal"
)

// Error is an engine error with a stable kind.
type Error struct {
	Kind     string
	Message  string
	Problems []policy.Problem // what was wrong, field by field (invalid_policy, invalid_request)
}

func (e *Error) Error() string { return e.Message }

// Errorf is an Error of kind with a formatted message.
func Errorf(kind, format string, a ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, a...)}
}

// Internal is the error of a state that should be impossible (a bug of sandtrap):
// it reaches the caller as kind internal instead of a panic.
func Internal(format string, a ...any) *Error {
	return &Error{Kind: KindInternal, Message: "BUG: " + fmt.Sprintf(format, a...)}
}

// ErrorInfo is a result's error.
type ErrorInfo struct {
	Kind     string           `msgpack:"kind"`
	Message  string           `msgpack:"message"`
	Problems []policy.Problem `msgpack:"problems,omitempty"` // invalid_policy, invalid_request: field by field
}
