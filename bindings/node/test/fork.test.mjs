// COW-fork map-reduce from Node with Python-source init/work.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Sandbox } from '../index.mjs';

const SYS = ['/usr', '/lib', '/bin'];

test('fork + reduce: the seed example with Python source', async () => {
  const data = fs.mkdtempSync(path.join(os.tmpdir(), 'st-data-'));
  fs.writeFileSync(path.join(data, 'numbers.txt'), Array.from({ length: 100 }, (_, i) => i).join(' '));
  const mapper = new Sandbox({ fsReadable: [...SYS, data] });
  const reducer = new Sandbox({ fsReadable: SYS, cleanEnv: true }); // python3 from the system PATH
  const seen = [];
  const clones = await mapper.fork(4, {
    init: `data = [int(x) for x in open(${JSON.stringify(path.join(data, 'numbers.txt'))}).read().split()]`,
    work: 'print(sum(data[CLONE_ID::4]))',
    onClone: (c) => seen.push(c.id),
  });
  assert.deepEqual(seen.sort(), [0, 1, 2, 3]);
  assert.deepEqual(clones.map((c) => c.stdout.toString()), ['1200\n', '1225\n', '1250\n', '1275\n']);
  const r = await reducer.reduce(['python3', '-c', 'import sys; print(sum(int(l) for l in sys.stdin))'], clones);
  assert.equal(r.stdout.toString(), '4950\n');
  // the reducer holds none of the mapper's access
  const denied = await reducer.run(['cat', path.join(data, 'numbers.txt')]);
  assert.match(denied.stderr.toString(), /Permission denied/);
  mapper.close();
  reducer.close();
});

test('fork: a failing clone is reported on its own', async () => {
  const sb = new Sandbox({ fsReadable: SYS });
  const clones = await sb.fork(3, { work: 'import os\nif CLONE_ID == 1: raise SystemExit(5)\nprint(os.environ["CLONE_ID"])' });
  assert.deepEqual(clones.map((c) => c.exitCode), [0, 5, 0]);
  assert.equal(clones[2].stdout.toString(), '2\n');
  sb.close();
});
