'use strict';
// COW-fork map-reduce from JavaScript, with Python-source init/work:
//
//   const clones = await mapper.fork(4, { init: 'data = load()', work: 'print(sum(data[CLONE_ID::4]))' });
//   const result = await reducer.reduce(['python3', '-c', '...'], clones);
//
// The template is the engine's `python3 -m sandtrap_guest.template`, run as a session
// under the mapper's own options (plus read access to the embedded guest runtime);
// each clone is an os.fork() of it inside the sandbox, with CLONE_ID set.

const fs = require('node:fs');
const { Encoder, Decoder } = require('@msgpack/msgpack');
const { Sandbox, probe } = require('./sandbox');
const { SandtrapError, InvalidArgument, IsolationUnavailable } = require('./errors');

const encoder = new Encoder({ ignoreUndefined: true });
const decoder = new Decoder();

async function fork(mapper, n, { init, work, timeout, parallel, onClone } = {}) {
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgument(`fork: n must be a positive integer, got ${n}`);
  if (typeof work !== 'string') throw new InvalidArgument('fork: work must be Python source (a string)');
  if (init != null && typeof init !== 'string') throw new InvalidArgument('fork: init must be Python source (a string)');
  const info = probe();
  if (!info.guestDir) throw new IsolationUnavailable(`the engine has no guest runtime: ${info.guestDirError}`);
  const opts = { ...mapper.options };
  timeout ??= opts.timeout; // the policy's timeout is every clone's, as it is every run's
  opts.fsReadable = [...(opts.fsReadable ?? []), info.guestDir];
  opts.env = { ...(opts.env ?? {}), PYTHONPATH: info.guestDir, PYTHONDONTWRITEBYTECODE: '1' };
  delete opts.timeout;
  // a system interpreter the mapper's policy lets the template execute
  const readable = (opts.fsReadable ?? []).map((p) => fs.realpathSync(p));
  const python = ['/usr/local/bin/python3', '/usr/bin/python3', '/bin/python3']
    .filter((p) => fs.existsSync(p))
    .find((p) => readable.some((r) => fs.realpathSync(p).startsWith(`${r.replace(/\/$/, '')}/`)));
  if (!python) throw new InvalidArgument('fork: no python3 under fsReadable (add /usr)');
  const tpl = new Sandbox(opts);
  try {
    const open = await tpl.request({ op: 'session_open', argv: [python, '-m', 'sandtrap_guest.template'] });
    if (open.error) throw new SandtrapError(open.error.message, { code: open.error.kind });
    const exchange = async (frame, t) => {
      const resp = await tpl.request({ op: 'session_send', session: open.session, frame: encoder.encode(frame), timeout: t });
      if (resp.error) throw new SandtrapError(resp.error.message, { code: resp.error.kind });
      if (resp.ended) {
        const stderr = Buffer.from(resp.result?.stderr ?? []).toString().slice(-2000);
        throw new SandtrapError(`the fork template ended: ${resp.reason}; stderr: ${stderr}`);
      }
      return decoder.decode(resp.frame);
    };
    let reply = await exchange({ op: 'init', init_src: init ?? null, work_src: work, sys_path: [] }, 3600);
    if (reply.op !== 'ready') throw new SandtrapError(`init failed in the template: ${reply.message}\n${reply.traceback ?? ''}`);
    reply = await exchange({ op: 'fork', n, parallel: parallel ?? null, timeout: timeout ?? null }, 60);
    if (reply.op !== 'forking') throw new SandtrapError(`fork failed: ${reply.message}`);
    const out = new Array(n);
    for (;;) {
      reply = await exchange({ op: 'next' }, (timeout ?? 3600) + 60);
      for (const it of reply.items) {
        const c = {
          id: it.id,
          stdout: Buffer.from(it.stdout),
          stderr: Buffer.from(it.stderr),
          exitCode: it.exit_code ?? null,
          signal: it.signal ?? null,
          timedOut: it.timed_out === true,
          stdoutTruncated: it.stdout_truncated === true,
        };
        c.success = c.exitCode === 0 && !c.timedOut;
        out[c.id] = c;
        if (onClone) onClone(c); // progress, in the order clones finish
      }
      if (reply.done) return out;
    }
  } finally {
    tpl.close();
  }
}

/** Run argv in the reducer with the clones' stdout, in clone order, on its stdin. */
function reduce(reducer, argv, clones, opts = {}) {
  const stdin = Buffer.concat(clones.map((c) => c.stdout));
  return reducer.run(argv, { ...opts, stdin });
}

Sandbox.prototype.fork = function forkMethod(n, options) {
  return fork(this, n, options);
};
Sandbox.prototype.reduce = function reduceMethod(argv, clones, options) {
  return reduce(this, argv, clones, options);
};

module.exports = { fork, reduce };
