package engine

import (
	"github.com/sandtrap/sandtrap/core/handlers"
	"github.com/sandtrap/sandtrap/core/plan"
)

// Calls judged by the host (policy_fn, handlers): the ops of core/handlers.
func init() {
	RegisterOp("run_handlers", func(s *Sandbox, b []byte) ([]byte, string) { return handlers.RunOp(s, b) })
	RegisterOp("handler_decide", func(s *Sandbox, b []byte) ([]byte, string) { return handlers.DecideOp(s, b) })
	RegisterOp("handler_read", func(s *Sandbox, b []byte) ([]byte, string) { return handlers.ReadOp(s, b) })
}

// NetPlan is who enforces the sandbox's network rules (core/plan).
func (s *Sandbox) NetPlan() plan.NetPlan { return s.in.Net }
