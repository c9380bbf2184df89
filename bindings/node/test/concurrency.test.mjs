// Many runs at once: all succeed, and nothing leaks (fds, child processes).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from 'sandtrap';
import { SYSTEM, fdCount, childPids, threadCount, waitFor, deadline, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

test('200 concurrent runs of /bin/true leak no fds and no processes', async () => {
  // no process limit: the default 64 is the sandbox's, shared by its concurrent runs
  const sb = new Sandbox({ fsReadable: SYSTEM, maxProcesses: 0 });
  // warm up: the thread pool, the Go runtime and the engine open what they keep
  await Promise.all(Array.from({ length: 8 }, () => sb.run(['/bin/true'])));
  const fds0 = fdCount();
  const kids0 = childPids();
  const threads0 = threadCount();

  const settled = await deadline(
    Promise.allSettled(Array.from({ length: 200 }, () => sb.run(['/bin/true']))),
    60000,
    '200 concurrent runs',
  );
  const failed = settled.filter((s) => s.status === 'rejected' || !s.value.success);
  assert.equal(failed.length, 0, `${failed.length} of 200 failed, e.g. ${failed[0]?.reason ?? JSON.stringify(failed[0]?.value.error)}`);

  // settle: finalizers of response buffers and engine goroutines may lag a moment.
  // The Go runtime keeps the threads it made for blocking calls (a few, more on a
  // loaded machine); a leak per run would be 200 or more.
  const ok = await waitFor(
    () => fdCount() <= fds0 && childPids().length <= kids0.length && threadCount() <= threads0 + 12,
    3000,
  );
  sb.close();
  assert.ok(ok, `fds ${fds0} -> ${fdCount()}, children ${kids0} -> ${childPids()}, threads ${threads0} -> ${threadCount()}`);
  assert.ok(fdCount() <= fds0, `fds ${fds0} -> ${fdCount()} after close`);
});

test('concurrent runs across many sandboxes, then close them all', async () => {
  const fds0 = fdCount();
  const boxes = Array.from({ length: 20 }, () => new Sandbox({ fsReadable: SYSTEM }));
  const results = await Promise.all(
    boxes.flatMap((b, i) => [b.run(['sh', '-c', `echo ${i}`]), b.run(['/bin/true'])]),
  );
  results.forEach((r) => assert.equal(r.success, true));
  assert.equal(results[2 * 7].stdout.toString(), '7\n');
  boxes.forEach((b) => b.close());
  assert.ok(await waitFor(() => fdCount() <= fds0 && childPids().length === 0, 3000), `fds ${fds0} -> ${fdCount()}`);
});

test('closing a sandbox with runs in flight does not block the event loop', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const runs = Array.from({ length: 4 }, () => sb.run(['sleep', '0.5']));
  const t0 = Date.now();
  sb.close();
  assert.ok(Date.now() - t0 < 100, `close() took ${Date.now() - t0} ms`);
  for (const r of await Promise.all(runs)) assert.equal(r.success, true);
});

test('sandboxes dropped without close() are released by the garbage collector', async (t) => {
  if (typeof global.gc !== 'function') {
    t.skip('needs --expose-gc');
    return;
  }
  const fds0 = fdCount();
  for (let i = 0; i < 50; i++) new Sandbox({ fsReadable: SYSTEM });
  for (let i = 0; i < 5; i++) {
    global.gc();
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(fdCount() <= fds0 + 2, `fds ${fds0} -> ${fdCount()}`);
});
