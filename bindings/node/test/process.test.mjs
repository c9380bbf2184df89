// Processes you can talk to: popen, streams, wait/kill/pause, exit reasons (issue 16).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { once } from 'node:events';
import { Sandbox, SandboxProcess, NotFound, InvalidRequest, InvalidState, ProcessFailed } from 'sandtrap';
import { SYSTEM, exitIfStuck, processesByCmdline } from './helpers.mjs';

exitIfStuck(after);

const sleepArg = () => `${30 + Math.floor(Math.random() * 1e6) / 1e6}`;
const until = async (pred, ms = 5000) => {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (pred()) return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return false;
};

test('cat round-trips through piped stdin and stdout, line by line', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const p = await sb.popen(['cat']);
  assert.ok(p instanceof SandboxProcess);
  assert.equal(fs.readFileSync(`/proc/${p.pid}/cmdline`, 'latin1'), 'cat\0');
  const lines = [];
  p.stdout.on('data', (b) => lines.push(b.toString()));
  p.stdin.write('one\n');
  assert.ok(await until(() => lines.join('') === 'one\n'));
  p.stdin.end('two\n');
  const [code, signal] = await once(p, 'exit');
  assert.equal(code, 0);
  assert.equal(signal, null);
  await once(p, 'close');
  assert.equal(lines.join(''), 'one\ntwo\n');
  const r = await p.wait();
  assert.equal(r.reason, 'exited');
  assert.equal(r.check(), r);
  sb.close();
});

test('kill during a blocked read ends it and kills the tree (setsid too)', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const arg = sleepArg();
  const p = await sb.popen(['sh', '-c', `(setsid sleep ${arg} &); sleep ${arg}`], { stdio: ['ignore', 'pipe', 'inherit'] });
  assert.equal(p.stdin, null);
  assert.ok(await until(() => processesByCmdline(`sleep ${arg}`).length === 2));
  const ended = once(p.stdout, 'end');
  p.stdout.resume();
  assert.equal(p.kill(), true);
  p.kill();
  await ended;
  const r = await p.wait();
  assert.equal(r.reason, 'killed');
  assert.equal(p.signalCode, 'SIGKILL');
  assert.deepEqual(processesByCmdline(`sleep ${arg}`), []);
  assert.equal(p.kill(), false);
  assert.throws(() => r.check(), ProcessFailed);
  sb.close();
});

test('close() kills the sandbox\'s processes', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const arg = sleepArg();
  const p = await sb.popen(['sh', '-c', `(setsid sleep ${arg} &); sleep ${arg}`], { stdio: 'ignore' });
  assert.ok(await until(() => processesByCmdline(`sleep ${arg}`).length === 2));
  sb.close();
  const r = await p.wait();
  assert.ok(['cancelled', 'killed', 'closed'].includes(r.reason), r.reason);
  assert.ok(await until(() => processesByCmdline(`sleep ${arg}`).length === 0));
});

test('a timer keeps ticking during a 2 s streamed run', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  let ticks = 0;
  let maxGap = 0;
  let last = Date.now();
  const iv = setInterval(() => {
    const now = Date.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
    ticks++;
  }, 50);
  const p = await sb.popen(['sh', '-c', 'for i in 1 2 3 4 5 6 7 8; do head -c 1000000 /dev/zero; sleep 0.25; done']);
  let n = 0;
  for await (const chunk of p.stdout) n += chunk.length;
  const r = await p.wait();
  clearInterval(iv);
  sb.close();
  assert.equal(n, 8000000);
  assert.equal(r.success, true);
  assert.ok(ticks >= 30, `only ${ticks} ticks`);
  assert.ok(maxGap < 300, `the event loop stalled for ${maxGap} ms`);
});

test('wait with a timeout, pause and resume, capture', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const p = await sb.popen(['sleep', '30'], { stdio: 'ignore' });
  assert.equal(await p.wait({ timeout: 0.1 }), null);
  await p.pause();
  await p.resume();
  p.kill();
  assert.equal((await p.wait()).reason, 'killed');
  const c = await sb.popen(['sh', '-c', 'echo o; echo e >&2'], { stdio: ['ignore', 'capture', 'capture'] });
  const r = await c.wait();
  assert.equal(r.stdout.toString(), 'o\n');
  assert.equal(r.stderr.toString(), 'e\n');
  sb.close();
});

test('start failures reject; bad modes list every problem', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  await assert.rejects(sb.popen(['no-such-program-xyz']), NotFound);
  await assert.rejects(sb.popen(['true'], { stdio: ['capture', 'bogus', 3.5] }), (e) => {
    assert.ok(e instanceof InvalidRequest);
    assert.deepEqual(e.problems.map((p) => p.field).sort(), ['stderr', 'stdin', 'stdout']);
    return true;
  });
  sb.close();
});

test('reasons and check() on run results', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const r = await sb.run(['sh', '-c', 'echo boom >&2; exit 3']);
  assert.equal(r.reason, 'exited');
  assert.throws(() => r.check(), (e) => e instanceof ProcessFailed && e.result === r && /status 3.*boom/.test(e.message));
  assert.equal((await sb.run(['sh', '-c', 'kill -TERM $$'])).reason, 'signaled');
  assert.equal((await sb.run(['sleep', '5'], { timeout: 0.2 })).reason, 'timeout');
  assert.ok(!Object.keys(r).includes('check'));
  sb.close();
});

test('the sandbox\'s own process: spawn, pid, wait, kill', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  assert.equal(sb.pid, null);
  assert.throws(() => sb.wait(), InvalidState);
  const p = await sb.spawn(['sleep', '30']);
  assert.equal(sb.pid, p.pid);
  await assert.rejects(sb.spawn(['true']), InvalidState);
  await sb.pause();
  await sb.resume();
  sb.kill();
  assert.equal((await sb.wait()).reason, 'killed');
  await sb.spawn(['true']);
  assert.equal((await sb.wait()).success, true);
  sb.close();
});

test('create() parks the program until start()', async () => {
  const dir = fs.mkdtempSync('/tmp/st-create-');
  const sb = new Sandbox({ fsReadable: SYSTEM, fsWritable: [dir] });
  await assert.rejects(sb.start(), InvalidState);
  const p = await sb.create(['sh', '-c', `echo x > ${dir}/ran`]);
  assert.equal(sb.pid, p.pid);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(fs.existsSync(`${dir}/ran`), false);
  await sb.start();
  assert.equal((await sb.wait()).success, true);
  assert.equal(fs.readFileSync(`${dir}/ran`, 'utf8'), 'x\n');
  await assert.rejects(p.start(), InvalidState);
  sb.close();
  fs.rmSync(dir, { recursive: true });
});

test('gather: named producers feed one consumer; pipeline stdout to an fd', async () => {
  const a = new Sandbox({ fsReadable: SYSTEM });
  const c = new Sandbox({ fsReadable: SYSTEM });
  const r = await a.cmd(['echo', 'print(1)']).as('code')
    .and(a.cmd(['echo', '1 2 3']).as('data'))
    .pipe(c.cmd(['sh', '-c', 'echo "$SANDTRAP_GATHER"; cat <&3; cat']))
    .run();
  assert.equal(r.success, true);
  assert.equal(r.stdout.toString(), 'code:3,data:0\nprint(1)\n1 2 3\n');
  assert.equal(r.stages.length, 3);
  const f = `/tmp/st-gather-${process.pid}`;
  const fd = fs.openSync(f, 'w');
  const p = await a.cmd(['echo', 'hi']).pipe(c.cmd(['tr', 'a-z', 'A-Z'])).run({ stdout: fd });
  fs.closeSync(fd);
  assert.equal(p.success, true);
  assert.equal(fs.readFileSync(f, 'utf8'), 'HI\n');
  fs.rmSync(f);
  const { Pipeline } = await import('sandtrap');
  await assert.rejects(new Pipeline([a.cmd(['true'])]).run(), /at least two stages/);
  assert.equal((await a.cmd(['true']).run()).success, true);
  a.close();
  c.close();
});
