"""VirtualFS: a filesystem the sandboxed code sees instead of the host's.

A backend keeps the files; a view (one per session) is what the sandbox's ``open``,
its granted ``os`` / ``os.path`` / ``io.open`` functions and ``pathlib.Path`` use
instead of the real filesystem:

* ``MemoryBackend``: in memory, in a mapping ``{path: bytes}`` (the seed's
  ``VirtualFS(state)``);
* ``DirectoryBackend``: a host directory (every path resolved, symlinks included,
  and kept inside it);
* ``RemoteBackend``: in a worker (``process``/``kernel``), every operation is a host
  call (``{"op": "fs", "name": op, "args": [...]}``) that the host answers from its
  own backend: the data stays in the host and crosses as msgpack (bytes, str, ints),
  never pickle. ``serve()`` is the host's side.

Paths inside are absolute POSIX paths (``/`` is the filesystem's root; ``..`` stops
there). Directories of a ``MemoryBackend`` are implicit (a file's parents exist) or
made with ``mkdir``. A file opened for writing is written back when it is flushed or
closed, and when the exec ends (files left open are closed then: no write is lost).
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import posixpath
import stat as _stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar, Union

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer
    from typing_extensions import Self

OPS = ("read", "write", "stat", "list", "mkdir", "remove", "rmdir", "rename")
MAX_PATH = 4096

# what the stand-ins take for a path (what the functions they replace take)
PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
StrPath = Union[str, "os.PathLike[str]"]
_C = TypeVar("_C", bound=type)


class Backend(Protocol):
    """What keeps a VirtualFS's files (paths normalized by ``norm``)."""

    def read(self, p: str) -> bytes: ...
    def write(self, p: str, data: bytes, append: bool = False) -> None: ...
    def stat(self, p: str) -> builtins.list[Any] | None: ...
    def list(self, p: str) -> builtins.list[str]: ...
    def mkdir(self, p: str) -> None: ...
    def remove(self, p: str) -> None: ...
    def rmdir(self, p: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...


def _oserror(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


def norm(path: Any, cwd: str = "/") -> str:
    """An absolute, normalized path inside the filesystem (``..`` stops at ``/``)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        raise TypeError(f"expected str, bytes or os.PathLike object, not {type(path).__name__}")
    if "\0" in path:
        raise ValueError("embedded null byte")
    if len(path) > MAX_PATH:
        raise _oserror(errno.ENAMETOOLONG, path[:64])
    if not path.startswith("/"):
        path = posixpath.join(cwd, path)
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return "/" + "/".join(out)


# ---------------------------------------------------------------------- backends
class MemoryBackend:
    """Files in a mapping ``{path: bytes}`` (given, or a new dict); directories made
    with ``mkdir`` in a set (parents of files are directories anyway)."""

    def __init__(self, state: MutableMapping[str, Any] | None = None, max_size: int | None = None) -> None:
        self.files: MutableMapping[str, Any] = {} if state is None else state
        for k in list(self.files):
            if not isinstance(k, str) or not isinstance(self.files[k], (bytes, bytearray)):
                raise TypeError("a VirtualFS state maps str paths to bytes")
            if k != norm(k):
                self.files[norm(k)] = bytes(self.files.pop(k))
        self.dirs: set[str] = {"/"}
        self.mtimes: dict[str, float] = {}
        self.max_size = max_size
        self.lock = threading.Lock()

    def _is_dir(self, p: str) -> bool:
        if p in self.dirs:
            return True
        pre = p.rstrip("/") + "/"
        return any(k.startswith(pre) for k in self.files) or any(d.startswith(pre) for d in self.dirs)

    def read(self, p: str) -> bytes:
        with self.lock:
            data = self.files.get(p)
            if data is None:
                raise _oserror(errno.EISDIR if self._is_dir(p) else errno.ENOENT, p)
            return bytes(data)

    def write(self, p: str, data: bytes, append: bool = False) -> None:
        with self.lock:
            if p == "/" or self._is_dir(p):
                raise _oserror(errno.EISDIR, p)
            parent = posixpath.dirname(p)
            if parent != "/" and not self._is_dir(parent):
                if parent in self.files:
                    raise _oserror(errno.ENOTDIR, p)
                raise _oserror(errno.ENOENT, p)
            new = (bytes(self.files.get(p, b"")) + data) if append else bytes(data)
            if self.max_size is not None:
                total = sum(len(v) for k, v in self.files.items() if k != p) + len(new)
                if total > self.max_size:
                    raise _oserror(errno.ENOSPC, p)
            self.files[p] = new
            self.mtimes[p] = time.time()

    def stat(self, p: str) -> list[Any] | None:
        with self.lock:
            data = self.files.get(p)
            if data is not None:
                return ["file", len(data), self.mtimes.get(p, 0.0)]
            if self._is_dir(p):
                return ["dir", 0, self.mtimes.get(p, 0.0)]
            return None

    def list(self, p: str) -> list[str]:
        with self.lock:
            if p in self.files:
                raise _oserror(errno.ENOTDIR, p)
            if not self._is_dir(p):
                raise _oserror(errno.ENOENT, p)
            pre = p.rstrip("/") + "/"
            names = {k[len(pre) :].split("/", 1)[0] for k in (*self.files, *self.dirs) if k.startswith(pre)}
            names.discard("")
            return sorted(names)

    def mkdir(self, p: str) -> None:
        with self.lock:
            if p in self.files or self._is_dir(p):
                raise _oserror(errno.EEXIST, p)
            parent = posixpath.dirname(p)
            if not self._is_dir(parent):
                raise _oserror(errno.ENOENT, p)
            self.dirs.add(p)
            self.mtimes[p] = time.time()

    def remove(self, p: str) -> None:
        with self.lock:
            if p not in self.files:
                raise _oserror(errno.EISDIR if self._is_dir(p) else errno.ENOENT, p)
            del self.files[p]
            self.mtimes.pop(p, None)

    def rmdir(self, p: str) -> None:
        with self.lock:
            if p in self.files:
                raise _oserror(errno.ENOTDIR, p)
            if not self._is_dir(p) or p == "/":
                raise _oserror(errno.ENOENT if p != "/" else errno.EBUSY, p)
            pre = p + "/"
            if any(k.startswith(pre) for k in (*self.files, *self.dirs)):
                raise _oserror(errno.ENOTEMPTY, p)
            self.dirs.discard(p)

    def rename(self, src: str, dst: str) -> None:
        with self.lock:
            if src in self.files:
                if self._is_dir(dst):
                    raise _oserror(errno.EISDIR, dst)
                self.files[dst] = self.files.pop(src)
                self.mtimes[dst] = self.mtimes.pop(src, time.time())
                return
            if not self._is_dir(src) or src == "/":
                raise _oserror(errno.ENOENT, src)
            if dst == src or dst.startswith(src + "/"):
                raise _oserror(errno.EINVAL, dst)
            if dst in self.files or (self._is_dir(dst) and self.list_unlocked(dst)):
                raise _oserror(errno.ENOTEMPTY, dst)
            pre = src + "/"
            for k in [k for k in self.files if k.startswith(pre)]:
                self.files[dst + k[len(src) :]] = self.files.pop(k)
            for d in [d for d in self.dirs if d == src or d.startswith(pre)]:
                self.dirs.discard(d)
                self.dirs.add(dst + d[len(src) :])

    def list_unlocked(self, p: str) -> bool:
        pre = p + "/"
        return any(k.startswith(pre) for k in (*self.files, *self.dirs))


class DirectoryBackend:
    """A host directory: every path is resolved (symlinks too) and must stay inside
    it, or the operation fails with ``PermissionError``."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.root = os.path.realpath(os.fspath(directory))
        os.makedirs(self.root, exist_ok=True)

    def _real(self, p: str, leaf: bool = True) -> str:
        rel = p.lstrip("/")
        if leaf:
            real = os.path.realpath(os.path.join(self.root, rel))
        else:  # the entry itself (remove, rename): resolve its parent only
            parent = os.path.realpath(os.path.join(self.root, posixpath.dirname(rel)))
            real = os.path.join(parent, posixpath.basename(rel)) if rel else parent
        if real != self.root and not real.startswith(self.root + os.sep):
            raise PermissionError(errno.EACCES, "path escapes the filesystem's directory", p)
        return real

    def read(self, p: str) -> bytes:
        with open(self._real(p), "rb") as f:
            return f.read()

    def write(self, p: str, data: bytes, append: bool = False) -> None:
        real = self._real(p)
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    def stat(self, p: str) -> list[Any] | None:
        try:
            st = os.stat(self._real(p))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return ["dir" if _stat.S_ISDIR(st.st_mode) else "file", st.st_size, st.st_mtime]

    def list(self, p: str) -> list[str]:
        return sorted(os.listdir(self._real(p)))

    def mkdir(self, p: str) -> None:
        os.mkdir(self._real(p, leaf=False))

    def remove(self, p: str) -> None:
        os.remove(self._real(p, leaf=False))

    def rmdir(self, p: str) -> None:
        if p == "/":
            raise _oserror(errno.EBUSY, p)
        os.rmdir(self._real(p, leaf=False))

    def rename(self, src: str, dst: str) -> None:
        os.rename(self._real(src, leaf=False), self._real(dst, leaf=False))


_ERRORS = {
    c.__name__: c
    for c in (
        FileNotFoundError,
        FileExistsError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
        OSError,
        ValueError,
        TypeError,
    )
}
_ERRNO = {
    "FileNotFoundError": errno.ENOENT,
    "FileExistsError": errno.EEXIST,
    "IsADirectoryError": errno.EISDIR,
    "NotADirectoryError": errno.ENOTDIR,
    "PermissionError": errno.EACCES,
}


class RemoteBackend:
    """In a worker: each operation is a host call answered by the host's backend.

    Within one exec the worker remembers the content of the files it wrote or read
    (up to ``CACHE_BYTES`` in all), and a read of one is answered from that memory:
    the host's VirtualFS changes during an exec only through the worker's own
    operations (which update or drop what is remembered) or through host code the
    exec calls — so the worker forgets everything when it calls the host (a granted
    function, a host object) and when an exec begins or ends (``forget``). A write,
    a stat, a listing and everything else still goes to the host, errors and
    ``max_size_mb`` included."""

    CACHE_BYTES = 8 << 20

    def __init__(self, call: Callable[[str, list[Any]], Any]) -> None:
        self._call = call
        self._known: dict[str, bytes] = {}
        self._known_bytes = 0
        # files opened for writing whose truncation is not sent yet (defer_truncate)
        self._deferred: set[str] = set()

    def forget(self) -> None:
        """Before host code runs, and at an exec's start and end: the deferred
        truncations are sent, and nothing is remembered any more."""
        self._flush_deferred()
        self._known.clear()
        self._known_bytes = 0

    def _flush_deferred(self) -> None:
        while self._deferred:
            p = self._deferred.pop()
            try:
                self._do("write", p, b"", False)
            except OSError:
                self._forget_path(p)

    def defer_truncate(self, p: str) -> bool:
        """``open(p, "w")`` of a file this exec wrote or read (so it exists, its
        directory too, and writing it worked): the truncation is not sent now but
        with the file's first write back (its close), or before anything else could
        see the file — a stat of it, host code, the exec's end. False: send it now."""
        if p not in self._known:
            return False
        self._deferred.add(p)
        self._remember(p, b"")
        return True

    def _remember(self, p: str, data: bytes) -> None:
        old = self._known.pop(p, None)
        if old is not None:
            self._known_bytes -= len(old)
        if self._known_bytes + len(data) <= self.CACHE_BYTES:
            self._known[p] = data
            self._known_bytes += len(data)

    def _do(self, op: str, *args: Any) -> Any:
        return self._call(op, list(args))

    def read(self, p: str) -> bytes:
        data = self._known.get(p)
        if data is not None:
            return data
        data = self._do("read", p)
        if not isinstance(data, bytes):
            raise OSError(errno.EIO, "the host sent no bytes", p)
        self._remember(p, data)
        return data

    def write(self, p: str, data: bytes, append: bool = False) -> None:
        data = bytes(data)
        if p in self._deferred:
            self._deferred.discard(p)
            if append:  # the truncation first, then what is appended
                self._do("write", p, b"", False)
        prev = self._known.pop(p, None) if append else None
        if prev is not None:
            self._known_bytes -= len(prev)
        else:
            self._forget_path(p)
        self._do("write", p, data, bool(append))
        if not append:
            self._remember(p, data)
        elif prev is not None:
            self._remember(p, prev + data)

    def _forget_path(self, p: str) -> None:
        old = self._known.pop(p, None)
        if old is not None:
            self._known_bytes -= len(old)

    def stat(self, p: str) -> list[Any] | None:
        if p in self._deferred:  # its size is 0 now
            self._deferred.discard(p)
            self._do("write", p, b"", False)
        r = self._do("stat", p)
        if r is None:
            return None
        if not (isinstance(r, (list, tuple)) and len(r) == 3 and r[0] in ("file", "dir")):
            raise OSError(errno.EIO, "the host sent a bad stat", p)
        return [r[0], int(r[1]), float(r[2])]

    def list(self, p: str) -> builtins.list[str]:
        r = self._do("list", p)
        if not isinstance(r, (list, tuple)) or not all(isinstance(n, str) for n in r):
            raise OSError(errno.EIO, "the host sent a bad listing", p)
        return list(r)

    def mkdir(self, p: str) -> None:
        self._do("mkdir", p)

    def remove(self, p: str) -> None:
        self._deferred.discard(p)
        self._forget_path(p)
        self._do("remove", p)

    def rmdir(self, p: str) -> None:
        self.forget()  # (what was below it)
        self._do("rmdir", p)

    def rename(self, src: str, dst: str) -> None:
        self.forget()  # a directory moves what is below it
        self._do("rename", src, dst)


def remote_error(type_name: str, message: str) -> BaseException:
    """The exception a worker raises for a host's answer to an fs call."""
    cls = _ERRORS.get(type_name, OSError)
    if issubclass(cls, OSError):
        return cls(_ERRNO.get(type_name, errno.EIO), message)
    return cls(message)


def serve(backend: Backend, op: object, args: object) -> Any:
    """The host's side of an fs host call: run ``op`` on ``backend`` after checking
    the arguments (they come from the worker: hostile)."""
    if not isinstance(op, str) or op not in OPS or not isinstance(args, list):
        raise ValueError(f"no filesystem operation {op!r}")
    want = {"read": 1, "stat": 1, "list": 1, "mkdir": 1, "remove": 1, "rmdir": 1, "write": 3, "rename": 2}[op]
    if len(args) != want:
        raise ValueError(f"{op} takes {want} arguments")
    paths = args[:2] if op == "rename" else args[:1]
    if not all(isinstance(p, str) for p in paths):
        raise TypeError("paths are str")
    paths = [norm(p) for p in paths]
    if op == "write":
        if not isinstance(args[1], bytes) or not isinstance(args[2], bool):
            raise TypeError("write takes a path, bytes and a bool")
        return backend.write(paths[0], args[1], args[2])
    if op == "rename":
        return backend.rename(paths[0], paths[1])
    return getattr(backend, op)(paths[0])


def backend_of(fs: object) -> Any:
    """The backend of a VirtualFS, or the backend itself."""
    return getattr(fs, "backend", fs)


# -------------------------------------------------------------------- files
_WRITEBACK: weakref.WeakKeyDictionary[io.BytesIO, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def _open_to_sandbox(cls: _C) -> _C:
    from .gates import open_to_sandbox

    return open_to_sandbox(cls)


@_open_to_sandbox
class VFile(io.BytesIO):
    """A file of a VirtualFS opened for writing: its content is written back when
    flushed, closed, or when the exec ends. (What it writes back to is not
    reachable from the object: it is held outside it.)"""

    def _sync(self) -> None:
        entry = _WRITEBACK.get(self)
        if entry is None or self.closed:
            return
        backend, path, state = entry
        if state["dirty"]:
            backend.write(path, self.getvalue(), False)
            state["dirty"] = False

    def write(self, b: ReadableBuffer, /) -> int:
        n = io.BytesIO.write(self, b)
        entry = _WRITEBACK.get(self)
        if entry is not None:
            entry[2]["dirty"] = True
        return n

    def writelines(self, lines: Iterable[ReadableBuffer], /) -> None:
        for line in lines:
            self.write(line)

    def truncate(self, size: int | None = None, /) -> int:
        n = io.BytesIO.truncate(self, size)
        entry = _WRITEBACK.get(self)
        if entry is not None:
            entry[2]["dirty"] = True
        return n

    def flush(self) -> None:
        io.BytesIO.flush(self)
        self._sync()

    def close(self) -> None:
        if not self.closed:
            try:
                self._sync()
            finally:
                _WRITEBACK.pop(self, None)
                io.BytesIO.close(self)

    def readable(self) -> bool:
        entry = _WRITEBACK.get(self)
        return bool(entry and entry[2]["read"]) and not self.closed

    @property
    def name(self) -> str:
        entry = _WRITEBACK.get(self)
        return entry[1] if entry else "<closed>"


def _parse_mode(mode: str) -> tuple[str, bool, bool]:
    if not isinstance(mode, str) or not mode or len(set(mode)) != len(mode) or set(mode) - set("rwaxbt+"):
        raise ValueError(f"invalid mode: {mode!r}")
    kinds = [c for c in mode if c in "rwax"]
    if len(kinds) != 1 or ("b" in mode and "t" in mode):
        raise ValueError(f"invalid mode: {mode!r}")
    return kinds[0], "+" in mode, "b" in mode


class VFSView:
    """What one session's sandboxed code sees of a backend: paths relative to its
    own working directory, open files (written back at the exec's end at the
    latest), and the functions that replace ``open``, ``os``, ``os.path``,
    ``io.open`` and ``pathlib.Path``."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.cwd = "/"
        self.open_files: weakref.WeakSet[io.IOBase] = weakref.WeakSet()

    def path(self, p: PathArg) -> str:
        return norm(p, self.cwd)

    # the operations
    def stat(self, p: PathArg) -> list[Any] | None:
        return self.backend.stat(self.path(p))

    def exists(self, p: PathArg) -> bool:
        try:
            return self.stat(p) is not None
        except (OSError, ValueError, TypeError):
            return False

    def isfile(self, p: PathArg) -> bool:
        try:
            st = self.stat(p)
        except (OSError, ValueError, TypeError):
            return False
        return st is not None and st[0] == "file"

    def isdir(self, p: PathArg) -> bool:
        try:
            st = self.stat(p)
        except (OSError, ValueError, TypeError):
            return False
        return st is not None and st[0] == "dir"

    def open(
        self,
        file: PathArg | int,
        mode: str = "r",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        closefd: bool = True,
        opener: Callable[[str, int], int] | None = None,
    ) -> IO[Any]:
        if opener is not None or closefd is not True:
            raise PermissionError(errno.EACCES, "opener/closefd are not available in the sandbox")
        if isinstance(file, (int, bool)):
            raise PermissionError(errno.EACCES, "file descriptors cannot be opened in the sandbox")
        kind, plus, binary = _parse_mode(mode)
        if binary and (encoding is not None or errors is not None or newline is not None):
            raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
        p = self.path(file)
        buf: io.BytesIO
        if kind == "r" and not plus:  # one operation: the read says what is missing
            try:
                buf = io.BytesIO(self.backend.read(p))
            except OSError as e:
                raise type(e)(e.errno, os.strerror(e.errno) if e.errno else str(e), os.fspath(file)) from None
        elif kind == "w" and not plus:  # one operation now (create/truncate), one at close
            buf = VFile(b"")
            _WRITEBACK[buf] = (self.backend, p, {"dirty": True, "read": False})
            defer = getattr(self.backend, "defer_truncate", None)
            try:
                if defer is None or not defer(p):  # (a worker's known file: at close only)
                    buf._sync()
            except OSError as e:
                _WRITEBACK.pop(buf, None)
                raise type(e)(e.errno, os.strerror(e.errno) if e.errno else str(e), os.fspath(file)) from None
            self.open_files.add(buf)
        else:
            st = self.backend.stat(p)
            if st is not None and st[0] == "dir":
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(file))
            if kind == "x" and st is not None:
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(file))
            if kind == "r" and st is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(file))
            initial = self.backend.read(p) if (st is not None and kind in "ra") else b""
            buf = VFile(initial)
            _WRITEBACK[buf] = (self.backend, p, {"dirty": kind in "wx" or st is None, "read": plus or kind == "r"})
            if kind == "a":
                buf.seek(0, io.SEEK_END)
            buf._sync()  # the file exists from now on, as with a real open
            self.open_files.add(buf)
        if binary:
            return buf
        f = io.TextIOWrapper(buf, encoding=encoding or "utf-8", errors=errors, newline=newline)
        if kind == "a":
            f.seek(0, io.SEEK_END)
        if buf in self.open_files:
            self.open_files.add(f)
        return f

    def close_all(self) -> None:
        """The exec ended: write back and close what the code left open."""
        files = list(self.open_files)
        files.sort(key=lambda f: isinstance(f, VFile))  # text wrappers first: they flush into their buffer
        for f in files:
            try:
                f.close()
            except Exception:  # noqa: BLE001 - a write-back that fails is the code's lost file
                pass
        self.open_files = weakref.WeakSet()

    def listdir(self, p: PathArg = ".") -> list[str]:
        return self.backend.list(self.path(p))

    def mkdir(self, p: PathArg, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        self.backend.mkdir(self.path(p))

    def makedirs(self, p: PathArg, mode: int = 0o777, exist_ok: bool = False) -> None:
        target = self.path(p)
        parts = target.strip("/").split("/") if target != "/" else []
        cur = ""
        for i, part in enumerate(parts):
            cur += "/" + part
            st = self.backend.stat(cur)
            if st is None:
                self.backend.mkdir(cur)
            elif st[0] != "dir":
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), cur)
            elif i == len(parts) - 1 and not exist_ok:
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(p))

    def remove(self, p: PathArg, *, dir_fd: int | None = None) -> None:
        self.backend.remove(self.path(p))

    def rmdir(self, p: PathArg, *, dir_fd: int | None = None) -> None:
        self.backend.rmdir(self.path(p))

    def rename(
        self, src: PathArg, dst: PathArg, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        self.backend.rename(self.path(src), self.path(dst))

    def getcwd(self) -> str:
        return self.cwd

    def chdir(self, p: PathArg) -> None:
        target = self.path(p)
        st = self.backend.stat(target)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(p))
        if st[0] != "dir":
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.fspath(p))
        self.cwd = target

    def os_stat(self, p: PathArg, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
        st = self.stat(p)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(p))
        mode = (_stat.S_IFDIR | 0o755) if st[0] == "dir" else (_stat.S_IFREG | 0o644)
        m = st[2]
        return os.stat_result((mode, 0, 0, 1, 0, 0, st[1], m, m, m))

    def walk(
        self,
        top: Any = ".",
        topdown: bool = True,
        onerror: Callable[[OSError], object] | None = None,
        followlinks: bool = False,
    ) -> Iterator[tuple[Any, list[str], list[str]]]:
        try:
            names = self.listdir(top)
        except OSError as e:
            if onerror is not None:
                onerror(e)
            return
        dirs: list[str] = []
        files: list[str] = []
        for n in names:
            (dirs if self.isdir(posixpath.join(self.path(top), n)) else files).append(n)
        if topdown:
            yield top, dirs, files
        for d in dirs:
            yield from self.walk(posixpath.join(top, d), topdown, onerror, followlinks)
        if not topdown:
            yield top, dirs, files

    def getsize(self, p: PathArg) -> int:
        return self.os_stat(p).st_size

    def getmtime(self, p: PathArg) -> float:
        return self.os_stat(p).st_mtime

    def abspath(self, p: PathArg) -> str:
        return self.path(p)

    def removedirs(self, p: PathArg) -> None:
        target = self.path(p)
        self.rmdir(target)
        head = posixpath.dirname(target)
        while head != "/":
            try:
                self.rmdir(head)
            except OSError:
                break
            head = posixpath.dirname(head)


# os functions that reach the real filesystem by path or descriptor and have no
# VirtualFS meaning: refused while a VirtualFS is the sandbox's filesystem
OS_REFUSED = (
    "open",
    "access",
    "chmod",
    "lchmod",
    "chown",
    "lchown",
    "link",
    "symlink",
    "readlink",
    "utime",
    "truncate",
    "lstat",
    "mkfifo",
    "mknod",
    "statvfs",
    "chroot",
    "fchdir",
    "scandir",
    "renames",
    "listxattr",
    "getxattr",
    "setxattr",
    "removexattr",
    "fwalk",
    "startfile",
    "opendir",
    "chflags",
    "lchflags",
    "pathconf",
    # descriptors: the sandbox's files are not descriptors
    "fdopen",
    "read",
    "write",
    "pread",
    "pwrite",
    "readv",
    "writev",
    "preadv",
    "pwritev",
    "sendfile",
    "copy_file_range",
    "splice",
    "dup",
    "dup2",
    "fstat",
    "fstatvfs",
    "ftruncate",
    "lseek",
    "close",
    "closerange",
    "fsync",
    "fdatasync",
    "fchmod",
    "fchown",
    "futimes",
    "posix_fallocate",
    "posix_fadvise",
    "lockf",
    "memfd_create",
    "pipe",
    "pipe2",
    "openpty",
    "set_blocking",
    "set_inheritable",
    "device_encoding",
    "isatty",
    "ttyname",
    "get_terminal_size",
)


def substitutions(view: VFSView, tick: Callable[[], Any]) -> list[tuple[Any, Any]]:
    """(real function or class, its VirtualFS stand-in or None to refuse) for the
    granted modules' file functions."""

    def ticking(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tick()
            return fn(*args, **kwargs)

        wrapper.__name__ = wrapper.__qualname__ = name
        return wrapper

    out: list[tuple[Any, Any]] = []
    table: dict[str, Callable[..., Any]] = {
        "listdir": view.listdir,
        "mkdir": view.mkdir,
        "makedirs": view.makedirs,
        "remove": view.remove,
        "unlink": view.remove,
        "rmdir": view.rmdir,
        "removedirs": view.removedirs,
        "rename": view.rename,
        "replace": view.rename,
        "stat": view.os_stat,
        "getcwd": view.getcwd,
        "chdir": view.chdir,
        "walk": view.walk,
    }
    for name, fn in table.items():
        real = getattr(os, name, None)
        if real is not None:
            out.append((real, ticking(name, fn)))
    for name in OS_REFUSED:
        real = getattr(os, name, None)
        if real is not None:
            out.append((real, None))
    ptable: dict[str, Callable[..., Any]] = {
        "exists": view.exists,
        "lexists": view.exists,
        "isfile": view.isfile,
        "isdir": view.isdir,
        "getsize": view.getsize,
        "getmtime": view.getmtime,
        "getctime": view.getmtime,
        "getatime": view.getmtime,
        "abspath": view.abspath,
        "realpath": lambda p, *, strict=False: view.abspath(p),  # noqa: PLW0108 - it takes strict=
        "islink": lambda p: False,
        "ismount": lambda p: view.path(p) == "/",
    }
    for name, fn in ptable.items():
        real = getattr(posixpath, name, None)
        if real is not None:
            out.append((real, ticking(name, fn)))
    out.append((io.open, ticking("open", view.open)))
    for name in ("FileIO", "open_code"):  # real files by path or descriptor
        real = getattr(io, name, None)
        if real is not None:
            out.append((real, None))
    for name in ("samefile", "expanduser"):
        real = getattr(posixpath, name, None)
        if real is not None and name == "samefile":
            out.append((real, ticking(name, lambda a, b: view.path(a) == view.path(b))))
    import pathlib

    P = make_path_class(view, tick)
    for name in ("Path", "PosixPath"):
        out.append((getattr(pathlib, name), P))
    win = getattr(pathlib, "WindowsPath", None)
    if win is not None:
        out.append((win, None))
    return out


def make_path_class(view: VFSView, tick: Callable[[], Any]) -> type:
    """``pathlib.Path`` over the view: a ``PurePosixPath`` with the I/O methods."""
    import pathlib

    from .gates import open_to_sandbox

    class Path(pathlib.PurePosixPath):
        __slots__ = ()

        @classmethod
        def cwd(cls) -> Self:
            return cls(view.getcwd())

        @classmethod
        def home(cls) -> Self:
            return cls("/")

        def absolute(self) -> Self:
            return type(self)(view.path(self))

        def resolve(self, strict: bool = False) -> Self:
            return type(self)(view.path(self))

        def expanduser(self) -> Self:
            return self

        def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
            tick()
            return view.os_stat(self)

        def exists(self, *, follow_symlinks: bool = True) -> bool:
            tick()
            return view.exists(self)

        def is_file(self) -> bool:
            tick()
            return view.isfile(self)

        def is_dir(self) -> bool:
            tick()
            return view.isdir(self)

        def is_symlink(self) -> bool:
            return False

        def open(
            self,
            mode: str = "r",
            buffering: int = -1,
            encoding: str | None = None,
            errors: str | None = None,
            newline: str | None = None,
        ) -> IO[Any]:
            tick()
            return view.open(self, mode, buffering, encoding, errors, newline)

        def read_bytes(self) -> bytes:
            with self.open("rb") as f:
                data: bytes = f.read()
                return data

        def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
            with self.open("r", encoding=encoding, errors=errors) as f:
                text: str = f.read()
                return text

        def write_bytes(self, data: ReadableBuffer) -> int:
            content = memoryview(data).tobytes()
            with self.open("wb") as f:
                return f.write(content)

        def write_text(
            self, data: str, encoding: str | None = None, errors: str | None = None, newline: str | None = None
        ) -> int:
            if not isinstance(data, str):
                raise TypeError(f"data must be str, not {type(data).__name__}")
            with self.open("w", encoding=encoding, errors=errors, newline=newline) as f:
                return f.write(data)

        def touch(self, mode: int = 0o666, exist_ok: bool = True) -> None:
            tick()
            if view.exists(self):
                if not exist_ok:
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(self))
                return
            view.open(self, "ab").close()

        def iterdir(self) -> Iterator[Self]:
            tick()
            for n in view.listdir(self):
                yield self / n

        def glob(self, pattern: str) -> Iterator[Self]:
            tick()
            import fnmatch

            parts = pattern.split("/")
            found: list[Self] = [self]
            for i, part in enumerate(parts):
                nxt: list[Self] = []
                for base in found:
                    if part == "**":
                        nxt.append(base)
                        for top, dirs, _files in view.walk(base):
                            nxt.extend(type(self)(top) / d for d in dirs)
                        continue
                    if not view.isdir(base):
                        continue
                    for n in view.listdir(base):
                        if fnmatch.fnmatchcase(n, part) and (i == len(parts) - 1 or view.isdir(base / n)):
                            nxt.append(base / n)
                found = nxt
            seen: set[str] = set()
            for p in found:
                if str(p) not in seen:
                    seen.add(str(p))
                    yield p

        def rglob(self, pattern: str) -> Iterator[Self]:
            return self.glob("**/" + pattern)

        def mkdir(self, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
            tick()
            try:
                if parents:
                    view.makedirs(self, exist_ok=exist_ok)
                else:
                    view.mkdir(self)
            except FileExistsError:
                if not exist_ok or not view.isdir(self):
                    raise

        def unlink(self, missing_ok: bool = False) -> None:
            tick()
            try:
                view.remove(self)
            except FileNotFoundError:
                if not missing_ok:
                    raise

        def rmdir(self) -> None:
            tick()
            view.rmdir(self)

        def rename(self, target: StrPath) -> Self:
            tick()
            view.rename(self, target)
            return type(self)(target)

        def replace(self, target: StrPath) -> Self:
            return self.rename(target)

        def samefile(self, other: StrPath) -> bool:
            return view.path(self) == view.path(other)

    Path.__module__ = "pathlib"
    Path.__qualname__ = "Path"
    cls: type = open_to_sandbox(Path)
    return cls


class VirtualFS:
    """A filesystem for the sandboxed code that is not the host's.

    ``VirtualFS()`` keeps the files in memory; ``VirtualFS(state)`` in the mapping
    given (``{path: bytes}``, as the seed's ``VirtualFS(state)``); ``max_size_mb``
    bounds the total size (``OSError(ENOSPC)`` past it). ``VirtualFS(directory=path)``
    keeps them in a host directory (created if missing; the sandbox cannot leave it,
    symlinks included). The host reads and writes it with the methods below; at
    ``isolation="process"``/``"kernel"`` the worker reaches it only through host
    calls (the data stays here)."""

    def __init__(
        self,
        state: MutableMapping[str, Any] | None = None,
        max_size_mb: float | None = None,
        *,
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        if directory is not None:
            if state is not None or max_size_mb is not None:
                raise ValueError("a directory-backed VirtualFS takes no state or max_size_mb")
            self.backend: Backend = DirectoryBackend(directory)
        else:
            self.backend = MemoryBackend(state, None if max_size_mb is None else int(max_size_mb * (1 << 20)))

    @property
    def directory(self) -> str | None:
        return getattr(self.backend, "root", None)

    def read(self, path: str) -> bytes:
        return bytes(self.backend.read(norm(path)))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, content: bytes | str, mode: str = "w") -> None:
        """Write ``content`` (str is UTF-8), making parent directories; ``mode="a"`` appends."""
        if isinstance(content, str):
            content = content.encode()
        p = norm(path)
        parent = posixpath.dirname(p)
        if parent != "/" and self.backend.stat(parent) is None:
            self.makedirs(parent)
        self.backend.write(p, bytes(content), mode == "a")

    def list(self, path: str = "/", recursive: bool = False) -> list[str]:
        p = norm(path)
        names = self.backend.list(p)
        if not recursive:
            return names
        out: list[str] = []
        for n in names:
            child = posixpath.join(p, n)
            out.append(posixpath.relpath(child, p))
            if self.isdir(child):
                out.extend(posixpath.join(n, sub) for sub in self.list(child, True))
        return out

    def exists(self, path: str) -> bool:
        return self.backend.stat(norm(path)) is not None

    def isfile(self, path: str) -> bool:
        st = self.backend.stat(norm(path))
        return st is not None and st[0] == "file"

    def isdir(self, path: str) -> bool:
        st = self.backend.stat(norm(path))
        return st is not None and st[0] == "dir"

    def getsize(self, path: str) -> int:
        st = self.backend.stat(norm(path))
        if st is None:
            raise _oserror(errno.ENOENT, path)
        return int(st[1])

    def remove(self, path: str) -> None:
        self.backend.remove(norm(path))

    def mkdir(self, path: str, parents: bool = False, exist_ok: bool = False) -> None:
        if parents:
            return self.makedirs(path, exist_ok=exist_ok)
        try:
            self.backend.mkdir(norm(path))
        except FileExistsError:
            if not exist_ok:
                raise

    def makedirs(self, path: str, exist_ok: bool = True) -> None:
        VFSView(self.backend).makedirs(path, exist_ok=exist_ok)

    def rmdir(self, path: str) -> None:
        self.backend.rmdir(norm(path))

    def rename(self, src: str, dst: str) -> None:
        self.backend.rename(norm(src), norm(dst))

    def __repr__(self) -> str:
        where = f"directory={self.directory!r}" if self.directory else "in memory"
        return f"VirtualFS({where})"


__all__ = ["VirtualFS", "MemoryBackend", "DirectoryBackend", "RemoteBackend", "VFSView", "serve", "norm", "OPS"]
