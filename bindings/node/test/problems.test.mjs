// tests/vectors/problems.json: invalid policies that every binding refuses with the
// same problems, each {field, message}, run through the Node API (option names in
// camelCase: the vectors' msgpack keys renamed through the generated table).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { Sandbox, PolicyError } from 'sandtrap';

const require = createRequire(import.meta.url);
const { POLICY } = require('../lib/fields.js');
const here = path.dirname(fileURLToPath(import.meta.url));
const vectorsDir = process.env.SANDTRAP_VECTORS ?? path.resolve(here, '..', '..', '..', 'tests', 'vectors');
const { cases } = JSON.parse(fs.readFileSync(path.join(vectorsDir, 'problems.json'), 'utf8'));

const OPTION = Object.fromEntries(Object.entries(POLICY).map(([name, [key]]) => [key, name]));
// a key that is no option is written as a JavaScript user would: in camelCase
const name = (key) => OPTION[key] ?? key.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const sorted = (list) => list.map((p) => `${p.field}\u0000${p.message}`).sort();

test('the problem vectors are there', () => assert.ok(cases.length > 0));

for (const c of cases) {
  test(`problems: ${c.name}`, () => {
    const opts = Object.fromEntries(Object.entries(c.policy).map(([k, v]) => [name(k), v]));
    assert.throws(
      () => new Sandbox(opts),
      (e) => {
        assert.ok(e instanceof PolicyError, String(e));
        const want = c.problems.map((p) => ({ field: name(p.field), message: p.message.replace(/\{(\w+)\}/g, (_, k) => name(k)) }));
        assert.deepEqual(sorted(e.problems), sorted(want));
        return true;
      },
    );
  });
}
