// The seed's configuration object in Node: every policy option reads as a
// read-only property with its default; Protection; comma lists of ports.
import test from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, Protection, MIN_ABI, PolicyError, probe } from '../index.mjs';
import { SYSTEM } from './helpers.mjs';

test('options read as properties, with the defaults of the schema', () => {
  const sb = new Sandbox({ fsReadable: SYSTEM, maxMemory: '256M', netAllowBind: ['8080,8081'] });
  try {
    assert.equal(sb.maxProcesses, 64);
    assert.equal(sb.cleanEnv, false);
    assert.deepEqual(sb.env, {});
    assert.deepEqual(sb.fsWritable, []);
    assert.deepEqual(sb.fsReadable, SYSTEM);
    assert.equal(sb.maxMemory, '256M');
    assert.equal(sb.maxOpenFiles, null);
    assert.equal(sb.onExit, 'commit');
    assert.equal(sb.onError, 'abort');
    assert.equal(sb.allowDegraded, false);
    assert.deepEqual(sb.disable, []);
    assert.equal(sb.maxOutput, 16 << 20);
    assert.deepEqual(sb.netAllowBind, ['8080,8081']);
    // read-only: assigning fails (strict mode), the value stays
    assert.throws(() => {
      sb.maxProcesses = 8;
    }, TypeError);
    assert.throws(() => sb.fsReadable.push('/etc'), TypeError);
    assert.equal(sb.maxProcesses, 64);
  } finally {
    sb.close();
  }
});

test('the default maxProcesses is enforced where the kernel can', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  try {
    const iso = await sb.isolation();
    const lim = iso.limits.maxProcesses;
    if (lim === undefined) {
      assert.ok(iso.degraded.some((d) => d.startsWith('max_processes: the default limit of 64 is not enforced')), iso.degraded);
      return;
    }
    assert.equal(lim.value, 64);
  } finally {
    sb.close();
  }
});

test('Protection names the Landlock protections with their ABI', async () => {
  assert.deepEqual(Object.values(Protection), ['fs', 'fs_refer', 'fs_truncate', 'net_tcp', 'fs_ioctl_dev', 'abstract_unix_socket_scope', 'signal_scope']);
  assert.equal(MIN_ABI[Protection.SIGNAL_SCOPE], 6);
  assert.equal(MIN_ABI[Protection.NET_TCP], 4);
  assert.throws(
    () => new Sandbox({ fsReadable: SYSTEM, allowDegraded: ['signal'] }),
    (e) => e instanceof PolicyError && e.problems.length === 1 && e.problems[0].field === 'allowDegraded' && e.problems[0].message.startsWith('"signal" is not a protection'),
  );
  if (probe().landlockAbi < 6) return;
  const sb = new Sandbox({ fsReadable: SYSTEM, disable: [Protection.SIGNAL_SCOPE], allowDegraded: [Protection.FS_IOCTL_DEV] });
  try {
    assert.deepEqual(sb.disable, ['signal_scope']);
    const iso = await sb.isolation();
    assert.equal(iso.protections.signalScope, 'disabled');
    assert.equal(iso.protections.fsIoctlDev, 'enforced');
    assert.equal(iso.protections.abstractUnixSocketScope, 'enforced');
    assert.deepEqual(iso.landlock.scoped, ['abstract_unix_socket']);
  } finally {
    sb.close();
  }
});

test('memoryBytes() is maxMemory in bytes as the engine reads it, null when unset', async () => {
  for (const [given, want] of [['256M', 256 << 20], ['1.5G', 3 * 2 ** 29], ['2GiB', 2 * 2 ** 30], [1048576, 1048576]]) {
    const sb = new Sandbox({ fsReadable: SYSTEM, maxMemory: given });
    try {
      assert.equal(await sb.memoryBytes(), want, `maxMemory ${given}`);
    } finally {
      sb.close();
    }
  }
  const none = new Sandbox({ fsReadable: SYSTEM });
  try {
    assert.equal(await none.memoryBytes(), null);
  } finally {
    none.close();
  }
});
