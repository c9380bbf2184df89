// Shared helpers of the Node test suite.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** Read-only system directories most test commands need. */
export const SYSTEM = ['/usr', '/lib', '/bin'];

/** Open file descriptors of this process. */
export function fdCount() {
  return fs.readdirSync('/proc/self/fd').length;
}

/** Threads of this process. */
export function threadCount() {
  return fs.readdirSync('/proc/self/task').length;
}

/** Pids whose parent is this process (zombies included). */
export function childPids(ppid = process.pid) {
  const out = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
      // pid (comm) state ppid …; comm may contain spaces and parentheses
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(rest[1]) === ppid) out.push(Number(e));
    } catch {}
  }
  return out;
}

/** Pids whose command line (NULs as spaces) is exactly `cmdline`. */
export function processesByCmdline(cmdline) {
  const out = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const c = fs.readFileSync(`/proc/${e}/cmdline`, 'latin1').replace(/\0/g, ' ').trimEnd();
      if (c === cmdline) out.push(Number(e));
    } catch {}
  }
  return out;
}

/** Pids whose environment holds NAME=value (finds a test's own sandboxed processes). */
export function processesWithEnv(name, value) {
  const needle = `${name}=${value}`;
  const out = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try {
      const env = fs.readFileSync(`/proc/${e}/environ`, 'latin1').split('\0');
      if (env.includes(needle)) out.push(Number(e));
    } catch {}
  }
  return out;
}

/** A process that is gone or a zombie counts as dead. */
export function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Poll `fn` until it returns a truthy value or `ms` passed; returns the last value. */
export async function waitFor(fn, ms = 2000, step = 20) {
  const end = Date.now() + ms;
  let v = fn();
  while (!v && Date.now() < end) {
    await sleep(step);
    v = fn();
  }
  return v;
}

/** A fresh temporary directory (mode 0755), removed by the returned cleanup. */
export function tmpdir(prefix = 'sandtrap-node-', base = os.tmpdir()) {
  const dir = fs.mkdtempSync(path.join(base, prefix));
  fs.chmodSync(dir, 0o755);
  return { dir, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

/**
 * Fail loudly instead of hanging: if an engine call never returns, the pending
 * native work keeps the process alive after the last test. Call once per file
 * (with node:test's `after`).
 */
export function exitIfStuck(after, ms = 5000) {
  after(() => {
    setTimeout(() => {
      process.stderr.write(`sandtrap test: still busy ${ms} ms after the last test (an engine call never returned?)\n`);
      process.exit(1);
    }, ms).unref();
  });
}

/** Reject when `p` is not settled within `ms` (an engine call that hangs). */
export function deadline(p, ms, what = 'operation') {
  let t;
  return Promise.race([
    p,
    new Promise((_, reject) => {
      t = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(t));
}
