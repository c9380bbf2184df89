// The shared attack vectors (tests/vectors/attacks.json, format in
// tests/vectors/README.md), run through the Node API: the policy keys are
// translated to their camelCase options and every run goes through Sandbox.run.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sandbox, SandtrapError, probe } from 'sandtrap';
import { alive, processesByCmdline, tmpdir, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const here = path.dirname(fileURLToPath(import.meta.url));
const vectorsDir = process.env.SANDTRAP_VECTORS ?? path.resolve(here, '..', '..', '..', 'tests', 'vectors');
const file = path.join(vectorsDir, 'attacks.json');
const PYTHON = '/usr/bin/python3';

// engine policy key -> JavaScript option name (the table the binding itself uses)
const { POLICY } = await import('../lib/options.js').then((m) => m.default ?? m);
const optionName = Object.fromEntries(Object.entries(POLICY).map(([js, [key]]) => [key, js]));

const features = probe();

function load() {
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  // the README's format: {base_policy, vectors}; a bare list is accepted too
  if (Array.isArray(doc)) return { base: {}, vectors: doc };
  return { base: doc.base_policy ?? {}, vectors: doc.vectors ?? [] };
}

function subst(v, vars) {
  if (typeof v === 'string') return v.replace(/\{([a-z_]+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
  if (Array.isArray(v)) return v.map((x) => subst(x, vars));
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, subst(x, vars)]));
  return v;
}

function layout(tmp) {
  const files = {
    'bin/attack.py': fs.readFileSync(path.join(vectorsDir, 'attack.py')),
    'work/public.txt': 'PUBLIC',
    'work/sub/keep.txt': 'KEEP',
    'work/denied/secret.txt': 'TOPSECRET',
    'outside/secret.txt': 'TOPSECRET',
    'outside/run.sh': '#!/bin/sh\necho escaped\n',
  };
  for (const [name, content] of Object.entries(files)) {
    const p = path.join(tmp, name);
    fs.mkdirSync(path.dirname(p), { recursive: true, mode: 0o755 });
    fs.writeFileSync(p, content, { mode: name.endsWith('.sh') ? 0o755 : 0o644 });
    fs.chmodSync(p, name.endsWith('.sh') ? 0o755 : 0o644);
  }
  for (const d of ['bin', 'work', 'work/sub', 'work/denied', 'outside']) fs.chmodSync(path.join(tmp, d), 0o755);
}

function listen(server, addr) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(addr, () => resolve(server));
  });
}

const helloServer = () => net.createServer((s) => s.end('HELLO')).on('error', () => {});

/** tests/vectors/host_fixtures.py: the fixtures every harness shares. */
function hostFixture(...args) {
  return execFileSync(PYTHON, [path.join(vectorsDir, 'host_fixtures.py'), ...args], { encoding: 'utf8' }).trim();
}

/** A TCP listener that accepts, sends HELLO and records what it receives. */
function recorder() {
  const rec = { conns: 0, got: '', open: 0 };
  rec.server = net.createServer((s) => {
    rec.conns += 1;
    rec.open += 1;
    s.on('data', (d) => { rec.got += d.toString('latin1'); });
    s.on('error', () => {});
    s.on('close', () => { rec.open -= 1; });
    s.setTimeout(3000, () => s.destroy());
    s.write('HELLO');
  }).on('error', () => {});
  /** Wait a moment for what is in flight; {conns, got}. */
  rec.settle = async () => {
    await new Promise((r) => setTimeout(r, 300));
    const end = Date.now() + 3000;
    while (rec.open > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    return { conns: rec.conns, got: rec.got };
  };
  return rec;
}

/** Files and directories under root with a set-uid or set-gid bit. */
function setidFiles(root) {
  const out = [];
  const walk = (d) => {
    let ents = [];
    try { ents = fs.readdirSync(d, { withFileTypes: true }); } catch { return; }
    for (const e of ents) {
      const p = path.join(d, e.name);
      try {
        const st = fs.lstatSync(p);
        if (st.mode & 0o6000) out.push(`${p} ${st.mode.toString(8)}`);
        if (st.isDirectory()) walk(p);
      } catch {}
    }
  };
  walk(root);
  return out;
}

/** Set up a case's fixtures; returns placeholder values and a cleanup. */
async function fixtures(names = [], tmp = '') {
  const vars = {};
  const cleanups = [];
  let hostProc = null;
  let rec = null;
  let skip = null;
  for (const fx of names) {
    switch (fx) {
      case 'recording_listener': {
        rec = recorder();
        await listen(rec.server, { port: 0, host: '127.0.0.1' });
        cleanups.push(() => rec.server.close());
        vars.rec_port = rec.server.address().port;
        break;
      }
      case 'sink_listener': {
        // accepted by libuv but never read (pauseOnConnect): the sender's buffers fill
        const held = [];
        const srv = net.createServer({ pauseOnConnect: true }, (s) => held.push(s)).on('error', () => {});
        await listen(srv, { port: 0, host: '127.0.0.1', backlog: 4096 });
        cleanups.push(() => { held.forEach((s) => s.destroy()); srv.close(); });
        vars.sink_port = srv.address().port;
        break;
      }
      case 'host_ipc': {
        const key = hostFixture('ipc-key');
        cleanups.push(() => hostFixture('ipc-sweep', key, '1'));
        hostFixture('ipc-create', key);
        vars.ipc_key = key;
        break;
      }
      case 'free_ipc_key': {
        const key = hostFixture('ipc-key');
        cleanups.push(() => hostFixture('ipc-sweep', key, '64'));
        vars.free_ipc_key = key;
        break;
      }
      case 'user_xattrs':
        hostFixture('xattrs', tmp);
        break;
      case 'symlinks':
        fs.symlinkSync(path.join(tmp, 'work'), path.join(tmp, 'worklink'));
        break;
      case 'mknod_zero':
        hostFixture('mknod', path.join(tmp, 'bin', 'zero'), '1', '5');
        break;
      case 'root_block_device': {
        const dev = hostFixture('rootdev');
        if (!dev) skip = 'fixture root_block_device: no block device node holds /';
        vars.rootdev = dev;
        break;
      }
      case 'tcp_listener': {
        const srv = await listen(helloServer(), { port: 0, host: '127.0.0.1' });
        cleanups.push(() => srv.close());
        vars.port = srv.address().port;
        vars.other_port = vars.port + 1;
        break;
      }
      case 'free_port': {
        const srv = await listen(net.createServer(), { port: 0, host: '127.0.0.1' });
        vars.free_port = srv.address().port;
        vars.other_port = vars.free_port + 1;
        await new Promise((r) => srv.close(r));
        break;
      }
      case 'abstract_listener': {
        // libuv binds abstract names with the whole sun_path (107 bytes after the
        // NUL, padded with NULs): a name of exactly that length is the same name
        // for a client that connects with its exact length (attack.py does).
        const name = `sandtrap-node-test-${process.pid}-${Date.now()}-`.padEnd(107, 'x');
        const srv = await listen(helloServer(), `\0${name}`);
        cleanups.push(() => srv.close());
        vars.abstract = name;
        break;
      }
      case 'host_process': {
        hostProc = spawn('sleep', ['60'], { stdio: 'ignore' });
        await new Promise((resolve, reject) => {
          hostProc.once('spawn', resolve);
          hostProc.once('error', reject);
        });
        cleanups.push(() => hostProc.kill('SIGKILL'));
        vars.pid = hostProc.pid;
        break;
      }
      default:
        throw new Error(`unknown fixture ${JSON.stringify(fx)} (update test/vectors.test.mjs)`);
    }
  }
  return { vars, hostProc, rec, skip, cleanup: () => cleanups.forEach((f) => f()) };
}

function skipReason(requires = {}) {
  for (const [k, v] of Object.entries(requires)) {
    if (k === 'landlock_abi' && features.landlockAbi < v) return `needs Landlock ABI ${v}, kernel has ${features.landlockAbi}`;
    if (k === 'root' && features.root !== v) return `needs root=${v}`;
    if (k !== 'landlock_abi' && k !== 'root') return `unknown requirement ${k}`;
  }
  return false;
}

function toOptions(policy) {
  const out = {};
  for (const [k, v] of Object.entries(policy)) {
    if (v === null) continue;
    const js = optionName[k];
    assert.ok(js, `policy key ${k} has no Node option`);
    out[js] = v;
  }
  return out;
}

/** Every expect key that does not hold, as messages (empty: all hold). */
async function problems(expect, res, wall, fx, vars) {
  const errs = [];
  for (const [k, want] of Object.entries(expect)) {
    switch (k) {
      case 'build_error_kind':
      case 'build_error_contains':
        errs.push('the sandbox was built (build_error_kind is checked before the run)');
        break;
      case 'no_setid_under': {
        const left = setidFiles(subst(want, vars));
        if (left.length) errs.push(`set-id files left: ${left.join(', ')}`);
        break;
      }
      case 'free_ipc_key_unused': {
        const found = JSON.parse(hostFixture('ipc-sweep', vars.free_ipc_key, '64'));
        if ((found.length === 0) !== want) errs.push(`IPC objects the run left on the host: ${found.join(', ')}`);
        break;
      }
      case 'rec_listener_connections':
      case 'rec_listener_got': {
        if (!fx.rec) {
          errs.push(`${k} needs the recording_listener fixture`);
          break;
        }
        const { conns, got } = await fx.rec.settle();
        if ((k === 'rec_listener_connections' ? conns : got) !== want) {
          errs.push(`recording listener: ${conns} connections, received ${JSON.stringify(got)}`);
        }
        break;
      }
      case 'one_of': {
        const why = [];
        let ok = false;
        for (const [i, alt] of want.entries()) {
          const e = await problems(alt, res, wall, fx, vars);
          if (e.length === 0) {
            ok = true;
            break;
          }
          why.push(`alternative ${i}: ${e.join('; ')}`);
        }
        if (!ok) errs.push(`one_of: none holds: ${why.join(' | ')}`);
        break;
      }
      default:
        try {
          check({ [k]: want }, res, wall, fx.hostProc);
        } catch (e) {
          errs.push(e.message);
        }
    }
  }
  return errs;
}

function check(expect, res, wall, hostProc) {
  const out = res.stdout.toString('utf8').trim();
  const ctx = () =>
    `stdout=${JSON.stringify(out.slice(0, 200))} stderr=${JSON.stringify(res.stderr.toString().slice(0, 300))} ` +
    `exit=${res.exitCode} signal=${res.signal} error=${JSON.stringify(res.error)}`;
  for (const [k, want] of Object.entries(expect)) {
    switch (k) {
      case 'stdout':
        assert.equal(out, want, `stdout; ${ctx()}`);
        break;
      case 'stdout_in':
        assert.ok(want.includes(out), `stdout: want one of ${JSON.stringify(want)}; ${ctx()}`);
        break;
      case 'stdout_startswith':
        assert.ok(out.startsWith(want), `stdout: want prefix ${JSON.stringify(want)}; ${ctx()}`);
        break;
      case 'stderr_contains':
        assert.ok(res.stderr.toString().includes(want), `stderr: want ${JSON.stringify(want)}; ${ctx()}`);
        break;
      case 'exit_code':
        assert.equal(res.exitCode, want, `exit code; ${ctx()}`);
        break;
      case 'signal':
        assert.equal(res.signal, want, `signal; ${ctx()}`);
        break;
      case 'success':
        assert.equal(res.success, want, `success; ${ctx()}`);
        break;
      case 'timed_out':
        assert.equal(res.timedOut, want, `timedOut; ${ctx()}`);
        break;
      case 'stdout_truncated':
        assert.equal(res.stdoutTruncated, want, `stdoutTruncated; ${ctx()}`);
        break;
      case 'error_kind':
        assert.equal(res.error?.kind, want, `error kind; ${ctx()}`);
        break;
      case 'stdout_len':
        assert.equal(res.stdout.length, want, 'stdout length');
        break;
      case 'max_wall_s':
        assert.ok(wall <= want, `took ${wall.toFixed(2)} s, want at most ${want} s`);
        break;
      case 'host_process_alive':
        assert.ok(hostProc && hostProc.exitCode === null && hostProc.signalCode === null && alive(hostProc.pid), `host process died; ${ctx()}`);
        break;
      case 'no_survivor': {
        // the kernel ends a pid namespace's processes as its pid 1 goes, not at once:
        // wait up to 2 s, as the Python harness does
        let pids = processesByCmdline(want);
        const sleeper = new Int32Array(new SharedArrayBuffer(4));
        for (let waited = 0; pids.length && waited < 2000; waited += 20) {
          Atomics.wait(sleeper, 0, 0, 20);
          pids = processesByCmdline(want);
        }
        assert.deepEqual(pids, [], `processes ${pids} (${JSON.stringify(want)}) outlived the run`);
        break;
      }
      default:
        assert.fail(`unknown expect key ${JSON.stringify(k)} (update test/vectors.test.mjs)`);
    }
  }
}

if (!fs.existsSync(file)) {
  test('shared vectors', { skip: `${file} does not exist` }, () => {});
} else {
  const { base, vectors } = load();
  describe('shared attack vectors', () => {
    let tmp;
    before(() => assert.ok(vectors.length > 0, 'no vectors'));
    for (const vec of vectors) {
      test(vec.name, { skip: skipReason(vec.requires), timeout: 120000 }, async (t) => {
        // {tmp} lives where few entries sit beside it (/var/tmp), as in the Python
        // run: a vector granting "/" and denying a path under {tmp} makes a Landlock
        // rule per sibling of each directory on the way, and a busy /tmp passes 1,024
        tmp = tmpdir('sandtrap-vec-', fs.existsSync('/var/tmp') ? '/var/tmp' : os.tmpdir());
        layout(tmp.dir);
        const fx = await fixtures(vec.fixtures, tmp.dir);
        try {
          if (fx.skip) {
            t.skip(fx.skip);
            return;
          }
          const vars = { tmp: tmp.dir, python: PYTHON, ...fx.vars };
          const policy = subst({ ...base, ...(vec.policy ?? {}) }, vars);
          const expect = vec.expect ?? {};
          if (expect.build_error_kind !== undefined) {
            let built = null;
            try {
              built = new Sandbox(toOptions(policy));
            } catch (e) {
              assert.ok(e instanceof SandtrapError, `want a SandtrapError, got ${e}`);
              assert.equal(e.code, expect.build_error_kind, `build error kind; ${e.message}`);
              for (const sub of expect.build_error_contains ?? []) {
                assert.ok(e.message.includes(subst(sub, vars)), `the error lacks ${subst(sub, vars)}: ${e.message}`);
              }
              return;
            }
            built.close();
            assert.fail(`want a ${expect.build_error_kind} error, the sandbox was built`);
          }
          const sb = new Sandbox(toOptions(policy));
          const argv = subst(vec.argv, vars);
          const opts = {};
          if (vec.timeout != null) opts.timeout = vec.timeout;
          if (vec.stdin != null) opts.stdin = vec.stdin;
          const t0 = performance.now();
          let res;
          try {
            res = await sb.run(argv, opts);
          } catch (e) {
            // NotFound, SpawnFailed, …: the engine's result is attached
            if (!(e instanceof SandtrapError) || !e.result) throw e;
            res = e.result;
          }
          const wall = (performance.now() - t0) / 1000;
          sb.close();
          const errs = await problems(expect, res, wall, fx, vars);
          assert.deepEqual(errs, [], errs.join('; '));
        } finally {
          fx.cleanup();
          tmp.cleanup();
        }
      });
    }
  });
}
