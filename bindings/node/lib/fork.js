'use strict';
// COW-fork map-reduce from JavaScript, with Python-source init/work:
//
//   const clones = await mapper.fork(4, { init: 'data = load()', work: 'print(sum(data[CLONE_ID::4]))' });
//   const result = await reducer.reduce(['python3', '-c', '...'], clones);
//
// The engine drives it (docs/protocol.md, "map-reduce": the template, its policy and
// limits, the stream of clones); this file maps names and takes the clones the
// engine hands over (host calls of kind "clones"), which an abort stops.

const { Sandbox, newTag, toDenial } = require('./sandbox');
const { InvalidArgument, AbortError, makeError } = require('./errors');
const { camelKeys } = require('./options');

/** @typedef {import('./sandbox').Wire} Wire */
/**
 * One clone's outcome (index.d.ts's CloneResult).
 * @typedef {{id: number, stdout: Buffer, stderr: Buffer, exitCode: number | null, signal: string | null,
 *   timedOut: boolean, stdoutTruncated: boolean, success: boolean, denials: Wire[], denialsDropped: number}} CloneResult
 */
/**
 * fork()'s options (index.d.ts's ForkOptions).
 * @typedef {{init?: string, work?: string, timeout?: number, parallel?: number,
 *   onClone?: (c: CloneResult) => void, signal?: AbortSignal, python?: string}} ForkOptions
 */

/** @param {Wire} it @returns {CloneResult} */
function clone(it) {
  const c = {
    id: it.id,
    stdout: Buffer.from(it.stdout),
    stderr: Buffer.from(it.stderr),
    exitCode: it.exit_code ?? null,
    signal: it.signal ?? null,
    timedOut: it.timed_out === true,
    stdoutTruncated: it.stdout_truncated === true,
    // what this clone and every process it started were refused (docs/protocol.md "map-reduce")
    denials: Array.isArray(it.denials) ? it.denials.map(toDenial) : [],
    denialsDropped: typeof it.denials_dropped === 'number' ? it.denials_dropped : 0,
  };
  return { ...c, success: c.exitCode === 0 && !c.timedOut };
}

/** The fork's denials_sources (as a run's). @param {Wire} resp @returns {Record<string, string>} */
function sources(resp) {
  return resp.denials_sources && typeof resp.denials_sources === 'object' ? { ...resp.denials_sources } : {};
}

/**
 * @param {Sandbox} mapper
 * @param {number} n
 * @param {ForkOptions} [options]
 * @returns {Promise<CloneResult[]>} with the engine's report as `isolation`, and `denialsSources`
 */
async function fork(mapper, n, { init, work, timeout, parallel, onClone, signal, python } = {}) {
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgument(`fork: n must be a positive integer, got ${n}`);
  if (typeof work !== 'string') throw new InvalidArgument('fork: work must be Python source (a string)');
  if (init != null && typeof init !== 'string') throw new InvalidArgument('fork: init must be Python source (a string)');
  const tag = newTag(); // every request of this fork: an abort cancels it
  /** @type {CloneResult[]} */
  const out = [];
  /** @type {Wire} */
  let resp;
  /** @type {Wire | null} */
  let asking = null;
  try {
    // (an abort before the first batch is an AbortError with the clones so far too: none)
    resp = await mapper.request(
      { op: 'fork', n, init_src: init ?? undefined, work_src: work, timeout, parallel, interpreter: python, tag },
      { signal },
    );
    while (resp.call) {
      asking = { op: 'answer', pending: resp.pending, call: resp.call.id, tag };
      for (const it of resp.call.items) {
        const c = clone(it);
        out[c.id] = c;
        if (onClone) onClone(c); // progress, in the order clones finish
      }
      resp = await mapper.request(asking, { signal });
      asking = null;
    }
  } catch (e) {
    // the engine still holds a batch for us: stop it (the template and clones die)
    if (asking) await mapper.request({ ...asking, abort: true }).catch(() => {});
    if (e instanceof AbortError) e.result = out;
    throw e;
  }
  Object.defineProperty(out, 'isolation', { value: resp.isolation ? camelKeys(resp.isolation) : null });
  Object.defineProperty(out, 'denialsSources', { value: sources(resp) });
  if (resp.error?.kind === 'cancelled' && signal?.aborted) {
    throw new AbortError('The operation was aborted', { cause: signal.reason, result: out });
  }
  if (resp.error) throw makeError(resp.error.kind, resp.error.message, { result: out });
  return out;
}

/**
 * fork() as an async iterable: `for await (const c of mapper.forkIter(n, opts))`
 * gets clones as they finish; `done` of `total` is the progress. Leaving the loop
 * (break, return, a throw) or aborting opts.signal kills the template and every
 * clone still running (the clones already yielded stay yours).
 */
class CloneStream {
  /** @param {Sandbox} mapper @param {number} n @param {ForkOptions} options */
  constructor(mapper, n, options) {
    const { init, work } = options;
    if (!Number.isInteger(n) || n < 1) throw new InvalidArgument(`forkIter: n must be a positive integer, got ${n}`);
    if (typeof work !== 'string') throw new InvalidArgument('forkIter: work must be Python source (a string)');
    if (init != null && typeof init !== 'string') throw new InvalidArgument('forkIter: init must be Python source (a string)');
    this._mapper = mapper;
    this._options = options;
    this._started = false;
    /** clones finished so far */
    this.done = 0;
    this.total = n;
    /** the template's isolation report, once every clone is in @type {Wire | null} */
    this.isolation = null;
    /** what the clones' denials report, by source, once every clone is in @type {Record<string, string>} */
    this.denialsSources = {};
  }

  async *[Symbol.asyncIterator]() {
    if (this._started) throw makeError('invalid_state', 'forkIter: a CloneStream is iterated once');
    this._started = true;
    const { init, work, timeout, parallel, signal, python } = this._options;
    const mapper = this._mapper;
    const tag = newTag();
    let resp = await mapper.request(
      { op: 'fork', n: this.total, init_src: init ?? undefined, work_src: work, timeout, parallel, interpreter: python, tag },
      { signal },
    );
    /** @type {Wire | null} */
    let asking = null;
    try {
      while (resp.call) {
        asking = { op: 'answer', pending: resp.pending, call: resp.call.id, tag };
        for (const it of resp.call.items) {
          this.done++;
          yield clone(it);
        }
        resp = await mapper.request(asking, { signal });
        asking = null;
      }
    } finally {
      // left early (or aborted): the engine still holds a batch for us; stop it
      if (asking) await mapper.request({ ...asking, abort: true }).catch(() => {});
    }
    this.isolation = resp.isolation ? camelKeys(resp.isolation) : null;
    this.denialsSources = sources(resp);
    if (resp.error?.kind === 'cancelled' && signal?.aborted) throw new AbortError('The operation was aborted', { cause: signal.reason });
    if (resp.error) throw makeError(resp.error.kind, resp.error.message);
  }
}

/**
 * Run argv in the reducer with the clones' stdout, in clone order, on its stdin.
 * @param {Sandbox} reducer
 * @param {string[]} argv
 * @param {Array<CloneResult | undefined>} clones
 * @param {Record<string, unknown>} [opts]
 */
function reduce(reducer, argv, clones, opts = {}) {
  const list = clones.filter((c) => c !== undefined && c !== null).map((c) => ({ id: c.id, stdout: c.stdout }));
  return reducer._run({ op: 'reduce', clones: list }, argv, opts);
}

// methods of Sandbox (declared in index.d.ts)
const proto = /** @type {any} */ (Sandbox.prototype);
/** @this {Sandbox} @param {number} n @param {ForkOptions} [options] */
proto.fork = function forkMethod(n, options) {
  return fork(this, n, options);
};
/** @this {Sandbox} @param {number} n @param {ForkOptions} [options] */
proto.forkIter = function forkIterMethod(n, options = {}) {
  return new CloneStream(this, n, options);
};
/** @this {Sandbox} @param {string[]} argv @param {Array<CloneResult | undefined>} clones @param {Record<string, unknown>} [options] */
proto.reduce = function reduceMethod(argv, clones, options) {
  return reduce(this, argv, clones, options);
};

module.exports = { fork, reduce, CloneStream };
