#!/usr/bin/env node
// Makes the npm tarball (`make npm-pack`): a package that installs on linux-x64
// without a toolchain and without running any script.
//
//   build/npm/package/               the staged package
//     package.json                  bindings/node's, with no lifecycle scripts (only
//                                   `build`) and no devDependencies
//     index.js, lib/, …             as in bindings/node (package.json "files")
//     prebuilds/linux-x64/
//       sandtrap.node               build/Release/sandtrap.node (N-API 8: any Node >= 18)
//       libsandtrap.so.0            the engine (rpath $ORIGIN, set with patchelf)
//       sandtrap                    the sandtrap command (bin/sandtrap.js; rpath $ORIGIN)
//       libseccomp.so.2             the system's libseccomp (LGPL-2.1, dynamically linked)
//       libseccomp.copyright        its licence notice
//       prebuilt.json               what the binaries need (glibc version), for the loader
//     engine/                       the engine's sources and Go modules, for the
//                                   from-source fallback (scripts/engine-sources.sh)
//   build/dist/sandtrap-<version>.tgz
//
// Usage: node scripts/pack.js [--patchelf PATH] [--out DIR]; needs a built addon
// (node scripts/build.js) and library (make lib).
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const pkgDir = path.resolve(__dirname, '..');
const repo = path.resolve(pkgDir, '..', '..');
/** @type {(name: string, dflt: string) => string} */
const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const patchelf = arg('--patchelf', 'patchelf');
const outDir = path.resolve(arg('--out', path.join(repo, 'build', 'dist')));
const stage = path.join(repo, 'build', 'npm', 'package');
const platform = 'linux-x64';

/** @param {string} msg */
function log(msg) {
  process.stderr.write(`pack: ${msg}\n`);
}

/**
 * @param {string} cmd
 * @param {string[]} args
 * @param {import('node:child_process').ExecFileSyncOptions} [opts]
 * @returns {string}
 */
function sh(cmd, args, opts = {}) {
  return String(execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], ...opts }));
}

// the highest GLIBC_x.y symbol version the ELF files need
/** @param {string[]} files */
function glibcNeeded(files) {
  let best = '0';
  for (const f of files) {
    for (const m of sh('objdump', ['-T', f]).matchAll(/GLIBC_(\d+(?:\.\d+)+)/g)) {
      if (m[1].localeCompare(best, undefined, { numeric: true }) > 0) best = m[1];
    }
  }
  return best;
}

function main() {
  const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
  const addon = path.join(pkgDir, 'build', 'Release', 'sandtrap.node');
  const lib = fs.realpathSync(path.join(repo, 'build', 'libsandtrap.so'));
  const cli = path.join(repo, 'build', 'sandtrap'); // the sandtrap command (bin/sandtrap.js runs it)
  for (const f of [addon, lib, cli]) if (!fs.existsSync(f)) throw new Error(`${f} is missing: run make lib cli and node scripts/build.js first`);

  fs.rmSync(path.dirname(stage), { recursive: true, force: true });
  fs.mkdirSync(stage, { recursive: true });
  for (const entry of pkg.files) {
    const rel = entry.replace(/\/$/, '');
    if (rel === 'prebuilds' || rel === 'engine') continue; // made below
    fs.cpSync(path.join(pkgDir, rel), path.join(stage, rel), { recursive: true, dereference: true });
  }
  // The published manifest: no lifecycle script at all (npm runs none at install, and
  // warns about none), only `build` for the from-source fallback; no devDependencies.
  const published = { ...pkg, scripts: { build: 'node scripts/build.js --force' } };
  delete published.devDependencies;
  fs.writeFileSync(path.join(stage, 'package.json'), JSON.stringify(published, null, 2) + '\n');

  // prebuilds/linux-x64
  const pre = path.join(stage, 'prebuilds', platform);
  fs.mkdirSync(pre, { recursive: true });
  fs.copyFileSync(addon, path.join(pre, 'sandtrap.node'));
  fs.copyFileSync(lib, path.join(pre, 'libsandtrap.so.0'));
  const seccomp = (sh('ldd', [lib]).match(/libseccomp\.so\.2 => (\S+)/) || [])[1];
  if (!seccomp) throw new Error(`ldd ${lib} names no libseccomp.so.2`);
  fs.copyFileSync(fs.realpathSync(seccomp), path.join(pre, 'libseccomp.so.2'));
  const copyright = '/usr/share/doc/libseccomp2/copyright';
  if (fs.existsSync(copyright)) fs.copyFileSync(copyright, path.join(pre, 'libseccomp.copyright'));
  sh(patchelf, ['--set-rpath', '$ORIGIN', path.join(pre, 'libsandtrap.so.0')]);
  fs.copyFileSync(cli, path.join(pre, 'sandtrap'));
  sh(patchelf, ['--set-rpath', '$ORIGIN', path.join(pre, 'sandtrap')]);
  const bins = ['sandtrap.node', 'libsandtrap.so.0', 'libseccomp.so.2', 'sandtrap'].map((f) => path.join(pre, f));
  for (const f of bins) fs.chmodSync(f, 0o755);
  const info = {
    platform,
    libc: 'glibc',
    glibc: glibcNeeded(bins),
    napi: 8,
    node: pkg.engines.node,
    builtWith: process.version,
    files: bins.map((f) => path.basename(f)),
  };
  fs.writeFileSync(path.join(pre, 'prebuilt.json'), JSON.stringify(info, null, 2) + '\n');
  log(`prebuilds/${platform}: ${info.files.join(', ')} (glibc >= ${info.glibc})`);

  // engine/
  sh('bash', [path.join(repo, 'scripts', 'engine-sources.sh'), path.join(stage, 'engine')], { stdio: ['ignore', 'inherit', 'inherit'] });

  fs.mkdirSync(outDir, { recursive: true });
  const out = sh('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', outDir], { cwd: stage });
  const [r] = JSON.parse(out);
  log(`${path.join(outDir, r.filename)}: ${r.size} bytes, ${r.unpackedSize} unpacked, ${r.entryCount} files`);
}

try {
  main();
} catch (e) {
  log(`failed: ${e instanceof Error ? e.message : e}`);
  process.exit(1);
}
