#!/usr/bin/env node
'use strict';
// The `sandtrap` command of the npm package: runs the sandtrap binary (a Go program,
// docs/cli.md) shipped beside the library, with this process's stdio, and exits as
// it does (a signal that killed it kills this process too).
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const platform = `${process.platform}-${process.arch}`;

/**
 * Where the binary is looked for: $SANDTRAP_CLI, the prebuilt one, a checkout's build/.
 * @returns {string[]}
 */
function candidates() {
  return /** @type {string[]} */ ([
    process.env.SANDTRAP_CLI,
    path.join(root, 'prebuilds', platform, 'sandtrap'),
    path.join(root, 'engine', 'build', 'sandtrap'),
    path.join(root, '..', '..', 'build', 'sandtrap'),
  ].filter(Boolean));
}

function binary() {
  for (const p of candidates()) {
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      // next
    }
  }
  return null;
}

/** @param {string[]} args */
function main(args) {
  const bin = binary();
  if (!bin) {
    process.stderr.write(`sandtrap: the sandtrap command is not installed with this package; looked at: ${candidates().join(', ')}\n`);
    process.exit(125);
  }
  // the child gets ^C from the terminal itself; this process only waits for it
  for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(s, () => {});
  const r = spawnSync(bin, args, { stdio: 'inherit' });
  if (r.error) {
    process.stderr.write(`sandtrap: ${bin}: ${r.error.message}\n`);
    process.exit(125);
  }
  if (r.signal) {
    process.removeAllListeners(r.signal);
    process.kill(process.pid, r.signal);
  }
  process.exit(r.status ?? 125);
}

if (require.main === module) main(process.argv.slice(2));
module.exports = { main, binary, candidates };
