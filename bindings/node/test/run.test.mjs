// Sandbox.run and pipelines: results, options, outcomes, errors.
import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

import * as esm from 'sandtrap';
import { Sandbox, SandtrapError, InvalidRequest, SandboxClosed, probe, version } from 'sandtrap';
import { SYSTEM, tmpdir, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const sb = new Sandbox({ fsReadable: SYSTEM });
after(() => sb.close());

describe('entry points', () => {
  test('ESM and CommonJS export the same objects', () => {
    const cjs = createRequire(import.meta.url)('sandtrap');
    for (const name of ['Sandbox', 'confine', 'probe', 'version', 'SandtrapError', 'PolicyError', 'AbortError']) {
      assert.equal(esm[name], cjs[name], name);
    }
    assert.equal(esm.default, cjs);
  });

  test('version and probe', () => {
    // one version (the repository's VERSION file) for the package and the library it loaded
    const want = fs.readFileSync(new URL('../../../VERSION', import.meta.url), 'utf8').trim();
    const v = version();
    assert.equal(v.binding, want);
    assert.equal(v.library, want);
    assert.equal(v.abi, v.headerAbi);
    const p = probe();
    assert.equal(typeof p.landlockAbi, 'number');
    assert.equal(typeof p.seccomp, 'boolean');
    assert.equal(typeof p.root, 'boolean');
  });
});

describe('run', () => {
  test('result fields', async () => {
    const r = await sb.run(['sh', '-c', 'echo out; echo err >&2']);
    assert.equal(r.success, true);
    assert.equal(r.exitCode, 0);
    assert.equal(r.signal, null);
    assert.ok(Buffer.isBuffer(r.stdout) && Buffer.isBuffer(r.stderr));
    assert.equal(r.stdout.toString(), 'out\n');
    assert.equal(r.stderr.toString(), 'err\n');
    assert.equal(r.stdoutTruncated, false);
    assert.equal(r.stderrTruncated, false);
    assert.equal(r.error, null);
    assert.equal(r.timedOut, false);
    assert.equal(r.cancelled, false);
    assert.equal(typeof r.usage.wallS, 'number');
    assert.equal(typeof r.usage.peakMemory, 'number');
    assert.equal(typeof r.isolation.noNewPrivs, 'boolean');
    assert.ok(r.isolation.treeKill);
  });

  test('exit code and signal', async () => {
    const e = await sb.run(['sh', '-c', 'exit 42']);
    assert.equal(e.success, false);
    assert.equal(e.exitCode, 42);
    assert.equal(e.error, null);
    const s = await sb.run(['sh', '-c', 'kill -TERM $$']);
    assert.equal(s.exitCode, null);
    assert.equal(s.signal, 15);
    assert.equal(s.success, false);
  });

  test('stdin as string and as bytes, binary output', async () => {
    const a = await sb.run(['tr', 'a-z', 'A-Z'], { stdin: 'hello' });
    assert.equal(a.stdout.toString(), 'HELLO');
    const bytes = Buffer.from([0, 1, 2, 255, 0x80]);
    const b = await sb.run(['cat'], { stdin: bytes });
    assert.deepEqual(b.stdout, bytes);
    const c = await sb.run(['cat'], { stdin: new Uint8Array([65, 66]) });
    assert.equal(c.stdout.toString(), 'AB');
  });

  test('env and cwd per run, over the policy', async () => {
    const { dir, cleanup } = tmpdir();
    try {
      const s = new Sandbox({ fsReadable: [...SYSTEM, dir], env: { A: 'policy', B: 'policy' }, cleanEnv: true });
      const r = await s.run(['sh', '-c', 'echo "$A $B $(pwd)"'], { env: { B: 'run' }, cwd: dir });
      assert.equal(r.stdout.toString().trim(), `policy run ${dir}`);
      s.close();
    } finally {
      cleanup();
    }
  });

  test('timeout kills and is reported', async () => {
    const t0 = Date.now();
    const r = await sb.run(['sleep', '30'], { timeout: 0.3 });
    assert.ok(Date.now() - t0 < 5000);
    assert.equal(r.timedOut, true);
    assert.equal(r.success, false);
    assert.equal(r.error.kind, 'timeout');
  });

  test('policy timeout is the default', async () => {
    const s = new Sandbox({ fsReadable: SYSTEM, timeout: 0.3 });
    const r = await s.run(['sleep', '30']);
    assert.equal(r.timedOut, true);
    s.close();
  });

  test('maxOutput truncates', async () => {
    const r = await sb.run(['sh', '-c', 'head -c 100000 /dev/zero'], { maxOutput: 1000 });
    assert.equal(r.stdout.length, 1000);
    assert.equal(r.stdoutTruncated, true);
    assert.equal(r.success, true);
  });

  test('filesystem policy is enforced', async () => {
    const r = await sb.run(['cat', '/etc/hostname']);
    assert.equal(r.success, false);
    assert.match(r.stderr.toString(), /Permission denied/);
  });

  test('a missing program resolves with error.kind not_found (as in Python)', async () => {
    const r = await sb.run(['no-such-program-xyz']);
    assert.equal(r.success, false);
    assert.equal(r.exitCode, null);
    assert.equal(r.error.kind, 'not_found');
    assert.match(r.error.message, /no-such-program-xyz/);
  });

  test('a program outside the policy resolves with error.kind spawn_failed', async () => {
    const { dir, cleanup } = tmpdir();
    try {
      fs.writeFileSync(path.join(dir, 'x.sh'), '#!/bin/sh\necho escaped\n', { mode: 0o755 });
      const r = await sb.run([path.join(dir, 'x.sh')]);
      assert.equal(r.success, false);
      assert.equal(r.error.kind, 'spawn_failed');
      assert.equal(r.stdout.length, 0);
    } finally {
      cleanup();
    }
  });

  test('bad run arguments reject with InvalidRequest listing every problem', async () => {
    await assert.rejects(sb.run([]), InvalidRequest);
    await assert.rejects(sb.run('ls'), InvalidRequest);
    await assert.rejects(sb.run(['a\0b']), /NUL/);
    await assert.rejects(
      sb.run(['echo', 5], { timout: 1, stdin: 5, env: { X: 1 }, signal: 'no' }),
      (e) => {
        assert.ok(e instanceof InvalidRequest);
        assert.equal(e.code, 'invalid_request');
        assert.equal(e.problems.length, 5, e.problems.join('\n'));
        assert.match(e.message, /timout.*did you mean timeout/);
        return true;
      },
    );
  });

  test('a closed sandbox refuses new runs; close is idempotent', async () => {
    const s = new Sandbox({ fsReadable: SYSTEM });
    const inFlight = s.run(['sh', '-c', 'sleep 0.2; echo done']);
    s.close();
    s.close();
    assert.equal(s.closed, true);
    await assert.rejects(s.run(['true']), (e) => e instanceof SandboxClosed && e.code === 'closed');
    // the run started before close() still completes
    assert.equal((await inFlight).stdout.toString(), 'done\n');
  });

  test('isolation report without running', async () => {
    const rep = await sb.isolation();
    assert.equal(typeof rep.noNewPrivs, 'boolean');
    assert.ok('landlock' in rep && 'seccomp' in rep);
  });
});

describe('pipelines', () => {
  test('seed example: data reader | restricted processor', async () => {
    const { dir, cleanup } = tmpdir();
    try {
      fs.writeFileSync(path.join(dir, 'secret.csv'), 'secret,data\n');
      const trusted = new Sandbox({ fsReadable: [...SYSTEM, dir] });
      const restricted = new Sandbox({ fsReadable: SYSTEM });
      const r = await trusted.cmd(['cat', path.join(dir, 'secret.csv')]).pipe(restricted.cmd(['tr', 'a-z', 'A-Z'])).run();
      assert.equal(r.stdout.toString(), 'SECRET,DATA\n');
      assert.equal(r.success, true);
      assert.equal(r.stages.length, 2);
      assert.ok(r.stages.every((s) => s.success));
      // the restricted stage cannot read the data itself
      const direct = await restricted.run(['cat', path.join(dir, 'secret.csv')]);
      assert.equal(direct.success, false);
      trusted.close();
      restricted.close();
    } finally {
      cleanup();
    }
  });

  test('XOA: planner output executed by another sandbox', async () => {
    const planner = new Sandbox({ fsReadable: SYSTEM });
    const executor = new Sandbox({ fsReadable: SYSTEM });
    const r = await planner.cmd(['echo', 'echo from-executor']).pipe(executor.cmd(['sh'])).run();
    assert.equal(r.stdout.toString(), 'from-executor\n');
    planner.close();
    executor.close();
  });

  test('three stages, stdin into the first, stage stderr kept', async () => {
    const r = await sb
      .cmd(['tr', 'a-z', 'A-Z'])
      .pipe(sb.cmd(['sh', '-c', 'cat; echo warn >&2']))
      .pipe(sb.cmd(['wc', '-c']))
      .run({ stdin: 'abc' });
    assert.equal(r.stdout.toString().trim(), '3');
    assert.equal(r.stages[1].stderr.toString(), 'warn\n');
    assert.equal(r.stages[0].stdout.length, 0); // only the last stage's stdout is captured
  });

  test('a stage that cannot start fails the pipeline (error.kind not_found)', async () => {
    const r = await sb.cmd(['no-such-program-xyz']).pipe(sb.cmd(['cat'])).run();
    assert.equal(r.success, false);
    assert.equal(r.error.kind, 'not_found');
    assert.equal(r.failedStage, 0);
    assert.equal(r.stages.length, 2);
  });

  test('a single command runs like run()', async () => {
    const r = await sb.cmd(['echo', 'one'], { env: { X: '1' } }).run();
    assert.equal(r.stdout.toString(), 'one\n');
  });

  test('pipe() type checks', () => {
    assert.throws(() => sb.cmd(['a']).pipe(['b']), TypeError);
    assert.throws(() => sb.cmd([]), InvalidRequest);
  });
});
