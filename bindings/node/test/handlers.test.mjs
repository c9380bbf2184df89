// policyFn and syscall handlers: the seed's examples (Node equivalents), only
// tightening, exception policies, deferred (Promise) handlers, abort.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Sandbox, Handler, NotifAction, ExceptionPolicy, InvalidRequest, PolicyContext, presets } from '../index.mjs';
import { SYSTEM } from './helpers.mjs';

const { PathDenyHandler, COMMON_PATH_SYSCALLS } = presets;

function tmp() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'st-h-'));
  fs.chmodSync(d, 0o755);
  return d;
}

test('seed: policyFn denies curl by argv and locks the network down', async () => {
  const onEvent = (event, ctx) => {
    if (event.syscall === 'execve' && event.argvContains('curl')) return true; // deny with EPERM
    if (event.syscall === 'execve') ctx.restrictNetwork([]); // lock down after startup
    return 0; // allow
  };
  const sb = new Sandbox({ fsReadable: ['/usr', '/lib'], policyFn: onEvent });
  const r = await sb.run(['/bin/sh', '-c', 'echo ok; c=cu; ${c}rl --version; echo $?']);
  assert.equal(r.stdout.toString(), 'ok\n126\n');
  sb.close();
});

test('several restrictNetwork calls intersect by membership', async () => {
  // 127.0.0.0/8 and 127.0.0.1 leave 127.0.0.1 (as strings they left nothing)
  const onEvent = (event, ctx) => {
    if (event.syscall === 'execve') {
      ctx.restrictNetwork(['127.0.0.0/8']);
      ctx.restrictNetwork(['127.0.0.1']);
    }
    return 0;
  };
  const code = "import socket\nfor h in ('127.0.0.1', '127.0.0.2'):\n s=socket.socket()\n"
    + ' try:\n  s.connect((h, 9))\n except OSError as e:\n  print(h, e.errno)\n';
  const sb = new Sandbox({ fsReadable: ['/usr', '/lib'], netAllow: ['127.0.0.0/8:9'], policyFn: onEvent });
  const r = await sb.run(['/usr/bin/python3', '-c', code]);
  assert.equal(r.stdout.toString(), '127.0.0.1 111\n127.0.0.2 13\n');
  sb.close();
});

test('restrictMaxMemory lowers the sandbox cgroup for the run', async () => {
  const alloc = ['/usr/bin/python3', '-c', "b = bytearray(200 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ok')"];
  const lower = (event, ctx) => {
    if (event.syscall === 'execve' && event.argv?.[0] === '/usr/bin/python3') ctx.restrictMaxMemory(64 << 20);
    return 0;
  };
  const sb = new Sandbox({ fsReadable: ['/usr', '/lib'], maxMemory: '512M', policyFn: lower });
  const r = await sb.run(alloc);
  if (String(r.isolation.limits.maxMemory.via).startsWith('cgroup')) {
    assert.notEqual(r.stdout.toString(), 'ok\n');
    assert.equal(r.success, false);
    const sb2 = new Sandbox({ fsReadable: ['/usr', '/lib'], maxMemory: '512M', policyFn: () => 0 });
    assert.equal((await sb2.run(alloc)).stdout.toString(), 'ok\n');
    sb2.close();
  } else {
    assert.match(JSON.stringify(r.denials), /no cgroup/); // unprivileged: the exception policy refused
  }
  sb.close();
});

test('restrictPidNetwork restricts that process; denyPath refuses a file by name, symlink and hard link', async () => {
  const code = "import socket\ns=socket.socket()\ntry:\n s.connect(('127.0.0.1', 9))\nexcept OSError as e:\n print(e.errno)\n";
  const sb = new Sandbox({ fsReadable: ['/usr', '/lib'], netAllow: ['127.0.0.1:9'], policyFn: (e, ctx) => {
    if (e.syscall === 'execve') ctx.restrictPidNetwork(e.pid, []);
    return 0;
  } });
  const r = await sb.run(['/usr/bin/python3', '-c', code]);
  assert.equal(r.stdout.toString(), '13\n');
  assert.match(JSON.stringify(r.denials), /restrict_pid_network/);
  sb.close();
  assert.throws(() => new PolicyContext().restrictPidNetwork(0, []), RangeError);
  const dir = tmp();
  fs.chmodSync(dir, 0o755);
  fs.writeFileSync(path.join(dir, 'secret'), 'SECRET');
  fs.writeFileSync(path.join(dir, 'other'), 'other');
  fs.symlinkSync('secret', path.join(dir, 'link'));
  fs.linkSync(path.join(dir, 'secret'), path.join(dir, 'hard'));
  const read = "import sys\ndef t(p):\n try:\n  return open(p).read()\n except OSError as e:\n  return str(e.errno)\nprint(*[t(p) for p in sys.argv[1:]])\n";
  const sb2 = new Sandbox({ fsReadable: ['/usr', '/lib', dir], policyFn: (e, ctx) => {
    if (e.syscall === 'execve') ctx.denyPath(path.join(dir, 'secret'));
    return 0;
  } });
  const r2 = await sb2.run(['/usr/bin/python3', '-c', read, ...['secret', 'link', 'hard', 'other'].map((n) => path.join(dir, n))]);
  assert.equal(r2.stdout.toString(), '13 13 13 other\n');
  sb2.close();
  assert.throws(() => new PolicyContext().denyPath('relative'), TypeError);
});

test('seed: PathDenyHandler on COMMON_PATH_SYSCALLS', async () => {
  const home = tmp();
  fs.mkdirSync(path.join(home, '.ssh'));
  fs.writeFileSync(path.join(home, '.ssh', 'id_rsa'), 'KEY');
  fs.writeFileSync(path.join(home, 'notes.txt'), 'notes');
  const sb = new Sandbox({ fsReadable: ['/usr', '/lib', home] });
  const deny = new PathDenyHandler({ deny: ['*/.ssh/*', '*/.aws/*'] });
  const r = await sb.runWithHandlers(['/bin/cat', path.join(home, 'notes.txt'), path.join(home, '.ssh', 'id_rsa')],
    COMMON_PATH_SYSCALLS.map((s) => [s, deny]));
  assert.equal(r.stdout.toString(), 'notes');
  assert.match(r.stderr.toString(), /Operation not permitted/);
  sb.close();
});

class Fixed extends Handler {
  constructor(act, policy = ExceptionPolicy.KILL) {
    super();
    this.act = act;
    this.policy = policy;
  }
  get onException() {
    return this.policy;
  }
  handle() {
    return this.act;
  }
}

test('continue cannot loosen Landlock; a handler on a denied syscall is refused', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const r = await sb.runWithHandlers(['/bin/cat', '/etc/hostname'], [['openat', new Fixed(NotifAction.continue_())]]);
  assert.equal(r.exitCode, 1);
  assert.match(r.stderr.toString(), /Permission denied/);
  await assert.rejects(sb.runWithHandlers(['/bin/true'], [['ptrace', new Fixed(NotifAction.continue_())]]),
    (e) => e instanceof InvalidRequest && /deny list/.test(e.message));
  sb.close();
});

test('returns, injectBytes, exception policies', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  let r = await sb.runWithHandlers(['/usr/bin/python3', '-c', 'import os; print(os.getppid())'], [['getppid', new Fixed(NotifAction.returns(4242))]]);
  assert.equal(r.stdout.toString(), '4242\n');
  class Inject extends Handler {
    handle(ctx) {
      return ctx.path === '/etc/virtual' ? NotifAction.injectBytes(Buffer.from('virtual\n')) : NotifAction.continue_();
    }
  }
  r = await sb.runWithHandlers(['/bin/cat', '/etc/virtual'], [['openat', new Inject()]]);
  assert.equal(r.stdout.toString(), 'virtual\n');
  class Boom extends Handler {
    constructor(p) {
      super();
      this.p = p;
    }
    get onException() {
      return this.p;
    }
    handle(ctx) {
      if (ctx.argv && ctx.argv[0] === '/bin/echo') throw new Error('boom');
      return NotifAction.continue_();
    }
  }
  const cmd = ['/bin/sh', '-c', '/bin/echo x'];
  r = await sb.runWithHandlers(cmd, [['execve', new Boom(ExceptionPolicy.DENY_EIO)]]);
  assert.match(r.stderr.toString(), /Input\/output error/);
  r = await sb.runWithHandlers(cmd, [['execve', new Boom(ExceptionPolicy.KILL)]]);
  assert.ok(r.exitCode === 137 || r.signal === 9, JSON.stringify(r.exitCode));
  r = await sb.runWithHandlers(cmd, [['execve', new Boom(ExceptionPolicy.CONTINUE)]]);
  assert.equal(r.stdout.toString(), 'x\n');
  sb.close();
});

test('a slow async handler does not block another thread\'s trapped call', async () => {
  const d = tmp();
  fs.writeFileSync(path.join(d, 'slow'), 's');
  fs.writeFileSync(path.join(d, 'fast'), 'f');
  class Slow extends Handler {
    async handle(ctx) {
      if ((ctx.path ?? '').endsWith('/slow')) await new Promise((r) => setTimeout(r, 1000));
      return NotifAction.continue_();
    }
  }
  const code = `import threading,time
def slow():
 open(${JSON.stringify(path.join(d, 'slow'))}).read()
t=threading.Thread(target=slow); t.start(); time.sleep(0.2)
a=time.monotonic(); open(${JSON.stringify(path.join(d, 'fast'))}).read(); b=time.monotonic()
t.join(); print(round(b-a,3))
`;
  const sb = new Sandbox({ fsReadable: [...SYSTEM, d] });
  const r = await sb.runWithHandlers(['/usr/bin/python3', '-c', code], [['openat', new Slow()]]);
  assert.equal(r.exitCode, 0, r.stderr.toString());
  assert.ok(Number(r.stdout.toString()) < 0.5, r.stdout.toString());
  sb.close();
});

test('an aborted run is killed (fail closed)', async () => {
  const sb = new Sandbox({ fsReadable: SYSTEM });
  const ac = new AbortController();
  class Wait extends Handler {
    handle(ctx) {
      if (ctx.argv && ctx.argv[0] === '/bin/sleep') setTimeout(() => ac.abort(), 50);
      return NotifAction.continue_();
    }
  }
  const t = Date.now();
  await assert.rejects(sb.runWithHandlers(['/bin/sh', '-c', '/bin/sleep 30'], [['execve', new Wait()]], { signal: ac.signal }),
    (e) => e.name === 'AbortError');
  assert.ok(Date.now() - t < 5000);
  sb.close();
});

test('PathDenyHandler judges both paths of rename, link, symlink (path2)', async () => {
  const dir = tmp();
  fs.chmodSync(dir, 0o777);
  const secret = path.join(dir, 'secret');
  fs.mkdirSync(secret, { mode: 0o777 });
  fs.chmodSync(secret, 0o777);
  fs.writeFileSync(path.join(secret, 's'), 's', { mode: 0o666 });
  fs.writeFileSync(path.join(dir, 'a'), 'a', { mode: 0o666 });
  fs.chmodSync(path.join(dir, 'a'), 0o666);
  fs.chmodSync(path.join(secret, 's'), 0o666);
  const seen = [];
  class Record extends Handler {
    handle(ctx) {
      seen.push([ctx.syscall, ctx.readPath(), ctx.readPath2()]);
      return NotifAction.continue_();
    }
  }
  const deny = new PathDenyHandler({ deny: [`${secret}/*`], errno: 13 });
  const script = `
import os, sys
T = sys.argv[1]
def t(f):
    try:
        f(); return "ok"
    except OSError as e:
        return str(e.errno)
print(t(lambda: os.rename(T + "/a", T + "/secret/a")), t(lambda: os.link(T + "/secret/s", T + "/stolen")),
      t(lambda: os.symlink("x", T + "/secret/l")), t(lambda: os.rename(T + "/a", T + "/b")),
      t(lambda: os.link(T + "/b", T + "/c")), t(lambda: os.symlink("b", T + "/l")))
`;
  const sb = new Sandbox({ fsReadable: [...SYSTEM, '/etc'], fsWritable: [dir] });
  const r = await sb.runWithHandlers(['/usr/bin/python3', '-c', script, dir],
    ['rename', 'link', 'symlink'].flatMap((s) => [[s, new Record()], [s, deny]]));
  sb.close();
  assert.equal(r.stdout.toString().trim(), '13 13 13 ok ok ok', r.stderr.toString());
  assert.deepEqual(seen.find((e) => e[0] === 'symlink' && e[1] === 'b'), ['symlink', 'b', path.join(dir, 'l')]);
  assert.ok(!fs.existsSync(path.join(dir, 'stolen')));
});
