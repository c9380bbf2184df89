// Determinism in Node (Python's test_determinism.py and the Go engine tests have
// the rest): randomSeed, timeStart and deterministicDirs reach the run, each
// checked against a control run without the field.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Sandbox, PolicyError } from 'sandtrap';
import { exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const RO = ['/usr', '/lib', '/bin', '/etc', '/dev'];
const PROBE = 'import os, random, uuid; print(os.urandom(32).hex(), random.random(), uuid.uuid4(), open("/dev/urandom","rb").read(16).hex())';

async function probe(opts) {
  const sb = new Sandbox({ fsReadable: RO, ...opts });
  try {
    const r = await sb.run(['/usr/bin/python3', '-I', '-c', PROBE]);
    assert.equal(r.exitCode, 0, r.stderr.toString());
    return r.stdout.toString().trim().split(' ');
  } finally {
    sb.close();
  }
}

test('randomSeed: the same seed gives the same bytes, another seed and no seed others', async () => {
  const a = await probe({ randomSeed: 99 });
  const b = await probe({ randomSeed: 99 });
  const c = await probe({ randomSeed: 100 });
  const n1 = await probe({});
  const n2 = await probe({});
  assert.deepEqual(a, b);
  for (let i = 0; i < 4; i++) {
    assert.notEqual(a[i], c[i]);
    assert.notEqual(n1[i], n2[i]);
  }
});

test('timeStart: date +%s is the start plus the elapsed time; the report says so', async () => {
  const start = 946684800;
  const sb = new Sandbox({ fsReadable: RO, timeStart: '2000-01-01T00:00:00Z' });
  try {
    const t0 = Date.now();
    const r = await sb.run(['date', '+%s']);
    const elapsed = (Date.now() - t0) / 1000;
    const v = Number(r.stdout.toString());
    assert.ok(v >= start && v <= start + elapsed + 1, `date printed ${v}`);
    const d = (await sb.isolation()).determinism;
    assert.equal(d.timeStart, start);
    assert.equal(d.randomSeed, false);
    assert.ok(d.notDeterministic.length > 0);
  } finally {
    sb.close();
  }
});

test('deterministicDirs: ls -f is sorted', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'det-'));
  fs.chmodSync(dir, 0o755);
  const names = [];
  for (let i = 0; i < 200; i++) names.push(`n${String((i * 37) % 200).padStart(3, '0')}`);
  for (const n of names) fs.writeFileSync(path.join(dir, n), '');
  const want = ['.', '..', ...names].sort();
  const ls = async (opts) => {
    const sb = new Sandbox({ fsReadable: [...RO, dir], ...opts });
    try {
      return (await sb.run(['ls', '-f', dir])).stdout.toString().split('\n').filter(Boolean);
    } finally {
      sb.close();
    }
  };
  try {
    assert.deepEqual(await ls({ deterministicDirs: true }), want);
    assert.notDeepEqual(await ls({}), want); // the control
  } finally {
    fs.rmSync(dir, { recursive: true });
  }
});

test('bad values are refused by name', () => {
  assert.throws(
    () => new Sandbox({ randomSeed: -1, timeStart: 'yesterday' }),
    (e) => e instanceof PolicyError && e.problems.map((p) => p.field).sort().join() === 'randomSeed,timeStart',
  );
});
