// Lifecycle (issue 16, second part): pause by the run's cgroup v2 freezer (no SIGCONT
// undoes it; SIGSTOP fallback reported), sendSignal, fork/reduce iterators, AbortSignal.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Sandbox, InvalidRequest } from 'sandtrap';
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
  for (let i = 0; i < 500 && tree(p.initPid).length < 4; i++) await sleep(10);
  const pids = tree(p.initPid);
  await p.pause();
  for (const pid of pids.slice(1)) process.kill(pid, 'SIGCONT');
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
  await sb.spawn(['sh', '-c', 'sleep 30 & sleep 30 & wait'], { stdio: 'ignore' });
  await sleep(200);
  for (const bad of [0, 'SIGSTOP', 'SIGCONT', 'SIGTSTP', 65, 'SIGNOPE']) {
    await assert.rejects(sb.sendSignal(bad), InvalidRequest, String(bad));
  }
  assert.equal(await sb.sendSignal(9, { tree: true }), 3);
  const r = await sb.wait();
  assert.equal(r.reason, 'signaled');
  assert.equal(r.signal, 9);
  sb.close();
});
