// Package session holds the engine's drivers of the embedded Python guest
// runtime's session protocols, as ops of the msgpack protocol (registered with
// engine.RegisterOp): the cooperative Python sandbox (coop_open, coop_exec: the
// worker's policy for each isolation level, its start, init, exec frames,
// deadlines, restarts, the isolation report) and COW-fork map-reduce (fork,
// reduce: the template's policy and start, init, the fork frame and its limits,
// clones streamed as they finish, cancellation). Both ask the host language what
// only it can answer — run a granted function, take a batch of clones — through
// host calls (core/hostcall). Bindings pass what only they know (their
// interpreter and import paths, the portable policy, function references) and
// adapt names; every rule lives here. (The sessions and templates these drivers
// use are core/template's.)
package session
