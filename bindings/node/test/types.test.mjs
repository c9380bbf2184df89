// The TypeScript declarations: a typed usage of both entry points compiles with
// `tsc --noEmit` (and its @ts-expect-error lines prove misuse is caught).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tsc = path.join(pkg, 'node_modules', 'typescript', 'bin', 'tsc');

test('tsc --noEmit accepts test/types (ESM and CommonJS usage)', { skip: !fs.existsSync(tsc) && 'typescript is not installed (npm install)' }, () => {
  const r = spawnSync(process.execPath, [tsc, '--noEmit', '-p', path.join(pkg, 'test', 'types')], { cwd: pkg, encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});

test('every runtime export is declared', async () => {
  const mod = await import('sandtrap');
  const dts = fs.readFileSync(path.join(pkg, 'index.d.ts'), 'utf8');
  for (const name of Object.keys(mod)) {
    if (name === 'default') continue;
    assert.match(dts, new RegExp(`export declare (class|function|const) ${name}\\b`), `${name} is not declared in index.d.ts`);
  }
});
