// Policy options: every field accepted, bad input rejected with one PolicyError
// that lists every problem (the JavaScript type checks and the engine's own).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  Sandbox,
  SandtrapError,
  PolicyError,
  IsolationUnavailable,
  InvalidRequest,
  Problem,
  confine,
  probe,
} from 'sandtrap';
import { SYSTEM, tmpdir, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

test('every policy field is accepted', async () => {
  const { dir, cleanup } = tmpdir();
  try {
    const work = path.join(dir, 'work');
    fs.mkdirSync(path.join(work, 'denied'), { recursive: true });
    fs.mkdirSync(path.join(work, 'sub'), { recursive: true });
    const sb = new Sandbox({
      fsReadable: SYSTEM,
      fsWritable: [work],
      fsDenied: [path.join(work, 'denied')],
      netAllow: [443, '8443', '*:80'],
      netAllowBind: [8080, '9000-9002'],
      netAllowUdp: false,
      netAllowUnix: false,
      maxMemory: '256M',
      maxProcesses: 32,
      maxOpenFiles: 256,
      maxDisk: 64 * 1024 * 1024,
      maxCpu: 100,
      maxCpuTime: 5.5,
      timeout: 10,
      maxOutput: '1M',
      env: { HELLO: 'world' },
      cleanEnv: true,
      cwd: path.join(work, 'sub'),
      extraAllowSyscalls: ['personality'],
      extraDenySyscalls: ['getcpu'],
      allowDegraded: true,
      // undefined and null mean "not set"
      uid: undefined,
      gid: null,
    });
    const r = await sb.run(['sh', '-c', 'echo $HELLO; pwd; echo x > f; cat f']);
    assert.equal(r.stdout.toString(), `world\n${work}/sub\nx\n`, r.stderr.toString());
    assert.equal(r.success, true);
    sb.close();
  } finally {
    cleanup();
  }
});

test('uid/gid run the program as another user (root only)', { skip: !probe().root && 'needs root' }, async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM, uid: 65534, gid: 65534 });
  const r = await sb.run(['id', '-u']);
  assert.equal(r.stdout.toString().trim(), '65534');
  sb.close();
});

test('bad input: one PolicyError listing every problem', () => {
  const opts = {
    fsReadable: ['/definitely/not/here', 'relative/path'],
    fsWritable: '/tmp', // not an array
    maxMemory: true,
    maxProcesses: 1.5,
    timeout: -1,
    netAllowBind: [70000],
    env: { GOOD: 'x', BAD: 1 },
    cleanEnv: 'yes',
    bogusOption: 1,
    max_memory: '1G', // snake_case: the Python spelling
  };
  assert.throws(
    () => new Sandbox(opts),
    (e) => {
      assert.ok(e instanceof PolicyError && e instanceof SandtrapError && e instanceof Error);
      assert.equal(e.name, 'PolicyError');
      assert.equal(e.code, 'invalid_policy');
      // every value is judged by the engine, its problems named in JavaScript terms
      const want = [
        /^fsWritable: want a list, got a string$/,
        /^maxMemory: want a byte count or a size string like "256M", got a boolean$/,
        /^maxProcesses: want an integer, got a float$/,
        /^env: the value of "BAD" is an integer, not a string$/,
        /^cleanEnv: want true or false, got a string$/,
        /^bogusOption: unknown field$/,
        /^max_memory: unknown field; did you mean maxMemory\?$/,
        // a relative path resolves against the working directory: the problem names the absolute path
        new RegExp(`^fsReadable: ${path.join(process.cwd(), 'relative', 'path').replace(/[/.]/g, '\\$&')}: no such file or directory$`),
        /^netAllowBind: port 70000 out of range/,
        /^timeout: -1 must be a positive number/,
        /\/definitely\/not\/here/,
      ];
      for (const re of want) {
        assert.ok(
          e.problems.some((p) => re.test(p)),
          `no problem matches ${re}:\n  ${e.problems.join('\n  ')}`,
        );
      }
      assert.equal(e.problems.length, want.length, e.problems.join('\n'));
      for (const p of e.problems) assert.ok(e.message.includes(p));
      assert.deepEqual(
        e.problems.filter((p) => p.field === 'maxProcesses').map((p) => ({ ...p })),
        [{ field: 'maxProcesses', message: 'want an integer, got a float' }],
      );
      return true;
    },
  );
});

test('one problem: a one-line message', () => {
  assert.throws(() => new Sandbox({ maxOpenFiles: 'many' }), {
    name: 'PolicyError',
    message: /^invalid policy: maxOpenFiles: want an integer, got a string$/,
  });
});

test('a misspelled option: one {field, message}, as in every binding', () => {
  // tests/vectors/problems.json holds the same case for every binding
  assert.throws(
    () => new Sandbox({ fsReadble: ['/usr'] }),
    (e) => {
      assert.ok(e instanceof PolicyError);
      assert.deepEqual(
        e.problems.map((p) => ({ field: p.field, message: p.message })),
        [{ field: 'fsReadble', message: 'unknown field; did you mean fsReadable?' }],
      );
      assert.ok(e.problems[0] instanceof Problem);
      assert.equal(e.message, 'invalid policy: fsReadble: unknown field; did you mean fsReadable?');
      return true;
    },
  );
});

test('a request the engine refuses: its problems under the option names', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  try {
    await assert.rejects(sb.run(['true'], { maxOutput: -1, cwd: 'rel' }), (e) => {
      assert.ok(e instanceof InvalidRequest);
      assert.deepEqual(
        e.problems.map((p) => ({ ...p })),
        [
          { field: 'maxOutput', message: '-1 is negative' },
          { field: 'cwd', message: 'path "rel" is relative; give an absolute path' },
        ],
      );
      assert.equal(e.message, 'invalid request (2 problems):\n- maxOutput: -1 is negative\n- cwd: path "rel" is relative; give an absolute path');
      return true;
    });
  } finally {
    sb.close();
  }
});

test('options must be a plain object; typos get a suggestion', () => {
  assert.throws(() => new Sandbox('fs'), PolicyError);
  assert.throws(() => new Sandbox([]), PolicyError);
  assert.throws(() => new Sandbox({ fsReadble: ['/usr'] }), /did you mean fsReadable/);
  assert.throws(() => new Sandbox({ fs_readable: ['/usr'] }), /did you mean fsReadable/);
});

test('engine-only checks are reported too', () => {
  const { dir, cleanup } = tmpdir();
  try {
    assert.throws(
      () => new Sandbox({ fsReadable: [dir], fsDenied: ['/'], uid: 1 }),
      (e) => {
        assert.ok(e instanceof PolicyError);
        assert.ok(e.problems.some((p) => /^uid: must be given together with gid$/.test(p)), e.problems.join('\n'));
        assert.ok(e.problems.some((p) => /fsDenied/.test(p)), e.problems.join('\n'));
        return true;
      },
    );
    assert.throws(
      () => new Sandbox({ extraAllowSyscalls: ['ptrace'], extraDenySyscalls: ['ptrace'] }),
      { message: 'invalid policy: extraDenySyscalls: syscall "ptrace" is both allowed and denied' },
    );
  } finally {
    cleanup();
  }
});

test('the error classes and codes', async () => {
  const mod = await import('sandtrap');
  const table = {
    InvalidArgument: 'invalid_argument',
    InvalidRequest: 'invalid_request',
    PolicyError: 'invalid_policy',
    IsolationUnavailable: 'isolation_unavailable',
    NotFound: 'not_found',
    SpawnFailed: 'spawn_failed',
    ForkedChild: 'forked_child',
    SandboxClosed: 'closed',
    InternalError: 'internal',
    AbortError: 'ABORT_ERR',
  };
  for (const [name, code] of Object.entries(table)) {
    const C = mod[name];
    assert.equal(typeof C, 'function', name);
    const e = new C('x');
    assert.ok(e instanceof SandtrapError && e instanceof Error, name);
    assert.equal(e.name, name);
    assert.equal(e.code, code, name);
    assert.equal(C.code, code, name);
  }
  assert.equal(IsolationUnavailable.code, 'isolation_unavailable');
  assert.equal(InvalidRequest.code, 'invalid_request');
});

test('confine() validates before touching the process', () => {
  assert.throws(() => confine({ fsReadable: 'x' }), PolicyError);
  assert.throws(() => confine(new Sandbox({ fsReadable: SYSTEM }), { seccomp: 'yes' }), InvalidRequest);
  assert.throws(() => confine(new Sandbox({ fsReadable: SYSTEM }), { sec: true }), InvalidRequest);
});
