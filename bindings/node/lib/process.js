'use strict';
// Processes you can talk to (docs/protocol.md, "processes"):
//
//   const p = await sb.popen(['cat'], { stdio: ['pipe', 'pipe', 'inherit'] });
//   p.stdout.on('data', (b) => ...); p.stdin.end('hello\n');
//   const result = await p.wait();        // or p.on('exit', (code, signal) => ...)
//
// The piped streams are the kernel's pipes, handed to this process and opened as
// libuv pipes (net.Socket): what the program writes is read here straight from its
// pipe, without the engine, and never on the JavaScript thread's time. wait runs on
// a thread of its own (as every engine call), kill/pause/resume are engine calls.

const { EventEmitter } = require('node:events');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const native = require('./native');
const { Sandbox } = require('./sandbox');
const { Problem, InvalidRequest, makeError, problemsMessage } = require('./errors');
const { RUN, mapOptions, isPlainObject, describe } = require('./options');

/** @typedef {import('./sandbox').Wire} Wire */

const MODES = { pipe: 'piped', piped: 'piped', inherit: 'inherit', ignore: 'null', null: 'null', capture: 'capture' };
const NAMES = ['stdin', 'stdout', 'stderr'];

/**
 * One stream's engine mode from a Node-style stdio entry.
 * @param {unknown} v @param {number} i @param {Problem[]} problems
 */
function stdioValue(v, i, problems) {
  if (v === undefined || v === null) return 'piped'; // child_process.spawn's default
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
  if (typeof v === 'string' && Object.hasOwn(MODES, v)) {
    const m = /** @type {Record<string, string>} */ (MODES)[v];
    if (m === 'capture' && i === 0) problems.push(new Problem('stdin', "'capture' is for stdout and stderr"));
    return m;
  }
  if (v && typeof v === 'object' && typeof (/** @type {{fd?: unknown}} */ (v).fd) === 'number') return /** @type {{fd: number}} */ (v).fd;
  problems.push(new Problem(NAMES[i], `want 'pipe', 'inherit', 'ignore', 'capture' or a file descriptor, got ${describe(v)}`));
  return undefined;
}

/** @param {number | null} n */
function signalName(n) {
  if (n === null) return null;
  for (const [name, num] of Object.entries(os.constants.signals)) if (num === n) return name;
  return String(n);
}

/**
 * A program running in a sandbox that you talk to (ChildProcess-like).
 *
 * Events: 'exit' (code, signal) once it ended, 'close' (code, signal) once its
 * piped output streams ended too, 'error' when waiting for it failed.
 */
class SandboxProcess extends EventEmitter {
  /**
   * @param {Sandbox} sb @param {string[]} argv @param {Wire} resp @param {string} tag
   */
  constructor(sb, argv, resp, tag) {
    super();
    this.sandbox = sb;
    this.spawnargs = argv;
    /** The program's pid on this machine (its parent, the run's pid 1, is initPid). @type {number} */
    this.pid = Number(resp.pid);
    /** @type {number} */
    this.initPid = Number(resp.init_pid);
    /**
     * How pause() stops the run: 'freezer' (its own cgroup v2: nothing inside or out
     * undoes it), 'sigstop' (no freezer on this host, pauseNote says why: a SIGCONT
     * resumes it) or 'unavailable' (no pid namespace). @type {string}
     */
    this.pauseVia = String(resp.pause || 'unavailable');
    /** @type {string | null} */
    this.pauseNote = resp.pause_note == null ? null : String(resp.pause_note);
    /** restore(): the checkpoint's app state and checkpoint.json (else null) */
    this.appState = resp.app_state instanceof Uint8Array ? Buffer.from(resp.app_state) : null;
    /** @type {Wire | null} */
    this.checkpointInfo = resp.checkpoint ?? null;
    /** @type {number | null} */
    this.exitCode = null;
    /** @type {string | null} */
    this.signalCode = null;
    /** The run result once it ended (index.d.ts's RunResult). @type {Wire | null} */
    this.result = null;
    this.killed = false;
    this._id = resp.process;
    this._tag = tag;
    /** @type {import('node:stream').Writable | null} */
    this.stdin = resp.stdin == null ? null : new net.Socket({ fd: Number(resp.stdin), readable: false, writable: true });
    /** @type {import('node:stream').Readable | null} */
    this.stdout = resp.stdout == null ? null : new net.Socket({ fd: Number(resp.stdout), readable: true, writable: false });
    /** @type {import('node:stream').Readable | null} */
    this.stderr = resp.stderr == null ? null : new net.Socket({ fd: Number(resp.stderr), readable: true, writable: false });
    this.stdio = [this.stdin, this.stdout, this.stderr];
    // a program that stops reading: EPIPE is the program's fate, not an uncaught error
    this.stdin?.on('error', () => {});
    /** @type {Promise<Wire>} */
    this._done = this._waitLoop();
    this._done.catch(() => {});
  }

  async _waitLoop() {
    const sb = this.sandbox;
    let r;
    try {
      r = await processCall(sb, 'process_wait', this._id, {});
    } catch (e) {
      this.emit('error', e);
      throw e;
    } finally {
      procsOf(sb).delete(this);
    }
    const { runResult } = require('./sandbox');
    const res = r && r.done ? runResult(r.result ?? {}) : closedResult();
    this.result = res;
    this.exitCode = res.exitCode;
    this.signalCode = signalName(res.signal);
    this.emit('exit', this.exitCode, this.signalCode);
    const outs = [this.stdout, this.stderr].filter((s) => s !== null);
    let open = outs.length;
    const close = () => this.emit('close', this.exitCode, this.signalCode);
    if (open === 0) process.nextTick(close);
    for (const s of outs) {
      if (s.readableEnded || s.destroyed) {
        if (--open === 0) process.nextTick(close);
      } else {
        s.once('close', () => {
          if (--open === 0) close();
        });
      }
    }
    return res;
  }

  /**
   * Resolve with the run result once the program ended (its reason, exit code,
   * captured streams, usage). With a timeout (seconds), resolve with null if it
   * still runs by then.
   * @param {{timeout?: number}} [opts]
   * @returns {Promise<Wire | null>}
   */
  async wait(opts = {}) {
    const secs = opts.timeout;
    if (secs === undefined) return this._done;
    /** @type {NodeJS.Timeout | undefined} */
    let timer;
    /** @type {Promise<null>} */
    const t = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), secs * 1000);
    });
    try {
      return await Promise.race([this._done, t]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Kill the program and every process it started (its pid namespace, setsid
   * daemons included). Idempotent; returns false once it ended.
   */
  kill() {
    if (this.result) return false;
    this.killed = true;
    processCall(this.sandbox, 'process_kill', this._id, {}).catch(() => {});
    return true;
  }

  /** Stop every process of the run (docs/security.md, "pause"). */
  async pause() {
    if (!this.result) await processCall(this.sandbox, 'process_pause', this._id, {});
  }

  /** Continue every process of a paused run. */
  async resume() {
    if (!this.result) await processCall(this.sandbox, 'process_resume', this._id, {});
  }

  /**
   * Send a signal (a number or a name such as 'SIGTERM') to the program, or with
   * {tree: true} to every process of the run but its pid 1 (sandtrap-init);
   * resolves with how many processes it reached (0 once it ended). SIGSTOP,
   * SIGTSTP, SIGTTIN, SIGTTOU and SIGCONT are refused (InvalidRequest: use
   * pause()/resume()), as is tree without a pid namespace.
   * @param {number | string} sig @param {{tree?: boolean}} [opts]
   */
  async sendSignal(sig, opts = {}) {
    const n = typeof sig === 'string' ? os.constants.signals[/** @type {keyof typeof os.constants.signals} */ (sig)] : sig;
    if (typeof n !== 'number' || !Number.isInteger(n)) throw makeError('invalid_request', `signal: ${String(sig)} is not a signal`);
    if (this.result) return 0;
    const r = await processCall(this.sandbox, 'process_signal', this._id, { signal: n, to: opts.tree ? 'tree' : 'leader' });
    return r ? Number(r.sent || 0) : 0;
  }

  /**
   * An application checkpoint (docs/protocol.md, "checkpoints"): what saveFn()
   * resolves with (a Buffer, or null), persisted with the program's argv, cwd and
   * env and the list of what is not captured, in dir (which must not exist).
   * Resolves with checkpoint.json's contents.
   * @param {string} dir @param {{saveFn?: () => Buffer | Uint8Array | null | Promise<Buffer | Uint8Array | null>, name?: string}} [opts]
   */
  async checkpoint(dir, opts = {}) {
    if (typeof dir !== 'string' || !path.isAbsolute(dir)) throw makeError('invalid_request', 'checkpoint: dir must be an absolute path');
    const state = opts.saveFn ? await opts.saveFn() : null;
    if (state != null && !(state instanceof Uint8Array)) throw makeError('invalid_request', 'checkpoint: saveFn must return a Buffer (or null)');
    const r = await processCall(this.sandbox, 'checkpoint', this._id, { dir, name: opts.name ?? '', app_state: state ?? null });
    if (!r) throw makeError('closed', 'the sandbox is closed');
    return r.checkpoint;
  }

  /** Let a program popen'd with {start: false} (create) exec; rejects with InvalidState when it is not parked. */
  async start() {
    try {
      await processCall(this.sandbox, 'process_start', this._id, {});
    } catch (e) {
      const err = /** @type {Error} */ (e);
      throw makeError('invalid_state', err.message);
    }
  }
}

function closedResult() {
  const { runResult } = require('./sandbox');
  return runResult({ success: false, reason: 'closed', error: { kind: 'closed', message: 'the sandbox was closed; its processes were killed' } });
}

/**
 * Start argv in the sandbox; resolve with a SandboxProcess once it runs, reject
 * (NotFound, SpawnFailed, IsolationUnavailable, InvalidRequest) when it cannot start.
 * @this {Sandbox}
 * @param {string[]} argv
 * @param {Record<string, unknown>} [opts] index.d.ts's PopenOptions
 */
async function popen(argv, opts = {}) {
  /** @type {Problem[]} */
  const problems = [];
  if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== 'string')) {
    problems.push(new Problem('argv', `want a non-empty array of strings, got ${describe(argv)}`));
  }
  const all = isPlainObject(opts) ? /** @type {Record<string, unknown>} */ (opts) : {};
  const { _restore: restoreDir, ...o } = all; // restore(): the checkpoint's directory
  const { map, problems: optProblems } = mapOptions(isPlainObject(opts) ? o : opts, RUN, 'popen', ['stdio', 'stdin', 'stdout', 'stderr', 'start']);
  problems.push(...optProblems);
  /** @type {unknown[]} */
  let stdio = [undefined, undefined, undefined];
  if (typeof o.stdio === 'string') stdio = [o.stdio, o.stdio, o.stdio];
  else if (Array.isArray(o.stdio)) stdio = [o.stdio[0], o.stdio[1], o.stdio[2]];
  else if (o.stdio !== undefined) problems.push(new Problem('stdio', `want a string or an array of three, got ${describe(o.stdio)}`));
  NAMES.forEach((n, i) => {
    if (o[n] !== undefined) stdio[i] = o[n];
  });
  /** @type {Wire} */
  const req = restoreDir === undefined ? { op: 'popen', argv, ...map } : { op: 'restore', dir: restoreDir, ...map };
  if (o.start !== undefined && typeof o.start !== 'boolean') problems.push(new Problem('start', `want a boolean, got ${describe(o.start)}`));
  if (o.start === false) req.start = false;
  stdio.forEach((v, i) => {
    const m = stdioValue(v, i, problems);
    if (m !== undefined) req[NAMES[i]] = m;
  });
  if (problems.length) throw new InvalidRequest(problemsMessage('invalid request', problems), { problems });
  const tag = `node-popen:${process.pid}:${++seq}`;
  const resp = await this.request({ ...req, tag });
  if (resp.error && resp.error.kind) throw makeError(resp.error.kind, resp.error.message);
  const p = new SandboxProcess(this, resp.checkpoint ? resp.checkpoint.process.argv : argv, resp, tag);
  procsOf(this).add(p);
  return p;
}
let seq = 0;

/**
 * One call on a process (by its id); null when the sandbox is gone.
 * @param {Sandbox} sb @param {string} op @param {unknown} id @param {Wire} extra
 * @returns {Promise<Wire | null>}
 */
async function processCall(sb, op, id, extra) {
  if (sb.closed) return null;
  const r = await sb.request({ op, process: id, ...extra });
  if (r.error && r.error.kind) throw makeError(r.error.kind, r.error.message);
  return r;
}

/** @type {WeakMap<Sandbox, Set<SandboxProcess>>} a sandbox's processes not yet ended */
const procs = new WeakMap();
/** @type {WeakMap<Sandbox, SandboxProcess>} a sandbox's own process (spawn) */
const currents = new WeakMap();
/** @param {Sandbox} sb */
function procsOf(sb) {
  let s = procs.get(sb);
  if (!s) procs.set(sb, (s = new Set()));
  return s;
}

const proto = /** @type {any} */ (Sandbox.prototype);
proto.popen = popen;
// close(): every process of the sandbox is killed (by its run's tag: synchronous),
// so their waits end and the engine's side is freed once they did.
const close = proto.close;
proto.close = function closeWithProcesses() {
  if (!this._closed && this._pending > 0) for (const p of procsOf(this)) native.cancel(this._handle, p._tag);
  return close.call(this);
};

// The sandbox's own process: spawn / wait / kill / pause / resume / pid.
/** @this {Sandbox} @param {string[]} argv @param {Record<string, unknown>} [opts] */
proto.spawn = async function spawn(argv, opts = {}) {
  const cur = currents.get(this);
  if (cur && !cur.result) throw makeError('invalid_state', `the sandbox's process (pid ${cur.pid}) is still running: wait() or kill() it first`);
  const p = await popen.call(this, argv, { stdio: 'inherit', ...opts });
  currents.set(this, p);
  return p;
};
/** @param {Sandbox} sb @param {string} what @returns {SandboxProcess} */
function current(sb, what) {
  const p = currents.get(sb);
  if (!p) throw makeError('invalid_state', `${what}: the sandbox has no process (spawn() one)`);
  return p;
}
Object.defineProperty(proto, 'pid', {
  get() {
    const p = currents.get(this);
    return p ? p.pid : null;
  },
});
proto.wait = function wait(/** @type {{timeout?: number}} */ opts) {
  return current(this, 'wait').wait(opts);
};
proto.kill = function kill() {
  return current(this, 'kill').kill();
};
proto.pause = function pause() {
  return current(this, 'pause').pause();
};
proto.resume = function resume() {
  return current(this, 'resume').resume();
};
proto.checkpoint = function checkpoint(/** @type {string} */ dir, /** @type {any} */ opts) {
  return current(this, 'checkpoint').checkpoint(dir, opts);
};
/**
 * Start a checkpoint's program again as the sandbox's process, its app state on
 * fd 3; resolves with the SandboxProcess (its appState and checkpoint set). Fails
 * closed: another policy rejects with PolicyError, a changed checkpoint with
 * InvalidRequest.
 * @this {Sandbox} @param {string} dir @param {Record<string, unknown> & {restoreFn?: (state: Buffer) => unknown}} [opts]
 */
proto.restore = async function restore(dir, opts = {}) {
  const cur = currents.get(this);
  if (cur && !cur.result) throw makeError('invalid_state', `the sandbox's process (pid ${cur.pid}) is still running: wait() or kill() it first`);
  const { restoreFn, ...rest } = opts;
  const p = await popen.call(this, ['(restore)'], { stdio: 'inherit', ...rest, _restore: path.resolve(dir) });
  if (restoreFn && p.appState) await restoreFn(p.appState);
  currents.set(this, p);
  return p;
};
proto.sendSignal = function sendSignal(/** @type {number | string} */ sig, /** @type {{tree?: boolean}} */ opts) {
  return current(this, 'sendSignal').sendSignal(sig, opts);
};
/** @this {Sandbox} @param {string[]} argv @param {Record<string, unknown>} [opts] */
proto.create = function create(argv, opts = {}) {
  return proto.spawn.call(this, argv, { ...opts, start: false });
};
proto.start = async function start() {
  const p = currents.get(this);
  if (!p || p.result) throw makeError('invalid_state', 'start() without create(): the sandbox has no parked program');
  return p.start();
};

module.exports = { SandboxProcess, popen };
