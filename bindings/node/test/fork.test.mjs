// COW-fork map-reduce from Node with Python-source init/work.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Sandbox } from '../index.mjs';

const SYS = ['/usr', '/lib', '/bin'];

test('fork + reduce: the seed example with Python source', async () => {
  const data = fs.mkdtempSync(path.join(os.tmpdir(), 'st-data-'));
  fs.writeFileSync(path.join(data, 'numbers.txt'), Array.from({ length: 100 }, (_, i) => i).join(' '));
  const mapper = new Sandbox({ fsReadable: [...SYS, data] });
  const reducer = new Sandbox({ fsReadable: SYS, cleanEnv: true }); // python3 from the system PATH
  const seen = [];
  const clones = await mapper.fork(4, {
    init: `data = [int(x) for x in open(${JSON.stringify(path.join(data, 'numbers.txt'))}).read().split()]`,
    work: 'print(sum(data[CLONE_ID::4]))',
    onClone: (c) => seen.push(c.id),
  });
  assert.deepEqual(seen.sort(), [0, 1, 2, 3]);
  assert.deepEqual(clones.map((c) => c.stdout.toString()), ['1200\n', '1225\n', '1250\n', '1275\n']);
  const r = await reducer.reduce(['python3', '-c', 'import sys; print(sum(int(l) for l in sys.stdin))'], clones);
  assert.equal(r.stdout.toString(), '4950\n');
  // the reducer holds none of the mapper's access
  const denied = await reducer.run(['cat', path.join(data, 'numbers.txt')]);
  assert.match(denied.stderr.toString(), /Permission denied/);
  mapper.close();
  reducer.close();
});

test('fork: a failing clone is reported on its own', async () => {
  const sb = new Sandbox({ fsReadable: SYS });
  const clones = await sb.fork(3, { work: 'import os\nif CLONE_ID == 1: raise SystemExit(5)\nprint(os.environ["CLONE_ID"])' });
  assert.deepEqual(clones.map((c) => c.exitCode), [0, 5, 0]);
  assert.equal(clones[2].stdout.toString(), '2\n');
  sb.close();
});

test('fork: the mapper\'s limits hold for the clones (maxOutput, maxProcesses)', async () => {
  const sb = new Sandbox({ fsReadable: SYS, maxOutput: 100, maxProcesses: 3 });
  try {
    const clones = await sb.fork(6, { work: "print('x' * 1000)" });
    assert.deepEqual(clones.map((c) => [c.stdout.length, c.stdoutTruncated, c.exitCode]), Array(6).fill([100, true, 0]));
    assert.equal(clones.isolation.limits.maxProcesses.value > 0, true);
    assert.equal(typeof clones.isolation.python.interpreter, 'string');
  } finally {
    sb.close();
  }
});

test('fork: an abort stops forking (the template and its clones are killed)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'st-abort-'));
  const sb = new Sandbox({ fsReadable: SYS, fsWritable: [dir] });
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 500);
  const t0 = Date.now();
  let err;
  await assert.rejects(
    sb.fork(1000, {
      work: `import time\nopen(${JSON.stringify(dir)} + '/' + str(CLONE_ID), 'w').close()\ntime.sleep(0.1)\nprint(CLONE_ID)`,
      parallel: 2,
      signal: ac.signal,
    }),
    (e) => {
      err = e;
      return e.name === 'AbortError';
    },
  );
  assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
  const started = fs.readdirSync(dir).length;
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(fs.readdirSync(dir).length, started, 'clones went on after the abort');
  assert.ok(started < 100, `${started} clones started`);
  assert.ok(err.result.filter(Boolean).length <= started);
  sb.close();
});
