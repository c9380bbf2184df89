// result.denials and learn() (issue 14).
import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { Sandbox } from 'sandtrap';
import { SYSTEM, tmpdir, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const PY = '/usr/bin/python3';
const CONNECT = 'import socket,sys\ns=socket.socket()\nsys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))))';

describe('denials', () => {
  const sb = new Sandbox({ fsReadable: SYSTEM, netAllow: ['127.0.0.1:9'], timeout: 30 });
  after(() => sb.close());

  test('a refused connect is in result.denials', async () => {
    const r = await sb.run([PY, '-S', '-c', CONNECT, '10.1.2.3', '80']);
    assert.equal(r.exitCode, 13);
    assert.equal(r.denials.length, 1);
    const d = r.denials[0];
    assert.deepEqual([d.syscall, d.errno, d.errnoNr, d.count, d.source, d.path], ['connect', 'EACCES', 13, 1, 'supervisor', null]);
    assert.match(d.address, /10\.1\.2\.3:80/);
    assert.equal(r.denialsDropped, 0);
    assert.equal(r.denialsSources.supervisor, 'reported');
    assert.match(r.denialsSources.landlock, /^not reported/);
    assert.match(r.denialsSources.seccomp, /^not reported/);
  });

  test('concurrent runs keep their own', async () => {
    const runs = [1, 2, 3, 4].map((i) =>
      sb.run([PY, '-S', '-c', `import socket\ns=socket.socket()\nfor _ in range(${10 * i}): s.connect_ex(('10.9.0.${i}', 80))\n`]));
    const results = await Promise.all(runs);
    results.forEach((r, j) => {
      const i = j + 1;
      assert.equal(r.denials.length, 1, JSON.stringify(r.denials));
      assert.equal(r.denials[0].count, 10 * i);
      assert.match(r.denials[0].address, new RegExp(`10\\.9\\.0\\.${i}:80`));
    });
  });
});

describe('learn', () => {
  test('learn, then run with the learned policy; without one learned path it fails', async () => {
    const { dir, cleanup } = tmpdir();
    after(cleanup);
    const data = path.join(dir, 'data.txt');
    fs.writeFileSync(data, '42\n');
    const out = path.join(dir, 'out');
    fs.mkdirSync(out);
    fs.chmodSync(out, 0o777);
    const server = net.createServer((c) => c.end());
    await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
    const port = server.address().port;
    const script = `import socket\nv = open(${JSON.stringify(data)}).read()\nopen(${JSON.stringify(path.join(out, 'r.txt'))}, 'w').write(v)\ns = socket.socket(); s.connect(('127.0.0.1', ${port})); print('ok')\n`;
    const argv = [PY, '-S', '-c', script];
    try {
      const sb = new Sandbox({ fsReadable: ['/usr'], fsWritable: [dir], timeout: 30 });
      const lr = await sb.learn(argv);
      sb.close();
      assert.equal(lr.result.success, false); // the connect was refused while learning
      assert.ok(lr.policy.fsReadable.includes(data), JSON.stringify(lr.policy));
      assert.deepEqual(lr.policy.fsWritable, [out]);
      assert.deepEqual(lr.policy.netAllow, [`127.0.0.1:${port}`]);
      assert.ok(lr.profile.includes(`fs_writable = [\n  "${out}",\n]`), lr.profile);
      assert.ok(lr.observed.read.includes(data));
      fs.unlinkSync(path.join(out, 'r.txt'));
      const good = new Sandbox({ ...lr.policy, timeout: 30 });
      const r = await good.run(argv);
      good.close();
      assert.equal(r.success, true, r.stderr.toString());
      assert.equal(r.stdout.toString(), 'ok\n');
      for (const [field, drop] of [['fsReadable', data], ['fsWritable', out], ['netAllow', `127.0.0.1:${port}`]]) {
        const pol = { ...lr.policy, [field]: lr.policy[field].filter((p) => p !== drop), timeout: 30 };
        const bad = new Sandbox(pol);
        const rb = await bad.run(argv);
        bad.close();
        assert.equal(rb.success, false, `ran without ${field} ${drop}`);
      }
    } finally {
      server.close();
    }
  });
});
