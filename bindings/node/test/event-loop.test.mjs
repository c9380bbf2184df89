// Engine calls run on the libuv thread pool: the event loop keeps turning.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Sandbox } from 'sandtrap';
import { SYSTEM, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

test('a setInterval keeps ticking through a 2-second run', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  let ticks = 0;
  let maxGap = 0;
  let last = Date.now();
  const iv = setInterval(() => {
    const now = Date.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
    ticks++;
  }, 100);
  const t0 = Date.now();
  const r = await sb.run(['sleep', '2']);
  const wall = Date.now() - t0;
  clearInterval(iv);
  sb.close();
  assert.equal(r.success, true);
  assert.ok(wall >= 1900, `the run took ${wall} ms`);
  assert.ok(ticks >= 15, `only ${ticks} ticks in ${wall} ms`);
  assert.ok(maxGap < 500, `the event loop stalled for ${maxGap} ms`);
});

test('a pipeline does not block the event loop either', async () => {
  const a = new Sandbox({ fsReadable: SYSTEM });
  let ticks = 0;
  const iv = setInterval(() => ticks++, 50);
  const r = await a.cmd(['sh', '-c', 'sleep 1; echo x']).pipe(a.cmd(['cat'])).run();
  clearInterval(iv);
  a.close();
  assert.equal(r.stdout.toString(), 'x\n');
  assert.ok(ticks >= 10, `only ${ticks} ticks`);
});

test('long runs do not occupy the libuv thread pool (fs keeps working)', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  // more long runs than the pool has threads (4 unless UV_THREADPOOL_SIZE)
  const n = Number(process.env.UV_THREADPOOL_SIZE || 4) + 2;
  const runs = Array.from({ length: n }, () => sb.run(['sleep', '1.5']));
  await new Promise((r) => setTimeout(r, 200));
  const t0 = Date.now();
  await fs.promises.readFile('/proc/self/status');
  await fs.promises.stat('/');
  const ms = Date.now() - t0;
  const t1 = Date.now();
  const results = await Promise.all(runs);
  const wall = Date.now() - t1;
  sb.close();
  assert.ok(ms < 500, `fs calls waited ${ms} ms behind sandbox runs`);
  results.forEach((r) => assert.equal(r.success, true));
  // and the runs were not serialised by a small pool either
  assert.ok(wall < 2500, `${n} concurrent 1.5 s runs took ${wall} ms more`);
});
