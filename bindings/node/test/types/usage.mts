// Typed usage of the ESM entry point; checked by `tsc --noEmit` (never run).
import sandtrap, {
  VirtualFS,
  sandbox,
  Sandbox,
  confine,
  probe,
  version,
  SandtrapError,
  PolicyError,
  AbortError,
  NotFound,
  type RunResult,
  type Denial,
  type LearnResult,
  type PipelineResult,
  type SandboxOptions,
  Problem,
  Protection,
  MIN_ABI,
} from 'sandtrap';

const options: SandboxOptions = {
  fsReadable: ['/usr', '/lib', '/bin'],
  fsWritable: ['/tmp/work'],
  maxMemory: '256M',
  maxProcesses: 10,
  netAllow: [443, 'example.com:443'],
  netAllowBind: [8080, '9000-9005'],
  env: { A: 'b' },
  cleanEnv: true,
  timeout: 30,
};

export async function main(): Promise<void> {
  const sb = new Sandbox(options);
  const id: number = sb.id;
  // every option reads as a read-only property, with its default
  const procs: number = sb.maxProcesses;
  const mem: number | string | null = sb.maxMemory;
  const ro: string[] = sb.fsReadable;
  const degraded: boolean | Protection[] = sb.allowDegraded;
  const sig: Protection = Protection.SIGNAL_SCOPE;
  const sigAbi: number = MIN_ABI[sig];
  const strict = new Sandbox({ allowDegraded: [Protection.SIGNAL_SCOPE], disable: ['fs_ioctl_dev'] });
  // @ts-expect-error read-only
  sb.maxProcesses = 8;
  // @ts-expect-error not a protection
  new Sandbox({ disable: ['signal'] });
  void procs, mem, ro, degraded, sigAbi, strict;
  const r: RunResult = await sb.run(['python3', '-c', "print('hello')"], { timeout: 30, stdin: 'x' });
  const out: Buffer = r.stdout;
  const code: number | null = r.exitCode;
  if (r.error) {
    const kind: string = r.error.kind;
    void kind;
  }
  const wall: number | undefined = r.usage?.wallS;
  const tk: string | undefined = r.isolation?.treeKill;
  const d: Denial | undefined = r.denials[0];
  const where: string | null | undefined = d?.path ?? d?.address;
  const dropped: number = r.denialsDropped;
  const supervised: string | undefined = r.denialsSources['supervisor'];
  const lr: LearnResult = await sb.learn(['cat', '/etc/hostname']);
  const learned = new Sandbox({ ...lr.policy, timeout: 30 });
  const toml: string = lr.profile;
  void where, dropped, supervised, learned, toml;
  // each fork clone's own denials, and what they report
  const clones = await sb.fork(2, { work: 'print(CLONE_ID)' });
  const cd: Denial | undefined = clones[0]?.denials[0];
  const cdropped: number | undefined = clones[0]?.denialsDropped;
  const csources: string | undefined = clones.denialsSources['supervisor'];
  void cd, cdropped, csources;

  const ac = new AbortController();
  try {
    await sb.run(['sleep', '30'], { signal: ac.signal, env: { X: '1' }, cwd: '/tmp', maxOutput: '1M' });
  } catch (e) {
    if (e instanceof AbortError) {
      const res = e.result;
      console.log(e.code, res?.cancelled);
    } else if (e instanceof NotFound || e instanceof SandtrapError) {
      console.log(e.code, e.problems.join(', '));
    }
  }

  const other = new Sandbox({ fsReadable: ['/usr'] });
  const p: PipelineResult = await sb.cmd(['cat', '/data']).pipe(other.cmd(['tr', 'a-z', 'A-Z'])).run({ stdin: Buffer.from('x') });
  const stages: RunResult[] = p.stages;

  try {
    new Sandbox({ maxMemory: '1G' });
  } catch (e) {
    if (e instanceof PolicyError) {
      const first: Problem | undefined = e.problems[0];
      const field: string | undefined = first?.field;
      const text: string | undefined = first?.message;
      console.log(e.problems.join('\n'), field, text);
    }
  }

  const features = probe();
  const abi: number = features.landlockAbi;
  const v: string = version().library;
  confine(sb, { seccomp: false });
  confine({ fsReadable: ['/usr'] });
  await sb.isolation();
  sb.close();
  other[Symbol.dispose]();
  void [id, out, code, wall, tk, stages, abi, v, sandtrap.Sandbox];
}

// @ts-expect-error: unknown option
new Sandbox({ fsReadble: ['/usr'] });
// @ts-expect-error: wrong type
new Sandbox({ maxProcesses: '10' });
// @ts-expect-error: numCpus is a number
new Sandbox({ numCpus: '2' });
// @ts-expect-error: argv is a list of strings
void new Sandbox().run('ls');

// the cooperative Python sandbox over a VirtualFS (kept in this process)
export async function pythonOverVirtualFS(): Promise<string> {
  const fs = new VirtualFS({ '/lib/helper.py': 'X = 1\n' }, { maxSizeMb: 1 });
  const py = sandbox({ timeout: 5, moduleRoot: '/lib' }, { isolation: 'process', filesystem: fs });
  await py.exec('import helper');
  // aexec: top-level await; aborting the signal stops the code
  const ac = new AbortController();
  const ar = await py.aexec('async def f():\n    return 1\nx = await f()', { signal: ac.signal, echo: 'last' });
  const ns: Record<string, unknown> = ar.namespace;
  void ns;
  // @ts-expect-error: code is a string
  void py.aexec(42);
  fs.write('/out.txt', 'text', { append: true });
  const state: Buffer = await py.snapshot();
  sandbox({}, { isolation: 'kernel', state, keepState: true }).close();
  py.close();
  return fs.readText('/out.txt') + fs.list('/', { recursive: true }).join(',');
}
// @ts-expect-error: a VirtualFS's files are strings or bytes
new VirtualFS({ '/a': 1 });

// the two-path calls' second copy (path2)
export function twoPaths(ctx: sandtrap.HandlerCtx): string {
  const first: string | null = ctx.readPath();
  const second: string | null = ctx.readPath2(256);
  const all: (string | null)[] = ctx.paths();
  // @ts-expect-error: path2 is read-only
  ctx.path2 = 'x';
  return `${first} ${second} ${all.length} ${ctx.path2 ?? ''}`;
}
