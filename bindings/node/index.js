'use strict';
/**
 * sandtrap: run commands confined by Landlock, seccomp, a pid namespace and
 * resource limits. CommonJS entry point (the ESM one, index.mjs, re-exports it).
 *
 *   const { Sandbox } = require('sandtrap');
 *   const sb = new Sandbox({ fsReadable: ['/usr', '/lib', '/bin'], maxMemory: '256M' });
 *   const r = await sb.run(['echo', 'hi'], { timeout: 10 });
 *   r.stdout; // <Buffer 68 69 0a>
 */
const errors = require('./lib/errors');
const { Sandbox, Command, Pipeline, Gather, confine, probe, version } = require('./lib/sandbox');
const { sandbox, PythonSandbox, VirtualFS, rpcProxy } = require('./lib/python');
require('./lib/fork'); // Sandbox.prototype.fork / reduce
const { BranchAction } = require('./lib/view'); // Sandbox.prototype.dryRun / commit / abort
const { SandboxProcess } = require('./lib/process'); // Sandbox.prototype.popen, spawn, …
const { loadProfile, policyFromDict, profileArgv } = require('./lib/profile');
const handlers = require('./lib/handlers');
const { Protection, MIN_ABI } = require('./lib/fields');

module.exports = {
  Sandbox,
  Handler: handlers.Handler,
  HandlerCtx: handlers.HandlerCtx,
  NotifAction: handlers.NotifAction,
  ExceptionPolicy: handlers.ExceptionPolicy,
  SyscallEvent: handlers.SyscallEvent,
  PolicyContext: handlers.PolicyContext,
  presets: handlers.presets,
  sandbox,
  PythonSandbox,
  VirtualFS,
  rpcProxy,
  Command,
  Pipeline,
  Gather,
  SandboxProcess,
  confine,
  probe,
  version,
  BranchAction,
  Protection,
  MIN_ABI,
  loadProfile,
  policyFromDict,
  profileArgv,
  Problem: errors.Problem,
  SandtrapError: errors.SandtrapError,
  InvalidArgument: errors.InvalidArgument,
  InvalidRequest: errors.InvalidRequest,
  PolicyError: errors.PolicyError,
  IsolationUnavailable: errors.IsolationUnavailable,
  NotFound: errors.NotFound,
  SpawnFailed: errors.SpawnFailed,
  ForkedChild: errors.ForkedChild,
  SandboxClosed: errors.SandboxClosed,
  InternalError: errors.InternalError,
  ProcessFailed: errors.ProcessFailed,
  InvalidState: errors.InvalidState,
  AbortError: errors.AbortError,
};
