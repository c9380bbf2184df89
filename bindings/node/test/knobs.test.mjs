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
    assert.deepEqual(p, { aslr: false, hugePages: false, coreDumps: 'off', cpuCores: [cpu], cpuVia: 'sched_setaffinity' });
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
