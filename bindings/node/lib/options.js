'use strict';
// camelCase options <-> the engine's snake_case msgpack keys, and the type checks
// done in JavaScript. Value checks (absolute paths that exist, positive limits, port
// ranges, …) are the engine's: its problems are merged into the same list, renamed
// to the JavaScript option names, so one PolicyError lists every problem.

const isPlainObject = (v) =>
  v !== null && typeof v === 'object' && (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);

const describe = (v) => {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (Buffer.isBuffer(v)) return 'a Buffer';
  if (typeof v === 'object') return `an object (${v.constructor ? v.constructor.name : 'Object'})`;
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  return `${typeof v} ${JSON.stringify(v)}`;
};

// Checkers return a problem string (without the option name) or null.
const checks = {
  string: (v) => (typeof v === 'string' ? null : `want a string, got ${describe(v)}`),
  bool: (v) => (typeof v === 'boolean' ? null : `want true or false, got ${describe(v)}`),
  int: (v) => (Number.isSafeInteger(v) ? null : `want an integer, got ${describe(v)}`),
  number: (v) => (typeof v === 'number' && Number.isFinite(v) ? null : `want a number of seconds, got ${describe(v)}`),
  size: (v) =>
    Number.isSafeInteger(v) || typeof v === 'string'
      ? null
      : `want a byte count or a size string like "256M", got ${describe(v)}`,
  strings: (v) => listOf(v, (x) => typeof x === 'string', 'strings'),
  ports: (v) =>
    listOf(v, (x) => typeof x === 'string' || Number.isSafeInteger(x), 'port numbers or strings like "8000-8005"'),
  targets: (v) =>
    listOf(v, (x) => typeof x === 'string' || Number.isSafeInteger(x), 'ports, "host:port" strings or "*"'),
  env: (v) => {
    if (!isPlainObject(v)) return `want an object of strings, got ${describe(v)}`;
    const bad = Object.entries(v).filter(([, x]) => typeof x !== 'string');
    if (bad.length) return bad.map(([k, x]) => `[${JSON.stringify(k)}] want a string value, got ${describe(x)}`).join('; ');
    return null;
  },
};

function listOf(v, ok, what) {
  if (!Array.isArray(v)) return `want an array of ${what}, got ${describe(v)}`;
  const bad = [];
  v.forEach((x, i) => {
    if (!ok(x)) bad.push(`[${i}] is ${describe(x)}`);
  });
  return bad.length ? `want an array of ${what}: ${bad.join(', ')}` : null;
}

/** Every policy option: JavaScript name -> [engine key, checker]. */
const POLICY = {
  fsReadable: ['fs_readable', 'strings'],
  fsWritable: ['fs_writable', 'strings'],
  fsDenied: ['fs_denied', 'strings'],
  netAllow: ['net_allow', 'targets'],
  netDeny: ['net_deny', 'targets'],
  netAllowBind: ['net_allow_bind', 'ports'],
  netAllowUdp: ['net_allow_udp', 'bool'],
  netAllowUnix: ['net_allow_unix', 'bool'],
  maxMemory: ['max_memory', 'size'],
  maxProcesses: ['max_processes', 'int'],
  maxOpenFiles: ['max_open_files', 'int'],
  maxDisk: ['max_disk', 'size'],
  maxCpu: ['max_cpu', 'int'],
  maxCpuTime: ['max_cpu_time', 'number'],
  timeout: ['timeout', 'number'],
  maxOutput: ['max_output', 'size'],
  env: ['env', 'env'],
  cleanEnv: ['clean_env', 'bool'],
  cwd: ['cwd', 'string'],
  uid: ['uid', 'int'],
  gid: ['gid', 'int'],
  extraAllowSyscalls: ['extra_allow_syscalls', 'strings'],
  extraDenySyscalls: ['extra_deny_syscalls', 'strings'],
  allowDegraded: ['allow_degraded', 'bool'],
};

/** Options of run() and cmd(): JavaScript name -> [request key, checker]. */
const RUN = {
  timeout: ['timeout', 'number'],
  env: ['env', 'env'],
  cwd: ['cwd', 'string'],
  maxOutput: ['max_output', 'size'],
};

const snakeToCamel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const camelToSnake = (s) => s.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

function suggest(name, table) {
  const camel = snakeToCamel(name);
  if (camel !== name && camel in table) return ` (did you mean ${camel}?)`;
  const lower = name.toLowerCase();
  const near = Object.keys(table).find((k) => k.toLowerCase() === lower || editDistance(k.toLowerCase(), lower) <= 2);
  return near ? ` (did you mean ${near}?)` : '';
}

function editDistance(a, b) {
  if (Math.abs(a.length - b.length) > 2) return 3;
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
  }
  return d[a.length][b.length];
}

/**
 * Map an options object through a table. Returns {map, problems}: `map` holds the
 * engine keys of every option that passed its type check (undefined and null mean
 * "not set"), `problems` one line per problem, prefixed by the option name.
 * `extra` names keys the caller handles itself.
 */
function mapOptions(opts, table, what, extra = []) {
  const problems = [];
  const map = {};
  if (opts === undefined || opts === null) return { map, problems };
  if (!isPlainObject(opts)) {
    problems.push(`${what} must be a plain object, got ${describe(opts)}`);
    return { map, problems };
  }
  for (const key of Object.keys(opts)) {
    if (extra.includes(key)) continue;
    const spec = table[key];
    if (!spec) {
      problems.push(`unknown ${what === 'options' ? 'option' : `${what} option`} ${JSON.stringify(key)}${suggest(key, table)}`);
      continue;
    }
    const v = opts[key];
    if (v === undefined || v === null) continue;
    const p = checks[spec[1]](v);
    if (p) {
      problems.push(`${key}: ${p}`);
      continue;
    }
    map[spec[0]] = spec[1] === 'env' ? { ...v } : v;
  }
  return { map, problems };
}

const ENGINE_NAMES = new RegExp(
  `\\b(${Object.values(POLICY)
    .map(([k]) => k)
    .filter((k) => k.includes('_'))
    .join('|')})\\b`,
  'g',
);

/** Split an engine validation message into its problems, with JavaScript names. */
function engineProblems(message) {
  let text = String(message);
  let list = [text];
  const many = /^invalid (?:policy|request) \((\d+) problems\):\s*([\s\S]*)$/.exec(text);
  const one = /^invalid (?:policy|request): ([\s\S]*)$/.exec(text);
  if (many) {
    // the engine lists one problem per line, each after "- "
    const parts = many[2].replace(/^- /, '').split('\n- ');
    list = parts.length === Number(many[1]) ? parts : [many[2]];
  } else if (one) {
    list = [one[1]];
  }
  return list.map((p) => p.replace(ENGINE_NAMES, (k) => snakeToCamel(k)));
}

/** Deep-convert the keys of an engine map to camelCase (results, reports). */
function camelKeys(v) {
  if (Array.isArray(v)) return v.map(camelKeys);
  if (v === null || typeof v !== 'object' || ArrayBuffer.isView(v)) return v;
  const out = {};
  for (const k of Object.keys(v)) out[snakeToCamel(k)] = camelKeys(v[k]);
  return out;
}

module.exports = {
  POLICY,
  RUN,
  mapOptions,
  engineProblems,
  camelKeys,
  snakeToCamel,
  camelToSnake,
  isPlainObject,
  describe,
};
