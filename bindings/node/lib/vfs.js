'use strict';
// VirtualFS from JavaScript: an in-memory filesystem that the cooperative Python
// sandbox's code sees instead of the host's (its `open`, and imports of modules it
// wrote under the policy's moduleRoot). The files stay here, in this process: the
// worker asks for each operation with an `fs` host call (docs/protocol.md,
// "coop_open" `vfs`) that `serve` answers. The semantics are the guest runtime's
// MemoryBackend (core/guest/python/sandtrap_guest/vfs.py): absolute POSIX paths, `..`
// stops at `/`, directories implicit (a file's parents exist) or made with mkdir.

const MAX_PATH = 4096;
const OPS = { read: 1, write: 3, stat: 1, list: 1, mkdir: 1, remove: 1, rmdir: 1, rename: 2 };

/** An OSError of the sandbox, by the Python class the worker raises. */
class VfsError extends Error {
  /**
   * @param {string} type FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, OSError, ...
   * @param {string} message
   */
  constructor(type, message) {
    super(message);
    this.name = type;
  }
}

/** @type {Record<string, [string, string]>} errno name -> [Python class, strerror] */
const ERRORS = {
  ENOENT: ['FileNotFoundError', 'No such file or directory'],
  EEXIST: ['FileExistsError', 'File exists'],
  EISDIR: ['IsADirectoryError', 'Is a directory'],
  ENOTDIR: ['NotADirectoryError', 'Not a directory'],
  ENOTEMPTY: ['OSError', 'Directory not empty'],
  ENOSPC: ['OSError', 'No space left on device'],
  EINVAL: ['OSError', 'Invalid argument'],
  EBUSY: ['OSError', 'Device or resource busy'],
  ENAMETOOLONG: ['OSError', 'File name too long'],
};

/**
 * @param {string} code
 * @param {string} p
 */
function fail(code, p) {
  const [type, text] = ERRORS[code];
  return new VfsError(type, `[Errno ${code}] ${text}: '${p}'`);
}

/**
 * An absolute, normalized path inside the filesystem (`..` stops at `/`).
 * @param {unknown} p
 * @returns {string}
 */
function norm(p) {
  if (typeof p !== 'string') throw new VfsError('TypeError', `a path is a string, not ${p === null ? 'null' : typeof p}`);
  if (p.includes('\0')) throw new VfsError('ValueError', 'embedded null byte');
  if (p.length > MAX_PATH) throw fail('ENAMETOOLONG', p.slice(0, 64));
  /** @type {string[]} */
  const out = [];
  for (const part of p.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') out.pop();
    else out.push(part);
  }
  return '/' + out.join('/');
}

/** @param {string} p */
const dirname = (p) => (p.lastIndexOf('/') <= 0 ? '/' : p.slice(0, p.lastIndexOf('/')));

class VirtualFS {
  /**
   * @param {Record<string, string | Uint8Array>} [files] initial files: path -> content (a string is UTF-8)
   * @param {{maxSizeMb?: number, directory?: string}} [options] maxSizeMb bounds the total size (ENOSPC past it);
   *   directory: a host directory is the filesystem instead (DirectoryVirtualFS)
   */
  constructor(files = {}, { maxSizeMb, directory } = {}) {
    if (directory !== undefined && directory !== null) {
      // a host directory as the filesystem (Python's VirtualFS(directory=path))
      if (maxSizeMb !== undefined && maxSizeMb !== null) throw new TypeError('maxSizeMb applies to an in-memory VirtualFS, not a directory');
      return new DirectoryVirtualFS(directory, files);
    }
    /** @type {Map<string, Buffer>} */
    this.files = new Map();
    /** @type {Set<string>} */
    this.dirs = new Set(['/']);
    /** @type {Map<string, number>} */
    this.mtimes = new Map();
    if (maxSizeMb !== undefined && maxSizeMb !== null && !(typeof maxSizeMb === 'number' && maxSizeMb > 0)) {
      throw new TypeError('maxSizeMb must be a positive number');
    }
    /** @type {number | null} */
    this.maxSize = maxSizeMb ? Math.floor(maxSizeMb * 1024 * 1024) : null;
    for (const [p, c] of Object.entries(files ?? {})) this.files.set(norm(p), toBuffer(c));
  }

  /** @param {string} p */
  _isDir(p) {
    if (this.dirs.has(p)) return true;
    const pre = p === '/' ? '/' : p + '/';
    for (const k of this.files.keys()) if (k.startsWith(pre)) return true;
    for (const d of this.dirs) if (d.startsWith(pre)) return true;
    return false;
  }

  // ------------------------------------------------------------ the host's API
  /** @param {string} path @returns {Buffer} */
  read(path) {
    const p = norm(path);
    const data = this.files.get(p);
    if (data === undefined) throw fail(this._isDir(p) ? 'EISDIR' : 'ENOENT', p);
    return Buffer.from(data);
  }

  /** @param {string} path */
  readText(path) {
    return this.read(path).toString('utf8');
  }

  /**
   * Write content (a string is UTF-8), making parent directories; {append: true} appends.
   * @param {string} path
   * @param {string | Uint8Array} content
   * @param {{append?: boolean}} [options]
   */
  write(path, content, { append = false } = {}) {
    const p = norm(path);
    const parts = dirname(p).split('/').filter(Boolean);
    let cur = '';
    for (const part of parts) {
      cur += '/' + part;
      if (this.files.has(cur)) throw fail('ENOTDIR', p);
      if (!this._isDir(cur)) this.dirs.add(cur);
    }
    this._write(p, toBuffer(content), append);
  }

  /**
   * The names in a directory (recursive: paths relative to it).
   * @param {string} [path]
   * @param {{recursive?: boolean}} [options]
   * @returns {string[]}
   */
  list(path = '/', { recursive = false } = {}) {
    const p = norm(path);
    const names = this._list(p);
    if (!recursive) return names;
    /** @type {string[]} */
    const out = [];
    for (const n of names) {
      out.push(n);
      const child = p === '/' ? '/' + n : p + '/' + n;
      if (this.isDir(child)) out.push(...this.list(child, { recursive: true }).map((s) => n + '/' + s));
    }
    return out;
  }

  /** @param {string} path */
  exists(path) {
    return this._stat(norm(path)) !== null;
  }

  /** @param {string} path */
  isFile(path) {
    return this.files.has(norm(path));
  }

  /** @param {string} path */
  isDir(path) {
    const p = norm(path);
    return !this.files.has(p) && this._isDir(p);
  }

  /** @param {string} path */
  getSize(path) {
    return this.read(path).length;
  }

  /** @param {string} path */
  remove(path) {
    this._remove(norm(path));
  }

  /**
   * @param {string} path
   * @param {{parents?: boolean, existOk?: boolean}} [options]
   */
  mkdir(path, { parents = false, existOk = false } = {}) {
    const p = norm(path);
    if (parents) {
      const parts = p.split('/').filter(Boolean);
      let cur = '';
      parts.forEach((part, i) => {
        cur += '/' + part;
        if (this.files.has(cur)) throw fail('EEXIST', cur);
        if (!this._isDir(cur)) this.dirs.add(cur);
        else if (i === parts.length - 1 && !existOk) throw fail('EEXIST', p);
      });
      return;
    }
    try {
      this._mkdir(p);
    } catch (e) {
      if (!(existOk && e instanceof VfsError && e.name === 'FileExistsError' && this.isDir(p))) throw e;
    }
  }

  /** @param {string} path */
  rmdir(path) {
    this._rmdir(norm(path));
  }

  /**
   * @param {string} src
   * @param {string} dst
   */
  rename(src, dst) {
    this._rename(norm(src), norm(dst));
  }

  // -------------------------------------------- the backend (normalized paths)
  /**
   * @param {string} p
   * @param {Buffer} data
   * @param {boolean} append
   */
  _write(p, data, append) {
    if (p === '/' || this._isDir(p)) throw fail('EISDIR', p);
    const parent = dirname(p);
    if (parent !== '/' && !this._isDir(parent)) throw fail(this.files.has(parent) ? 'ENOTDIR' : 'ENOENT', p);
    const next = append && this.files.has(p) ? Buffer.concat([/** @type {Buffer} */ (this.files.get(p)), data]) : data;
    if (this.maxSize !== null) {
      let total = next.length;
      for (const [k, v] of this.files) if (k !== p) total += v.length;
      if (total > this.maxSize) throw fail('ENOSPC', p);
    }
    this.files.set(p, next);
    this.mtimes.set(p, Date.now() / 1000);
  }

  /** @param {string} p @returns {[string, number, number] | null} */
  _stat(p) {
    const data = this.files.get(p);
    if (data !== undefined) return ['file', data.length, this.mtimes.get(p) ?? 0];
    if (this._isDir(p)) return ['dir', 0, this.mtimes.get(p) ?? 0];
    return null;
  }

  /** @param {string} p @returns {string[]} */
  _list(p) {
    if (this.files.has(p)) throw fail('ENOTDIR', p);
    if (!this._isDir(p)) throw fail('ENOENT', p);
    const pre = p === '/' ? '/' : p + '/';
    const names = new Set();
    for (const k of [...this.files.keys(), ...this.dirs]) {
      if (k.startsWith(pre) && k.length > pre.length) names.add(k.slice(pre.length).split('/')[0]);
    }
    return [...names].sort();
  }

  /** @param {string} p */
  _mkdir(p) {
    if (this.files.has(p) || this._isDir(p)) throw fail('EEXIST', p);
    if (!this._isDir(dirname(p))) throw fail('ENOENT', p);
    this.dirs.add(p);
    this.mtimes.set(p, Date.now() / 1000);
  }

  /** @param {string} p */
  _remove(p) {
    if (!this.files.has(p)) throw fail(this._isDir(p) ? 'EISDIR' : 'ENOENT', p);
    this.files.delete(p);
    this.mtimes.delete(p);
  }

  /** @param {string} p */
  _rmdir(p) {
    if (this.files.has(p)) throw fail('ENOTDIR', p);
    if (p === '/') throw fail('EBUSY', p);
    if (!this._isDir(p)) throw fail('ENOENT', p);
    const pre = p + '/';
    for (const k of [...this.files.keys(), ...this.dirs]) if (k.startsWith(pre)) throw fail('ENOTEMPTY', p);
    this.dirs.delete(p);
  }

  /**
   * @param {string} src
   * @param {string} dst
   */
  _rename(src, dst) {
    const data = this.files.get(src);
    if (data !== undefined) {
      if (this._isDir(dst)) throw fail('EISDIR', dst);
      const parent = dirname(dst);
      if (parent !== '/' && !this._isDir(parent)) throw fail('ENOENT', dst);
      this.files.delete(src);
      this.files.set(dst, data);
      this.mtimes.set(dst, this.mtimes.get(src) ?? Date.now() / 1000);
      this.mtimes.delete(src);
      return;
    }
    if (src === '/' || !this._isDir(src)) throw fail('ENOENT', src);
    if (dst === src || dst.startsWith(src + '/')) throw fail('EINVAL', dst);
    if (this.files.has(dst) || (this._isDir(dst) && this._list(dst).length)) throw fail('ENOTEMPTY', dst);
    const pre = src + '/';
    for (const k of [...this.files.keys()]) {
      if (k.startsWith(pre)) {
        this.files.set(dst + k.slice(src.length), /** @type {Buffer} */ (this.files.get(k)));
        this.files.delete(k);
      }
    }
    for (const d of [...this.dirs]) {
      if (d === src || d.startsWith(pre)) {
        this.dirs.delete(d);
        this.dirs.add(dst + d.slice(src.length));
      }
    }
  }
}

const nodefs = require('node:fs');
const nodepath = require('node:path');

/** @param {unknown} e @param {string} p @returns {Error} */
function fromOs(e, p) {
  if (e instanceof VfsError) return e;
  const code = /** @type {{code?: string}} */ (e)?.code;
  if (code === 'EACCES' || code === 'EPERM' || code === 'ELOOP') return new VfsError('PermissionError', `[Errno ${code}] Permission denied: '${p}'`);
  if (code && Object.hasOwn(ERRORS, code)) return fail(code, p);
  return new VfsError('OSError', `${code ?? 'error'}: '${p}'`);
}

/**
 * A VirtualFS backed by a host directory (`new VirtualFS(files, {directory})`): the
 * semantics of Python's `VirtualFS(directory=path)` (vfs.py DirectoryBackend). Every
 * path is resolved inside the directory — symlinks too — and one that leaves it is a
 * PermissionError; writes never follow a symlink at the leaf (O_NOFOLLOW).
 */
class DirectoryVirtualFS extends VirtualFS {
  /**
   * @param {string} directory
   * @param {Record<string, string | Uint8Array>} [files] written into it first
   */
  constructor(directory, files = {}) {
    super({});
    if (typeof directory !== 'string' || directory === '') throw new TypeError('directory must be a path');
    nodefs.mkdirSync(directory, { recursive: true });
    /** @type {string} */
    this.root = nodefs.realpathSync(directory);
    for (const [p, c] of Object.entries(files ?? {})) this.write(p, c);
  }

  /**
   * The host path of normalized path p: resolved (leaf: the entry itself too; else
   * only its parent), and inside the root.
   * @param {string} p
   * @param {boolean} [leaf]
   */
  _real(p, leaf = true) {
    const rel = p.replace(/^\/+/, '');
    /** @type {(q: string) => string} */
    const resolve = (q) => {
      try {
        return nodefs.realpathSync(q);
      } catch {
        // a path that does not exist yet: resolve what exists of it
        const parent = nodepath.dirname(q);
        return parent === q ? q : nodepath.join(resolve(parent), nodepath.basename(q));
      }
    };
    const real = leaf ? resolve(nodepath.join(this.root, rel)) : nodepath.join(resolve(nodepath.join(this.root, nodepath.dirname(rel))), rel ? nodepath.basename(rel) : '');
    const r = real.replace(/\/+$/, '') || '/';
    if (r !== this.root && !r.startsWith(this.root + nodepath.sep)) {
      throw new VfsError('PermissionError', `[Errno EACCES] path escapes the filesystem's directory: '${p}'`);
    }
    return r;
  }

  /** @param {string} p */
  _isDir(p) {
    const st = this._stat(p);
    return st !== null && st[0] === 'dir';
  }

  /** @param {string} path @returns {Buffer} */
  read(path) {
    const p = norm(path);
    const real = this._real(p);
    try {
      return nodefs.readFileSync(real);
    } catch (e) {
      throw fromOs(e, p);
    }
  }

  /**
   * @param {string} path
   * @param {string | Uint8Array} content
   * @param {{append?: boolean}} [options]
   */
  write(path, content, { append = false } = {}) {
    const p = norm(path);
    const parent = dirname(p);
    if (parent !== '/') {
      const realParent = this._real(parent);
      try {
        nodefs.mkdirSync(realParent, { recursive: true });
      } catch (e) {
        throw fromOs(e, p);
      }
    }
    this._write(p, toBuffer(content), append);
  }

  /** @param {string} path */
  isFile(path) {
    const st = this._stat(norm(path));
    return st !== null && st[0] === 'file';
  }

  /** @param {string} path */
  isDir(path) {
    return this._isDir(norm(path));
  }

  /**
   * @param {string} path
   * @param {{parents?: boolean, existOk?: boolean}} [options]
   */
  mkdir(path, { parents = false, existOk = false } = {}) {
    const p = norm(path);
    if (!parents) {
      try {
        this._mkdir(p);
      } catch (e) {
        if (!(existOk && e instanceof VfsError && e.name === 'FileExistsError' && this.isDir(p))) throw e;
      }
      return;
    }
    if (this._isDir(p) && !existOk) throw fail('EEXIST', p);
    try {
      nodefs.mkdirSync(this._real(p), { recursive: true });
    } catch (e) {
      throw fromOs(e, p);
    }
  }

  /**
   * @param {string} p
   * @param {Buffer} data
   * @param {boolean} append
   */
  _write(p, data, append) {
    const real = this._real(p);
    const flags = nodefs.constants.O_WRONLY | nodefs.constants.O_CREAT | nodefs.constants.O_NOFOLLOW | (append ? nodefs.constants.O_APPEND : nodefs.constants.O_TRUNC);
    let fd;
    try {
      fd = nodefs.openSync(real, flags, 0o644);
      nodefs.writeSync(fd, data);
    } catch (e) {
      throw fromOs(e, p);
    } finally {
      if (fd !== undefined) nodefs.closeSync(fd);
    }
  }

  /** @param {string} p @returns {[string, number, number] | null} */
  _stat(p) {
    let st;
    try {
      st = nodefs.statSync(this._real(p));
    } catch (e) {
      if (e instanceof VfsError) throw e;
      return null;
    }
    return [st.isDirectory() ? 'dir' : 'file', st.isDirectory() ? 0 : st.size, st.mtimeMs / 1000];
  }

  /** @param {string} p @returns {string[]} */
  _list(p) {
    try {
      return nodefs.readdirSync(this._real(p)).sort();
    } catch (e) {
      throw fromOs(e, p);
    }
  }

  /** @param {string} p */
  _mkdir(p) {
    try {
      nodefs.mkdirSync(this._real(p, false));
    } catch (e) {
      throw fromOs(e, p);
    }
  }

  /** @param {string} p */
  _remove(p) {
    const real = this._real(p, false);
    try {
      if (nodefs.lstatSync(real).isDirectory()) throw fail('EISDIR', p);
      nodefs.unlinkSync(real);
    } catch (e) {
      throw e instanceof VfsError ? e : fromOs(e, p);
    }
  }

  /** @param {string} p */
  _rmdir(p) {
    if (p === '/') throw fail('EBUSY', p);
    try {
      nodefs.rmdirSync(this._real(p, false));
    } catch (e) {
      throw fromOs(e, p);
    }
  }

  /**
   * @param {string} src
   * @param {string} dst
   */
  _rename(src, dst) {
    try {
      nodefs.renameSync(this._real(src, false), this._real(dst, false));
    } catch (e) {
      throw e instanceof VfsError ? e : fromOs(e, src);
    }
  }
}

/**
 * The host's side of an `fs` host call: run op with args after checking them (they
 * come from the worker: hostile). Throws a VfsError for the sandboxed code.
 * @param {VirtualFS} fs
 * @param {unknown} op
 * @param {unknown} args
 * @returns {unknown}
 */
function serve(fs, op, args) {
  if (typeof op !== 'string' || !Object.hasOwn(OPS, op) || !Array.isArray(args)) {
    throw new VfsError('ValueError', `no filesystem operation ${JSON.stringify(op)}`);
  }
  if (args.length !== OPS[/** @type {keyof typeof OPS} */ (op)]) throw new VfsError('ValueError', `${op} takes ${OPS[/** @type {keyof typeof OPS} */ (op)]} arguments`);
  const paths = (op === 'rename' ? args.slice(0, 2) : args.slice(0, 1)).map((p) => {
    if (typeof p !== 'string') throw new VfsError('TypeError', 'paths are str');
    return norm(p);
  });
  switch (op) {
    case 'read':
      return fs.read(paths[0]);
    case 'write':
      if (!(args[1] instanceof Uint8Array) || typeof args[2] !== 'boolean') {
        throw new VfsError('TypeError', 'write takes a path, bytes and a bool');
      }
      fs._write(paths[0], Buffer.from(args[1]), args[2]);
      return null;
    case 'stat':
      return fs._stat(paths[0]);
    case 'list':
      return fs._list(paths[0]);
    case 'mkdir':
      fs._mkdir(paths[0]);
      return null;
    case 'remove':
      fs._remove(paths[0]);
      return null;
    case 'rmdir':
      fs._rmdir(paths[0]);
      return null;
    default:
      fs._rename(paths[0], paths[1]);
      return null;
  }
}

/** @param {unknown} c @returns {Buffer} */
function toBuffer(c) {
  if (typeof c === 'string') return Buffer.from(c, 'utf8');
  if (c instanceof Uint8Array) return Buffer.from(c);
  throw new TypeError('file content is a string or a Uint8Array');
}

module.exports = { VirtualFS, DirectoryVirtualFS, VfsError, serve, norm };
