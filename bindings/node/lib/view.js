'use strict';
// The copy-on-write workdir from JavaScript (docs/protocol.md "workdir"):
//
//   const sb = new Sandbox({ fsWritable: ['.'], workdir: '.', fsReadable: ['/usr', '/lib', '/bin', '/etc'] });
//   const r = await sb.dryRun(['make', 'build']);
//   for (const c of r.changes) console.log(`${c.kind}  ${c.path}`);
//
// With onExit/onError 'keep', a result's changes wait for sb.commit(result) or
// sb.abort(result).

const { Sandbox, runError, toChanges } = require('./sandbox');
const { InvalidRequest, Problem, makeError } = require('./errors');

/** What becomes of a run's workdir changes (onExit, onError). */
const BranchAction = Object.freeze({ COMMIT: 'commit', ABORT: 'abort', KEEP: 'keep' });

/** @typedef {import('./sandbox').Wire} Wire */

const proto = /** @type {any} */ (Sandbox.prototype);

/**
 * Run argv as run() does, list what it changed under the workdir and discard it
 * all: {success, exitCode, stdout, stderr, changes, error, result}.
 * @this {Sandbox}
 * @param {string[]} argv
 * @param {Record<string, unknown>} [opts] index.d.ts's RunOptions
 */
proto.dryRun = async function dryRun(argv, opts = {}) {
  const r = await this._run({ op: 'dry_run' }, argv, opts);
  return { success: r.success, exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, changes: r.changes, error: r.error, result: r };
};

/**
 * @param {Sandbox} sb
 * @param {string} op
 * @param {unknown} result a result whose branch was kept, or its branchId
 */
async function branchOp(sb, op, result) {
  const id = typeof result === 'number' ? result : result && typeof result === 'object' ? /** @type {Wire} */ (result).branchId : null;
  if (typeof id !== 'number' || !(id > 0)) {
    const msg = "the result's changes were not kept (onExit/onError 'keep')";
    throw new InvalidRequest(`invalid request: branchId: ${msg}`, { problems: [new Problem('branchId', msg)] });
  }
  const r = await sb.request({ op, branch_id: id });
  if (r.error && r.error.kind && r.error.kind !== 'commit_failed') throw makeError(r.error.kind, r.error.message);
  return r;
}

/**
 * Apply a kept result's changes to the workdir, file by file: {committed,
 * commitRefused, error} (error: why it stopped; what is in committed was applied).
 * @this {Sandbox}
 * @param {unknown} result
 */
proto.commit = async function commit(result) {
  const r = await branchOp(this, 'commit', result);
  return { committed: toChanges(r.committed), commitRefused: toChanges(r.commit_refused), error: r.error ? runError(r.error) : null };
};

/**
 * Discard a kept result's changes.
 * @this {Sandbox}
 * @param {unknown} result
 */
proto.abort = async function abort(result) {
  await branchOp(this, 'abort', result);
};

module.exports = { BranchAction };
