// VirtualFS from Node: the cooperative Python sandbox's files kept in this process,
// served to the worker through fs host calls (docs/protocol.md "coop_open" vfs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { sandbox, VirtualFS } = require('../index.js');
const { serve } = require('../lib/vfs.js');

for (const isolation of ['process', 'kernel']) {
  test(`VirtualFS at ${isolation}: open, imports from it, from main import, the host reads what was written`, async () => {
    const fs = new VirtualFS({ '/data/in.txt': 'hello', '/lib/helper.py': 'def twice(x):\n    return 2 * x\n' });
    const sb = sandbox({ timeout: 20, moduleRoot: '/lib' }, { isolation, filesystem: fs });
    try {
      const r = await sb.exec(
        [
          "text = open('/data/in.txt').read()",
          "with open('/data/result.txt', 'w') as f:",
          "    f.write(text.upper())",
          "with open('/data/in.txt', 'a') as f:",
          "    f.write('!')",
          'import helper',
          'n = helper.twice(21)',
          "with open('/lib/mod2.py', 'w') as f:",
          "    f.write('VALUE = 7\\n')",
          'import mod2',
          'def kept():',
          '    return 5',
        ].join('\n'),
      );
      assert.equal(r.error, null, JSON.stringify(r.error));
      assert.equal(r.namespace.text, 'hello');
      assert.equal(r.namespace.n, 42);
      assert.equal(fs.readText('/data/result.txt'), 'HELLO');
      assert.equal(fs.readText('/data/in.txt'), 'hello!');
      assert.deepEqual(fs.list('/', { recursive: true }), ['data', 'data/in.txt', 'data/result.txt', 'lib', 'lib/helper.py', 'lib/mod2.py']);
      const r2 = await sb.exec('import mod2\nfrom main import kept\nv = mod2.VALUE + kept()');
      assert.equal(r2.error, null, JSON.stringify(r2.error));
      assert.equal(r2.namespace.v, 12);
    } finally {
      sb.close();
    }
  });

  test(`VirtualFS at ${isolation}: the code stays inside it, its errors are Python's`, async () => {
    const fs = new VirtualFS({}, { maxSizeMb: 0.001 });
    const sb = sandbox({ timeout: 20 }, { isolation, filesystem: fs });
    try {
      const r = await sb.exec(
        [
          'def err(f):',
          '    try:',
          '        f()',
          "        return 'ok'",
          '    except Exception as e:',
          '        return type(e).__name__',
          "passwd = err(lambda: open('../../../etc/passwd').read())",
          "missing = err(lambda: open('/nope.txt').read())",
          "isdir = err(lambda: open('/').read())",
          'def put(path, data):',
          "    with open(path, 'wb') as f:",
          '        f.write(data)',
          "big = err(lambda: put('/big.bin', b'x' * 5000))",
          "small = err(lambda: put('/small.txt', b'y'))",
        ].join('\n'),
      );
      assert.equal(r.error, null, JSON.stringify(r.error));
      // ../../../etc/passwd is /etc/passwd of the VirtualFS (absent), never the host's
      assert.deepEqual(
        { passwd: r.namespace.passwd, missing: r.namespace.missing, isdir: r.namespace.isdir, big: r.namespace.big, small: r.namespace.small },
        { passwd: 'FileNotFoundError', missing: 'FileNotFoundError', isdir: 'IsADirectoryError', big: 'OSError', small: 'ok' },
      );
      assert.equal(fs.readText('/small.txt'), 'y');
      assert.equal(fs.exists('/etc/passwd'), false);
    } finally {
      sb.close();
    }
  });
}

test('VirtualFS: the host side checks what the worker asks (hostile arguments)', () => {
  const fs = new VirtualFS({ '/a.txt': 'A' });
  assert.throws(() => serve(fs, 'unlink', ['/a.txt']), { name: 'ValueError' });
  assert.throws(() => serve(fs, 'read', ['/a.txt', 'extra']), { name: 'ValueError' });
  assert.throws(() => serve(fs, 'read', [7]), { name: 'TypeError' });
  assert.throws(() => serve(fs, 'read', ['/a\0b']), { name: 'ValueError' });
  assert.throws(() => serve(fs, 'write', ['/b.txt', 'not bytes', false]), { name: 'TypeError' });
  assert.throws(() => serve(fs, '__proto__', []), { name: 'ValueError' });
  assert.throws(() => serve(fs, 'read', ['/' + 'x'.repeat(5000)]), { name: 'OSError' });
  assert.equal(serve(fs, 'read', ['/../../a.txt']).toString(), 'A');
  assert.deepEqual(serve(fs, 'stat', ['/nope']), null);
  assert.equal(serve(fs, 'stat', ['/'])[0], 'dir');
  serve(fs, 'write', ['/b.txt', new Uint8Array([104, 105]), false]);
  assert.equal(fs.readText('/b.txt'), 'hi');
  assert.throws(() => serve(fs, 'rmdir', ['/']), { name: 'OSError' });
  assert.throws(() => serve(fs, 'rename', ['/nope', '/x']), { name: 'FileNotFoundError' });
  assert.throws(() => new VirtualFS({}, { maxSizeMb: -1 }), TypeError);
  assert.throws(() => sandbox({}, { filesystem: 42 }), /filesystem: want a directory/);
  assert.throws(() => sandbox({ moduleRoot: 'lib' }, {}), /moduleRoot/);
});
