'use strict';
// Profiles: TOML policies in the seed API's sections (docs/cli.md, "Profiles"). The
// engine reads and checks them (core/profile, sandtrap_profile); this only converts.
//
//   const { Sandbox, loadProfile, policyFromDict } = require('sandtrap');
//   const sb = new Sandbox(policyFromDict(loadProfile('python')));

const { Encoder, Decoder } = require('@msgpack/msgpack');
const native = require('./native');
const { Problem, makeError } = require('./errors');
const { POLICY } = require('./fields');

const encoder = new Encoder({ ignoreUndefined: true });
const decoder = new Decoder({ useBigInt64: false });

/** msgpack key -> option name @type {Record<string, string>} */
const OPTION = Object.fromEntries(Object.entries(POLICY).map(([name, [key]]) => [key, name]));

/**
 * @typedef {{ file?: string, line?: number, key?: string, field?: string, message?: string }} WireProblem
 * @typedef {{ name: string, path: string, profile: Record<string, Record<string, unknown>>,
 *   policy: Record<string, unknown>, argv: string[] | null,
 *   error?: { kind?: string, message?: string, problems?: WireProblem[] } }} ProfileResponse
 */

/**
 * One sandtrap_profile request.
 * @param {Record<string, unknown>} req
 * @returns {ProfileResponse}
 */
function call(req) {
  const [status, buf] = native.profile(encoder.encode(req));
  const resp = /** @type {ProfileResponse} */ (decoder.decode(buf));
  if (status !== 0) {
    const e = (resp && resp.error) || {};
    const problems = Array.isArray(e.problems)
      ? e.problems.map((/** @type {WireProblem} */ p) => {
          let where = p.file || '';
          if (p.line) where += `:${p.line}`;
          if (p.key) where += where ? `: ${p.key}` : p.key;
          const prob = new Problem(where, p.message || '');
          Object.assign(prob, { file: p.file || '', line: p.line || 0, key: p.key || '' });
          return prob;
        })
      : undefined;
    throw makeError(e.kind || 'internal', e.message || `sandtrap_profile failed (${status})`, { status, problems });
  }
  return resp;
}

/**
 * The profile `nameOrPath` as sections of keys (the file's shape): a saved profile
 * ($XDG_CONFIG_HOME/sandtrap/profiles/NAME.toml) or a file (a path has a '/' or ends
 * in .toml). Throws a PolicyError naming the file, line and key of every problem,
 * NotFound when there is no such profile.
 * @param {string} nameOrPath
 * @returns {Record<string, Record<string, unknown>>}
 */
function loadProfile(nameOrPath) {
  if (typeof nameOrPath !== 'string' || nameOrPath === '') throw new TypeError('loadProfile: want a profile name or a path');
  const req = { load: nameOrPath, config_home: process.env.XDG_CONFIG_HOME || '', home: process.env.HOME || '' };
  return call(req).profile;
}

/**
 * Sandbox options for a profile given as sections of keys (what loadProfile
 * returns), checked as a file is; [program] exec and args are left out (profileArgv).
 * @param {Record<string, Record<string, unknown>>} profile
 * @param {string} [source] names the dict in problems
 * @returns {Record<string, unknown>}
 */
function policyFromDict(profile, source = '<dict>') {
  const { policy } = call({ dict: profile, source });
  /** @type {Record<string, unknown>} */
  const out = {};
  for (const [k, v] of Object.entries(policy)) out[OPTION[k] ?? k] = v;
  return out;
}

/**
 * The program of a profile's [program] (exec then args), or null.
 * @param {Record<string, Record<string, unknown>>} profile
 * @returns {string[] | null}
 */
function profileArgv(profile) {
  const { argv } = call({ dict: profile, source: '<dict>' });
  return argv ?? null;
}

module.exports = { loadProfile, policyFromDict, profileArgv };
