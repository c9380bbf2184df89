// Issue 10, "also broken": a pipeline reports a stage that could not start or failed;
// an upstream stage ended by SIGPIPE is not a failure.
import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from 'sandtrap';
import { SYSTEM, exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const sb = new Sandbox({ fsReadable: SYSTEM });
after(() => sb.close());

describe('pipeline failures', () => {
  test('a first stage that cannot start fails the pipeline, naming the stage', async () => {
    // as in Python: the pipeline's result says so (it does not reject)
    const res = await sb.cmd(['/no/such/program']).pipe(sb.cmd(['cat'])).run();
    assert.equal(res.success, false, JSON.stringify(res.error));
    assert.equal(res.error?.kind, 'not_found', JSON.stringify(res.error));
    assert.ok(res.error.message.includes('stage 0'), res.error.message);
  });

  test('a failing middle stage fails the pipeline', async () => {
    const res = await sb
      .cmd(['echo', 'x'])
      .pipe(sb.cmd(['sh', '-c', 'cat >/dev/null; exit 3']))
      .pipe(sb.cmd(['cat']))
      .run();
    assert.equal(res.success, false, `stages exited ${res.stages.map((s) => s.exitCode)}`);
  });

  test('yes | head -1 succeeds (SIGPIPE upstream is no failure)', async () => {
    const res = await sb.cmd(['yes']).pipe(sb.cmd(['head', '-1'])).run();
    assert.equal(res.success, true, `stages ${JSON.stringify(res.stages.map((s) => [s.exitCode, s.signal]))}`);
    assert.equal(res.stdout.toString(), 'y\n');
  });
});
