// State across turns from Node: snapshot() is the namespace as source plus data (the
// state map's msgpack bytes, opaque here), {state} rebuilds it in a fresh worker,
// {keepState} keeps it across a worker restart (docs/protocol.md "coop_exec").
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { sandbox } = require('../index.js');
const { decode } = require('@msgpack/msgpack');

const CODE = [
  'class Point:',
  '    def __init__(self, x, y):',
  '        self.x, self.y = x, y',
  '    def norm(self):',
  '        return (self.x ** 2 + self.y ** 2) ** 0.5',
  'def area(r):',
  '    return 3 * r * r',
  'pt = Point(3, 4)',
  "table = {1: 'one', 2: 'two'}",
  'n = 5',
].join('\n');

for (const [from, to] of [['process', 'kernel'], ['kernel', 'process']]) {
  test(`state: a snapshot at ${from} rebuilds functions, classes, instances and int-keyed dicts at ${to}`, async () => {
    const a = sandbox({ timeout: 20 }, { isolation: from });
    let state;
    try {
      assert.equal((await a.exec(CODE)).error, null);
      state = await a.snapshot();
    } finally {
      a.close();
    }
    assert.ok(Buffer.isBuffer(state));
    const map = decode(state, { mapKeyConverter: (k) => k });
    assert.equal(map.version, 2);
    assert.match(map.source, /class Point/);
    const b = sandbox({ timeout: 20 }, { isolation: to, state });
    try {
      const r = await b.exec("res = [area(2), pt.norm(), table[1], sorted(table), n, type(pt).__name__]");
      assert.equal(r.error, null, JSON.stringify(r.error));
      // table's keys stayed ints (a JavaScript object would have made them strings)
      assert.deepEqual(r.namespace.res, [12, 5, 'one', [1, 2], 5, 'Point']);
    } finally {
      b.close();
    }
  });
}

test('state: keepState survives a worker restart; without it a restart resets the namespace', async () => {
  for (const keepState of [true, false]) {
    const sb = sandbox({ timeout: 20 }, { isolation: 'kernel', keepState });
    try {
      assert.equal((await sb.exec(CODE)).error, null);
      assert.equal((await sb.exec('m = Point(6, 8)\nn = n + 1')).error, null);
      const timer = setTimeout(() => sb.cancel(), 500);
      const killed = await sb.exec('while True:\n    pass');
      clearTimeout(timer);
      assert.equal(killed.error.type, 'StCancelled');
      const r = await sb.exec('res = [area(1), pt.norm(), m.norm(), n]');
      assert.equal(r.restarted, true);
      if (keepState) {
        assert.equal(r.error, null, JSON.stringify(r.error));
        assert.deepEqual(r.namespace.res, [3, 5, 10, 6]);
      } else {
        assert.equal(r.error.type, 'NameError');
      }
    } finally {
      sb.close();
    }
  }
});

test('state: what is not a snapshot is refused', async () => {
  assert.throws(() => sandbox({}, { state: { version: 1 } }), /state: want the bytes snapshot\(\) returned/);
  const sb = sandbox({ timeout: 5 }, { isolation: 'process', state: Buffer.from('not msgpack') });
  try {
    await assert.rejects(sb.exec('x = 1'), /state \(bin\) must be one msgpack-encoded map/);
  } finally {
    sb.close();
  }
  // a hostile state is checked like code: it cannot reach what code cannot
  const { encode } = require('@msgpack/msgpack');
  const evil = Buffer.from(encode({ version: 1, source: "x = ().__class__.__bases__[0].__subclasses__()", data: {}, dropped: [] }));
  const sb2 = sandbox({ timeout: 5 }, { isolation: 'kernel', state: evil });
  try {
    const r = await sb2.exec('y = 1');
    assert.equal(r.error.type, 'StAttributeDenied');
  } finally {
    sb2.close();
  }
});
