// The copy-on-write workdir: dryRun, changes, branch actions.
import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import { Sandbox, BranchAction, InvalidRequest, PolicyError } from 'sandtrap';
import { SYSTEM, tmpdir, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

function tree(root) {
  const lines = [];
  const walk = (d) => {
    for (const name of fs.readdirSync(d).sort()) {
      const p = path.join(d, name);
      const st = fs.lstatSync(p);
      const rel = path.relative(root, p);
      if (st.isDirectory()) {
        lines.push(`${rel}/ ${st.mode}`);
        walk(p);
      } else lines.push(`${rel} ${st.mode} ${crypto.createHash('sha256').update(fs.readFileSync(p)).digest('hex')}`);
    }
  };
  walk(root);
  return lines.join('\n');
}

function workdir() {
  const t = tmpdir();
  after(t.cleanup);
  const w = path.join(t.dir, 'w');
  fs.mkdirSync(path.join(w, 'dir'), { recursive: true });
  fs.writeFileSync(path.join(w, 'edit.txt'), 'old\n');
  fs.writeFileSync(path.join(w, 'gone.txt'), 'bye\n');
  fs.writeFileSync(path.join(w, 'dir', 'a'), 'a\n');
  return w;
}

const SCRIPT = 'cd "$W" && echo new > added && echo more >> edit.txt && rm gone.txt && mv dir renamed';
const WANT = [
  { kind: 'A', path: 'added' },
  { kind: 'D', path: 'dir' },
  { kind: 'D', path: 'dir/a' },
  { kind: 'M', path: 'edit.txt' },
  { kind: 'D', path: 'gone.txt' },
  { kind: 'A', path: 'renamed' },
  { kind: 'A', path: 'renamed/a' },
];

describe('workdir', () => {
  test('dryRun lists every change and leaves the workdir identical', async () => {
    const w = workdir();
    const before = tree(w);
    const sb = new Sandbox({ fsReadable: SYSTEM, fsWritable: [w], workdir: w, env: { W: w } });
    try {
      const r = await sb.dryRun(['sh', '-c', SCRIPT]);
      assert.equal(r.success, true, r.stderr.toString());
      assert.deepEqual(r.changes, WANT);
      assert.equal(r.result.branch, 'aborted');
      assert.equal(tree(w), before);
    } finally {
      sb.close();
    }
  });

  test('commit on success by default, keep then commit or abort', async () => {
    const w = workdir();
    const sb = new Sandbox({ fsReadable: SYSTEM, fsWritable: [w], workdir: w, env: { W: w }, onError: BranchAction.KEEP });
    try {
      const r = await sb.run(['sh', '-c', SCRIPT]);
      assert.equal(r.branch, 'committed');
      assert.deepEqual([...r.committed].sort((a, b) => (a.path < b.path ? -1 : 1)), WANT);
      assert.equal(fs.readFileSync(path.join(w, 'added'), 'utf8'), 'new\n');
      const before = tree(w);
      const k = await sb.run(['sh', '-c', 'echo x > "$W/kept"; exit 4']);
      assert.equal(k.branch, 'kept');
      assert.ok(k.branchId > 0);
      assert.equal(tree(w), before);
      const c = await sb.commit(k);
      assert.deepEqual(c, { committed: [{ kind: 'A', path: 'kept' }], commitRefused: [], error: null });
      await assert.rejects(sb.commit(k), InvalidRequest);
      await assert.rejects(sb.abort(r), InvalidRequest); // never kept
    } finally {
      sb.close();
    }
  });

  test('branch actions are checked; dryRun needs a workdir', async () => {
    assert.throws(() => new Sandbox({ fsReadable: SYSTEM, workdir: '/tmp', onExit: 'merge' }), PolicyError);
    const sb = new Sandbox({ fsReadable: SYSTEM });
    try {
      await assert.rejects(sb.dryRun(['true']), /workdir/);
    } finally {
      sb.close();
    }
  });

  test('maxDisk is a quota on what the run adds', async () => {
    const w = workdir();
    const sb = new Sandbox({ fsReadable: SYSTEM, fsWritable: [w], workdir: w, maxDisk: '1M' });
    try {
      const r = await sb.dryRun(['sh', '-c', `for i in $(seq 400); do echo x > "${w}/f$i" || exit 1; done`]);
      assert.equal(r.success, false);
      assert.equal(r.error.kind, 'disk_limit');
    } finally {
      sb.close();
    }
  });
});

describe('chroot', () => {
  function rootfs() {
    const t = tmpdir();
    after(t.cleanup);
    fs.chmodSync(t.dir, 0o755);
    const root = path.join(t.dir, 'root');
    for (const d of ['usr', 'etc', 'dev', 'proc', 'work', 'ro']) fs.mkdirSync(path.join(root, d), { recursive: true });
    for (const l of ['bin', 'lib', 'lib64']) fs.symlinkSync(`usr/${l}`, path.join(root, l));
    const work = path.join(t.dir, 'work');
    fs.mkdirSync(work, { mode: 0o777 });
    fs.chmodSync(work, 0o777);
    fs.writeFileSync(path.join(work, 'f'), 'orig');
    return { root, work };
  }

  test('fsMount (read-write) and fsMountRo (read-only), cwd inside', async () => {
    const { root, work } = rootfs();
    const sb = new Sandbox({ chroot: root, fsMount: { '/work': work }, fsMountRo: { '/usr': '/usr', '/ro': work }, fsReadable: ['/'], cwd: '/work' });
    try {
      const r = await sb.run(['sh', '-c', 'pwd; echo new > /work/added; echo x > /ro/f; cat /ro/added']);
      assert.equal(r.stdout.toString(), '/work\nnew\n');
      assert.match(r.stderr.toString(), /Read-only file system/);
      assert.equal(fs.readFileSync(path.join(work, 'f'), 'utf8'), 'orig');
    } finally {
      sb.close();
    }
  });

  test('a mapping with a mode suffix is refused', () => {
    const { root, work } = rootfs();
    assert.throws(() => new Sandbox({ chroot: root, fsMount: { '/work': `${work}:ro` } }), /fsMount: .*mode suffix/);
  });
});
