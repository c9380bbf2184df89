// The cooperative Python sandbox driven from Node (the engine's embedded guest runtime).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { sandbox } = require('../lib/python.js');

for (const isolation of ['process', 'kernel']) {
  test(`python exec at ${isolation}: output, namespace, ticks, persistence`, async () => {
    const sb = sandbox({ timeout: 5, tickLimit: 100000 }, { isolation });
    try {
      const r = await sb.exec("total = sum(range(10))\nprint(f'total = {total}')");
      assert.equal(r.error, null);
      assert.equal(r.stdout, 'total = 45\n');
      assert.deepEqual(r.namespace, { total: 45 });
      assert.equal(r.ticks, 2);
      const r2 = await sb.exec('def f(x):\n    return x + total\n');
      const r3 = await sb.exec('y = f(1)');
      assert.equal(r2.error, null);
      assert.equal(r3.namespace.y, 46);
    } finally {
      sb.close();
    }
  });
}

test('python exec: escapes end in the exact guest error', async () => {
  const sb = sandbox({ timeout: 5 }, { isolation: 'kernel' });
  try {
    const r = await sb.exec('().__class__.__bases__[0].__subclasses__()');
    assert.equal(r.error.type, 'StAttributeDenied');
    const r2 = await sb.exec("__import__('os')");
    assert.equal(r2.error.type, 'StValidationError');
  } finally {
    sb.close();
  }
});

test('python exec in kernel mode: files only under the root', async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'st-py-'));
  fs.writeFileSync(path.join(root, 'in.txt'), 'inside');
  const sb = sandbox({ timeout: 5 }, { isolation: 'kernel', filesystem: root });
  try {
    // the guest maps absolute paths into the root; the kernel holds the rest
    const r = await sb.exec("data = open('in.txt').read()\ntry:\n    open('/etc/hostname').read()\nexcept Exception as e:\n    err = type(e).__name__\n");
    assert.equal(r.error, null, JSON.stringify(r.error));
    assert.deepEqual(r.namespace, { data: 'inside', err: 'FileNotFoundError' });
  } finally {
    sb.close();
  }
});

for (const isolation of ['process', 'kernel']) {
  test(`python exec at ${isolation}: granted JavaScript functions run here, with msgpack values`, async () => {
    const seen = [];
    const functions = {
      add: (a, b) => a + b,
      later: async (x, kw) => {
        seen.push([x, kw]);
        return { got: x, kw };
      },
      boom: () => {
        throw new RangeError('no');
      },
    };
    const sb = sandbox({ timeout: 10, functions }, { isolation });
    try {
      const r = await sb.exec(
        "x = add(2, 3)\ny = later([1, 'a'], k=True)\ntry:\n    boom()\nexcept Exception as e:\n    m = str(e)\ntry:\n    missing()\nexcept NameError as e:\n    n = 'NameError'\n",
      );
      assert.equal(r.error, null, JSON.stringify(r.error));
      assert.deepEqual(r.namespace, { x: 5, y: { got: [1, 'a'], kw: { k: true } }, m: 'RangeError: no', n: 'NameError' });
      assert.deepEqual(seen, [[[1, 'a'], { k: true }]]);
      assert.equal(r.isolation.level, isolation);
      assert.equal(typeof r.isolation.python.interpreter, 'string');
      assert.equal(r.isolation.subprocess.allowed, isolation === 'process');
    } finally {
      sb.close();
    }
  });
}

test('python: the interpreter is the one named, else the engine picks a python3 program', async () => {
  const named = sandbox({ timeout: 5 }, { isolation: 'kernel', python: '/usr/bin/python3' });
  const picked = sandbox({ timeout: 5 }, { isolation: 'kernel' });
  try {
    assert.equal((await named.open()).python.interpreter, '/usr/bin/python3');
    const p = (await picked.open()).python.interpreter;
    assert.ok(!fs.readFileSync(p).subarray(0, 2).equals(Buffer.from('#!')), `${p} is a script`);
    assert.equal((await picked.exec('x = 1')).namespace.x, 1);
  } finally {
    named.close();
    picked.close();
  }
  const missing = sandbox({}, { python: '/nonexistent/python3' });
  await assert.rejects(missing.exec('x = 1'), (e) => e.code === 'invalid_request' && /nonexistent/.test(e.message));
  missing.close();
});

test('python: cancel() stops a running exec; the next exec gets a fresh worker', async () => {
  const sb = sandbox({ timeout: 30 }, { isolation: 'kernel' });
  try {
    await sb.exec('x = 1');
    setTimeout(() => sb.cancel(), 300);
    const t0 = Date.now();
    const r = await sb.exec('while True:\n    pass');
    assert.equal(r.error.type, 'StCancelled');
    assert.ok(Date.now() - t0 < 10000);
    const r2 = await sb.exec('y = 2');
    assert.equal(r2.restarted, true);
    assert.deepEqual(r2.namespace, { y: 2 });
  } finally {
    sb.close();
  }
});

test('python exec: echo modes (per sandbox, per exec), a wrong one refused, KeyError args, memory in bytes', async () => {
  const sb = sandbox({ timeout: 10, memoryLimit: 64 * 1024 * 1024 }, { isolation: 'process', echo: 'all' });
  try {
    assert.equal((await sb.exec('1\nx = 2\nx * 3')).stdout, '1\n6\n');
    assert.equal((await sb.exec('1\nx = 2\nx * 3', { echo: 'last' })).stdout, '6\n');
    assert.equal((await sb.exec('1\nx = 2\nx * 3', { echo: false })).stdout, '');
    await assert.rejects(sb.exec('1', { echo: 'bad' }), /Invalid echo option/);
    const r = await sb.exec("d = {}\nd['k']");
    assert.equal(r.error.type, 'KeyError');
    assert.deepEqual(r.error.args, ['k']);
    const m = await sb.exec('x = [bytearray(1 << 20) for _ in range(200)]');
    assert.equal(m.error.type, 'MemoryError');
    assert.match(m.error.message, /67108864 bytes/);
  } finally {
    sb.close();
  }
  const bad = sandbox({ timeout: 5 }, { isolation: 'process', echo: 'sometimes' });
  await assert.rejects(bad.open(), /Invalid echo option/);
  bad.close();
});

test('python exec: snapshotPrints fills prints', async () => {
  const sb = sandbox({ timeout: 10 }, { isolation: 'process', snapshotPrints: true });
  try {
    const r = await sb.exec("print('a', 1)\nprint([2])");
    assert.deepEqual(r.prints, [['a', 1], [[2]]]);
  } finally {
    sb.close();
  }
  const plain = sandbox({ timeout: 10 }, { isolation: 'process' });
  try {
    assert.deepEqual((await plain.exec("print('a')")).prints, []);
  } finally {
    plain.close();
  }
});
