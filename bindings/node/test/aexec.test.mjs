// aexec from Node (Python's aexec): top-level await, async for and async with in the
// worker's own event loop; aborting stops the code (its worker is killed: nothing of
// it runs on), also while a host function answers; the timeout stops an await.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { sandbox } = require('../lib/python.js');

const ASYNC_CODE = `
async def double(x):
    return x * 2
y = await double(21)
async def count(n):
    for i in range(n):
        yield i
out = [i async for i in count(3)]
async for i in count(2):
    out.append(i)
class Ctx:
    async def __aenter__(self):
        return 'in'
    async def __aexit__(self, *exc):
        return False
async with Ctx() as state:
    pass
`;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

for (const isolation of ['process', 'kernel']) {
  test(`aexec at ${isolation}: top-level await, async for, async with; exec refuses them`, { timeout: 30_000 }, async () => {
    const sb = sandbox({ timeout: 5 }, { isolation });
    try {
      const r = await sb.aexec(ASYNC_CODE);
      assert.equal(r.error, null, JSON.stringify(r.error));
      assert.equal(r.namespace.y, 42);
      assert.deepEqual(r.namespace.out, [0, 1, 2, 0, 1]);
      assert.equal(r.namespace.state, 'in');
      // the functions survive into the next exec; per-exec echo as exec's
      const r2 = await sb.aexec('await double(5)', { echo: 'last' });
      assert.equal(r2.stdout, '10\n');
      // exec (not aexec) refuses top-level await, as Python does
      const r3 = await sb.exec('w = await double(1)');
      assert.equal(r3.error.type, 'SyntaxError');
      assert.match(r3.error.message, /outside function/);
    } finally {
      sb.close();
    }
  });

  test(`aexec at ${isolation}: aborting stops the code`, { timeout: 30_000 }, async () => {
    let ticks = 0;
    const sb = sandbox({ timeout: 20, functions: { tick: () => ++ticks } }, { isolation });
    try {
      await sb.aexec('x = 1'); // the worker's start is not measured
      const ac = new AbortController();
      const run = sb.aexec('async def step():\n    tick()\nwhile True:\n    await step()', { signal: ac.signal });
      while (ticks < 3) await sleep(5);
      const t0 = Date.now();
      ac.abort();
      await assert.rejects(run, { name: 'AbortError' });
      assert.ok(Date.now() - t0 < 2000, `stopped in ${Date.now() - t0} ms`);
      const after = ticks;
      await sleep(300);
      assert.equal(ticks, after, 'the code ran on after the abort');
      const r = await sb.aexec('y = 3');
      assert.equal(r.error, null);
      assert.equal(r.restarted, true); // a fresh worker: the old one was killed
      assert.deepEqual(r.namespace, { y: 3 });
    } finally {
      sb.close();
    }
  });

  test(`aexec at ${isolation}: aborting while a host function answers abandons the exec`, { timeout: 30_000 }, async () => {
    let marked = 0;
    const functions = {
      slow: () => sleep(300).then(() => 'late'),
      mark: () => ++marked,
    };
    const sb = sandbox({ timeout: 20, functions }, { isolation });
    try {
      const ac = new AbortController();
      const run = sb.aexec('async def f():\n    slow()\n    mark()\nawait f()', { signal: ac.signal });
      setTimeout(() => ac.abort(), 100);
      await assert.rejects(run, { name: 'AbortError' });
      await sleep(200);
      assert.equal(marked, 0, 'code after the host call ran');
      const r = await sb.aexec('z = 1');
      assert.equal(r.restarted, true);
      assert.deepEqual(r.namespace, { z: 1 });
      // a signal aborted before the call: rejected without running anything
      const r2 = sb.aexec('mark()', { signal: AbortSignal.abort() });
      await assert.rejects(r2, { name: 'AbortError' });
      assert.equal(marked, 0);
    } finally {
      sb.close();
    }
  });

  test(`aexec at ${isolation}: the timeout stops an await`, { timeout: 30_000 }, async () => {
    const sb = sandbox({ timeout: 1 }, { isolation });
    try {
      await sb.aexec('x = 1');
      const t0 = Date.now();
      const r = await sb.aexec('async def spin():\n    while True:\n        pass\nawait spin()');
      assert.equal(r.error.type, 'StTimeout');
      assert.ok(Date.now() - t0 < 3000, `took ${Date.now() - t0} ms`);
    } finally {
      sb.close();
    }
  });
}
