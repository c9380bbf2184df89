package engine

import (
	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	runs "github.com/sandtrap/sandtrap/core/run"
)

// The engine's types and constants are its packages' (core/protocol, core/plan,
// core/run): the names below keep one import for capi/ and core/session.

type (
	// Error is an engine error with a stable kind.
	Error = protocol.Error
	// ErrorInfo is a result's error.
	ErrorInfo = protocol.ErrorInfo
	// RunRequest is one command to run.
	RunRequest = runs.Request
	// Result is the outcome of a run.
	Result = runs.Result
	// Usage is what a run consumed.
	Usage = runs.Usage
	// PipelineResult is a pipeline's outcome.
	PipelineResult = runs.PipelineResult
	// Stage is one command of a pipeline and the sandbox it runs in.
	Stage = runs.Stage
	// Isolation is what took effect for a run, protection by protection.
	Isolation = plan.Isolation
	// Limit is one resource limit and the mechanism enforcing it.
	Limit = plan.Limit
	// Denial is one refused access of a run, counted (core/run/denials.go).
	Denial = runs.Denial
)

// Denial sources (Result.DenialsSources; core/run).
const (
	SourceSupervisor = runs.SourceSupervisor
	SourceLandlock   = runs.SourceLandlock
	SourceSeccomp    = runs.SourceSeccomp
)

// Error kinds, stable across the C ABI and the bindings (core/protocol).
const (
	KindInvalidRequest = protocol.KindInvalidRequest
	KindInvalidPolicy  = protocol.KindInvalidPolicy
	KindIsolation      = protocol.KindIsolation
	KindNotFound       = protocol.KindNotFound
	KindSpawn          = protocol.KindSpawn
	KindTimeout        = protocol.KindTimeout
	KindCancelled      = protocol.KindCancelled
	KindKilled         = protocol.KindKilled
	KindCPUTime        = protocol.KindCPUTime
	KindMemory         = protocol.KindMemory
	KindStageFailed    = protocol.KindStageFailed
	KindForked         = protocol.KindForked
	KindClosed         = protocol.KindClosed
	KindInternal       = protocol.KindInternal
)

// Limits of the protocol and of the plan.
const (
	MaxRequest       = protocol.MaxRequest
	MaxDepth         = protocol.MaxDepth
	DefaultPath      = runs.DefaultPath
	InotifyInstances = plan.InotifyInstances
	InotifyWatches   = plan.InotifyWatches
)

// DevicePaths are granted read/write to every sandbox (core/plan).
var DevicePaths = plan.DevicePaths

// DecodeMap decodes one msgpack map with string keys, refusing trailing bytes.
func DecodeMap(b []byte, what string) (map[string]any, error) { return protocol.DecodeMap(b, what) }

// Encode marshals a response.
func Encode(v any) []byte { return protocol.Encode(v) }

// ErrorResponse is the response for a request that could not run at all.
func ErrorResponse(err error) []byte { return protocol.ErrorResponse(err) }

// CallKind maps a result error to a call status (core/protocol).
func CallKind(e *ErrorInfo) string { return protocol.CallKind(e) }

// Pipeline runs stages joined by kernel pipes (core/run).
func Pipeline(stages []Stage, stdin []byte) *PipelineResult { return runs.Pipeline(stages, stdin) }

func errorf(kind, format string, a ...any) *Error { return protocol.Errorf(kind, format, a...) }

func kindOf(err error) string { return protocol.KindOf(err) }

func requestError(probs policy.Problems) *Error { return protocol.RequestError(probs) }

func invalidRequest(field, format string, a ...any) *Error {
	return protocol.InvalidRequest(field, format, a...)
}

func parseRun(m map[string]any, at, what string, probs *policy.Problems, extra ...string) *RunRequest {
	return runs.ParseRequest(m, at, what, probs, extra...)
}
