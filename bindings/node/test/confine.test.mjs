// confine(): irreversible, so every case runs in a child Node process.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { probe } from 'sandtrap';
import { tmpdir, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const p = probe();
const noLandlock = p.landlockAbi < 1 && 'needs Landlock';

// Run `code` in `node -e` (CommonJS, `sandtrap` = the package); returns parsed JSON
// printed by the child on its last stdout line.
function child(code, env = {}) {
  const r = spawnSync(process.execPath, ['-e', code], {
    cwd: pkg,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 30000,
  });
  assert.equal(r.status, 0, `child failed (${r.status ?? r.signal}):\n${r.stdout}\n${r.stderr}`);
  const lines = r.stdout.trim().split('\n');
  return JSON.parse(lines[lines.length - 1]);
}

const prelude = `
const fs = require('node:fs');
const sandtrap = require('./index.js');
const tryRead = (p) => { try { fs.readFileSync(p); return 'OK'; } catch (e) { return e.code; } };
const tryWrite = (p) => { try { fs.writeFileSync(p, 'x'); return 'OK'; } catch (e) { return e.code; } };
`;

test('after confine to /usr, /lib and a tmp dir, /etc/hostname is EACCES', { skip: noLandlock }, () => {
  const { dir, cleanup } = tmpdir();
  try {
    fs.writeFileSync(path.join(dir, 'inside.txt'), 'inside');
    const out = child(`${prelude}
      const dir = ${JSON.stringify(dir)};
      const before = tryRead('/etc/hostname');
      sandtrap.confine(new sandtrap.Sandbox({ fsReadable: ['/usr', '/lib'], fsWritable: [dir] }));
      console.log(JSON.stringify({
        before,
        after: tryRead('/etc/hostname'),
        inside: tryRead(dir + '/inside.txt'),
        write: tryWrite(dir + '/new.txt'),
        writeOutside: tryWrite('/tmp/sandtrap-confine-' + process.pid),
        usr: tryRead('/usr/bin/env'),
      }));
    `);
    assert.deepEqual(out, { before: 'OK', after: 'EACCES', inside: 'OK', write: 'OK', writeOutside: 'EACCES', usr: 'OK' });
  } finally {
    cleanup();
  }
});

test('confine with policy options instead of a Sandbox, plus seccomp', { skip: noLandlock || (!p.seccomp && 'needs seccomp') }, () => {
  const { dir, cleanup } = tmpdir();
  try {
    const out = child(`${prelude}
      sandtrap.confine({ fsReadable: ['/usr', '/lib'], fsWritable: [${JSON.stringify(dir)}] }, { seccomp: true });
      // the event loop and the thread pool still work under the filter
      fs.promises.readFile('/usr/bin/env').then(() => {
        const status = fs.readFileSync('/proc/self/task/' + process.pid + '/status', 'utf8');
        console.log(JSON.stringify({ after: tryRead('/etc/hostname'), seccomp: status.match(/^Seccomp:\\s*(\\d)/m)[1] }));
      });
    `);
    assert.deepEqual(out, { after: 'EACCES', seccomp: '2' });
  } finally {
    cleanup();
  }
});

test('confine stacks: a second confine narrows further', { skip: noLandlock }, () => {
  const { dir, cleanup } = tmpdir();
  try {
    fs.mkdirSync(path.join(dir, 'a'));
    fs.writeFileSync(path.join(dir, 'a', 'f'), 'a');
    fs.writeFileSync(path.join(dir, 'g'), 'g');
    const out = child(`${prelude}
      const dir = ${JSON.stringify(dir)};
      sandtrap.confine({ fsReadable: ['/usr', '/lib', dir] });
      const first = [tryRead(dir + '/g'), tryRead(dir + '/a/f')];
      sandtrap.confine({ fsReadable: ['/usr', '/lib', dir + '/a'] });
      console.log(JSON.stringify({ first, second: [tryRead(dir + '/g'), tryRead(dir + '/a/f')] }));
    `);
    assert.deepEqual(out, { first: ['OK', 'OK'], second: ['EACCES', 'OK'] });
  } finally {
    cleanup();
  }
});

test('a confined process can still run sandboxes (within its own rules)', { skip: noLandlock }, () => {
  const out = child(`${prelude}
    sandtrap.confine({ fsReadable: ['/usr', '/lib', '/bin', '/proc', '/dev', '/sys'], fsWritable: ['/tmp'] });
    const sb = new sandtrap.Sandbox({ fsReadable: ['/usr', '/lib', '/bin'] });
    sb.run(['echo', 'inside']).then((r) => console.log(JSON.stringify({ out: r.stdout.toString(), host: tryRead('/etc/hostname') })),
      (e) => console.log(JSON.stringify({ error: e.code + ': ' + e.message })));
  `);
  assert.deepEqual(out, { out: 'inside\n', host: 'EACCES' });
});
