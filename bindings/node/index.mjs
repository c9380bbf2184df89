// ESM entry point: the same objects as the CommonJS one (one copy of the addon).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const sandtrap = require('./index.js');

export const {
  Sandbox,
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
  Problem,
  SandtrapError,
  InvalidArgument,
  InvalidRequest,
  PolicyError,
  IsolationUnavailable,
  NotFound,
  SpawnFailed,
  ForkedChild,
  SandboxClosed,
  InternalError,
  ProcessFailed,
  InvalidState,
  AbortError,
  Handler,
  HandlerCtx,
  NotifAction,
  ExceptionPolicy,
  SyscallEvent,
  PolicyContext,
  presets,
} = sandtrap;
export default sandtrap;
