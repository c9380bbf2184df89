'use strict';
// The cooperative Python sandbox from JavaScript: sandbox(policy, {isolation}).exec(code).
//
// The engine runs the guest runtime it embeds (probe().guest_dir) in a worker —
// `python3 -m sandtrap_guest.worker` — as a session: an ordinary sandboxed run
// ("kernel": Landlock, seccomp, limits; "process": a separate process) spoken to in
// msgpack frames. Python code only: host functions cannot be granted from
// JavaScript, so the policy carries limits, not grants.

const fs = require('node:fs');
const { Encoder, Decoder } = require('@msgpack/msgpack');
const { Sandbox, probe } = require('./sandbox');
const { SandtrapError, InvalidArgument, IsolationUnavailable } = require('./errors');

const encoder = new Encoder({ ignoreUndefined: true });
const decoder = new Decoder();
const GRACE = 2; // seconds a worker may overrun the policy's timeout before it is killed
const LEVELS = ['process', 'kernel'];

function portablePolicy(p) {
  const known = ['timeout', 'tickLimit', 'memoryLimit', 'maxStdout', 'allowNetwork'];
  const problems = Object.keys(p).filter((k) => !known.includes(k)).map((k) => `policy: unknown option "${k}"`);
  for (const k of ['timeout', 'tickLimit', 'memoryLimit', 'maxStdout']) {
    if (p[k] != null && !(typeof p[k] === 'number' && p[k] > 0)) problems.push(`policy.${k}: want a positive number`);
  }
  if (problems.length) throw new InvalidArgument(problems.join('\n'), { problems });
  return {
    version: 1,
    timeout: p.timeout ?? 30,
    tick_limit: p.tickLimit ?? null,
    memory_limit: p.memoryLimit ?? null,
    max_stdout: p.maxStdout ?? null,
    allow_network: p.allowNetwork === true,
    grants: [],
  };
}

class PythonSandbox {
  constructor(policy = {}, { isolation = 'kernel', filesystem, echo = false, allowDegraded = false } = {}) {
    if (!LEVELS.includes(isolation)) {
      throw new InvalidArgument(`isolation must be one of ${LEVELS.join(', ')} from JavaScript (got ${isolation})`);
    }
    this.policy = portablePolicy(policy);
    this.allowSubprocess = policy.allowSubprocess === true;
    this.level = isolation;
    this.root = filesystem ? fs.realpathSync(filesystem) : null;
    this.echo = echo;
    const info = probe();
    if (!info.guestDir) throw new IsolationUnavailable(`the engine has no guest runtime: ${info.guestDirError}`);
    const env = { PYTHONPATH: info.guestDir, PYTHONDONTWRITEBYTECODE: '1', PYTHONNOUSERSITE: '1', PYTHONSAFEPATH: '1' };
    const opts = isolation === 'process'
      ? { fsReadable: ['/'], fsWritable: ['/'], netAllow: ['*'], netAllowUdp: true, netAllowUnix: true, allowDegraded: true, env }
      : {
          fsReadable: ['/usr', '/lib', info.guestDir, ...['/lib64'].filter((d) => fs.existsSync(d))],
          cleanEnv: true,
          env: { ...env, HOME: '/nonexistent' }, // the worker's init sets HOME to the root
          maxProcesses: 64,
          allowDegraded,
          ...(this.root ? { fsWritable: [this.root] } : {}),
          ...(policy.allowNetwork ? { netAllow: ['*'], netAllowUdp: true } : {}),
          ...(policy.memoryLimit ? { maxMemory: policy.memoryLimit + 256 * 1024 * 1024 } : {}),
        };
    if (this.root) opts.cwd = this.root;
    this.sandbox = new Sandbox(opts);
    this.session = null;
    this.started = false;
    this.queue = Promise.resolve();
  }

  async _exchange(frame, timeout) {
    const resp = await this.sandbox.request({ op: 'session_send', session: this.session, frame: encoder.encode(frame), timeout });
    if (resp.error) throw new SandtrapError(resp.error.message, { code: resp.error.kind });
    if (resp.ended) {
      this.session = null;
      this.stale = resp.confined === true; // the frame was not delivered
      const stderr = Buffer.from(resp.result?.stderr ?? []).toString().slice(-2000);
      this.lastEnd = `${resp.reason}; stderr: ${stderr}`;
      return null;
    }
    return decoder.decode(resp.frame);
  }

  async _start() {
    // a fork of this configuration's template (started once per process by the
    // engine, confined like this sandbox; the fork joins this sandbox's cgroup)
    // one template serves sandboxes that differ only in paths: the fork gets init
    const template = encoder.encode({ op: 'template', policy: this.policy });
    // at kernel the fork's seccomp layer refuses new processes and programs, as in
    // Python, unless the policy allows them (allowSubprocess)
    const spawn = this.level !== 'kernel' || this.allowSubprocess;
    const resp = await this.sandbox.request({ op: 'session_open', argv: ['python3', '-S', '-m', 'sandtrap_guest.worker'], template, spawn });
    if (resp.error) throw new IsolationUnavailable(`the sandbox worker did not start: ${resp.error.message}`);
    this.session = resp.session;
    const reply = await this._exchange({ op: 'init', policy: this.policy, filesystem_root: this.root, echo: this.echo }, 30);
    if (!reply || reply.op !== 'ready') {
      this.session = null;
      throw new IsolationUnavailable(`the sandbox worker did not start: ${reply?.message ?? this.lastEnd}`);
    }
  }

  /** Run Python code; resolves with {stdout, namespace, error, ticks, ...}; never rejects for the code's faults. */
  exec(code, { namespace, stdin, argv } = {}) {
    if (typeof code !== 'string') return Promise.reject(new InvalidArgument('code must be a string'));
    const run = async () => {
      let restarted = false;
      if (this.session === null) {
        await this._start();
        restarted = this.started;
        this.started = true;
      }
      const timeout = this.policy.timeout + GRACE;
      const frame = { op: 'exec', code, namespace: namespace ?? null, stdin: stdin ?? null, argv: argv ?? null };
      this.stale = false;
      let reply = await this._exchange(frame, timeout);
      if (!reply && this.stale) {
        // the worker predates this process's confine(): it ended before the code ran
        await this._start();
        restarted = true;
        reply = await this._exchange(frame, timeout);
      }
      const base = { isolation: this.level, restarted };
      if (!reply) {
        const kind = this.lastEnd.includes('timed out') ? 'StTimeout' : 'WorkerCrashed';
        return { ...base, stdout: '', stderr: '', namespace: {}, ticks: 0, traceback: null, error: { type: kind, message: this.lastEnd } };
      }
      return {
        ...base,
        stdout: reply.stdout,
        stderr: reply.stderr,
        namespace: reply.namespace ?? {},
        ticks: reply.ticks,
        traceback: reply.traceback ?? null,
        error: reply.error ? { type: reply.error.type, message: reply.error.message, traceback: reply.error.traceback } : null,
      };
    };
    const p = this.queue.then(run, run); // one exec at a time: the namespace is shared
    this.queue = p.catch(() => {});
    return p;
  }

  close() {
    this.sandbox.close();
  }
}

/** sandbox(policy, {isolation: 'kernel' | 'process', filesystem, echo, allowDegraded}) */
function sandbox(policy, options) {
  return new PythonSandbox(policy, options);
}

module.exports = { sandbox, PythonSandbox };
