// The process knobs in Node (Python's test_knobs.py has the attacks): cpuCores,
// noHugePages, noRandomizeMemory and noCoredump reach the run and the report.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';

import { Sandbox, PolicyError } from 'sandtrap';
import { exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const RO = ['/usr', '/lib', '/bin', '/etc', '/proc'];

test('the knobs reach every process of the run and the isolation report', async () => {
  const cpu = os.cpus().length - 1;
  const sb = new Sandbox({ fsReadable: RO, cpuCores: [cpu], noHugePages: true, noRandomizeMemory: true, noCoredump: true });
  try {
    const r = await sb.run(['sh', '-c', "grep -E '^(Cpus_allowed_list|THP_enabled):' /proc/self/status; grep '\\[stack\\]' /proc/self/maps"]);
    const out = r.stdout.toString();
    assert.match(out, new RegExp(`Cpus_allowed_list:\\s+${cpu}\\n`));
    assert.match(out, /THP_enabled:\s+0/);
    const again = (await sb.run(['sh', '-c', "grep '\\[stack\\]' /proc/self/maps"])).stdout.toString();
    assert.equal(again.split(' ')[0], out.split('\n')[2].split(' ')[0], 'the same stack address without randomization');
    const p = (await sb.isolation()).process;
    // a cpuset cgroup where the host's cgroup has one (root here), else the affinity
    const via = p.cpuVia;
    assert.ok(['sched_setaffinity', 'cpuset_cgroup_v1', 'cpuset_cgroup_v2'].includes(via), via);
    assert.deepEqual(p, { aslr: false, hugePages: false, coreDumps: 'off', cpuCores: [cpu], cpuVia: via });
  } finally {
    sb.close();
  }
});

test('cpuCores refuses CPUs this process cannot use, with every problem', () => {
  assert.throws(
    () => new Sandbox({ fsReadable: RO, cpuCores: [5000, 'x'] }),
    (e) => e instanceof PolicyError && e.problems.length === 2 && e.problems.every((p) => p.field === 'cpuCores'),
  );
  assert.throws(
    () => new Sandbox({ fsReadable: RO, cpuCores: [1023] }),
    (e) => e instanceof PolicyError && e.problems[0].field === 'cpuCores' && /1023 is not one this process may run on/.test(e.message),
  );
});

test('numCpus is what the run sees; noSupervisor runs without a supervisor', async () => {
  const sb = new Sandbox({ fsReadable: [...RO, '/sys'], numCpus: 1 });
  try {
    const r = await sb.run(['sh', '-c', 'nproc; cat /sys/devices/system/cpu/online; grep -c ^processor /proc/cpuinfo']);
    const p = (await sb.isolation()).process;
    assert.equal(p.numCpus, 1);
    const [nproc, online, procs] = r.stdout.toString().trim().split('\n');
    assert.equal(nproc, '1');
    if ((p.cpuFiles || []).includes('/sys/devices/system/cpu/online')) assert.equal(online, String(p.cpuCores[0]));
    if ((p.cpuFiles || []).includes('/proc/cpuinfo')) assert.equal(procs, '1');
  } finally {
    sb.close();
  }
  assert.throws(
    () => new Sandbox({ fsReadable: RO, numCpus: os.cpus().length + 1 }),
    (e) => e instanceof PolicyError && e.problems[0].field === 'numCpus' && /a run sees only CPUs it can run on/.test(e.message),
  );
  const ns = new Sandbox({ fsReadable: RO, noSupervisor: true });
  try {
    const sc = (await ns.isolation()).seccomp;
    assert.equal(sc.noSupervisor, true);
    assert.ok(sc.refused.includes('inotify_add_watch'), sc.refused);
    assert.equal((await ns.run(['/bin/true'])).exitCode, 0);
  } finally {
    ns.close();
  }
  assert.throws(
    () => new Sandbox({ fsReadable: RO, noSupervisor: true, netAllow: ['10.0.0.0/8:22'] }),
    (e) => e instanceof PolicyError && e.problems[0].field === 'netAllow' && /noSupervisor|no_supervisor/.test(e.message),
  );
  assert.throws(
    () => new Sandbox({ fsReadable: RO, noSupervisor: true, policyFn: () => null }),
    (e) => e instanceof PolicyError && e.problems[0].field === 'policyFn' && /noSupervisor turns off/.test(e.message),
  );
  assert.throws(
    () => new Sandbox({ fsReadable: RO, gpuDevices: ['all', 1] }),
    (e) => e instanceof PolicyError && e.problems[0].field === 'gpuDevices',
  );
});
