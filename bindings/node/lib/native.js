'use strict';
// Loads the N-API addon (build/Release/sandtrap.node, which finds libsandtrap.so
// beside itself through its $ORIGIN rpath).
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const candidates = [
  process.env.SANDTRAP_ADDON,
  path.join(root, 'build', 'Release', 'sandtrap.node'),
  path.join(root, 'build', 'Debug', 'sandtrap.node'),
].filter(Boolean);

function load() {
  const errors = [];
  for (const p of candidates) {
    try {
      return require(p);
    } catch (e) {
      if (e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(p)) {
        errors.push(`${p}: not built`);
        continue;
      }
      errors.push(`${p}: ${e && e.message}`);
    }
  }
  const err = new Error(
    `sandtrap: cannot load the native addon (run \`npm install\` or \`npm run build\` in ${root}):\n  ` +
      errors.join('\n  '),
  );
  err.code = 'ERR_SANDTRAP_ADDON';
  throw err;
}

module.exports = load();
