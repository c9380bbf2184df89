// bench_run.mjs: median wall time of `run(["/bin/true"])` through sandtrap against
// child_process.spawnSync("/bin/true") in the same process, and, when the package
// is installed somewhere, the same command through @anthropic-ai/sandbox-runtime.
//
//   node bench/node/bench_run.mjs [N] [--srt=DIR] [--json]
//
// N defaults to 200 (after 20 warm-up runs of each). --srt=DIR points at a
// directory whose node_modules holds @anthropic-ai/sandbox-runtime (install it
// with `npm install @anthropic-ai/sandbox-runtime` in a throwaway directory);
// without it that line says "not installed".
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';

const here = path.dirname(fileURLToPath(import.meta.url));
const { Sandbox, probe, version } = await import(path.join(here, '..', '..', 'bindings', 'node', 'index.mjs'));

const args = process.argv.slice(2);
const N = Number(args.find((a) => /^\d+$/.test(a)) ?? 200);
const WARM = 20;
const json = args.includes('--json');
const srtDir = args.find((a) => a.startsWith('--srt='))?.slice(6) ?? process.env.SANDTRAP_BENCH_SRT;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function timeIt(fn) {
  for (let i = 0; i < WARM; i++) await fn();
  const xs = [];
  for (let i = 0; i < N; i++) {
    const t = performance.now();
    await fn();
    xs.push(performance.now() - t);
  }
  return median(xs);
}

const results = {};

// Baseline: a plain spawn of the same binary from this process.
results.spawnSync = await timeIt(() => {
  const r = spawnSync('/bin/true');
  if (r.status !== 0) throw new Error('spawnSync /bin/true failed');
});

// sandtrap with a typical policy (read-only system dirs).
const sb = new Sandbox({ fsReadable: ['/usr', '/lib', '/bin'] });
let iso;
results.sandtrap = await timeIt(async () => {
  const r = await sb.run(['/bin/true']);
  if (!r.success) throw new Error(`sandtrap run failed: ${JSON.stringify(r.error)}`);
  iso = r.isolation;
});

// For context: the asynchronous spawn (what a Promise-based caller would use).
results.spawnAsync = await timeIt(
  () =>
    new Promise((resolve, reject) => {
      const c = spawn('/bin/true', { stdio: 'ignore' });
      c.once('error', reject);
      c.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`exit ${code}`))));
    }),
);

// Interleave once more so that a drift (CPU frequency, cache) shows in both.
results.spawnSync2 = await timeIt(() => spawnSync('/bin/true'));
const base = Math.min(results.spawnSync, results.spawnSync2);

// @anthropic-ai/sandbox-runtime, when installed.
let srt = { status: 'not installed (pass --srt=DIR)' };
if (srtDir) {
  try {
    const req = createRequire(path.join(path.resolve(srtDir), 'noop.js'));
    const mod = await import(req.resolve('@anthropic-ai/sandbox-runtime'));
    const Mgr = mod.SandboxManager ?? mod.default?.SandboxManager;
    if (!Mgr) throw new Error(`no SandboxManager export (exports: ${Object.keys(mod).join(', ')})`);
    await Mgr.initialize({
      network: { allowedDomains: [], deniedDomains: [] },
      filesystem: { denyRead: [], allowWrite: [], denyWrite: [] },
    });
    const wrapped = await Mgr.wrapWithSandbox('/bin/true');
    const once = () => {
      const r = spawnSync('/bin/sh', ['-c', wrapped]);
      if (r.status !== 0) throw new Error(`exit ${r.status}: ${String(r.stderr).slice(0, 300)}`);
    };
    once();
    // wrapWithSandbox per call as a user of the library would do, plus the spawn
    const t = await timeIt(async () => {
      const w = await Mgr.wrapWithSandbox('/bin/true');
      const r = spawnSync('/bin/sh', ['-c', w]);
      if (r.status !== 0) throw new Error(`exit ${r.status}`);
    });
    results.sandboxRuntime = t;
    srt = { status: 'ok', wrapped: wrapped.slice(0, 200) };
    await Mgr.reset?.();
  } catch (e) {
    srt = { status: `did not run: ${e.message.split('\n')[0]}` };
  }
}

// bubblewrap, which @anthropic-ai/sandbox-runtime runs on Linux (without the
// network proxy and the seccomp helper it adds): a lower bound for that package.
let bwrap = null;
const bw = spawnSync('bwrap', ['--ro-bind', '/', '/', '--dev', '/dev', '--unshare-all', '--die-with-parent', '/bin/true']);
if (!bw.error && bw.status === 0) {
  results.bwrap = await timeIt(() => spawnSync('bwrap', ['--ro-bind', '/', '/', '--dev', '/dev', '--unshare-all', '--die-with-parent', '/bin/true']));
  bwrap = 'ok';
} else {
  bwrap = bw.error ? `not available (${bw.error.code})` : `failed: ${String(bw.stderr).trim().slice(0, 200)}`;
}

sb.close();

const p = probe();
const out = {
  n: N,
  node: process.version,
  sandtrap: version(),
  kernel: { landlockAbi: p.landlockAbi, seccomp: p.seccomp, root: p.root, cgroup: p.cgroup?.version ?? null },
  treeKill: iso?.treeKill,
  medianMs: Object.fromEntries(Object.entries(results).map(([k, v]) => [k, +v.toFixed(3)])),
  ratio: +(results.sandtrap / base).toFixed(2),
  sandboxRuntimeRatio: results.sandboxRuntime ? +(results.sandboxRuntime / base).toFixed(2) : null,
  sandboxRuntime: srt.status,
  bwrapRatio: results.bwrap ? +(results.bwrap / base).toFixed(2) : null,
  bwrap,
};
if (json) {
  console.log(JSON.stringify(out));
} else {
  console.log(`median of ${N} runs of /bin/true (node ${process.version}, tree kill: ${out.treeKill})`);
  console.log(`  child_process.spawnSync     ${base.toFixed(3)} ms`);
  console.log(`  child_process.spawn (async) ${results.spawnAsync.toFixed(3)} ms   (context)`);
  console.log(`  sandtrap Sandbox.run        ${results.sandtrap.toFixed(3)} ms   ratio ${out.ratio}x vs spawnSync (target <= 2x)`);
  if (results.sandboxRuntime !== undefined) {
    console.log(`  @anthropic-ai/sandbox-runtime ${results.sandboxRuntime.toFixed(3)} ms   ratio ${out.sandboxRuntimeRatio}x`);
  } else {
    console.log(`  @anthropic-ai/sandbox-runtime ${srt.status}`);
  }
  if (results.bwrap !== undefined) {
    console.log(`  bwrap --unshare-all (what sandbox-runtime wraps on Linux) ${results.bwrap.toFixed(3)} ms   ratio ${out.bwrapRatio}x`);
  } else {
    console.log(`  bwrap ${bwrap}`);
  }
}
