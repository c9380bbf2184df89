'use strict';
// policyFn and syscall handlers (issue 14): the engine's supervisor traps the calls
// a run's handlers name, applies the sandbox's own rules first (a handler can only
// tighten) and asks the host about what they let through, as host calls of kind
// "syscall" on the run_handlers operation (docs/protocol.md, "host calls"). This
// file answers them. A handler (or policyFn) that returns a Promise is deferred:
// the binding answers "defer" at once, the engine goes on serving the run's other
// trapped calls, and the decision follows as handler_decide when the Promise settles.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { newTag } = require('./sandbox');

/** @typedef {import('./sandbox').Sandbox} Sandbox */
/** @typedef {Record<string, any>} Wire */
const { InvalidRequest, Problem, problemsMessage } = require('./errors');

const ExceptionPolicy = Object.freeze({ KILL: 'kill', DENY_EPERM: 'deny_eperm', CONTINUE: 'continue', DENY_EIO: 'deny_eio' });
const POLICIES = new Set(Object.values(ExceptionPolicy));

/** A handler's decision; build it with the static methods. */
class NotifAction {
  /** @param {Wire} wire */
  constructor(wire) {
    /** @type {Readonly<Wire>} */
    this.wire;
    Object.defineProperty(this, 'wire', { value: Object.freeze(wire), enumerable: true });
    Object.freeze(this);
  }

  /** Let the sandbox's own decision stand (an open is performed with the path the handler saw). */
  static continue_() {
    return new NotifAction({ action: 'continue' });
  }

  /** Fail the call with errno (1..4095). @param {number} value */
  static errno(value) {
    return new NotifAction({ action: 'errno', errno: value });
  }

  /** Return value without running the call. @param {number | bigint} value */
  static returns(value) {
    return new NotifAction({ action: 'returns', value });
  }

  /** Never answer: the caller waits until the run ends. */
  static hold() {
    return new NotifAction({ action: 'hold' });
  }

  /** Send sig to the caller's process group. @param {number} [sig] */
  static kill(sig = 9) {
    return new NotifAction({ action: 'kill', signal: sig });
  }

  /**
   * Answer with a new fd of the caller's, a copy of fd (which passes to the engine: do not close it).
   * @param {number} fd
   * @param {number} [flags]
   */
  static injectFd(fd, flags = 0) {
    if (!Number.isInteger(fd) || fd < 0) throw new TypeError(`injectFd: fd must be a non-negative integer, got ${fd}`);
    return new NotifAction({ action: 'inject_fd', fd, flags });
  }

  /**
   * Answer (an open) with a read-only fd of a file holding data, at offset 0: an
   * unlinked temporary file the binding writes (Node has no memfd_create).
   * @param {string | Uint8Array} data
   * @param {{cloexec?: boolean}} [options]
   */
  static injectBytes(data, { cloexec = true } = {}) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandtrap-inject-'));
    const file = path.join(dir, 'content');
    try {
      fs.writeFileSync(file, data, { mode: 0o600 });
      const fd = fs.openSync(file, 'r');
      return NotifAction.injectFd(fd, cloexec ? 0o2000000 : 0);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
}
NotifAction.continue = NotifAction.continue_;

/** Subclass and override handle(ctx) (which may return a Promise). */
class Handler {
  /** What an exception (or a non-NotifAction answer) of handle() does. @returns {string} */
  get onException() {
    return ExceptionPolicy.KILL;
  }

  /**
   * @param {HandlerCtx} _ctx
   * @returns {NotifAction | Promise<NotifAction>}
   */
  handle(_ctx) {
    throw new Error('Handler subclasses must override handle(ctx)');
  }
}

/** @type {Record<string, number>} */
const PATH_ARG = {
  openat: 1, open: 0, creat: 0, unlinkat: 1, unlink: 0, mkdirat: 1, mkdir: 0, rmdir: 0, newfstatat: 1,
  statx: 1, stat: 0, lstat: 0, faccessat: 1, faccessat2: 1, access: 0, readlinkat: 1, readlink: 0,
  execve: 0, execveat: 1, truncate: 0, chdir: 0, mknodat: 1, mknod: 0,
  chmod: 0, fchmodat: 1, fchmodat2: 1, chown: 0, lchown: 0, fchownat: 1, utimensat: 1,
};

/** The two-path calls: [index of the first path (old name, a symlink's target), of the second (new name)]. @type {Record<string, [number, number]>} */
const MULTI_PATH = {
  renameat2: [1, 3], renameat: [1, 3], rename: [0, 1], linkat: [1, 3], link: [0, 1], symlinkat: [0, 2], symlink: [0, 1],
};

/** One trapped call: registers, the supervisor's copies (path, argv, host, port), memory reads while it waits. */
class HandlerCtx {
  /** @param {Wire} call @param {Op} op */
  constructor(call, op) {
    this.id = call.event;
    this.pid = call.pid;
    this.syscall = call.syscall;
    this.syscallNr = call.nr;
    this.args = Object.freeze([...(call.args ?? [])]);
    this.path = call.path ?? null;
    /** the new name of a rename or link, the link a symlink makes (its path is the target) */
    this.path2 = call.path2 ?? null;
    this.argv = call.argv ? Object.freeze([...call.argv]) : null;
    this.family = call.family ?? null;
    this.host = call.host ?? null;
    this.port = call.port ?? 0;
    /** @type {Op} */
    this._op;
    Object.defineProperty(this, '_op', { value: op, enumerable: false });
  }

  /** @param {Wire} req @returns {Promise<Buffer | null>} */
  async _read(req) {
    try {
      const r = await this._op.sb.request({ op: 'handler_read', run: this._op.run, event: this.id, ...req });
      return r.success ? Buffer.from(r.data) : null;
    } catch {
      return null;
    }
  }

  /**
   * length bytes of the caller's memory at addr (at most 1 MiB), read now; null once the call no longer waits.
   * @param {number | bigint} addr
   * @param {number} length
   */
  read(addr, length) {
    return this._read({ addr, len: length });
  }

  /**
   * A NUL-terminated string at addr of at most maxLen bytes, read now.
   * @param {number | bigint} addr
   * @param {number} maxLen
   * @returns {Promise<string | null>}
   */
  async readCstr(addr, maxLen) {
    const b = await this._read({ addr, cstr: maxLen });
    return b === null ? null : b.toString('utf8');
  }

  /**
   * The path argument: the supervisor's copy (arg omitted), or the string at args[arg] read now (a Promise).
   * @param {number} [arg]
   * @param {number} [maxLen]
   * @returns {string | null | Promise<string | null>}
   */
  readPath(arg, maxLen = 4096) {
    if (arg === undefined) {
      if (!(this.syscall in PATH_ARG) && !(this.syscall in MULTI_PATH)) {
        throw new TypeError(`readPath: ${this.syscall} is not a known path syscall: pass arg`);
      }
      return this.path === null ? null : this.path.slice(0, maxLen);
    }
    return this.readCstr(this.args[arg], maxLen);
  }

  /**
   * The second path of a two-path call (rename, link: the new name; symlink: the link made), the supervisor's copy.
   * @param {number} [maxLen]
   * @returns {string | null}
   */
  readPath2(maxLen = 4096) {
    if (!(this.syscall in MULTI_PATH)) throw new TypeError(`readPath2: ${this.syscall} has one path argument at most`);
    return this.path2 === null ? null : this.path2.slice(0, maxLen);
  }

  /**
   * Every path the call names, copied: [readPath()], or [readPath(), readPath2()] for a two-path call.
   * @param {number} [maxLen]
   * @returns {(string | null)[]}
   */
  paths(maxLen = 4096) {
    const first = /** @type {string | null} */ (this.readPath(undefined, maxLen));
    return this.syscall in MULTI_PATH ? [first, this.readPath2(maxLen)] : [first];
  }
}

/** What policyFn sees. */
class SyscallEvent {
  /** @param {Wire} call */
  constructor(call) {
    this.syscall = call.syscall;
    this.category = call.category ?? 'file';
    this.pid = call.pid ?? 0;
    this.parentPid = 0;
    this.host = call.host ?? null;
    this.port = call.port ?? 0;
    this.argv = call.argv ? Object.freeze([...call.argv]) : null;
    this.path = call.path ?? null;
    this.denied = false;
  }

  /** @param {string} s */
  argvContains(s) {
    return this.argv !== null && this.argv.some((a) => a.includes(s));
  }
}

/** Tightens the run's policy from the callback on (never widens it). */
class PolicyContext {
  constructor() {
    /** @type {string[][]} */
    this._restrict = [];
    /** @type {[number, string[]][]} */
    this._pidRestrict = [];
    /** @type {string[]} */
    this._deny = [];
    this._maxMemory = 0;
    this._maxProcesses = 0;
  }

  /** From now on connect, sendto and bind reach only these addresses or CIDR prefixes ([]: none). */
  /** @param {string[]} ips */
  restrictNetwork(ips) {
    if (!Array.isArray(ips)) throw new TypeError('restrictNetwork takes an array of addresses');
    this._restrict.push(ips.map(String));
  }

  grantNetwork() {
    throw new Error('grantNetwork would widen the policy: sandtrap only tightens');
  }

  /**
   * Lowers the sandbox's memory limit (its cgroup's) to at most `bytes` until this run
   * ends; without a cgroup the engine applies the callback's exception policy.
   * @param {number} bytes
   */
  restrictMaxMemory(bytes) {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new RangeError(`restrictMaxMemory takes a positive number of bytes, got ${bytes}`);
    this._maxMemory = this._maxMemory === 0 ? bytes : Math.min(this._maxMemory, bytes);
  }

  /**
   * Lowers the sandbox's process limit (its cgroup's pids.max: every process of the
   * sandbox counts) to at most `n` until this run ends.
   * @param {number} n
   */
  restrictMaxProcesses(n) {
    if (!Number.isSafeInteger(n) || n <= 0) throw new RangeError(`restrictMaxProcesses takes a positive count, got ${n}`);
    this._maxProcesses = this._maxProcesses === 0 ? n : Math.min(this._maxProcesses, n);
  }

  /**
   * From now on the process `pid` is a task of (an event's pid) reaches only these
   * addresses or CIDR prefixes ([]: none) with connect, sendto and bind. Pinned when
   * the callback returns (a later process with that number is not restricted);
   * processes it forks are not covered (use restrictNetwork for the whole run).
   * @param {number} pid @param {string[]} ips
   */
  restrictPidNetwork(pid, ips) {
    if (!Number.isSafeInteger(pid) || pid <= 0) throw new RangeError(`restrictPidNetwork takes a pid, got ${pid}`);
    if (!Array.isArray(ips)) throw new TypeError('restrictPidNetwork takes an array of addresses');
    this._pidRestrict.push([pid, ips.map(String)]);
  }

  /**
   * From now on the run's judged calls refuse (EACCES) `path` (absolute) and what is
   * beneath it; opens, unlinks and mkdirs also by the file reached (symlinks and ..
   * resolved; a hard link or rename of a denied file stays denied).
   * @param {string} path
   */
  denyPath(path) {
    if (typeof path !== 'string' || !path.startsWith('/')) throw new TypeError(`denyPath takes an absolute path, got ${path}`);
    this._deny.push(path);
  }
}

/** @param {any} result @param {PolicyContext} ctx @returns {Wire} */
function policyAnswer(result, ctx) {
  /** @type {Wire} */
  let ans;
  if (result == null || result === false || result === 0) ans = { action: 'continue' };
  else if (result === true || result === -1) ans = { action: 'errno', errno: 1 };
  else if (result === 'audit' || result === -2) ans = { action: 'audit' };
  else if (Number.isInteger(result) && result > 0) ans = { action: 'errno', errno: result };
  else ans = { action: 'errno', errno: 1 }; // unrecognised: fail closed
  // each call a set the address must be in: the engine intersects them by membership
  // (10.0.0.0/8 and 10.1.2.3 leave 10.1.2.3)
  if (ctx._restrict.length) ans.restrict_network = ctx._restrict.map((s) => [...s]);
  if (ctx._pidRestrict.length) ans.restrict_pid_network = ctx._pidRestrict.map(([p, s]) => [p, [...s]]);
  if (ctx._deny.length) ans.deny_path = [...ctx._deny];
  if (ctx._maxMemory) ans.restrict_max_memory = ctx._maxMemory;
  if (ctx._maxProcesses) ans.restrict_max_processes = ctx._maxProcesses;
  return ans;
}

/** @param {any} e */
const errorOf = (e) => ({ error: { type: e?.name ?? 'Error', message: String(e?.message ?? e) } });
/** @param {any} v @returns {v is Promise<unknown>} */
const isThenable = (v) => v != null && typeof v.then === 'function';

/** @param {unknown} act */
function actionWire(act) {
  if (!(act instanceof NotifAction)) throw new TypeError(`handle() returned ${typeof act}, not a NotifAction`);
  return act.wire;
}

// The binding's side of one run_handlers operation.
class Op {
  /**
   * @param {Sandbox} sb
   * @param {Map<number, Handler>} handlers
   * @param {((event: SyscallEvent, ctx: PolicyContext) => unknown) | null} policyFn
   */
  constructor(sb, handlers, policyFn) {
    this.sb = sb;
    this.handlers = handlers;
    this.policyFn = policyFn;
    this.run = 0;
  }

  /**
   * @param {Wire} call
   * @param {Promise<unknown>} promise
   * @param {(v: any) => unknown} toWire
   * @returns {Wire}
   */
  _defer(call, promise, toWire) {
    promise
      .then((v) => ({ value: toWire(v) }), errorOf)
      .then((/** @type {Wire} */ ans) => {
        const a = ans.value !== undefined ? { value: ans.value } : ans;
        return this.sb.request({ op: 'handler_decide', run: call.run, event: call.event, ...a });
      })
      .catch(() => {}); // the run is over: nothing to decide
    return { value: { action: 'defer' } };
  }

  /** @param {Wire} call @returns {Wire} */
  answer(call) {
    this.run = call.run;
    if (!call.handler) {
      if (!this.policyFn) return { error: { type: 'NotImplemented', message: 'no policyFn' } };
      const ctx = new PolicyContext();
      try {
        const r = this.policyFn(new SyscallEvent(call), ctx);
        if (isThenable(r)) return this._defer(call, r, (v) => policyAnswer(v, ctx));
        return { value: policyAnswer(r, ctx) };
      } catch (e) {
        return errorOf(e);
      }
    }
    const h = this.handlers.get(call.handler);
    if (!h) return { error: { type: 'NotImplemented', message: `no handler ${call.handler}` } };
    try {
      const r = h.handle(new HandlerCtx(call, this));
      if (isThenable(r)) return this._defer(call, r, actionWire);
      return { value: actionWire(r) };
    } catch (e) {
      return errorOf(e);
    }
  }
}

/**
 * Run argv with syscall handlers: handlers is an array of [syscall, handler] pairs
 * (a name like 'openat' or a number). The sandbox's own rules judge each call
 * first; a handler only sees what they let through and can only tighten. The
 * sandbox's policyFn, if any, is asked first. Sandbox.runWithHandlers calls it.
 * @param {Sandbox} sb
 * @param {string[]} argv
 * @param {unknown} handlers
 * @param {Record<string, unknown>} opts
 * @returns {Promise<Wire>}
 */
async function runWithHandlers(sb, argv, handlers, opts) {
  /** @type {Problem[]} */
  const problems = [];
  /** @type {Wire[]} */
  const regs = [];
  const byId = new Map();
  if (!Array.isArray(handlers)) problems.push(new Problem('handlers', 'want an array of [syscall, handler] pairs'));
  for (const [i, pair] of (Array.isArray(handlers) ? handlers : []).entries()) {
    if (!Array.isArray(pair) || pair.length !== 2) {
      problems.push(new Problem(`handlers[${i}]`, 'must be a [syscall, handler] pair'));
      continue;
    }
    const [key, h] = pair;
    if (typeof key !== 'string' && !Number.isInteger(key)) {
      problems.push(new Problem(`handlers[${i}].syscall`, 'must be a name or a number'));
      continue;
    }
    if (!h || typeof h.handle !== 'function') {
      problems.push(new Problem(`handlers[${i}]`, 'has no handle(ctx) method'));
      continue;
    }
    const onException = h.onException ?? ExceptionPolicy.KILL;
    if (!POLICIES.has(onException)) {
      problems.push(new Problem(`handlers[${i}].onException`, `must be one of ${[...POLICIES].join(', ')}`));
      continue;
    }
    byId.set(i + 1, h);
    regs.push({ syscall: key, id: i + 1, on_exception: onException });
  }
  if (problems.length) throw new InvalidRequest(problemsMessage('invalid request', problems), { problems });
  const op = new Op(sb, byId, sb._policyFn);
  /** @type {Wire} */
  const base = { op: 'run_handlers', handlers: regs };
  if (sb._policyFn) base.policy_fn = { on_exception: ExceptionPolicy.DENY_EPERM };
  // the shared run path, with the request answered here until the run ends
  const self = /** @type {Sandbox} */ (Object.create(sb));
  const outer = sb;
  /** @param {Wire} req @param {{signal?: AbortSignal | null, sandboxes?: Sandbox[]}} [o] */
  self.request = async function drive(req, o) {
    const tag = newTag();
    let resp = await outer.request({ ...req, tag }, o);
    while (resp.call) {
      const { call, pending } = resp;
      let ans;
      try {
        ans = call.kind === 'syscall' ? op.answer(call) : { error: { type: 'NotImplemented', message: `no host call ${call.kind}` } };
      } catch {
        ans = { abort: true };
      }
      resp = await outer.request({ op: 'answer', pending, call: call.id, tag, ...ans }, o);
    }
    return resp;
  };
  return sb._run.call(self, base, argv, opts);
}

// fnmatch-style patterns (*, ?, [...]); * also matches '/', as Python's fnmatch.
/** @param {string} pattern */
function globRegExp(pattern) {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '*') re += '.*';
    else if (c === '?') re += '.';
    else if (c === '[') {
      const j = pattern.indexOf(']', i + 2);
      if (j < 0) re += '\\[';
      else {
        let cls = pattern.slice(i + 1, j).replace(/\\/g, '\\\\');
        if (cls[0] === '!') cls = '^' + cls.slice(1);
        re += `[${cls}]`;
        i = j;
      }
    } else re += c.replace(/[.+^${}()|\\/]/g, '\\$&');
  }
  return new RegExp(`^${re}$`, 's');
}

const COMMON_PATH_SYSCALLS = Object.freeze(['openat', 'unlinkat', 'newfstatat', 'statx', 'faccessat', 'readlinkat', 'mkdirat', 'execve']);

/** Deny (errno, EPERM) calls whose path (either of a rename, link, symlink) matches a pattern of deny; fails closed. */
class PathDenyHandler extends Handler {
  /** @param {{deny: string[], errno?: number, maxLen?: number}} options */
  constructor({ deny, errno = 1, maxLen = 4096 }) {
    super();
    if (!Array.isArray(deny)) throw new TypeError('deny must be an array of patterns');
    this.deny = deny.map(globRegExp);
    this.errno = errno;
    this.maxLen = maxLen;
  }

  /** @param {HandlerCtx} ctx */
  handle(ctx) {
    // both paths of a rename, link, symlink
    if (ctx.paths(this.maxLen).some((p) => p !== null && this.deny.some((re) => re.test(p)))) return NotifAction.errno(this.errno);
    return NotifAction.continue_();
  }
}

/** Allow only paths matching a pattern of allow (others: errno, EACCES). */
class PathAllowHandler extends Handler {
  /** @param {{allow: string[], errno?: number, maxLen?: number}} options */
  constructor({ allow, errno = 13, maxLen = 4096 }) {
    super();
    if (!Array.isArray(allow)) throw new TypeError('allow must be an array of patterns');
    this.allow = allow.map(globRegExp);
    this.errno = errno;
    this.maxLen = maxLen;
  }

  /** @param {HandlerCtx} ctx */
  handle(ctx) {
    // every path of the call must be allowed
    if (ctx.paths(this.maxLen).every((p) => p !== null && this.allow.some((re) => re.test(p)))) return NotifAction.continue_();
    return NotifAction.errno(this.errno);
  }
}

/** Call callback(path, ctx) for each call; never changes the outcome. */
class AuditPathsHandler extends Handler {
  /**
   * @param {(path: string | null, ctx: HandlerCtx) => void} callback
   * @param {{maxLen?: number}} [options]
   */
  constructor(callback, { maxLen = 4096 } = {}) {
    super();
    this.callback = callback;
    this.maxLen = maxLen;
  }

  /** @returns {string} */
  get onException() {
    return ExceptionPolicy.CONTINUE;
  }

  /** @param {HandlerCtx} ctx */
  handle(ctx) {
    this.callback(/** @type {string | null} */ (ctx.readPath(undefined, this.maxLen)), ctx);
    return NotifAction.continue_();
  }
}

const presets = { COMMON_PATH_SYSCALLS, PathDenyHandler, PathAllowHandler, AuditPathsHandler };

module.exports = { runWithHandlers, Handler, HandlerCtx, NotifAction, ExceptionPolicy, SyscallEvent, PolicyContext, presets, ...presets };
