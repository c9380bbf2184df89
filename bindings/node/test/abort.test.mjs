// AbortSignal cancels a run: the promise rejects with an AbortError and the whole
// process tree dies.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sandbox, AbortError, SandtrapError } from 'sandtrap';
import { SYSTEM, processesByCmdline, processesWithEnv, waitFor, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const MARK = 'SANDTRAP_NODE_ABORT_TEST';
const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

test("AbortSignal kills sh -c 'sleep 30 & sleep 30' and everything in it", async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const id = `${process.pid}-${Date.now()}`;
  const ac = new AbortController();
  const t0 = Date.now();
  const p = sb.run(['sh', '-c', 'sleep 30 & sleep 30'], { signal: ac.signal, env: { [MARK]: id } });
  // wait until both sleeps (and sh) are running, found by the marker in their environment
  const seen = await waitFor(() => processesWithEnv(MARK, id).length >= 3 && processesWithEnv(MARK, id), 5000);
  assert.ok(seen, 'the sandboxed processes never showed up');
  const sleeps = seen.filter((pid) => processesByCmdline('sleep 30').includes(pid));
  assert.equal(sleeps.length, 2, `want two "sleep 30" among ${seen}`);
  ac.abort();
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof AbortError && e instanceof SandtrapError && e instanceof Error);
    assert.equal(e.name, 'AbortError');
    assert.equal(e.code, 'ABORT_ERR');
    assert.equal(e.result.cancelled, true);
    assert.equal(e.result.success, false);
    assert.equal(e.cause, ac.signal.reason);
    return true;
  });
  assert.ok(Date.now() - t0 < 10000);
  // nothing survives: not the marked processes, not a "sleep 30" of this run
  const left = processesWithEnv(MARK, id);
  assert.deepEqual(left, [], `survivors: ${left}`);
  for (const pid of sleeps) {
    assert.ok(!processesByCmdline('sleep 30').includes(pid), `sleep 30 (pid ${pid}) survived`);
  }
  sb.close();
});

test('an already-aborted signal rejects without running', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const reason = new Error('stop');
  const t0 = Date.now();
  await assert.rejects(sb.run(['sleep', '5'], { signal: AbortSignal.abort(reason) }), (e) => {
    assert.equal(e.name, 'AbortError');
    assert.equal(e.cause, reason);
    assert.equal(e.result, undefined);
    return true;
  });
  assert.ok(Date.now() - t0 < 1000);
  sb.close();
});

test('AbortSignal.timeout cancels', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const t0 = Date.now();
  await assert.rejects(sb.run(['sleep', '30'], { signal: AbortSignal.timeout(200) }), (e) => {
    assert.equal(e.name, 'AbortError');
    assert.equal(e.cause.name, 'TimeoutError');
    return true;
  });
  assert.ok(Date.now() - t0 < 5000);
  sb.close();
});

test('many long runs share one signal: all are killed', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const ac = new AbortController();
  const runs = Array.from({ length: 12 }, () => sb.run(['sleep', '30'], { signal: ac.signal }));
  setTimeout(() => ac.abort(), 300);
  const t0 = Date.now();
  const settled = await Promise.allSettled(runs);
  assert.ok(Date.now() - t0 < 10000, `took ${Date.now() - t0} ms`);
  for (const s of settled) {
    assert.equal(s.status, 'rejected');
    assert.equal(s.reason.name, 'AbortError');
  }
  sb.close();
});

test('runs waiting for a slot (SANDTRAP_MAX_CONCURRENT) are aborted or cancelled without starting', () => {
  // a child process: the limit is read when the package loads
  const code = `
    const { Sandbox } = require('./index.js');
    const sb = new Sandbox({ fsReadable: ['/usr', '/lib', '/bin'] });
    const ac = new AbortController();
    const t0 = Date.now();
    const running = [sb.run(['sleep', '30'], { signal: ac.signal }), sb.run(['sleep', '30'], { signal: ac.signal })];
    const queued = [sb.run(['sleep', '30'], { signal: ac.signal }), sb.run(['echo', 'never'], { signal: ac.signal })];
    const other = new Sandbox({ fsReadable: ['/usr', '/lib', '/bin'] });
    const cancelled = other.run(['echo', 'never']);
    other.cancelAll();
    setTimeout(() => ac.abort(), 300);
    Promise.allSettled([...running, ...queued, cancelled]).then((s) => {
      console.log(JSON.stringify({
        ms: Date.now() - t0,
        status: s.map((x) => x.status === 'rejected' ? x.reason.name + ':' + (x.reason.result ? x.reason.result.cancelled : 'none') : 'ok:' + x.value.cancelled + ':' + x.value.stdout),
      }));
    });
  `;
  const r = spawnSync(process.execPath, ['-e', code], {
    cwd: pkg,
    env: { ...process.env, SANDTRAP_MAX_CONCURRENT: '2' },
    encoding: 'utf8',
    timeout: 30000,
  });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.ok(out.ms < 10000, `took ${out.ms} ms`);
  // the two running ones were killed (result attached); the two waiting never started
  assert.deepEqual(out.status, ['AbortError:true', 'AbortError:true', 'AbortError:none', 'AbortError:none', 'ok:true:']);
});

test('aborting a pipeline kills every stage, across sandboxes', async () => {
  const a = new Sandbox({ fsReadable: SYSTEM });
  const b = new Sandbox({ fsReadable: SYSTEM });
  const id = `${process.pid}-p-${Date.now()}`;
  const ac = new AbortController();
  const p = a
    .cmd(['sh', '-c', 'sleep 30; echo x'], { env: { [MARK]: id } })
    .pipe(b.cmd(['sh', '-c', 'cat; sleep 30'], { env: { [MARK]: id } }))
    .run({ signal: ac.signal });
  assert.ok(await waitFor(() => processesWithEnv(MARK, id).length >= 3, 5000), 'stages never started');
  ac.abort();
  await assert.rejects(p, (e) => {
    assert.equal(e.name, 'AbortError');
    assert.equal(e.result.stages.length, 2);
    assert.ok(e.result.stages.every((s) => s.cancelled), JSON.stringify(e.result.stages.map((s) => s.error)));
    return true;
  });
  assert.deepEqual(processesWithEnv(MARK, id), []);
  a.close();
  b.close();
});

test('a run that ends before the abort is not affected', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const ac = new AbortController();
  const r = await sb.run(['echo', 'ok'], { signal: ac.signal });
  ac.abort();
  assert.equal(r.stdout.toString(), 'ok\n');
  sb.close();
});

test('cancelAll() resolves runs in flight with cancelled: true', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const p = sb.run(['sleep', '30']);
  await waitFor(() => sb.cancelAll() > 0, 5000, 10);
  const r = await p;
  assert.equal(r.cancelled, true);
  assert.equal(r.error.kind, 'cancelled');
  sb.close();
});
