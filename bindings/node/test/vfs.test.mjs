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

// a host directory as the VirtualFS (Python's VirtualFS(directory=path)): the code's
// files land in it, and nothing outside it is reached, through symlinks neither
import nodefs from 'node:fs';
import nodeos from 'node:os';
import nodepath from 'node:path';

for (const isolation of ['process', 'kernel']) {
  test(`a directory-backed VirtualFS at ${isolation}: files land in the directory, symlinks out are refused`, async () => {
    const base = nodefs.mkdtempSync(nodepath.join(nodeos.tmpdir(), 'st-vfsdir-'));
    const dir = nodepath.join(base, 'fs');
    const secret = nodepath.join(base, 'secret.txt');
    nodefs.writeFileSync(secret, 'host secret');
    const fs = new VirtualFS({ '/lib/helper.py': 'def twice(x):\n    return 2 * x\n' }, { directory: dir });
    assert.ok(fs instanceof VirtualFS);
    nodefs.symlinkSync(secret, nodepath.join(dir, 'link.txt'));
    nodefs.symlinkSync(base, nodepath.join(dir, 'up'));
    const sb = sandbox({ timeout: 20, moduleRoot: '/lib' }, { isolation, filesystem: fs });
    try {
      const r = await sb.exec(
        [
          'def err(f):',
          '    try:',
          '        f()',
          "        return 'ok'",
          '    except Exception as e:',
          '        return type(e).__name__',
          "with open('/lib/result.txt', 'w') as f:",
          "    f.write('written')",
          'import helper',
          'n = helper.twice(4)',
          "via_link = err(lambda: open('/link.txt').read())",
          "via_dir = err(lambda: open('/up/secret.txt').read())",
          "def put():\n    with open('/link.txt', 'w') as f:\n        f.write('overwritten')",
          'write_link = err(put)',
          "climb = err(lambda: open('/../../../../etc/hostname').read())",
        ].join('\n'),
      );
      assert.equal(r.error, null, JSON.stringify(r.error));
      assert.equal(r.namespace.n, 8);
      assert.equal(nodefs.readFileSync(nodepath.join(dir, 'lib', 'result.txt'), 'utf8'), 'written');
      assert.deepEqual(
        { l: r.namespace.via_link, d: r.namespace.via_dir, w: r.namespace.write_link, c: r.namespace.climb },
        { l: 'PermissionError', d: 'PermissionError', w: 'PermissionError', c: 'FileNotFoundError' },
      );
      assert.equal(nodefs.readFileSync(secret, 'utf8'), 'host secret');
    } finally {
      sb.close();
      nodefs.rmSync(base, { recursive: true, force: true });
    }
  });
}

test('a directory-backed VirtualFS refuses maxSizeMb and serves the host the same API', () => {
  const base = nodefs.mkdtempSync(nodepath.join(nodeos.tmpdir(), 'st-vfsdir-'));
  try {
    assert.throws(() => new VirtualFS({}, { directory: base, maxSizeMb: 1 }), /in-memory/);
    const fs = new VirtualFS({ '/a/b.txt': 'hi' }, { directory: base });
    assert.deepEqual(fs.list('/', { recursive: true }), ['a', 'a/b.txt']);
    assert.equal(fs.isDir('/a') && fs.isFile('/a/b.txt') && fs.getSize('/a/b.txt') === 2, true);
    fs.rename('/a/b.txt', '/a/c.txt');
    fs.mkdir('/x/y', { parents: true });
    assert.throws(() => fs.rmdir('/a'), (e) => e.name === 'OSError');
    fs.remove('/a/c.txt');
    fs.rmdir('/a');
    assert.deepEqual(fs.list('/', { recursive: true }), ['x', 'x/y']);
    assert.throws(() => serve(fs, 'read', ['/nope']), (e) => e.name === 'FileNotFoundError');
  } finally {
    nodefs.rmSync(base, { recursive: true, force: true });
  }
});
