#!/usr/bin/env node
// Builds the addon and its library from source. No install script runs it: the
// published package carries a prebuilt linux-x64 addon (prebuilds/, see pack.js)
// and installs without running anything. It runs:
//   - in a checkout of the repository: `npm install` (the "prepare" script), `npm
//     run build` (--force) and before `npm test`;
//   - in an installed package, as its from-source fallback on other platforms:
//     `npm explore sandtrap -- npm run build`.
// Steps, each skipped when its output is fresh:
//   1. the Go library:  make -C <engine> lib, where <engine> is this package's own
//      engine/ (the sources pack.js puts in the tarball) or, in a checkout, the
//      repository root — nothing else: it never runs a Makefile of the project that
//      installed it;
//   2. the addon:       node-gyp rebuild (only when missing or older than its sources);
//      --nodedir only when node-gyp has no headers of this Node but the Node
//      installation carries them (e.g. Debian's /usr/include/node): offline;
//   3. libsandtrap.so.0 copied next to build/Release/sandtrap.node, where the
//      addon's $ORIGIN rpath finds it.
// Environment: SANDTRAP_SKIP_MAKE=1 skips step 1; SANDTRAP_NODEDIR (or npm's
// --nodedir) chooses the headers; SANDTRAP_REBUILD=1 is --force.
'use strict';

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const pkgDir = path.resolve(__dirname, '..');
const releaseDir = path.join(pkgDir, 'build', 'Release');
const addon = path.join(releaseDir, 'sandtrap.node');
const SONAME = 'libsandtrap.so.0';
const libDst = path.join(releaseDir, SONAME);
const force = process.argv.includes('--force') || process.env.SANDTRAP_REBUILD === '1';

/** @param {string} msg */
function log(msg) {
  process.stderr.write(`sandtrap: ${msg}\n`);
}

/**
 * @param {string} cmd
 * @param {string[]} args
 * @param {import('node:child_process').SpawnSyncOptions} [opts]
 */
function run(cmd, args, opts = {}) {
  log(`${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { stdio: ['ignore', 2, 2], cwd: pkgDir, ...opts });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (exit ${r.status ?? r.signal})`);
}

/** @param {string} p */
function mtime(p) {
  try {
    return fs.statSync(p).mtimeMs;
  } catch {
    return -1;
  }
}

/** @param {string} dir */
function isEngine(dir) {
  return ['go.mod', 'Makefile', 'capi/abi.c', 'include/sandtrap.h'].every((f) => fs.existsSync(path.join(dir, f)));
}

// The engine sources this package builds from: its own engine/ (a packed tarball),
// or the repository it is bindings/node of. A directory above an installed package
// (the consumer's project) is never one of them.
function engineDir() {
  const own = path.join(pkgDir, 'engine');
  if (isEngine(own)) return own;
  const repo = path.resolve(pkgDir, '..', '..');
  let isCheckout = false;
  try {
    isCheckout = fs.realpathSync(path.join(repo, 'bindings', 'node')) === fs.realpathSync(pkgDir);
  } catch {}
  if (isCheckout && isEngine(repo)) return repo;
  return null;
}

// node-gyp: the one npm runs its scripts with, else npm's bundled copy, else PATH.
/** @returns {[string, string[]]} the command and its first arguments */
function nodeGyp() {
  const candidates = [];
  if (process.env.npm_config_node_gyp) candidates.push(process.env.npm_config_node_gyp);
  try {
    candidates.push(require.resolve('node-gyp/bin/node-gyp.js'));
  } catch {}
  const npmRoot = spawnSync('npm', ['root', '-g'], { encoding: 'utf8' });
  if (npmRoot.status === 0) {
    candidates.push(path.join(npmRoot.stdout.trim(), 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  }
  candidates.push(path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  for (const c of candidates) {
    if (c && fs.existsSync(c)) return [process.execPath, [c]];
  }
  return ['node-gyp', []];
}

// The version of the headers in <dir>/include/node (node_version.h), or null.
/** @param {string} dir */
function headersVersion(dir) {
  try {
    const h = fs.readFileSync(path.join(dir, 'include', 'node', 'node_version.h'), 'utf8');
    const v = ['MAJOR', 'MINOR', 'PATCH'].map((k) => (h.match(new RegExp(`#define NODE_${k}_VERSION (\\d+)`)) || [])[1]);
    return v.every(Boolean) ? v.join('.') : null;
  } catch {
    return null;
  }
}

// --nodedir for node-gyp: the user's choice, else none when node-gyp has this
// Node's headers already, else this Node installation's own headers when they are
// there and of this version (offline), else none (node-gyp downloads them).
function nodedirArgs() {
  const chosen = process.env.SANDTRAP_NODEDIR || process.env.npm_config_nodedir;
  if (chosen) return [`--nodedir=${chosen}`];
  const version = process.versions.node;
  const devdir = process.env.npm_config_devdir || path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'node-gyp');
  if (headersVersion(path.join(devdir, version))) return [];
  const prefix = path.dirname(path.dirname(fs.realpathSync(process.execPath)));
  if (headersVersion(prefix) === version && fs.existsSync(path.join(prefix, 'include', 'node', 'common.gypi'))) {
    log(`using the headers of this Node installation (${prefix}/include/node): --nodedir=${prefix}`);
    return [`--nodedir=${prefix}`];
  }
  log(`no local headers of Node ${version}: node-gyp will download them`);
  return [];
}

function main() {
  if (process.platform !== 'linux') throw new Error('sandtrap needs Linux (Landlock, seccomp)');
  const engine = engineDir();
  const libSrc = engine && path.join(engine, 'build', 'libsandtrap.so');

  // 1. The Go library.
  if (process.env.SANDTRAP_SKIP_MAKE === '1') {
    log('SANDTRAP_SKIP_MAKE=1: using the library as it is');
  } else if (engine) {
    const check = spawnSync('bash', [path.join(engine, 'scripts', 'check-build-deps.sh'), '-v', '--make'], { stdio: ['ignore', 2, 2] });
    if (check.status !== 0) throw new Error('the build tools above are missing');
    run('make', ['-C', engine, 'lib', 'cli']);
  } else if (!fs.existsSync(libDst)) {
    throw new Error(`no engine sources: ${path.join(pkgDir, 'engine')} is missing and ${pkgDir} is not bindings/node of a sandtrap checkout`);
  }

  // 2. The addon.
  const inputs = [path.join(pkgDir, 'src', 'addon.cc'), path.join(pkgDir, 'binding.gyp')];
  if (engine) inputs.push(path.join(engine, 'include', 'sandtrap.h'));
  const stale = force || mtime(addon) < 0 || inputs.some((p) => mtime(p) > mtime(addon));
  if (stale) {
    if (!engine) throw new Error('the addon must be rebuilt but there are no engine sources (include/sandtrap.h)');
    const [cmd, pre] = nodeGyp();
    run(cmd, [...pre, 'rebuild', ...nodedirArgs(), '--', `-Dsandtrap_root=${engine}`]);
  }

  // 3. The library beside the addon.
  if (libSrc && fs.existsSync(libSrc)) {
    const s = fs.statSync(libSrc);
    let d = null;
    try {
      d = fs.statSync(libDst);
    } catch {}
    if (!d || d.size !== s.size || d.mtimeMs < s.mtimeMs) {
      const tmp = `${libDst}.tmp${process.pid}`;
      fs.copyFileSync(libSrc, tmp);
      fs.renameSync(tmp, libDst); // atomic: a process that has the old one mapped keeps it
      log(`copied ${libSrc} -> ${path.relative(pkgDir, libDst)}`);
    }
  }
}

try {
  main();
} catch (e) {
  log(`build failed: ${e instanceof Error ? e.message : e}`);
  process.exit(1);
}
