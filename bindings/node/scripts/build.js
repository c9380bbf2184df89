#!/usr/bin/env node
// Builds what is missing (run by `npm install`, `npm run build` and before tests):
//   1. the Go library:   make -C ../.. lib        (make itself skips it when fresh)
//   2. the addon:        node-gyp rebuild --nodedir=/usr   (only when missing or older
//                        than its sources; --force always rebuilds)
//   3. libsandtrap.so copied next to build/Release/sandtrap.node, where the addon's
//      $ORIGIN rpath finds it (refreshed whenever the library changed).
// SANDTRAP_SKIP_MAKE=1 skips step 1 (e.g. while the engine's tree does not build).
// Nothing is downloaded: node-gyp uses the headers in /usr/include/node.
'use strict';

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const pkgDir = path.resolve(__dirname, '..');
const root = path.resolve(pkgDir, '..', '..');
const libSrc = path.join(root, 'build', 'libsandtrap.so');
const releaseDir = path.join(pkgDir, 'build', 'Release');
const addon = path.join(releaseDir, 'sandtrap.node');
const libDst = path.join(releaseDir, 'libsandtrap.so.0'); // the soname the addon records
const force = process.argv.includes('--force') || process.env.SANDTRAP_REBUILD === '1';
const nodedir = process.env.SANDTRAP_NODEDIR || process.env.npm_config_nodedir || '/usr';

function log(msg) {
  process.stderr.write(`sandtrap: ${msg}\n`);
}

function run(cmd, args, opts = {}) {
  log(`${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { stdio: ['ignore', 2, 2], cwd: pkgDir, ...opts });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (exit ${r.status ?? r.signal})`);
}

function mtime(p) {
  try {
    return fs.statSync(p).mtimeMs;
  } catch {
    return -1;
  }
}

// node-gyp: the one npm runs its scripts with, else npm's bundled copy, else PATH.
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

function main() {
  if (process.platform !== 'linux') throw new Error('sandtrap needs Linux (Landlock, seccomp)');

  // 1. The Go library. When this package is used outside the repository (no
  // Makefile above), the library must already sit next to the addon.
  if (process.env.SANDTRAP_SKIP_MAKE === '1') {
    log('SANDTRAP_SKIP_MAKE=1: using the library as it is');
  } else if (fs.existsSync(path.join(root, 'Makefile'))) {
    run('make', ['-C', root, 'lib']);
  } else if (!fs.existsSync(libSrc) && !fs.existsSync(libDst)) {
    throw new Error(`no ${libSrc} and no Makefile to build it`);
  }

  // 2. The addon.
  const inputs = [
    path.join(pkgDir, 'src', 'addon.cc'),
    path.join(pkgDir, 'binding.gyp'),
    path.join(root, 'include', 'sandtrap.h'),
  ];
  const stale = force || mtime(addon) < 0 || inputs.some((p) => mtime(p) > mtime(addon));
  if (stale) {
    const [cmd, pre] = nodeGyp();
    run(cmd, [...pre, 'rebuild', `--nodedir=${nodedir}`]);
  }

  // 3. The library beside the addon.
  if (fs.existsSync(libSrc)) {
    const s = fs.statSync(libSrc);
    let d = null;
    try {
      d = fs.statSync(libDst);
    } catch {}
    if (!d || d.size !== s.size || d.mtimeMs < s.mtimeMs) {
      const tmp = `${libDst}.tmp${process.pid}`;
      fs.copyFileSync(libSrc, tmp);
      fs.renameSync(tmp, libDst); // atomic: a process that has the old one mapped keeps it
      log(`copied ${path.relative(pkgDir, libSrc)} -> ${path.relative(pkgDir, libDst)}`);
    }
  }
}

try {
  main();
} catch (e) {
  log(`build failed: ${e.message}`);
  process.exit(1);
}
