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
