// loadProfile / policyFromDict / profileArgv: thin wrappers of the engine's loader.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Sandbox, loadProfile, policyFromDict, profileArgv, PolicyError, NotFound } from '../index.mjs';

const PROFILE = `
[program]
exec = "/bin/echo"
args = ["from", "profile"]
clean_env = true

[filesystem]
fs_readable = ["/usr", "/lib"]

[limits]
max_memory = "64M"
`;

test('a saved profile loads, converts to options and runs', async () => {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'sandtrap-prof-'));
  const saved = process.env.XDG_CONFIG_HOME;
  process.env.XDG_CONFIG_HOME = home;
  try {
    fs.mkdirSync(path.join(home, 'sandtrap', 'profiles'), { recursive: true });
    fs.writeFileSync(path.join(home, 'sandtrap', 'profiles', 'echo.toml'), PROFILE);
    const prof = loadProfile('echo');
    assert.deepEqual(prof.filesystem, { fs_readable: ['/usr', '/lib'] });
    assert.deepEqual(loadProfile(path.join(home, 'sandtrap', 'profiles', 'echo.toml')), prof);
    const opts = policyFromDict(prof);
    assert.deepEqual(opts, { cleanEnv: true, fsReadable: ['/usr', '/lib'], maxMemory: '64M' });
    const argv = profileArgv(prof);
    assert.deepEqual(argv, ['/bin/echo', 'from', 'profile']);
    const r = await new Sandbox(opts).run(argv);
    assert.equal(r.stdout.toString(), 'from profile\n');
    assert.throws(() => loadProfile('nope'), NotFound);
  } finally {
    if (saved === undefined) delete process.env.XDG_CONFIG_HOME;
    else process.env.XDG_CONFIG_HOME = saved;
    fs.rmSync(home, { recursive: true, force: true });
  }
});

test('every problem with file, line and key', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandtrap-prof-'));
  const f = path.join(dir, 'bad.toml');
  fs.writeFileSync(f, '[filesytem]\nx = 1\n[limits]\nmax_memory = [1]\nfs_readable = ["/usr"]\n');
  try {
    assert.throws(
      () => loadProfile(f),
      (e) => {
        assert.ok(e instanceof PolicyError);
        assert.deepEqual(
          e.problems.map((p) => [p.line, p.key]),
          [[1, 'filesytem'], [4, 'limits.max_memory'], [5, 'limits.fs_readable']],
        );
        assert.equal(e.problems[0].field, `${f}:1: filesytem`);
        assert.match(e.problems[2].message, /belongs in \[filesystem\]/);
        return true;
      },
    );
    assert.throws(() => policyFromDict({ limits: { max_procs: 3 } }), (e) => e instanceof PolicyError && /max_processes/.test(e.message));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
