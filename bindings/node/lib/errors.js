'use strict';
// Error classes. Every error sandtrap raises is a SandtrapError with a stable
// `code`: the engine's status name (docs/protocol.md, "Status codes") or, for an
// aborted operation, Node's own 'ABORT_ERR'.

/**
 * One problem of a policy or a request, as the engine reports it: `field`, the
 * option (or request key) it is about, '' when it is about the input as a whole,
 * and `message`, what is wrong with it. As a string it reads "field: message".
 */
class Problem {
  /** @param {string} field @param {string} message */
  constructor(field, message) {
    this.field = field;
    this.message = message;
  }

  toString() {
    return this.field ? `${this.field}: ${this.message}` : this.message;
  }
}

/**
 * A Problem from a string (a problem of the input as a whole) or an engine {field, message}.
 * @param {unknown} p
 * @param {(field: string) => string} [rename]
 * @returns {Problem}
 */
function toProblem(p, rename = (f) => f) {
  if (p instanceof Problem) return p;
  if (p !== null && typeof p === 'object') {
    const { field, message } = /** @type {{field?: unknown, message?: unknown}} */ (p);
    return new Problem(rename(String(field ?? '')), String(message ?? ''));
  }
  return new Problem('', String(p));
}

/**
 * The human message of a list of problems, as the engine writes it.
 * @param {string} what
 * @param {ReadonlyArray<Problem|string>} problems
 */
function problemsMessage(what, problems) {
  if (problems.length === 1) return `${what}: ${problems[0]}`;
  return `${what} (${problems.length} problems):\n${problems.map((p) => `- ${p}`).join('\n')}`;
}

class SandtrapError extends Error {
  /** The engine's status name of the class (subclasses set it), or 'ABORT_ERR'. @type {string | undefined} */
  static code;
  /** The C ABI's status number of the class. @type {number | undefined} */
  static status;

  /**
   * @param {string} message
   * @param {{code?: string, status?: number, problems?: Array<Problem|string>, result?: unknown, cause?: unknown}} [info]
   */
  constructor(message, info = {}) {
    super(message, info.cause !== undefined ? { cause: info.cause } : undefined);
    /** @type {string} */
    this.code = info.code ?? /** @type {typeof SandtrapError} */ (this.constructor).code ?? 'internal';
    /** @type {number | undefined} */
    this.status; // declares the property for tsc (set only when known)
    if (info.status !== undefined) this.status = info.status;
    // every problem found at once (policy and request validation), as {field, message}
    /** @type {Problem[]} */
    this.problems = (info.problems && info.problems.length ? info.problems : [message]).map((p) => toProblem(p));
    // the engine's result when there was one (e.g. a spawn failure, an abort)
    /** @type {unknown} */
    this.result; // declares the property for tsc (set only when there is one)
    if (info.result !== undefined) this.result = info.result;
  }
}

/**
 * A subclass of SandtrapError named `name`, for the engine status `code`.
 * @param {string} name
 * @param {string} code
 * @param {number} status
 * @returns {typeof SandtrapError}
 */
function define(name, code, status) {
  const C = { [name]: class extends SandtrapError {} }[name];
  C.code = code;
  C.status = status;
  Object.defineProperty(C.prototype, 'name', { value: name, writable: true, configurable: true });
  return C;
}

Object.defineProperty(SandtrapError.prototype, 'name', { value: 'SandtrapError', writable: true, configurable: true });

const InvalidArgument = define('InvalidArgument', 'invalid_argument', -1);
const InvalidRequest = define('InvalidRequest', 'invalid_request', -2);
const PolicyError = define('PolicyError', 'invalid_policy', -3);
const IsolationUnavailable = define('IsolationUnavailable', 'isolation_unavailable', -4);
const NotFound = define('NotFound', 'not_found', -5);
const SpawnFailed = define('SpawnFailed', 'spawn_failed', -6);
const ForkedChild = define('ForkedChild', 'forked_child', -7);
const SandboxClosed = define('SandboxClosed', 'closed', -8);
const InternalError = define('InternalError', 'internal', -99);
/** result.check() of a run that did not succeed: err.result is that result. */
const ProcessFailed = define('ProcessFailed', 'process_failed', -100);
/** An operation the object's state does not allow (spawn while running, wait without spawn). */
const InvalidState = define('InvalidState', 'invalid_state', -101);

/** Node's convention for a cancelled operation: name 'AbortError', code 'ABORT_ERR',
 * the signal's reason as `cause`. The run's result (cancelled: true) is `err.result`. */
class AbortError extends SandtrapError {
  /**
   * @param {string} [message]
   * @param {{status?: number, problems?: Array<Problem|string>, result?: unknown, cause?: unknown}} [info]
   */
  constructor(message = 'The operation was aborted', info = {}) {
    super(message, { ...info, code: 'ABORT_ERR' });
  }
}
AbortError.code = 'ABORT_ERR';
Object.defineProperty(AbortError.prototype, 'name', { value: 'AbortError', writable: true, configurable: true });

const byCode = {
  invalid_argument: InvalidArgument,
  invalid_request: InvalidRequest,
  invalid_policy: PolicyError,
  isolation_unavailable: IsolationUnavailable,
  not_found: NotFound,
  spawn_failed: SpawnFailed,
  forked_child: ForkedChild,
  closed: SandboxClosed,
  internal: InternalError,
  process_failed: ProcessFailed,
  invalid_state: InvalidState,
};

/**
 * The error class for an engine status name ('not_found', …).
 * @param {string} code
 * @returns {typeof SandtrapError}
 */
function errorClass(code) {
  return Object.hasOwn(byCode, code) ? byCode[/** @type {keyof typeof byCode} */ (code)] : SandtrapError;
}

/**
 * A SandtrapError from an engine status name and message.
 * @param {string} code
 * @param {string} message
 * @param {{status?: number, problems?: Array<Problem|string>, result?: unknown, cause?: unknown}} [info]
 * @returns {SandtrapError}
 */
function makeError(code, message, info = {}) {
  const C = errorClass(code);
  return new C(message, { code, ...info });
}

/**
 * Convert an Error thrown by the addon ({code, status, message, problems}) into its
 * class; `rename` maps the engine's field names to this binding's.
 * @param {unknown} e
 * @param {{result?: unknown, cause?: unknown}} [info]
 * @param {(field: string) => string} [rename]
 * @returns {unknown} the SandtrapError, or `e` itself when it is not the addon's
 */
function fromNative(e, info = {}, rename = undefined) {
  if (e instanceof SandtrapError || !(e instanceof Error)) return e;
  const n = /** @type {Error & {code?: unknown, status?: number, problems?: unknown}} */ (e);
  if (typeof n.code !== 'string' || !(n.code in byCode)) return e;
  const problems = Array.isArray(n.problems) ? n.problems.map((p) => toProblem(p, rename)) : undefined;
  return makeError(n.code, n.message, { status: n.status, problems, ...info });
}

module.exports = {
  Problem,
  toProblem,
  problemsMessage,
  SandtrapError,
  InvalidArgument,
  InvalidRequest,
  PolicyError,
  IsolationUnavailable,
  NotFound,
  SpawnFailed,
  ForkedChild,
  SandboxClosed,
  InternalError,
  ProcessFailed,
  InvalidState,
  AbortError,
  errorClass,
  makeError,
  fromNative,
};
