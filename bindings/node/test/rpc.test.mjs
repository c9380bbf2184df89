// Host objects from Node (Python's RpcProxyMarker/rpc_handlers and policy.module(obj,
// name=)): the object stays here, the worker's proxy calls it through rpc host calls,
// and every call is judged here as well as by the engine.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { sandbox, rpcProxy, InvalidArgument } = require('../index.js');

class Ledger {
  constructor() {
    this.rows = [];
  }
  add(x) {
    this.rows.push(x);
    return this.rows.length;
  }
  _private() {
    return 'private';
  }
}

for (const isolation of ['process', 'kernel']) {
  test(`host objects at ${isolation}: a live object and a handler, each call checked here`, async () => {
    const ledger = new Ledger();
    const calls = [];
    const sb = sandbox(
      { timeout: 20, objects: { ledger } },
      { isolation, rpcHandlers: { cache: (method, args, kwargs) => { calls.push([method, args, kwargs]); return { method, n: args.length }; } } },
    );
    try {
      const r = await sb.exec("import ledger\nn = ledger.add(5)\nm = ledger.add([1, 'x'])\nv = c.get('k', ttl=3)\nbig = 'z' * 100", {
        namespace: { c: rpcProxy('cache', { methods: ['get'] }) },
        keep: ['n', 'm', 'v', 'big'],
      });
      assert.equal(r.error, null, JSON.stringify(r.error));
      assert.deepEqual([r.namespace.n, r.namespace.m, r.namespace.v], [1, 2, { method: 'get', n: 1 }]);
      assert.deepEqual(ledger.rows, [5, [1, 'x']]);
      assert.deepEqual(calls, [['get', ['k'], { ttl: 3 }]]);
      assert.equal(r.sizes.big, 102);
      assert.deepEqual(Object.keys(r.namespace).sort(), ['big', 'm', 'n', 'v']);
      for (const [code, type] of [
        ['ledger._private()', 'StAttributeDenied'],
        ['ledger.rows', 'AttributeError'],
        ['c.put(1)', 'AttributeError'],
      ]) {
        const e = (await sb.exec(code)).error;
        assert.equal(e?.type, type, `${code}: ${JSON.stringify(e)}`);
      }
      assert.equal(calls.length, 1);
      assert.deepEqual(ledger.rows, [5, [1, 'x']]);
    } finally {
      sb.close();
    }
  });
}

test('markers and handlers are checked at the door', async () => {
  assert.throws(() => rpcProxy('grant:ledger'), InvalidArgument);
  assert.throws(() => rpcProxy('x', { methods: ['_secret'] }), InvalidArgument);
  assert.throws(() => sandbox({}, { isolation: 'process', rpcHandlers: { 'grant:x': () => 1 } }), InvalidArgument);
  const sb = sandbox({ timeout: 20 }, { isolation: 'process' });
  try {
    await assert.rejects(sb.exec('x = 1', { namespace: { c: rpcProxy('nobody') } }), InvalidArgument);
  } finally {
    sb.close();
  }
});
