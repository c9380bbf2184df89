'use strict';
// The JavaScript API over the addon: Sandbox, Command/Pipeline, confine, probe.
//
// Every operation is one msgpack request through native.exec (a Promise settled
// on the libuv thread pool). Adding an operation of the protocol is one method
// that builds its request and one function that shapes its response: see run(),
// pipeline() and isolation() below, which all go through request().

const { Encoder, Decoder } = require('@msgpack/msgpack');
const native = require('./native');
const {
  Problem,
  SandtrapError,
  PolicyError,
  InvalidRequest,
  AbortError,
  makeError,
  fromNative,
  problemsMessage,
  toProblem,
} = require('./errors');
const { RUN, policyOptions, mapOptions, optionName, camelKeys, isPlainObject, describe } = require('./options');
const { DEFAULTS } = require('./fields');

/**
 * A map decoded from the engine (msgpack; its keys are docs/protocol.md's): the
 * protocol's data, typed where this file shapes it for JavaScript.
 * @typedef {Record<string, any>} Wire
 */

// useBigInt64: a BigInt is encoded as a 64-bit integer (sandbox ids are uint64)
const encoder = new Encoder({ ignoreUndefined: true, useBigInt64: true });
// keys that are not strings or numbers (a Python namespace may have None, bool or
// bytes keys) become strings: JavaScript objects hold nothing else
const decoder = new Decoder({
  mapKeyConverter: (/** @type {unknown} */ k) =>
    typeof k === 'string' || typeof k === 'number'
      ? k
      : ArrayBuffer.isView(k)
        ? Buffer.from(k.buffer, k.byteOffset, k.byteLength).toString()
        : String(k),
});
const encode = (/** @type {unknown} */ v) => encoder.encode(v);
const decode = (/** @type {ArrayLike<number> | ArrayBufferView | ArrayBuffer} */ buf) => /** @type {Wire} */ (decoder.decode(buf));

// Error kinds that are a run's fate (the call itself worked): resolved, not rejected.
// A program that is missing or could not start is one (as in Python and C: the
// result's error says so); a sandbox that cannot isolate or is closed is not.
const OUTCOME_KINDS = new Set(['timeout', 'cancelled', 'killed', 'cpu_time_limit', 'memory_limit', 'stage_failed', 'not_found', 'spawn_failed', 'disk_limit', 'commit_failed']);

let tagSeq = 0;
const newTag = () => `node:${process.pid}:${++tagSeq}`;

const EMPTY = Buffer.alloc(0);
/** @param {unknown} v @returns {Buffer} */
function toBuffer(v) {
  if (v === null || v === undefined) return EMPTY;
  if (Buffer.isBuffer(v)) return v;
  if (ArrayBuffer.isView(v)) return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  return Buffer.from(String(v));
}

/**
 * Shape one engine run result (docs/protocol.md "run result") for JavaScript.
 * @param {Wire} r
 * @returns {Wire} index.d.ts's RunResult
 */
function runResult(r) {
  const res = {
    success: r.success === true,
    reason: typeof r.reason === 'string' ? r.reason : 'unknown',
    exitCode: r.exit_code ?? null,
    signal: r.signal ?? null,
    stdout: toBuffer(r.stdout),
    stderr: toBuffer(r.stderr),
    stdoutTruncated: r.stdout_truncated === true,
    stderrTruncated: r.stderr_truncated === true,
    error: r.error ? runError(r.error) : null,
    timedOut: r.timed_out === true,
    cancelled: r.cancelled === true,
    isolation: r.isolation ? camelKeys(r.isolation) : null,
    usage: r.usage ? camelKeys(r.usage) : null,
    // a pipeline's (below); a run has none, as in Python
    stages: [],
    failedStage: null,
    denials: Array.isArray(r.denials) ? r.denials.map(toDenial) : [],
    denialsDropped: typeof r.denials_dropped === 'number' ? r.denials_dropped : 0,
    denialsSources: r.denials_sources && typeof r.denials_sources === 'object' ? { ...r.denials_sources } : {},
    // with a workdir (lib/view.js)
    changes: toChanges(r.changes),
    branch: typeof r.branch === 'string' && r.branch ? r.branch : null,
    branchId: typeof r.branch_id === 'number' && r.branch_id > 0 ? r.branch_id : null,
    committed: toChanges(r.committed),
    commitRefused: toChanges(r.commit_refused),
  };
  Object.defineProperty(res, 'check', { value: checkResult, enumerable: false });
  return res;
}

/**
 * result.check(): the result if the run succeeded, else throws ProcessFailed (err.result).
 * @this {Wire}
 */
function checkResult() {
  if (this.success) return this;
  const why =
    this.reason === 'exited' ? `exited with status ${this.exitCode}` :
    this.reason === 'signaled' ? `was killed by signal ${this.signal}` :
    this.error ? this.error.message : `ended: ${this.reason}`;
  const tail = this.stderr && this.stderr.length ? this.stderr.subarray(-400).toString().trim() : '';
  throw makeError('process_failed', `the run ${why}${tail ? `; its stderr ends with: ${tail}` : ''}`, { result: this });
}

/**
 * The changes of an engine response list: [{kind: 'A'|'M'|'D', path}].
 * @param {unknown} v
 * @returns {{kind: string, path: string}[]}
 */
function toChanges(v) {
  if (!Array.isArray(v)) return [];
  return v.filter((c) => c && typeof c === 'object').map((c) => ({ kind: String(c.kind ?? ''), path: String(c.path ?? '') }));
}

/**
 * A learn response: the learning run's result and the policy it needed, as options.
 * @param {Wire} r
 * @returns {Wire} index.d.ts's LearnResult
 */
function learnResult(r) {
  /** @type {Record<string, unknown>} */
  const policy = {};
  for (const [k, v] of Object.entries(r.policy ?? {})) policy[optionName(k)] = Array.isArray(v) ? v.map(String) : v;
  /** @type {Record<string, string[]>} */
  const observed = {};
  for (const [k, v] of Object.entries(r.observed ?? {})) observed[k] = Array.isArray(v) ? v.map(String) : [];
  return {
    result: runResult(r.result ?? {}),
    policy,
    profile: String(r.profile ?? ''),
    observed,
    dropped: typeof r.dropped === 'number' ? r.dropped : 0,
    mode: String(r.mode ?? ''),
  };
}

/**
 * One refused access (docs/protocol.md "denials"); absent path/address/reason are null.
 * @param {Wire} d
 * @returns {Wire} index.d.ts's Denial
 */
function toDenial(d) {
  /** @param {unknown} v */
  const opt = (v) => (v ? String(v) : null);
  return {
    syscall: String(d.syscall ?? ''),
    path: opt(d.path),
    address: opt(d.address),
    reason: opt(d.reason),
    errno: String(d.errno ?? ''),
    errnoNr: Number(d.errno_nr ?? 0),
    count: Number(d.count ?? 0),
    source: String(d.source ?? ''),
  };
}

/**
 * A result's error: {kind, message}, and the problems of a request that could not run.
 * @param {Wire} e
 */
function runError(e) {
  /** @type {{kind: string, message: string, problems?: Problem[]}} */
  const out = { kind: String(e.kind), message: String(e.message) };
  if (Array.isArray(e.problems) && e.problems.length) out.problems = e.problems.map((p) => toProblem(p, optionName));
  return out;
}

/** @param {Wire} r */
function pipelineResult(r) {
  const res = runResult(r);
  res.stages = Array.isArray(r.stages) ? r.stages.map(runResult) : [];
  res.failedStage = Number.isInteger(r.failed_stage) ? r.failed_stage : null;
  return res;
}

/**
 * The first result (of `results`) whose error means the call failed, not the run.
 * @param {Wire[]} results
 */
function callFailure(results) {
  return results.find((r) => r && r.error && !OUTCOME_KINDS.has(r.error.kind));
}

/** @param {unknown} s @returns {s is AbortSignal} */
function isAbortSignal(s) {
  if (s === null || typeof s !== 'object') return false;
  const o = /** @type {{aborted?: unknown, addEventListener?: unknown}} */ (s);
  return typeof o.aborted === 'boolean' && typeof o.addEventListener === 'function';
}

/** @param {AbortSignal} signal @param {unknown} [result] */
function abortError(signal, result) {
  return new AbortError('The operation was aborted', { cause: signal.reason, result });
}

/**
 * stdin: string, Buffer/TypedArray/DataView or ArrayBuffer.
 * @param {unknown} v
 * @param {Problem[]} problems
 * @returns {string | Uint8Array | undefined}
 */
function stdinBytes(v, problems, what = 'stdin') {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return v;
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  problems.push(new Problem(what, `want a string, Buffer or Uint8Array, got ${describe(v)}`));
  return undefined;
}

/**
 * @param {unknown} argv
 * @param {Problem[]} problems
 * @returns {string[]}
 */
function checkArgv(argv, problems) {
  if (!Array.isArray(argv) || argv.length === 0) {
    problems.push(new Problem('argv', `want a non-empty array of strings, got ${describe(argv)}`));
    return [];
  }
  argv.forEach((/** @type {unknown} */ a, /** @type {number} */ i) => {
    if (typeof a !== 'string') problems.push(new Problem('argv', `element ${i}: want a string, got ${describe(a)}`));
    else if (a.includes('\0')) problems.push(new Problem('argv', `element ${i} contains a NUL byte`));
  });
  if (typeof argv[0] === 'string' && argv[0] === '') problems.push(new Problem('argv', 'element 0 (the program) is empty'));
  return argv.slice();
}

/** @param {Problem[]} problems */
function requestError(problems) {
  return new InvalidRequest(problemsMessage('invalid request', problems), { problems });
}

/** @param {Problem[]} problems */
function policyError(problems) {
  return new PolicyError(problemsMessage('invalid policy', problems), { problems });
}

/**
 * How many engine calls run at once. Each one holds a thread for as long as its
 * program runs; beyond this, requests wait (in order) for a slot. The Go runtime
 * aborts the whole process past 10000 threads, so this must stay well below.
 * SANDTRAP_MAX_CONCURRENT overrides the default of 256 (the same variable and default
 * bound the Python binding's asyncio calls).
 */
/** @typedef {{resolve: () => void, reject: (e: unknown) => void, signal: AbortSignal | undefined, onAbort: (() => void) | null}} Waiter */
const slots = {
  max: Math.max(1, Math.min(Number(process.env.SANDTRAP_MAX_CONCURRENT) || 256, 4096)),
  running: 0,
  /** @type {Waiter[]} */
  waiting: [],
  /**
   * @param {AbortSignal} [signal]
   * @returns {Promise<void>}
   */
  acquire(signal) {
    if (this.running < this.max && this.waiting.length === 0) {
      this.running++;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      /** @type {Waiter} */
      const w = { resolve, reject, signal, onAbort: null };
      if (signal) {
        w.onAbort = () => {
          const i = this.waiting.indexOf(w);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(abortError(signal));
        };
        signal.addEventListener('abort', w.onAbort, { once: true });
      }
      this.waiting.push(w);
    });
  },
  release() {
    const w = this.waiting.shift();
    if (!w) {
      this.running--;
      return;
    }
    if (w.signal && w.onAbort) w.signal.removeEventListener('abort', w.onAbort);
    w.resolve(); // the slot passes on
  },
};

/** process.env now, without what the engine cannot carry (NUL bytes). */
function hostEnv() {
  /** @type {Record<string, string>} */
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (typeof v === 'string' && !k.includes('\0') && !v.includes('\0') && !k.includes('=')) env[k] = v;
  }
  return env;
}

/**
 * A deep, frozen copy of plain options data.
 * @param {unknown} v
 * @returns {unknown}
 */
function snapshot(v) {
  if (Array.isArray(v)) return Object.freeze(v.map(snapshot));
  if (isPlainObject(v)) return Object.freeze(Object.fromEntries(Object.entries(v).map(([k, x]) => [k, snapshot(x)])));
  return v;
}

/**
 * The response of a request that cancelAll() stopped before it started.
 * @param {Wire} req
 */
function cancelledBeforeStart(req) {
  /** @type {Wire} */
  const r = {
    success: false,
    exit_code: null,
    signal: null,
    stdout: EMPTY,
    stderr: EMPTY,
    stdout_truncated: false,
    stderr_truncated: false,
    timed_out: false,
    cancelled: true,
    error: { kind: 'cancelled', message: 'cancelled before it started' },
    isolation: null,
    usage: null,
  };
  if (req.op === 'pipeline') r.stages = req.stages.map(() => ({ ...r }));
  return r;
}

class Sandbox {
  /**
   * @param {object} [options] policy options (camelCase; see index.d.ts)
   */
  constructor(options = {}) {
    // policyFn is a host callable, not a policy value (lib/handlers.js)
    let policyFn = null;
    if (isPlainObject(options) && 'policyFn' in options) ({ policyFn = null, ...options } = options);
    const { map, problems } = policyOptions(options);
    if (policyFn != null && typeof policyFn !== 'function') problems.push(new Problem('policyFn', `want a function (event, ctx), got ${describe(policyFn)}`));
    if (policyFn != null && isPlainObject(options) && options.noSupervisor) problems.push(new Problem('policyFn', 'needs the syscall supervisor, which noSupervisor turns off'));
    if (!map.clean_env && (map.env === undefined || isPlainObject(map.env))) {
      // as in Python: the program inherits this process's environment as it is now
      // (snapshotted per sandbox; the engine alone would see it as it was at load),
      // under the policy's own env
      map.env = { ...hostEnv(), ...(map.env ?? {}) };
    }
    /** @type {unknown} the addon's handle */
    let handle = null;
    try {
      handle = native.newSandbox(encode(map));
    } catch (e) {
      const err = fromNative(e, {}, optionName);
      if (!(err instanceof SandtrapError)) throw err;
      if (err.code === 'invalid_policy' || err.code === 'invalid_request') {
        problems.push(...err.problems); // the message is rewritten with the option names
      } else if (problems.length === 0) {
        throw err; // e.g. IsolationUnavailable
      }
    }
    if (problems.length) {
      if (handle) native.free(handle);
      throw policyError(problems);
    }
    this._handle = handle;
    this._closed = false;
    this._pending = 0; // requests made and not yet settled (queued ones included)
    this._cancelGen = 0; // bumped by cancelAll(): queued requests then do not start
    for (const k of ['_handle', '_closed', '_pending', '_cancelGen']) Object.defineProperty(this, k, { enumerable: false });
    /** The engine's id of this sandbox (names it as a pipeline stage). @type {bigint | number} */
    this.id; // declares the property for tsc (defined below, read-only)
    Object.defineProperty(this, 'id', { value: native.sandboxId(handle), enumerable: true });
    /** @type {((event: any, ctx: any) => unknown) | null} lib/handlers.js asks it about each trapped call */
    this._policyFn; // declares the property for tsc (defined below, read-only)
    Object.defineProperty(this, '_policyFn', { value: policyFn, enumerable: false });
    /** A frozen snapshot of the options (confine() rebuilds the policy from it). @type {object} */
    this.options; // declares the property for tsc (defined below, read-only)
    Object.defineProperty(this, 'options', { value: snapshot(options), enumerable: true });
  }

  get closed() {
    return this._closed;
  }

  _live() {
    if (this._closed) throw makeError('closed', 'the sandbox is closed');
    return this._handle;
  }

  /**
   * Send one request and return the decoded response map.
   * @param {Wire} req the request map (engine keys)
   * @param {{signal?: AbortSignal | null, sandboxes?: Sandbox[]}} [opts] other sandboxes the request names
   * @returns {Promise<Wire>}
   */
  async request(req, { signal, sandboxes = [] } = {}) {
    if (signal != null && !isAbortSignal(signal)) throw new TypeError('signal must be an AbortSignal');
    /** @type {Sandbox[]} */
    const involved = [this];
    for (const sb of sandboxes) {
      if (!(sb instanceof Sandbox)) throw new TypeError('sandboxes must be Sandbox objects');
      if (!involved.includes(sb)) involved.push(sb);
    }
    for (const sb of involved) sb._live();
    if (signal?.aborted) throw abortError(signal);
    // Every request carries a tag: it names the operation for cancel() (unique, unless
    // the caller names it: the requests of one operation answering host calls share it).
    req = { ...req, tag: req.tag ?? newTag() };
    const gen = this._cancelGen;
    // pin every sandbox involved: close() frees the engine's side only after
    // the requests already made (queued ones included) are done
    for (const sb of involved) sb._pending++;
    try {
      await slots.acquire(signal ?? undefined);
      try {
        if (this._cancelGen !== gen) return cancelledBeforeStart(req);
        return await this._send(req, signal ?? undefined, involved);
      } finally {
        slots.release();
      }
    } finally {
      for (const sb of involved) sb._unpin();
    }
  }

  /**
   * @param {Wire} req
   * @param {AbortSignal | undefined} signal
   * @param {Sandbox[]} involved
   * @returns {Promise<Wire>}
   */
  async _send(req, signal, involved) {
    const handles = involved.map((sb) => sb._handle);
    const others = handles.slice(1);
    if (signal == null) {
      try {
        return decode(await native.exec(handles[0], encode(req), others));
      } catch (e) {
        throw fromNative(e);
      }
    }
    if (signal.aborted) throw abortError(signal);
    const sig = signal;
    let settled = false;
    let delay = 1;
    // The engine knows the tag only once the run has started, a moment after
    // exec() was called: retry until the request settles.
    const cancel = () => {
      if (settled) return;
      for (const h of handles) native.cancel(h, req.tag);
      setTimeout(cancel, delay);
      delay = Math.min(delay * 2, 50);
    };
    signal.addEventListener('abort', cancel, { once: true });
    /** @type {Wire} */
    let resp;
    try {
      resp = decode(await native.exec(handles[0], encode(req), others));
    } catch (e) {
      throw fromNative(e);
    } finally {
      settled = true;
      sig.removeEventListener('abort', cancel);
    }
    if (sig.aborted) {
      const err = abortError(sig, resp);
      // the raw response, for the caller to shape into err.result
      Object.defineProperty(err, 'response', { value: resp, configurable: true });
      throw err;
    }
    return resp;
  }

  _unpin() {
    if (--this._pending === 0 && this._closed) native.free(this._handle);
  }

  /**
   * Run argv in the sandbox.
   * @param {string[]} argv
   * @param {Record<string, unknown>} [opts] index.d.ts's RunOptions
   * @returns {Promise<Wire>} the run result; rejects with a SandtrapError when the
   *   program could not run (NotFound, SpawnFailed, IsolationUnavailable, …) and with
   *   an AbortError (err.result) when opts.signal aborted it.
   */
  async run(argv, opts = {}) {
    if (this._policyFn) return this.runWithHandlers(argv, [], opts); // lib/handlers.js
    return this._run({ op: 'run' }, argv, opts);
  }

  /**
   * Run argv with syscall handlers: handlers is an array of [syscall, handler] pairs
   * (a name like 'openat' or a number); the sandbox's own rules judge each call first,
   * a handler sees only what they let through and can only tighten (lib/handlers.js).
   * @param {string[]} argv
   * @param {Array<[string | number, import('./handlers').Handler]>} [handlers]
   * @param {Record<string, unknown>} [opts] index.d.ts's RunOptions
   * @returns {Promise<Wire>}
   */
  runWithHandlers(argv, handlers = [], opts = {}) {
    return require('./handlers').runWithHandlers(this, argv, handlers, opts);
  }

  /**
   * Run argv permissively but recorded, and resolve with the smallest policy it
   * needed: {result, policy (options for new Sandbox(policy)), profile (TOML),
   * observed, dropped, mode} (docs/protocol.md "learn").
   * @param {string[]} argv
   * @param {Record<string, unknown>} [opts] index.d.ts's RunOptions
   * @returns {Promise<Wire>}
   */
  async learn(argv, opts = {}) {
    return this._run({ op: 'learn' }, argv, opts, learnResult);
  }

  /**
   * run(), or an op whose request and result are a run's plus the keys of `base`.
   * @param {Wire} base
   * @param {unknown} argv
   * @param {unknown} opts
   * @param {(r: Wire) => Wire} [shape]
   * @returns {Promise<Wire>}
   */
  async _run(base, argv, opts, shape = runResult) {
    /** @type {Problem[]} */
    const problems = [];
    const args = checkArgv(argv, problems);
    const { map, problems: optProblems } = mapOptions(opts, RUN, 'run', ['stdin', 'signal']);
    problems.push(...optProblems);
    const o = /** @type {{stdin?: unknown, signal?: AbortSignal | null}} */ (isPlainObject(opts) ? opts : {});
    const stdin = stdinBytes(o.stdin, problems);
    if (o.signal != null && !isAbortSignal(o.signal)) problems.push(new Problem('signal', `want an AbortSignal, got ${describe(o.signal)}`));
    if (problems.length) throw requestError(problems);
    return finishRun(await this._requestShaped({ ...base, argv: args, stdin, ...map }, o.signal, shape));
  }

  /**
   * A command for a pipeline: sb.cmd(a).pipe(sb2.cmd(b)).run().
   * @param {string[]} argv
   * @param {Record<string, unknown>} [opts] index.d.ts's CommandOptions
   */
  cmd(argv, opts = {}) {
    return new Command(this, argv, opts);
  }

  /** What this sandbox enforces on this machine (the isolation report), without running anything. */
  async isolation() {
    return camelKeys(await this.request({ op: 'isolation' }));
  }

  /**
   * maxMemory in bytes as the engine reads it ('512M' -> 536870912), or null when unset.
   * @returns {Promise<number | null>}
   */
  async memoryBytes() {
    const lim = (await this.isolation()).limits.maxMemory;
    return lim && typeof lim.value === 'number' ? lim.value : null;
  }

  /**
   * {virtualPort: realPort} for the sockets this sandbox's runs hold bound now
   * (portRemap; {} without it): a host client reaches a server on the real port.
   * @returns {Promise<Record<number, number>>}
   */
  async ports() {
    const r = await this.request({ op: 'ports' });
    if (r.error && r.error.kind) throw makeError(r.error.kind, r.error.message);
    /** @type {Record<number, number>} */
    const out = {};
    for (const [k, v] of Object.entries(r.ports || {})) out[Number(k)] = Number(v);
    return out;
  }

  /**
   * request() that turns an abort into an AbortError carrying the shaped result.
   * @param {Wire} req
   * @param {AbortSignal | null | undefined} signal
   * @param {(r: Wire) => Wire} shape
   * @param {Sandbox[]} [sandboxes]
   */
  async _requestShaped(req, signal, shape, sandboxes) {
    try {
      return shape(await this.request(req, { signal: signal ?? undefined, sandboxes }));
    } catch (e) {
      const a = /** @type {AbortError & {response?: Wire}} */ (e);
      if (a instanceof AbortError && a.response) {
        a.result = shape(a.response);
        delete a.response;
      }
      throw e;
    }
  }

  /**
   * Close the sandbox: no new runs start; runs in flight finish first, then the
   * engine's resources are released. Idempotent.
   */
  close() {
    if (this._closed) return;
    this._closed = true;
    if (this._pending === 0) native.free(this._handle);
  }

  /**
   * Cancel every run of this sandbox in flight or waiting for a slot (they
   * resolve with cancelled: true). Returns how many the engine was running.
   */
  cancelAll() {
    this._cancelGen++;
    if (this._pending === 0) return 0;
    return native.cancel(this._handle, null);
  }
}

if (typeof Symbol.dispose === 'symbol') {
  /** @type {any} */ (Sandbox.prototype)[Symbol.dispose] = function dispose() {
    this.close();
  };
}

// Every policy option reads as a read-only property of a Sandbox: the value
// given (frozen, as `options` holds it), else its default (lib/fields.js DEFAULTS,
// generated from the engine's schema).
for (const [name, dflt] of Object.entries(DEFAULTS)) {
  if (name in Sandbox.prototype) throw new Error(`BUG(sandtrap): option ${name} shadows Sandbox.prototype.${name}`);
  Object.defineProperty(Sandbox.prototype, name, {
    get() {
      const v = this.options[name];
      return v === undefined || v === null ? snapshot(dflt) : v;
    },
    configurable: true,
  });
}

/** @param {Wire} res @returns {Wire} */
function finishRun(res) {
  // the pipeline's own error first: the engine names the stage in it
  const failed = callFailure(res.stages ? [res, ...res.stages] : [res]);
  if (failed) {
    const { kind, message, problems } = failed.error;
    // a request the engine refused: its message again, with the option names
    const text = problems ? problemsMessage(kind === 'invalid_policy' ? 'invalid policy' : 'invalid request', problems) : message;
    throw makeError(kind, text, { result: res, problems });
  }
  return res;
}

class Command {
  /**
   * @param {Sandbox} sandbox
   * @param {string[]} argv
   * @param {Record<string, unknown>} [opts] index.d.ts's CommandOptions
   */
  constructor(sandbox, argv, opts = {}) {
    if (!(sandbox instanceof Sandbox)) throw new TypeError('Command: sandbox must be a Sandbox');
    /** @type {Problem[]} */
    const problems = [];
    this.sandbox = sandbox;
    this.argv = checkArgv(argv, problems);
    const { map, problems: optProblems } = mapOptions(opts, RUN, 'cmd');
    problems.push(...optProblems);
    if (problems.length) throw requestError(problems);
    this._request = map;
    Object.defineProperty(this, '_request', { enumerable: false });
  }

  /**
   * Join this command's stdout to the next command's stdin (a kernel pipe).
   * @param {Command | Pipeline} next
   * @returns {Pipeline}
   */
  pipe(next) {
    return new Pipeline([this]).pipe(next);
  }

  /**
   * Run this command alone (sandbox.run with the command's options).
   * @param {Record<string, unknown>} [opts] index.d.ts's PipelineRunOptions
   */
  run(opts = {}) {
    const p = new Pipeline([this]);
    p._single = true;
    return p.run(opts);
  }

  /**
   * This command's output named for a gather's consumer:
   * a.cmd(x).as('code').and(b.cmd(y).as('data')).pipe(c.cmd(z)).run().
   * @param {string} name
   * @returns {Gather}
   */
  as(name) {
    if (typeof name !== 'string' || name === '') throw new InvalidRequest(`as(): want a non-empty name, got ${describe(name)}`);
    const c = new Command(this.sandbox, this.argv);
    c._request = this._request;
    Object.defineProperty(c, '_name', { value: name, enumerable: false });
    return new Gather([c]);
  }
}

/** Named commands run at once whose outputs feed one consumer (Command.as). */
class Gather {
  /** @param {Command[]} sources */
  constructor(sources) {
    this.sources = sources.slice();
  }

  /** @param {Gather} other @returns {Gather} */
  and(other) {
    if (!(other instanceof Gather)) throw new TypeError('and: want cmd.as(name)');
    return new Gather([...this.sources, ...other.sources]);
  }

  /**
   * The consumer (and any stages after it): the last source on its stdin, the others
   * on fds 3, 4, …, named by SANDTRAP_GATHER ("code:3,data:0").
   * @param {Command | Pipeline} next
   * @returns {Pipeline}
   */
  pipe(next) {
    const p = new Pipeline([]).pipe(next);
    if (this.sources.length < 2) throw new InvalidRequest('a gather needs at least two named commands', { problems: [new Problem('gather', 'at least two')] });
    p._gather = this.sources;
    return p;
  }
}

class Pipeline {
  /** @param {Command[]} commands */
  constructor(commands) {
    this.commands = commands.slice();
    /** a gather's producers (Gather.pipe), or null @type {Command[] | null} */
    this._gather = null;
    this._single = false; // Command.run: one command, run as a run
    Object.defineProperty(this, '_gather', { enumerable: false, writable: true });
    Object.defineProperty(this, '_single', { enumerable: false, writable: true });
  }

  /**
   * @param {Command | Pipeline} next
   * @returns {Pipeline}
   */
  pipe(next) {
    /** @type {Pipeline} */
    let p;
    if (next instanceof Pipeline) p = new Pipeline([...this.commands, ...next.commands]);
    else if (!(next instanceof Command)) throw new TypeError('pipe: want a Command (sandbox.cmd(argv)) or a Pipeline');
    else p = new Pipeline([...this.commands, next]);
    p._gather = this._gather;
    return p;
  }

  /**
   * Run every stage at once, each under its own sandbox's policy; only bytes cross.
   * Resolves with the last stage's result plus `stages` (every stage's result).
   * Rejects when any stage could not start (e.g. NotFound), with err.result.
   * @param {Record<string, unknown>} [opts] index.d.ts's PipelineRunOptions
   * @returns {Promise<Wire>}
   */
  async run(opts = {}) {
    /** @type {Problem[]} */
    const problems = [];
    const { map, problems: optProblems } = mapOptions(opts, { timeout: RUN.timeout }, 'pipeline', ['stdin', 'signal', 'stdout']);
    problems.push(...optProblems);
    const o = /** @type {{stdin?: unknown, signal?: AbortSignal | null, stdout?: unknown}} */ (isPlainObject(opts) ? opts : {});
    if (o.stdout !== undefined && !(Number.isInteger(o.stdout) && /** @type {number} */ (o.stdout) >= 0)) {
      problems.push(new Problem('stdout', `want a file descriptor (an integer), got ${describe(o.stdout)}`));
    }
    if (this.commands.length < 2 && !this._gather && !this._single) problems.push(new Problem('stages', 'a pipeline needs at least two stages (run one command with cmd.run())'));
    const stdin = stdinBytes(o.stdin, problems);
    if (o.signal != null && !isAbortSignal(o.signal)) problems.push(new Problem('signal', `want an AbortSignal, got ${describe(o.signal)}`));
    if (problems.length) throw requestError(problems);
    const first = this.commands[0].sandbox;
    if (this._single) {
      const c = this.commands[0];
      return finishRun(
        await first._requestShaped({ op: 'run', argv: c.argv, stdin, ...c._request, ...map }, o.signal, runResult),
      );
    }
    const stages = this.commands.map((c) => ({ argv: c.argv, sandbox: BigInt(c.sandbox.id), ...c._request }));
    /** @type {Command[]} */
    const producers = this._gather ?? [];
    const sandboxes = [...new Set([...producers, ...this.commands].map((c) => c.sandbox))];
    /** @type {Wire} */
    const req = { op: 'pipeline', stages, stdin, ...map };
    if (o.stdout !== undefined) req.stdout = o.stdout;
    if (this._gather) {
      req.gather = producers.map((c) => ({ name: /** @type {any} */ (c)._name, argv: c.argv, sandbox: BigInt(c.sandbox.id), ...c._request }));
    }
    return finishRun(await first._requestShaped(req, o.signal, pipelineResult, sandboxes));
  }
}

/**
 * Confine the calling process for good with a sandbox's policy (Landlock on every
 * thread; the seccomp filter too with {seccomp: true}). Irreversible.
 * (The engine keeps this process's /proc/self/task readable: it reaches every
 * thread through psx, which lists that directory while it restricts them.)
 * @param {Sandbox|object} sandbox a Sandbox, or policy options to build one
 * @param {{seccomp?: boolean}} [opts]
 */
function confine(sandbox, opts = {}) {
  const { problems } = mapOptions(opts, { seccomp: ['seccomp', 'bool'] }, 'confine');
  if (problems.length) throw requestError(problems);
  let options = sandbox;
  if (sandbox instanceof Sandbox) {
    sandbox._live();
    options = sandbox.options;
  }
  const sb = new Sandbox(options);
  try {
    native.confine(sb._handle, opts.seccomp === true);
  } catch (e) {
    throw fromNative(e);
  } finally {
    sb.close();
  }
}

/** What this kernel and process can enforce (Landlock ABI, seccomp, namespaces, cgroups, root). */
function probe() {
  try {
    return camelKeys(decode(native.probe()));
  } catch (e) {
    throw fromNative(e);
  }
}

const pkg = require('../package.json');

/** Versions: this package, the loaded library and its ABI. */
function version() {
  const v = native.version();
  return { binding: pkg.version, library: v.version, abi: v.abi, headerAbi: v.headerAbi };
}

module.exports = { Sandbox, Command, Pipeline, Gather, confine, probe, version, SandtrapError, newTag, runResult, runError, toChanges, toDenial };
