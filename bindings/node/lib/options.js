'use strict';
// camelCase options <-> the engine's snake_case msgpack keys. The policy table is
// generated from the engine's schema (fields.js); the engine judges every value and
// reports each problem as {field, message}, shown here under the option's name.
// What stays here is naming: unknown and unsupported option names (they never reach
// the engine, whose names are not JavaScript's) and the run options' table.

const { Encoder } = require('@msgpack/msgpack');
const { POLICY, UNSUPPORTED } = require('./fields');
const { Problem } = require('./errors');

const encoder = new Encoder({ ignoreUndefined: true, useBigInt64: true });

/** @type {(v: unknown) => v is Record<string, any>} */
const isPlainObject = (v) =>
  v !== null && typeof v === 'object' && (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);

/** @param {unknown} v @returns {string} */
const describe = (v) => {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (Buffer.isBuffer(v)) return 'a Buffer';
  if (typeof v === 'object') return `an object (${v.constructor ? v.constructor.name : 'Object'})`;
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  return `${typeof v} ${JSON.stringify(v)}`;
};

/** msgpack key -> option name, for the engine's problems. */
/** @type {Record<string, string>} */
const OPTION_OF = Object.fromEntries(Object.entries(POLICY).map(([name, [key]]) => [key, name]));
/** POLICY and UNSUPPORTED looked up by any name. */
const POLICY_BY_NAME = /** @type {Record<string, string[] | undefined>} */ (POLICY);
const UNSUPPORTED_BY_NAME = /** @type {Record<string, string>} */ (UNSUPPORTED);

// Checkers of the run options (request keys, not policy fields): a problem
// message (without the option name) or null.
/** @type {Record<string, (v: any) => string | null>} */
const checks = {
  string: (v) => (typeof v === 'string' ? null : `want a string, got ${describe(v)}`),
  bool: (v) => (typeof v === 'boolean' ? null : `want true or false, got ${describe(v)}`),
  number: (v) => (typeof v === 'number' && Number.isFinite(v) ? null : `want a number of seconds, got ${describe(v)}`),
  size: (v) =>
    Number.isSafeInteger(v) || typeof v === 'string'
      ? null
      : `want a byte count or a size string like "256M", got ${describe(v)}`,
  env: (v) => {
    if (!isPlainObject(v)) return `want an object of strings, got ${describe(v)}`;
    const bad = Object.entries(v).filter(([, x]) => typeof x !== 'string');
    if (bad.length) return bad.map(([k, x]) => `the value of ${JSON.stringify(k)} is ${describe(x)}, not a string`).join('; ');
    return null;
  },
};

/**
 * Options of run() and cmd(): option name -> [request key, checker].
 * @typedef {Record<string, [string, string]>} OptionTable
 * @type {OptionTable}
 */
const RUN = {
  timeout: ['timeout', 'number'],
  env: ['env', 'env'],
  cwd: ['cwd', 'string'],
  maxOutput: ['max_output', 'size'],
};
/** @type {Record<string, string>} */
const RUN_OPTION_OF = Object.fromEntries(Object.entries(RUN).map(([name, [key]]) => [key, name]));

/** @param {string} s */
const snakeToCamel = (s) => s.replace(/_([a-z])/g, (_, /** @type {string} */ c) => c.toUpperCase());

// The nearest of names (case-insensitive, ignoring underscores) when at most
// 1 + len/3 edits away, the first on a tie: the engine's rule (policy.Suggest).
/** @param {string} given @param {string[]} names */
function suggest(given, names) {
  const norm = (/** @type {string} */ s) => s.replace(/_/g, '').toLowerCase();
  const g = norm(given);
  let best = '';
  let bestD = -1;
  for (const n of names) {
    const nn = norm(n);
    const d = editDistance(g, nn);
    if (d <= 1 + Math.floor(nn.length / 3) && (bestD < 0 || d < bestD)) {
      best = n;
      bestD = d;
    }
  }
  return best;
}

/** @param {string} a @param {string} b @returns {number} */
function editDistance(a, b) {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length];
}

/**
 * The problem of a name that is not an option: the engine's wording, with JavaScript names.
 * @param {string} name
 * @param {string[]} names
 */
function unknownOption(name, names) {
  const near = suggest(name, names);
  return new Problem(name, near ? `unknown field; did you mean ${near}?` : 'unknown field');
}

/**
 * The engine's policy map for Sandbox options. Returns {map, problems}: `map`
 * holds the engine key of every option given (undefined and null mean "not set"),
 * `problems` the options that never reach the engine: unknown or unsupported
 * names, and values msgpack cannot carry.
 * @param {unknown} opts
 * @returns {{map: Record<string, any>, problems: Problem[]}}
 */
function policyOptions(opts) {
  /** @type {Problem[]} */
  const problems = [];
  /** @type {Record<string, any>} */
  const map = {};
  if (opts === undefined || opts === null) return { map, problems };
  if (!isPlainObject(opts)) {
    problems.push(new Problem('', `options must be a plain object, got ${describe(opts)}`));
    return { map, problems };
  }
  const names = Object.keys(POLICY);
  for (const name of Object.keys(opts)) {
    const spec = POLICY_BY_NAME[name];
    if (!spec) {
      problems.push(name in UNSUPPORTED ? new Problem(name, UNSUPPORTED_BY_NAME[name]) : unknownOption(name, names));
      continue;
    }
    const v = opts[name];
    if (v === undefined || v === null) continue;
    try {
      encoder.encode(v);
    } catch (e) {
      problems.push(new Problem(name, `${describe(v)} cannot be sent to the engine (${e instanceof Error ? e.message : e})`));
      continue;
    }
    map[spec[0]] = isPlainObject(v) ? { ...v } : v;
  }
  return { map, problems };
}

/**
 * Map run options through a table. Returns {map, problems}: `map` holds the
 * request keys of every option that passed its type check (undefined and null mean
 * "not set"), `problems` one per problem. `extra` names keys the caller handles.
 * @param {unknown} opts
 * @param {OptionTable} table
 * @param {string} what
 * @param {string[]} [extra]
 * @returns {{map: Record<string, any>, problems: Problem[]}}
 */
function mapOptions(opts, table, what, extra = []) {
  /** @type {Problem[]} */
  const problems = [];
  /** @type {Record<string, any>} */
  const map = {};
  if (opts === undefined || opts === null) return { map, problems };
  if (!isPlainObject(opts)) {
    problems.push(new Problem('', `${what} options must be a plain object, got ${describe(opts)}`));
    return { map, problems };
  }
  for (const key of Object.keys(opts)) {
    if (extra.includes(key)) continue;
    const spec = table[key];
    if (!spec) {
      problems.push(unknownOption(key, [...Object.keys(table), ...extra]));
      continue;
    }
    const v = opts[key];
    if (v === undefined || v === null) continue;
    const p = checks[spec[1]](v);
    if (p) {
      problems.push(new Problem(key, p));
      continue;
    }
    map[spec[0]] = spec[1] === 'env' ? { ...v } : v;
  }
  return { map, problems };
}

/**
 * The option name of an engine problem's field: a policy key, a request key, or
 * "stages[i].key" in a pipeline (the key renamed).
 * @param {string} field
 */
function optionName(field) {
  const dot = field.lastIndexOf('.');
  const key = field.slice(dot + 1);
  const name = OPTION_OF[key] ?? RUN_OPTION_OF[key] ?? key;
  return field.slice(0, dot + 1) + name;
}

/**
 * Deep-convert the keys of an engine map to camelCase (results, reports).
 * @param {any} v
 * @returns {any}
 */
function camelKeys(v) {
  if (Array.isArray(v)) return v.map(camelKeys);
  if (v === null || typeof v !== 'object' || ArrayBuffer.isView(v)) return v;
  /** @type {Record<string, unknown>} */
  const out = {};
  for (const k of Object.keys(v)) out[snakeToCamel(k)] = camelKeys(v[k]);
  return out;
}

module.exports = {
  POLICY,
  RUN,
  policyOptions,
  mapOptions,
  optionName,
  camelKeys,
  snakeToCamel,
  isPlainObject,
  describe,
};
