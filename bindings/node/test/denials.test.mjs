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

// clone i is refused i connects and i inotify watches (the supervisor's), half by a
// child of the clone, and i opens outside the policy (Landlock's: not reported)
const FORK_WORK = `
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
i = CLONE_ID
def refuse(k):
    s = socket.socket(); s.settimeout(1)
    assert s.connect_ex(("10.79.%d.%d" % (i, k), 80)) == 13
    s.close()
    fd = libc.inotify_init1(0)
    assert libc.inotify_add_watch(fd, b"/etc", 0xfff) == -1 and ctypes.get_errno() == 13
    os.close(fd)
    try:
        open("/etc/hostname").close(); raise SystemExit("the open outside the policy worked")
    except PermissionError:
        pass
for k in range(i // 2):
    refuse(k)
pid = os.fork()
if pid == 0:
    for k in range(i // 2, i):
        refuse(k)
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
`;

describe('fork denials', () => {
  test('each clone reports exactly its own denials', async () => {
    const ro = ['/usr', '/lib', '/bin'].concat(fs.existsSync('/lib64') && !fs.lstatSync('/lib64').isSymbolicLink() ? ['/lib64'] : []);
    const mapper = new Sandbox({ fsReadable: ro, netAllow: ['127.0.0.1:9'], timeout: 60 });
    try {
      const clones = await mapper.fork(16, { work: FORK_WORK, python: PY });
      assert.equal(clones.denialsSources.supervisor, 'reported');
      assert.match(clones.denialsSources.landlock, /^not reported/);
      for (const c of clones) {
        assert.ok(c.success, `clone ${c.id}: ${c.stderr}`);
        const counts = {};
        for (const d of c.denials) {
          assert.equal(d.source, 'supervisor');
          if (d.syscall === 'connect') assert.match(d.address, new RegExp(`10\\.79\\.${c.id}\\.`));
          counts[d.syscall] = (counts[d.syscall] ?? 0) + d.count;
        }
        assert.deepEqual(counts, c.id ? { connect: c.id, inotify_add_watch: c.id } : {}, `clone ${c.id}`);
        assert.equal(c.denialsDropped, 0);
      }
    } finally {
      mapper.close();
    }
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
