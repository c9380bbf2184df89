// Type declarations of the `sandtrap` package (CommonJS and ESM entry points).
/// <reference types="node" />

/** Sizes in bytes, or strings with binary suffixes: `"512K"`, `"256M"`, `"1.5G"`. */
export type Size = number | string;

/** Policy options of a Sandbox (docs/protocol.md, "Policy map", in camelCase). */
export interface SandboxOptions {
  /** Absolute paths (files or directories) readable and executable. */
  fsReadable?: string[];
  /** Absolute paths readable, writable, executable, creatable, removable. */
  fsWritable?: string[];
  /** Paths inside allowed trees that stay denied. */
  fsDenied?: string[];
  /** TCP connect: `443`, `"443"`, `"host:443"` (host needs allowDegraded), `"*"`. */
  netAllow?: Array<number | string>;
  /** TCP bind ports: `8080`, `"8000-8005"`. */
  netAllowBind?: Array<number | string>;
  /** Allow UDP sockets (all ports). */
  netAllowUdp?: boolean;
  /** Allow pathname AF_UNIX sockets (abstract ones stay scoped). */
  netAllowUnix?: boolean;
  /** Memory for the whole process tree. */
  maxMemory?: Size;
  /** Tasks in the sandbox. */
  maxProcesses?: number;
  /** RLIMIT_NOFILE per process. */
  maxOpenFiles?: number;
  /** Largest file the run may write. */
  maxDisk?: Size;
  /** Percent of one CPU (throttled), e.g. 50 or 200. */
  maxCpu?: number;
  /** CPU seconds for the whole tree, then killed. */
  maxCpuTime?: number;
  /** Default wall-clock timeout of a run, in seconds. */
  timeout?: number;
  /** Bytes kept of each of stdout and stderr (default 16 MiB). */
  maxOutput?: Size;
  /** Variables set for the program. */
  env?: Record<string, string>;
  /** Start from an empty environment (PATH set to the system default). */
  cleanEnv?: boolean;
  /** Working directory. */
  cwd?: string;
  /** Run the program as this user (host must be root; give gid too). */
  uid?: number;
  gid?: number;
  /** Syscall names removed from the deny list. */
  extraAllowSyscalls?: string[];
  /** Syscall names answered with EPERM. */
  extraDenySyscalls?: string[];
  /** Run even when a requested protection is unavailable (results say what was not applied). */
  allowDegraded?: boolean;
}

/** Options of one command (run() and cmd()). */
export interface CommandOptions {
  /** Seconds; overrides the policy's timeout. */
  timeout?: number;
  /** Merged over the policy's environment. */
  env?: Record<string, string>;
  /** Overrides the policy's working directory. */
  cwd?: string;
  /** Overrides the policy's maxOutput. */
  maxOutput?: Size;
}

export type Stdin = string | ArrayBufferView | ArrayBuffer;

export interface RunOptions extends CommandOptions {
  /** Fed to the program, then closed (absent: /dev/null). */
  stdin?: Stdin;
  /** Aborting kills the whole process tree; the promise rejects with an AbortError. */
  signal?: AbortSignal;
}

export interface PipelineRunOptions {
  /** Fed to the first stage. */
  stdin?: Stdin;
  /** Default timeout of every stage, in seconds. */
  timeout?: number;
  /** Aborting kills every stage. */
  signal?: AbortSignal;
}

/** Error kinds: the engine's status names and the run outcomes. */
export type ErrorKind =
  | 'invalid_argument'
  | 'invalid_request'
  | 'invalid_policy'
  | 'isolation_unavailable'
  | 'not_found'
  | 'spawn_failed'
  | 'forked_child'
  | 'closed'
  | 'internal'
  | 'timeout'
  | 'cancelled'
  | 'cpu_time_limit'
  | 'memory_limit';

export interface RunError {
  kind: ErrorKind | (string & {});
  message: string;
}

export interface LimitReport {
  value?: number;
  seconds?: number;
  via: string;
  note?: string;
}

/** What took effect for a run (docs/protocol.md, "isolation report", in camelCase). */
export interface IsolationReport {
  landlock: {
    abi: number;
    fsRules: Array<{ path: string; access: 'ro' | 'rw' | 'dev' | (string & {}) }>;
    skipped?: string[] | null;
    net: boolean;
    connectPorts: number[] | null;
    bindPorts: number[] | null;
    scoped: string[] | null;
  } | null;
  seccomp: {
    enforced: boolean;
    action: string;
    denied: string[];
    foreignArch: string;
    inetSockets: boolean;
    udp: boolean;
    unixSockets: boolean;
  } | null;
  noNewPrivs: boolean;
  capabilities: string;
  pidNamespace: boolean;
  userNamespace: boolean;
  treeKill: 'pid_namespace' | 'cgroup' | 'process_group' | (string & {});
  cgroup: string;
  uid?: number;
  gid?: number;
  limits: Record<string, LimitReport>;
  degraded: string[] | null;
  notApplied?: string[];
  testDisabled?: string[];
}

export interface Usage {
  wallS: number;
  cpuUserS: number;
  cpuSysS: number;
  cpuTreeS?: number;
  peakMemory: number;
  peakMemorySource: 'cgroup' | 'rusage_maxrss' | (string & {});
  spawnUs: number;
}

export interface RunResult {
  /** Exit code 0 and no error. */
  success: boolean;
  /** null when killed by a signal. */
  exitCode: number | null;
  /** The signal that killed the main process. */
  signal: number | null;
  stdout: Buffer;
  stderr: Buffer;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** Why the engine stopped the run (timeout, cancelled, limits) or could not start it (not_found, spawn_failed), else null. */
  error: RunError | null;
  timedOut: boolean;
  cancelled: boolean;
  isolation: IsolationReport | null;
  usage: Usage | null;
  /** A pipeline's stages (empty for a run, as in Python). */
  stages: RunResult[];
  /** A pipeline's first failed stage (null for a run). */
  failedStage: number | null;
}

/** The last stage's result plus every stage's result, in order. It succeeds only
 * if every stage did; failedStage is the first that failed (named in error). */
export interface PipelineResult extends RunResult {
  stages: RunResult[];
  failedStage: number | null;
}

export interface ProbeResult {
  landlockAbi: number;
  seccomp: boolean;
  root: boolean;
  pidNamespace: boolean;
  userNamespace: boolean;
  cgroup: { version: number; controllers: string[] } | null;
  testDisabled: string[] | null;
}

export interface VersionInfo {
  /** This package's version. */
  binding: string;
  /** The loaded libsandtrap's version. */
  library: string;
  /** The loaded library's ABI version. */
  abi: number;
  /** The ABI version the addon was compiled against. */
  headerAbi: number;
}

export declare class Sandbox {
  /** COW-fork map: init once in a confined template, then n clones of it, each running work. */
  fork(n: number, options: ForkOptions): Promise<Clones>;
  /** Run argv here with the clones' stdout, in clone order, on stdin. */
  reduce(argv: string[], clones: CloneResult[], options?: RunOptions): Promise<RunResult>;
  /** Validates every option at once: throws one PolicyError listing every problem. */
  constructor(options?: SandboxOptions);
  /** The engine's id of this sandbox (names it as a pipeline stage). */
  readonly id: number;
  /** The options it was built with. */
  readonly options: Readonly<SandboxOptions>;
  readonly closed: boolean;
  /**
   * Run argv in the sandbox, on the libuv thread pool. Resolves with the result
   * (also when the program fails, is missing — `error.kind` 'not_found' — or could
   * not start — 'spawn_failed' —, times out or hits a limit); rejects with
   * IsolationUnavailable, SandboxClosed… when the sandbox cannot run anything, and
   * with an AbortError (result in `err.result`) when `signal` aborted it.
   */
  run(argv: readonly string[], options?: RunOptions): Promise<RunResult>;
  /** A command for a pipeline: `a.cmd(x).pipe(b.cmd(y)).run()`. */
  cmd(argv: readonly string[], options?: CommandOptions): Command;
  /** What this sandbox enforces on this machine, without running anything. */
  isolation(): Promise<IsolationReport>;
  /** Cancel every run of this sandbox in flight; returns how many. */
  cancelAll(): number;
  /** No new runs; runs in flight finish, then the engine's resources go. Idempotent. */
  close(): void;
  [Symbol.dispose](): void;
  /**
   * Low level: send one protocol request (docs/protocol.md keys) and get the
   * decoded response map. `sandboxes`: other sandboxes the request names.
   */
  request(req: Record<string, unknown>, options?: { signal?: AbortSignal; sandboxes?: Sandbox[] }): Promise<Record<string, unknown>>;
}

export declare class Command {
  constructor(sandbox: Sandbox, argv: readonly string[], options?: CommandOptions);
  readonly sandbox: Sandbox;
  readonly argv: string[];
  /** Join this command's stdout to the next one's stdin by a kernel pipe. */
  pipe(next: Command | Pipeline): Pipeline;
  /** Run this command alone. */
  run(options?: PipelineRunOptions): Promise<RunResult>;
}

export declare class Pipeline {
  constructor(commands: Command[]);
  readonly commands: Command[];
  pipe(next: Command | Pipeline): Pipeline;
  /**
   * Run every stage at once, each under its own sandbox's policy. Rejects when
   * any stage could not start (err.result holds every stage's result).
   */
  run(options?: PipelineRunOptions): Promise<PipelineResult>;
}

/**
 * Confine the calling process for good with a sandbox's policy: Landlock on every
 * thread, and the seccomp filter too with `{seccomp: true}`. Irreversible.
 */
export declare function confine(sandbox: Sandbox | SandboxOptions, options?: { seccomp?: boolean }): void;

/** What this kernel and process can enforce. */
export declare function probe(): ProbeResult;

export declare function version(): VersionInfo;

export interface SandtrapErrorInfo {
  code?: string;
  status?: number;
  problems?: string[];
  result?: RunResult | PipelineResult;
  cause?: unknown;
}

/** Base of every error sandtrap raises. */
export declare class SandtrapError extends Error {
  constructor(message: string, info?: SandtrapErrorInfo);
  /** Stable: the engine's status name ('invalid_policy', 'not_found', …) or 'ABORT_ERR'. */
  readonly code: string;
  /** The C status code, when the error came from the engine. */
  readonly status?: number;
  /** Every problem found (validation errors list them all). */
  readonly problems: string[];
  /** The run's result, when there was one. */
  result?: RunResult | PipelineResult;
  static readonly code: string;
}

export declare class InvalidArgument extends SandtrapError {
  readonly code: 'invalid_argument';
}
export declare class InvalidRequest extends SandtrapError {
  readonly code: 'invalid_request';
}
export declare class PolicyError extends SandtrapError {
  readonly code: 'invalid_policy';
}
export declare class IsolationUnavailable extends SandtrapError {
  readonly code: 'isolation_unavailable';
}
export declare class NotFound extends SandtrapError {
  readonly code: 'not_found';
}
export declare class SpawnFailed extends SandtrapError {
  readonly code: 'spawn_failed';
}
export declare class ForkedChild extends SandtrapError {
  readonly code: 'forked_child';
}
export declare class SandboxClosed extends SandtrapError {
  readonly code: 'closed';
}
export declare class InternalError extends SandtrapError {
  readonly code: 'internal';
}
/** Node's convention: name 'AbortError', code 'ABORT_ERR', the signal's reason as `cause`. */
export declare class AbortError extends SandtrapError {
  readonly name: 'AbortError';
  readonly code: 'ABORT_ERR';
}

/** Limits and granted functions of the cooperative Python sandbox. */
export interface PythonPolicy {
  /** Seconds an exec may run, host calls included (default 30; null: no limit). */
  timeout?: number | null;
  tickLimit?: number;
  memoryLimit?: number;
  maxStdout?: number;
  allowNetwork?: boolean;
  /** At 'kernel', let the worker create processes and run programs (refused with EPERM otherwise). */
  allowSubprocess?: boolean;
  /**
   * Host functions the sandboxed code may call by name: they run here, in JavaScript,
   * with the call's arguments (and its keyword arguments as one last object, when
   * there are any); their result (or a promise of it) crosses back as msgpack data,
   * an exception as a Python exception (HostError) whose message is `<name>: <message>`.
   */
  functions?: Record<string, (...args: any[]) => unknown>;
}

export interface PythonSandboxOptions {
  /** 'kernel' (default): Landlock, seccomp and limits under the worker; 'process': a separate process. */
  isolation?: 'kernel' | 'process';
  /** The directory the code sees as its filesystem. */
  filesystem?: string;
  echo?: boolean | 'all';
  allowDegraded?: boolean;
  /** The Python interpreter (default: the engine's pick: the first python3 program on PATH). */
  python?: string;
}

export interface PythonExecResult {
  stdout: string;
  stderr: string;
  namespace: Record<string, unknown>;
  error: { type: string; module: string; message: string; traceback: string | null } | null;
  ticks: number;
  traceback: string | null;
  /** Characters of stdout dropped (the tail is kept). */
  stdoutTruncated: number;
  duration: number;
  /** What took effect: the level, the engine's isolation report, the worker's Python and subprocess rules. */
  isolation: { level: 'kernel' | 'process'; [key: string]: unknown };
  /** A fresh worker ran this call (the previous one crashed or was killed). */
  restarted: boolean;
}

export declare class PythonSandbox {
  constructor(policy?: PythonPolicy, options?: PythonSandboxOptions);
  /** Resolves with the isolation report once the engine built the worker's sandbox (rejects as exec would). */
  open(): Promise<Record<string, unknown>>;
  exec(
    code: string,
    options?: { namespace?: Record<string, unknown>; modules?: Record<string, Record<string, unknown>>; stdin?: string; argv?: string[] },
  ): Promise<PythonExecResult>;
  /** Stop the running exec (its worker is killed); with none running, nothing happens. */
  cancel(): void;
  close(): void;
}

/** The cooperative Python sandbox: `sandbox(policy, {isolation}).exec(code)`. */
export declare function sandbox(policy?: PythonPolicy, options?: PythonSandboxOptions): PythonSandbox;

export interface CloneResult {
  id: number;
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  stdoutTruncated: boolean;
  success: boolean;
}

export interface ForkOptions {
  /** Python source run once in the template. */
  init?: string;
  /** Python source run in each clone (sees CLONE_ID). */
  work: string;
  /** Seconds before a clone is killed (default: the mapper's timeout). */
  timeout?: number;
  /** Clones alive at once (default: 4 per CPU). */
  parallel?: number;
  /** Called as each clone finishes (progress); if it throws, forking stops and fork() rejects with that error. */
  onClone?: (clone: CloneResult) => void;
  /** Aborting stops forking (the template and its clones are killed); fork() rejects with an AbortError, `err.result` the clones so far. */
  signal?: AbortSignal;
  /** The Python interpreter of the template (default: the engine's pick, as for sandbox()). */
  python?: string;
}

/** The clones of a fork in clone order, and the template's isolation report (with `python.granted`: what the engine added to the mapper's policy for the Python runtime). */
export type Clones = CloneResult[] & { readonly isolation: Record<string, unknown> | null };
