'use strict';
// Loads the N-API addon, which finds libsandtrap.so.0 beside itself through its
// $ORIGIN rpath. Looked for, in order:
//   1. $SANDTRAP_ADDON (development);
//   2. build/Release/sandtrap.node: built here by scripts/build.js (a checkout, or the
//      from-source fallback of an installed package);
//   3. prebuilds/<platform>-<arch>/sandtrap.node: the prebuilt addon of the npm
//      tarball (linux-x64, glibc; with libsandtrap.so.0 and libseccomp.so.2 beside
//      it), loaded without anything having been built or run at install time.
// N-API (version 8) keeps one binary valid for every Node >= 18.
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const platform = `${process.platform}-${process.arch}`;
const prebuiltDir = path.join(root, 'prebuilds', platform);
const candidates = [
  process.env.SANDTRAP_ADDON,
  path.join(root, 'build', 'Release', 'sandtrap.node'),
  path.join(prebuiltDir, 'sandtrap.node'),
].filter(/** @returns {p is string} */ (p) => typeof p === 'string' && p !== '');

// The glibc version of this process, or null (musl, or not Linux).
function glibc() {
  try {
    const report = /** @type {{header?: {glibcVersionRuntime?: string}}} */ (process.report.getReport());
    return report.header?.glibcVersionRuntime || null;
  } catch {
    return null;
  }
}

function prebuiltInfo() {
  try {
    return JSON.parse(fs.readFileSync(path.join(prebuiltDir, 'prebuilt.json'), 'utf8'));
  } catch {
    return null;
  }
}

function load() {
  const errors = [];
  for (const p of candidates) {
    if (!fs.existsSync(p)) {
      if (p === process.env.SANDTRAP_ADDON) errors.push(`${p} (SANDTRAP_ADDON): no such file`);
      continue;
    }
    try {
      const addon = require(p);
      Object.defineProperty(addon, 'path', { value: p, enumerable: false });
      return addon;
    } catch (e) {
      errors.push(`${p}: ${e instanceof Error ? e.message : e}`);
    }
  }
  const info = prebuiltInfo();
  const libc = glibc();
  const hints = [];
  if (!info) {
    hints.push(`this package has no prebuilt addon for ${platform} (prebuilts: linux-x64 with glibc)`);
  } else if (!libc) {
    hints.push(`the prebuilt addon needs glibc >= ${info.glibc}; this process does not run on glibc (musl?)`);
  } else if (info.glibc && libc.localeCompare(info.glibc, undefined, { numeric: true }) < 0) {
    hints.push(`the prebuilt addon needs glibc >= ${info.glibc}; this system has ${libc}`);
  }
  const fallback = fs.existsSync(path.join(root, 'engine'))
    ? 'build it from the sources in this package: `npm explore sandtrap -- npm run build` ' +
      '(needs Go, a C compiler, libseccomp headers, make and node-gyp; it says what is missing)'
    : `build it: \`npm run build\` in ${root} (needs \`make lib\` of the repository)`;
  const err = /** @type {Error & {code?: string}} */ (new Error(
    `sandtrap: cannot load the native addon.\n  ${[...errors, ...hints].join('\n  ') || 'nothing was built'}\n  To fix: ${fallback}`,
  ));
  err.code = 'ERR_SANDTRAP_ADDON';
  throw err;
}

module.exports = load();
