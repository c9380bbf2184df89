// Lifecycle (issue 16, second part): pause by the run's cgroup v2 freezer (no SIGCONT
// undoes it; SIGSTOP fallback reported), sendSignal, fork/reduce iterators, AbortSignal.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Sandbox, InvalidRequest, sandbox } from 'sandtrap';
import { SYSTEM, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tree = (root) => {
  const out = [];
  const stack = [root];
  while (stack.length) {
    const pid = stack.pop();
    out.push(pid);
    try {
      for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
        stack.push(...fs.readFileSync(`/proc/${pid}/task/${t}/children`, 'latin1').split(' ').filter(Boolean).map(Number));
      }
    } catch {}
  }
  return out;
};
const ticks = (pids) => {
  let n = 0;
  for (const pid of pids) {
    try {
      const f = fs.readFileSync(`/proc/${pid}/stat`, 'latin1').split(')').pop().trim().split(/\s+/);
      n += Number(f[11]) + Number(f[12]);
    } catch {}
  }
  return n;
};
const freezerExpected = () => process.geteuid() === 0 && fs.readFileSync('/proc/self/mountinfo', 'latin1').includes(' - cgroup2 ');
const SPIN = 'while :; do kill -CONT -1 2>/dev/null; done';

test('the freezer pause holds against SIGCONT from inside and out; kill works frozen', async (t) => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const p = await sb.popen(['sh', '-c', `(sh -c '${SPIN}' &); (sh -c '${SPIN}' &); ${SPIN}`], { stdio: 'ignore' });
  if (!freezerExpected()) {
    assert.equal(p.pauseVia, 'sigstop');
    assert.match(p.pauseNote, /freezer/);
    p.kill();
    await p.wait();
    sb.close();
    return t.skip(`no cgroup v2 freezer here (${p.pauseNote})`);
  }
  assert.equal(p.pauseVia, 'freezer');
  // the tree settles at init + three spinners (the subshells that start two of them exit)
  let pids = [];
  for (let i = 0, last = ''; i < 500; i++, await sleep(10)) {
    pids = tree(p.initPid);
    const key = pids.join(',');
    if (pids.length === 4 && key === last) break;
    last = key;
  }
  await p.pause();
  for (const pid of pids.slice(1)) {
    try {
      process.kill(pid, 'SIGCONT');
    } catch (e) {
      if (e.code !== 'ESRCH') throw e;
    }
  }
  let t0 = ticks(pids);
  await sleep(500);
  const frozen = ticks(pids) - t0;
  await p.resume();
  t0 = ticks(pids);
  await sleep(500);
  const resumed = ticks(pids) - t0;
  t.diagnostic(`ticks in 0.5 s: frozen ${frozen}, resumed ${resumed}`);
  assert.ok(frozen <= 1 && resumed >= 3, `frozen ${frozen}, resumed ${resumed}`);
  await p.pause();
  p.kill();
  assert.equal((await p.wait()).reason, 'killed');
  assert.ok(pids.every((pid) => !fs.existsSync(`/proc/${pid}`)));
  sb.close();
});

test('sendSignal: the leader (a trap runs), the tree, refusals', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const p = await sb.popen(['sh', '-c', "trap 'exit 3' TERM; while :; do sleep 0.02; done"], { stdio: 'ignore' });
  await sleep(150);
  assert.equal(await p.sendSignal('SIGTERM'), 1);
  assert.equal((await p.wait()).exitCode, 3);
  assert.equal(await p.sendSignal('SIGTERM'), 0);
  const q = await sb.spawn(['sh', '-c', 'sleep 30 & sleep 30 & wait'], { stdio: 'ignore' });
  // both sleeps exec'd (a loaded machine is slow to)
  const comms = () => tree(q.initPid).map((pid) => {
    try {
      return fs.readFileSync(`/proc/${pid}/comm`, 'latin1').trim();
    } catch {
      return '';
    }
  });
  for (let i = 0; i < 2000 && comms().filter((c) => c === 'sleep').length < 2; i++) await sleep(10);
  assert.equal(comms().slice(1).filter((c) => c === 'sleep').length, 2, comms().join(','));
  for (const bad of [0, 'SIGSTOP', 'SIGCONT', 'SIGTSTP', 65, 'SIGNOPE']) {
    await assert.rejects(sb.sendSignal(bad), InvalidRequest, String(bad));
  }
  assert.equal(await sb.sendSignal(9, { tree: true }), 3);
  const r = await sb.wait();
  assert.equal(r.reason, 'signaled');
  assert.equal(r.signal, 9);
  sb.close();
});

// -- forkIter: clones as they finish, progress; leaving the loop kills the rest ----
const comm = (dir) => `stc${Math.abs([...dir].reduce((h, c) => (h * 31 + c.charCodeAt(0)) | 0, 7)) % 1e9}`.slice(0, 15);
const clonePids = (dir) => {
  const want = comm(dir);
  const out = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (fs.readFileSync(`/proc/${d}/comm`, 'latin1').trim() === want) out.push(Number(d));
    } catch {}
  }
  return out;
};
const alive = (pids) =>
  pids.filter((pid) => {
    try {
      return fs.readFileSync(`/proc/${pid}/stat`, 'latin1').split(')').pop().trim()[0] !== 'Z';
    } catch {
      return false;
    }
  });
const sleeperWork = (dir) =>
  `import ctypes, os, time\nctypes.CDLL(None).prctl(15, ${JSON.stringify(comm(dir))}.encode(), 0, 0, 0)\n` +
  `open(${JSON.stringify(dir)} + '/' + str(CLONE_ID), 'w').close()\nif CLONE_ID > 0:\n    time.sleep(30)\nprint(CLONE_ID)`;

test('forkIter yields clones as they finish with progress; break kills the clones still running', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'st-forkiter-'));
  const sb = new Sandbox({ fsReadable: SYSTEM, fsWritable: [dir] });
  const stream = sb.forkIter(4, { work: sleeperWork(dir), parallel: 4 });
  assert.equal(stream.total, 4);
  let pids = [];
  let ticks = 0;
  const timer = setInterval(() => ticks++, 10);
  for await (const c of stream) {
    assert.equal(c.id, 0);
    assert.equal(c.stdout.toString(), '0\n');
    assert.equal(stream.done, 1);
    for (let i = 0; i < 500 && fs.readdirSync(dir).length < 2; i++) await sleep(20);
    pids = clonePids(dir);
    break;
  }
  clearInterval(timer);
  assert.ok(pids.length > 0, 'no sleeping clone ran');
  assert.ok(ticks > 5, `the event loop was blocked (${ticks} ticks)`);
  for (let i = 0; i < 250 && alive(pids).length; i++) await sleep(20);
  assert.deepEqual(alive(pids), [], 'clones outlived the loop');
  sb.close();
});

test('forkIter: an AbortSignal kills the remaining clones', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'st-forkiter-'));
  const sb = new Sandbox({ fsReadable: SYSTEM, fsWritable: [dir] });
  const ac = new AbortController();
  let pids = [];
  await assert.rejects(
    (async () => {
      for await (const c of sb.forkIter(4, { work: sleeperWork(dir), parallel: 4, signal: ac.signal })) {
        assert.equal(c.id, 0);
        for (let i = 0; i < 500 && fs.readdirSync(dir).length < 2; i++) await sleep(20);
        pids = clonePids(dir);
        ac.abort();
      }
    })(),
    (e) => e.name === 'AbortError',
  );
  assert.ok(pids.length > 0);
  for (let i = 0; i < 250 && alive(pids).length; i++) await sleep(20);
  assert.deepEqual(alive(pids), []);
  sb.close();
});

test('PythonSandbox.exec: an AbortSignal stops the code; the next exec does not wait for it', async () => {
  for (const isolation of ['kernel', 'process']) {
    const py = sandbox({ timeout: 30 }, { isolation });
    assert.equal((await py.exec('x = 41')).error, null);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    const t0 = Date.now();
    await assert.rejects(py.exec('while True:\n    pass', { signal: ac.signal }), (e) => e.name === 'AbortError');
    assert.ok(Date.now() - t0 < 3000, `${isolation}: the abort took ${Date.now() - t0} ms`);
    const t1 = Date.now();
    const r = await py.exec('y = 1');
    assert.equal(r.error, null);
    assert.ok(Date.now() - t1 < 3000, `${isolation}: the next exec waited ${Date.now() - t1} ms`);
    py.close();
  }
});

test('checkpoint and restore: app state on fd 3, same policy only, a changed state refused', async () => {
  const { PolicyError } = await import('sandtrap');
  const prog = `import os, socket, sys, time
if "SANDTRAP_CHECKPOINT_FD" in os.environ:
    print("restored:" + os.read(3, int(os.environ["SANDTRAP_CHECKPOINT_SIZE"])).decode())
    sys.exit(0)
a, b = socket.socketpair()
print("up", flush=True)
time.sleep(30)
`;
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const p = await sb.spawn(['/usr/bin/python3', '-c', prog], { stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  p.stdout.on('data', (b) => (out += b));
  for (let i = 0; i < 500 && !out.includes('up'); i++) await sleep(10);
  const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'st-cp-')), 'cp');
  const cp = await sb.checkpoint(dir, { saveFn: () => Buffer.from('step-7'), name: 'n' });
  assert.equal(cp.format, 'sandtrap-checkpoint/1');
  assert.ok(cp.not_captured.some((n) => n.what === '2 socket fd(s)'), JSON.stringify(cp.not_captured));
  assert.equal(fs.readFileSync(path.join(dir, 'app_state.bin'), 'latin1'), 'step-7');
  await assert.rejects(sb.checkpoint(dir), InvalidRequest); // never over another
  p.kill();
  await p.wait();
  let seen = null;
  const q = await sb.restore(dir, { stdout: 'capture', restoreFn: (s) => (seen = s.toString()) });
  assert.equal(seen, 'step-7');
  assert.equal((await q.wait()).stdout.toString(), 'restored:step-7\n');
  const other = new Sandbox({ fsReadable: [...SYSTEM, '/etc'] });
  await assert.rejects(other.restore(dir), PolicyError);
  other.close();
  fs.writeFileSync(path.join(dir, 'app_state.bin'), 'step-8');
  await assert.rejects(sb.restore(dir), InvalidRequest);
  sb.close();
});
