'use strict';
// The cooperative Python sandbox from JavaScript: sandbox(policy, {isolation}).exec(code).
//
// The engine drives the worker (docs/protocol.md, "cooperative sandbox": its policy,
// interpreter, frames, deadline, restarts); this file maps names and answers the
// engine's host calls: `policy.functions` run here, in JavaScript, when the
// sandboxed code calls them (arguments and results cross as msgpack data).

const { encode } = require('@msgpack/msgpack');
const native = require('./native');
const { Sandbox, newTag } = require('./sandbox');
const { InvalidArgument, AbortError, makeError } = require('./errors');
const { camelKeys } = require('./options');
const { VirtualFS, serve: serveFs } = require('./vfs');

/** @typedef {import('./sandbox').Wire} Wire */
/**
 * The options of sandbox() (index.d.ts's PythonSandboxOptions).
 * @typedef {{isolation?: string, filesystem?: string | VirtualFS, echo?: boolean | string, allowDegraded?: boolean, python?: string, snapshotPrints?: boolean, state?: Uint8Array | null, keepState?: boolean, rpcHandlers?: Record<string, RpcHandler>}} PythonSandboxOptions
 */
/** @typedef {(...args: any[]) => unknown} HostFunction */
/** @typedef {(method: string, args: unknown[], kwargs: Record<string, unknown>) => unknown} RpcHandler */

const RPC_KEY = '__st_rpc__'; // a marker on the wire (sandtrap_guest/rpc.py)
const GRANT = 'grant:'; // a live object's target
const PUBLIC = /^[A-Za-z][A-Za-z0-9_]{0,199}$/;

/**
 * A stand-in for a host object in `namespace` or `modules` (Python's
 * RpcProxyMarker): the sandbox gets a proxy whose method calls reach
 * `rpcHandlers[target](method, args, kwargs)` here.
 * @param {string} target
 * @param {{methods?: string[], attributes?: string[]}} [options]
 */
function rpcProxy(target, { methods, attributes } = {}) {
  if (typeof target !== 'string' || !target || target.length > 200 || target.startsWith(GRANT)) {
    throw new InvalidArgument(`rpcProxy: target must be a name (1 to 200 characters, not starting with "${GRANT}")`);
  }
  for (const [what, names] of [['methods', methods], ['attributes', attributes]]) {
    if (names !== undefined && !(Array.isArray(names) && names.every((n) => typeof n === 'string' && PUBLIC.test(n)))) {
      throw new InvalidArgument(`rpcProxy: ${what} must be public identifiers (no leading "_")`);
    }
  }
  return { [RPC_KEY]: target, methods: methods ?? null, attributes: attributes ?? null };
}

/**
 * A live object's surface: [methods, attributes] (public names: no leading "_";
 * its own properties and its prototypes' up to Object.prototype).
 * @param {object} obj
 * @returns {[string[], string[]]}
 */
function surface(obj) {
  const methods = new Set();
  const attributes = new Set();
  for (let o = obj; o && o !== Object.prototype; o = Object.getPrototypeOf(o)) {
    for (const n of Object.getOwnPropertyNames(o)) {
      if (n === 'constructor' || !PUBLIC.test(n) || methods.has(n) || attributes.has(n)) continue;
      const d = Object.getOwnPropertyDescriptor(o, n);
      if (d && typeof d.value === 'function') methods.add(n);
      else attributes.add(n);
    }
  }
  return [[...methods].sort(), [...attributes].sort()];
}

const LEVELS = ['process', 'kernel'];
// policy option -> the portable policy's key (Policy.to_portable in the guest runtime)
/** @type {Record<string, string>} */
const LIMITS = {
  timeout: 'timeout',
  tickLimit: 'tick_limit',
  memoryLimit: 'memory_limit_bytes', // bytes (Python's memory_limit is megabytes, as in its seed)
  maxStdout: 'max_stdout',
  allowNetwork: 'allow_network',
  allowSubprocess: 'allow_subprocess',
};

class PythonSandbox {
  /**
   * @param {Record<string, any>} [policy] limits and `functions` (index.d.ts's PythonPolicy)
   * @param {PythonSandboxOptions} [options]
   */
  constructor(
    policy = {},
    { isolation = 'kernel', filesystem, echo = false, allowDegraded = false, python, snapshotPrints = false, state = null, keepState = false, rpcHandlers = {} } = {},
  ) {
    if (!LEVELS.includes(isolation)) {
      throw new InvalidArgument(`isolation must be one of ${LEVELS.join(', ')} from JavaScript (got ${isolation})`);
    }
    /** @type {string[]} */
    const problems = [];
    /** @type {{grants: Array<Record<string, unknown>>, [limit: string]: unknown}} */
    const portable = { grants: [] };
    /** @type {Record<string, HostFunction>} */
    this.functions = {};
    // live objects granted by name (Python's policy.module(obj, name=...)): `import
    // name` gives a proxy; each call runs the object's own method here
    /** @type {Map<string, {obj: any, methods: Set<string>}>} */
    this.objects = new Map();
    /** @type {Record<string, RpcHandler>} */
    this.rpcHandlers = {};
    for (const [k, h] of Object.entries(rpcHandlers ?? {})) {
      if (!k || k.length > 200 || k.startsWith(GRANT)) problems.push(`rpcHandlers: "${k}" is not a target name (not starting with "${GRANT}")`);
      if (typeof h !== 'function') problems.push(`rpcHandlers.${k}: want a function (method, args, kwargs)`);
      this.rpcHandlers[k] = h;
    }
    // per target, the methods its markers declared (null: any public name)
    /** @type {Map<string, Set<string> | null>} */
    this.rpcMethods = new Map();
    let moduleRoot = '/';
    for (const [k, v] of Object.entries(policy ?? {})) {
      if (k === 'moduleRoot') {
        if (typeof v !== 'string' || !v.startsWith('/')) problems.push('policy.moduleRoot: want an absolute path inside the VirtualFS');
        else moduleRoot = v;
      } else if (k === 'functions') {
        for (const [name, fn] of Object.entries(v ?? {})) {
          if (typeof fn !== 'function') problems.push(`policy.functions.${name}: want a function`);
          this.functions[name] = fn;
          portable.grants.push({ kind: 'host_fn', name, ref: name });
        }
      } else if (k === 'objects') {
        for (const [name, obj] of Object.entries(v ?? {})) {
          if (obj === null || typeof obj !== 'object') {
            problems.push(`policy.objects.${name}: want an object`);
            continue;
          }
          if (!PUBLIC.test(name)) problems.push(`policy.objects.${name}: want an identifier`);
          const [methods, attributes] = surface(obj);
          this.objects.set(name, { obj, methods: new Set(methods) });
          portable.grants.push({ kind: 'object', name, ref: name, methods, attributes });
        }
      } else if (k in LIMITS) {
        if (v !== undefined) portable[LIMITS[k]] = v;
      } else {
        problems.push(`policy: unknown option "${k}"`);
      }
    }
    if (state !== null && state !== undefined && !(state instanceof Uint8Array)) {
      problems.push('state: want the bytes snapshot() returned');
    }
    if (filesystem !== undefined && filesystem !== null && typeof filesystem !== 'string' && !(filesystem instanceof VirtualFS)) {
      problems.push('filesystem: want a directory (a string) or a VirtualFS');
    }
    if (problems.length) throw new InvalidArgument(problems.join('\n'), { problems });
    this.level = isolation;
    // a VirtualFS stays here: the worker reads and writes it through fs host calls
    /** @type {VirtualFS | null} */
    this.vfs = filesystem instanceof VirtualFS ? filesystem : null;
    const root = typeof filesystem === 'string' ? filesystem : undefined;
    this.snapshotPrints = snapshotPrints === true;
    // the state a fresh worker is given (the engine sends it only to one started for
    // the exec): the bytes of a snapshot (the state map msgpack-encoded, opaque here:
    // JavaScript objects cannot hold its keys); with keepState every exec brings back
    // the current one, so the namespace survives a worker restart
    /** @type {Uint8Array | null} */
    this.state = state ?? null;
    this.keepState = keepState === true;
    /** the isolation report (camelCase), once the worker's sandbox is built @type {Wire | undefined} */
    this.report = undefined;
    // a handle for the ops: the engine builds the worker's own policy
    this.sandbox = new Sandbox({ allowDegraded: true });
    // opened on a thread: what the engine refuses (IsolationUnavailable, a missing
    // filesystem) rejects open() and every exec
    this.opening = this.sandbox
      .request({ op: 'coop_open', level: isolation, policy: portable, interpreter: python, filesystem_root: root,
        vfs: this.vfs ? { module_root: moduleRoot } : undefined, echo, allow_degraded: allowDegraded,
        rpc_targets: Object.keys(this.rpcHandlers) })
      .then(check)
      .then((r) => {
        this.report = camelKeys(r.isolation);
        return r;
      });
    this.opening.catch(() => {});
  }

  /** Resolves with the isolation report once the engine has built the worker's sandbox. */
  async open() {
    await this.opening;
    return this.report;
  }

  /**
   * Run the granted function a host call names; the answer's value or error.
   * @param {Wire} call
   * @returns {Promise<{value: unknown} | {error: {type: string, message: string}}>}
   */
  async _answer(call) {
    if (call.kind === 'fs' && this.vfs) {
      try {
        return { value: serveFs(this.vfs, call.name, call.args) ?? null };
      } catch (e) {
        const err = /** @type {{name?: unknown, message?: unknown}} */ (e);
        return { error: { type: String(err?.name ?? 'OSError'), message: String(err?.message ?? e) } };
      }
    }
    if (call.kind === 'rpc') return this._answerRpc(call);
    const fn = call.kind === 'fn' ? this.functions[call.name] : undefined;
    if (!fn) return { error: { type: 'NotImplemented', message: `no host call ${call.kind}:${call.name}` } };
    try {
      const args = [...call.args];
      if (Object.keys(call.kwargs).length) args.push(call.kwargs); // keyword arguments: one last object
      const value = (await fn(...args)) ?? null;
      encode(value); // what msgpack cannot carry is the function's error, not the exec's
      return { value };
    } catch (e) {
      const err = /** @type {{name?: unknown, message?: unknown} | null | undefined} */ (e);
      return { error: { type: String(err?.name ?? 'Error'), message: String(err?.message ?? e) } };
    }
  }

  /**
   * A proxy's method call (the engine checked the target is served and the method a
   * public name): checked again here against the marker's or the grant's surface.
   * @param {Wire} call
   */
  async _answerRpc(call) {
    const started = Date.now();
    const { target, method } = call;
    try {
      let value;
      if (typeof target === 'string' && target.startsWith(GRANT)) {
        const g = this.objects.get(target.slice(GRANT.length));
        if (!g) throw Object.assign(new Error(`no host object '${target}'`), { name: 'LookupError' });
        if (!g.methods.has(method)) throw Object.assign(new Error(`'${method}' is not a method the grant gives`), { name: 'AttributeError' });
        value = await g.obj[method](...call.args, ...(Object.keys(call.kwargs).length ? [call.kwargs] : []));
      } else {
        const h = Object.hasOwn(this.rpcHandlers, target) && this.rpcMethods.has(target) ? this.rpcHandlers[target] : undefined;
        if (!h) throw Object.assign(new Error(`no host object '${target}'`), { name: 'LookupError' });
        const allowed = this.rpcMethods.get(target);
        if (!PUBLIC.test(method) || (allowed && !allowed.has(method))) {
          throw Object.assign(new Error(`'${method}' is not a method of the host object '${target}'`), { name: 'AttributeError' });
        }
        value = await h(method, [...call.args], { ...call.kwargs });
      }
      value = value ?? null;
      encode(value);
      return { value, host_time: (Date.now() - started) / 1000 };
    } catch (e) {
      const err = /** @type {{name?: unknown, message?: unknown} | null | undefined} */ (e);
      return { error: { type: String(err?.name ?? 'Error'), message: String(err?.message ?? e) }, host_time: (Date.now() - started) / 1000 };
    }
  }

  /**
   * Record the surfaces the markers of a namespace (or a module's attributes) declare.
   * @param {Record<string, unknown> | undefined | null} values
   */
  _noteMarkers(values) {
    for (const v of Object.values(values ?? {})) {
      if (!v || typeof v !== 'object' || !Object.hasOwn(v, RPC_KEY)) continue;
      const m = /** @type {Record<string, any>} */ (v);
      const target = m[RPC_KEY];
      if (!Object.hasOwn(this.rpcHandlers, target)) throw new InvalidArgument(`rpcProxy('${target}'): no rpcHandlers entry serves that target`);
      const prev = this.rpcMethods.get(target);
      if (m.methods === null || prev === null) this.rpcMethods.set(target, null);
      else this.rpcMethods.set(target, new Set([...(prev ?? []), ...m.methods]));
    }
  }

  /**
   * Run Python code; resolves with {stdout, namespace, error, ticks, ...}; never rejects for the code's faults.
   * @param {string} code
   * With `signal` (an AbortSignal), aborting stops the code (its worker is killed,
   * the next exec gets a fresh one) and the promise rejects with an AbortError.
   * @param {{namespace?: Record<string, unknown>, modules?: Record<string, unknown>, stdin?: string, argv?: string[], echo?: 'none' | 'last' | 'all' | boolean, keep?: string[], signal?: AbortSignal}} [options]
   * @returns {Promise<Wire>} index.d.ts's PythonExecResult
   */
  async exec(code, options = {}) {
    return this._exec(code, options, false);
  }

  /**
   * exec whose code may use top-level `await`, `async for` and `async with`
   * (Python's aexec): the body runs as a coroutine on an event loop of the worker's
   * own until it completes, never on this process's loop; the timeout and
   * `cancel()` stop an `await` too. With `signal`, aborting stops the code — the
   * worker is killed, so nothing of it runs on — and the promise rejects with an
   * AbortError once it has stopped; the next exec gets a fresh worker.
   * @param {string} code
   * @param {{namespace?: Record<string, unknown>, modules?: Record<string, unknown>, stdin?: string, argv?: string[], echo?: 'none' | 'last' | 'all' | boolean, keep?: string[], signal?: AbortSignal}} [options]
   * @returns {Promise<Wire>} index.d.ts's PythonExecResult
   */
  async aexec(code, options = {}) {
    return this._exec(code, options, true);
  }

  /**
   * @param {string} code
   * @param {{namespace?: Record<string, unknown>, modules?: Record<string, unknown>, stdin?: string, argv?: string[], echo?: 'none' | 'last' | 'all' | boolean, keep?: string[], signal?: AbortSignal}} options
   * @param {boolean} topLevelAwait
   * @returns {Promise<Wire>}
   */
  async _exec(code, { namespace, modules, stdin, argv, echo, keep, signal } = {}, topLevelAwait) {
    if (typeof code !== 'string') throw new InvalidArgument('code must be a string');
    if (signal?.aborted) throw new AbortError('The operation was aborted', { cause: signal.reason });
    if (keep !== undefined && keep !== null && !(Array.isArray(keep) && keep.every((k) => typeof k === 'string'))) {
      throw new InvalidArgument('keep must be an array of names');
    }
    this._noteMarkers(namespace);
    for (const m of Object.values(modules ?? {})) if (m && typeof m === 'object') this._noteMarkers(/** @type {Record<string, unknown>} */ (m));
    await this.opening;
    /** @type {Wire} */
    const req = { op: 'coop_exec', code, namespace: namespace ?? null, modules: modules ?? null, stdin: stdin ?? null, argv: argv ?? null };
    if (this.snapshotPrints) req.prints = true;
    if (topLevelAwait) req.top_level_await = true; // aexec: the body may await
    if (keep) req.keep = keep; // the response's namespace holds only these names
    if (echo !== undefined && echo !== null) req.echo = echo; // this exec's mode (the engine checks it)
    if (this.keepState) Object.assign(req, { snapshot: true, state_encoded: true });
    const resp = await this._request(req, signal);
    if (resp.state instanceof Uint8Array) this.state = Buffer.from(resp.state);
    return {
      stdout: resp.stdout,
      stderr: resp.stderr,
      namespace: resp.namespace,
      error: resp.error ? { ...resp.error, traceback: resp.error.traceback ?? null } : null,
      ticks: resp.ticks,
      traceback: resp.traceback ?? null,
      stdoutTruncated: resp.stdout_truncated,
      duration: resp.duration,
      isolation: { ...this.report },
      restarted: resp.restarted === true,
      prints: resp.prints ?? [], // each print's values, with {snapshotPrints: true}
      sizes: resp.sizes ?? {}, // each value's bytes as it crossed
      renderedPrints: resp.rendered_prints ?? [], // Python's render_prints (not offered here: empty)
      printCount: resp.print_count ?? 0,
    };
  }

  /**
   * The namespace as source plus data (never pickle): the import, def and class
   * statements that made its functions and classes, its data, its instances of
   * sandbox classes as their attributes. Resolves with the state's bytes (its map
   * msgpack-encoded); `sandbox(policy, {state})` rebuilds it (Python's
   * `sandbox(policy, state=msgpack.unpackb(bytes))` too).
   * @returns {Promise<Buffer>}
   */
  async snapshot() {
    await this.opening;
    const resp = await this._request({ op: 'coop_exec', code: '', snapshot: true, state_encoded: true });
    if (!(resp.state instanceof Uint8Array)) throw makeError('internal', 'the engine sent no state');
    const st = Buffer.from(resp.state);
    if (this.keepState) this.state = st;
    return st;
  }

  /**
   * One coop_exec with the state a fresh worker needs, its host calls answered here.
   * @param {Wire} req
   * @param {AbortSignal} [signal] aborting cancels the exec (one tag) and rejects once it has ended
   * @returns {Promise<Wire>}
   */
  async _request(req, signal) {
    if (this.state) req.state = this.state;
    if (signal?.aborted) throw new AbortError('The operation was aborted', { cause: signal.reason });
    const tag = newTag();
    // Aborting cancels the exec by its tag (the engine kills the worker), retried until
    // the exec has started; the requests themselves are never abandoned: a host call
    // pending when the abort lands is answered `abort`, so the engine ends the exec
    // and frees the sandbox for the next one, and the promise rejects once it has.
    let settled = false;
    let delay = 1;
    const cancel = () => {
      if (settled || this.sandbox.closed) return;
      native.cancel(this.sandbox._handle, tag);
      setTimeout(cancel, delay);
      delay = Math.min(delay * 2, 50);
    };
    signal?.addEventListener('abort', cancel, { once: true });
    let resp;
    try {
      resp = check(await this.sandbox.request({ ...req, tag }));
      while (resp.call) {
        const { call, pending } = resp;
        /** @type {Wire | null} */
        let answer = signal?.aborted ? null : await this._answer(call);
        if (signal?.aborted) answer = { abort: true }; // aborted (perhaps while the host answered)
        resp = check(await this.sandbox.request({ op: 'answer', pending, call: call.id, tag, ...answer }));
      }
    } finally {
      settled = true;
      signal?.removeEventListener('abort', cancel);
    }
    if (resp.isolation) this.report = camelKeys(resp.isolation); // sent when it changed
    if (signal?.aborted) throw new AbortError('The operation was aborted', { cause: signal.reason });
    return resp;
  }

  /** Stop the running exec (its worker is killed); with none running, nothing happens. */
  cancel() {
    if (!this.sandbox.closed) native.cancel(this.sandbox._handle, null);
  }

  close() {
    this.cancel();
    this.sandbox.close();
  }
}

/**
 * An engine error response (it has error.kind; an exec's own error has error.type).
 * @param {Wire} resp
 * @returns {Wire}
 */
function check(resp) {
  if (resp.error && resp.error.kind) throw makeError(resp.error.kind, resp.error.message);
  return resp;
}

/**
 * sandbox(policy, {isolation: 'kernel' | 'process', filesystem, echo ('none' | 'last' | 'all' | boolean), allowDegraded, python})
 * @param {Record<string, any>} [policy]
 * @param {PythonSandboxOptions} [options]
 */
function sandbox(policy, options) {
  return new PythonSandbox(policy, options);
}

module.exports = { sandbox, PythonSandbox, VirtualFS, rpcProxy };
