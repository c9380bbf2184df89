"""ctypes declarations of libsandtrap.so (include/sandtrap.h) and thin helpers.

The library is loaded lazily, at the first call that needs it, from (in order):

1. the file named by the environment variable ``SANDTRAP_LIB`` (development);
2. ``sandtrap/_lib/libsandtrap.so`` inside the installed package;
3. ``build/libsandtrap.so`` of the source tree this file lives in (a checkout used
   through ``PYTHONPATH=bindings/python/src``).

ctypes releases the GIL for the duration of every foreign call (``CDLL``), so runs on
many threads proceed in parallel.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_uint64, c_void_p
from pathlib import Path
from typing import Any, cast

import msgpack

from ._errors import ForkedChildError, InternalError, Problem, SandtrapError, error_for

ABI_VERSION = 2  # SANDTRAP_ABI_VERSION of the header this binding was written for

OK = 0
E_INVALID_ARGUMENT = -1
E_INVALID_REQUEST = -2
E_INVALID_POLICY = -3
E_ISOLATION_UNAVAILABLE = -4
E_NOT_FOUND = -5
E_SPAWN_FAILED = -6
E_FORKED_CHILD = -7
E_CLOSED = -8
E_INTERNAL = -99

_P_u8 = POINTER(ctypes.c_uint8)

# name: (restype, argtypes) for every function of include/sandtrap.h
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "sandtrap_abi_version": (c_int, []),
    "sandtrap_version": (c_char_p, []),
    "sandtrap_status_name": (c_char_p, [c_int]),
    "sandtrap_string_free": (None, [c_void_p]),
    "sandtrap_buffer_free": (None, [c_void_p]),
    "sandtrap_probe": (c_int, [POINTER(c_void_p), POINTER(c_size_t)]),
    "sandtrap_profile": (c_int, [c_char_p, c_size_t, POINTER(c_void_p), POINTER(c_size_t)]),
    # the builder (sandtrap_sandbox_builder_*) is for C callers: the binding sends
    # one msgpack policy map
    "sandtrap_error_status": (c_int, [c_void_p]),
    "sandtrap_error_kind": (c_char_p, [c_void_p]),
    "sandtrap_error_message": (c_char_p, [c_void_p]),
    "sandtrap_error_problem_count": (c_size_t, [c_void_p]),
    "sandtrap_error_problem_field": (c_char_p, [c_void_p, c_size_t]),
    "sandtrap_error_problem_message": (c_char_p, [c_void_p, c_size_t]),
    "sandtrap_error_free": (None, [c_void_p]),
    "sandtrap_sandbox_new": (c_int, [c_char_p, c_size_t, POINTER(c_void_p), POINTER(c_void_p)]),
    "sandtrap_sandbox_free": (None, [c_void_p]),
    "sandtrap_sandbox_id": (c_uint64, [c_void_p]),
    "sandtrap_sandbox_exec": (c_int, [c_void_p, c_char_p, c_size_t, POINTER(c_void_p), POINTER(c_size_t)]),
    "sandtrap_sandbox_cancel": (c_int, [c_void_p, c_char_p]),
    "sandtrap_confine": (c_int, [c_void_p, c_int, POINTER(c_void_p)]),
}

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_path: str | None = None

_PKG_DIR = Path(__file__).resolve().parent
LIBNAME = "libsandtrap.so"


def candidates() -> list[Path]:
    """Where the library is looked for, in order."""
    out: list[Path] = []
    env = os.environ.get("SANDTRAP_LIB")
    if env:
        out.append(Path(env))
    out.append(_PKG_DIR / "_lib" / LIBNAME)
    # src checkout: bindings/python/src/sandtrap -> repository root
    root = _PKG_DIR.parents[3] if len(_PKG_DIR.parents) > 3 else None
    if root is not None and (root / "include" / "sandtrap.h").is_file():
        out.append(root / "build" / LIBNAME)
    return out


def lib() -> ctypes.CDLL:
    """The loaded library (loading it on first use)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        env = os.environ.get("SANDTRAP_LIB")
        for path in candidates():
            if not path.is_file():
                tried.append(f"{path} (missing)")
                if env and str(path) == env:
                    raise ImportError(f"SANDTRAP_LIB={env!r} does not name a file")
                continue
            try:
                handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
            except OSError as e:
                raise ImportError(f"cannot load {path}: {e}") from e
            _declare(handle)
            abi = handle.sandtrap_abi_version()
            if abi != ABI_VERSION:
                raise ImportError(
                    f"{path} implements sandtrap ABI {abi}; this package needs ABI {ABI_VERSION}: "
                    "reinstall the package so that the library is rebuilt"
                )
            _lib, _lib_path = handle, str(path)
            return handle
        raise ImportError(
            "libsandtrap.so not found; looked at: "
            + ", ".join(tried)
            + ". Install the package with pip (it builds the library with Go) or set SANDTRAP_LIB"
        )


def lib_path() -> str | None:
    """Path of the loaded library, or None before it is loaded."""
    return _lib_path


def _declare(h: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(h, name)
        fn.restype = restype
        fn.argtypes = argtypes


def take_buffer(ptr: c_void_p, size: c_size_t) -> dict[str, Any] | None:
    """Decode and free a msgpack buffer the library returned."""
    if not ptr.value:
        return None
    try:
        n = size.value
        view = memoryview((ctypes.c_char * n).from_address(ptr.value)).cast("B") if n else b""
        try:
            obj = msgpack.unpackb(view, raw=False, strict_map_key=False)
        except Exception as e:  # the engine produced something undecodable: a bug
            raise InternalError(f"cannot decode the engine's response: {e}") from e
        finally:
            if n:
                view.release()  # type: ignore[union-attr]
    finally:
        lib().sandtrap_buffer_free(ptr)
    if not isinstance(obj, dict):
        raise InternalError(f"the engine's response is a {type(obj).__name__}, not a map")
    return obj


def pack(obj: Any) -> bytes:
    return cast(bytes, msgpack.packb(obj, use_bin_type=True))


def _text(b: bytes | None) -> str:
    return b.decode("utf-8", "replace") if b else ""


def take_error(ptr: c_void_p) -> SandtrapError | None:
    """The exception for a sandtrap_error the library returned (then freed), with
    its kind, message and every problem; None for NULL."""
    if not ptr.value:
        return None
    h = lib()
    try:
        problems = [
            Problem(_text(h.sandtrap_error_problem_field(ptr, i)), _text(h.sandtrap_error_problem_message(ptr, i)))
            for i in range(h.sandtrap_error_problem_count(ptr))
        ]
        return error_for(
            kind=_text(h.sandtrap_error_kind(ptr)) or None,
            code=h.sandtrap_error_status(ptr),
            message=_text(h.sandtrap_error_message(ptr)),
            problems=problems or None,
        )
    finally:
        h.sandtrap_error_free(ptr)


def status_error(rc: int, resp: dict[str, Any] | None = None, message: str = "") -> SandtrapError:
    """The exception for a failed call: kind, message and problems from the
    response's error when there is one."""
    kind = None
    problems: list[Problem] | None = None
    if resp and isinstance(resp.get("error"), dict):
        e = resp["error"]
        kind = e.get("kind")
        message = message or str(e.get("message") or "")
        if isinstance(e.get("problems"), list) and e["problems"]:
            problems = [Problem.from_engine(p) for p in e["problems"]]
    if rc == E_FORKED_CHILD:
        return error_for(code=rc)
    if not kind:
        try:
            kind = lib().sandtrap_status_name(rc).decode()
        except SandtrapError:
            kind = None
    return error_for(kind=kind, code=rc, message=message or f"sandtrap call failed with status {rc}", problems=problems)


def version() -> str:
    """The loaded library's version string."""
    v: bytes = lib().sandtrap_version()
    return v.decode()


def probe() -> dict[str, Any]:
    out, n = c_void_p(), c_size_t()
    rc = lib().sandtrap_probe(byref(out), byref(n))
    if rc != OK:
        raise status_error(rc)
    return take_buffer(out, n) or {}


_compiled: set[str] = set()


def guest_dir() -> str | None:
    """The engine's guest runtime directory (None if the engine has none), byte-compiled
    once per process: workers cannot write there under Landlock, and without bytecode
    every template start recompiles it and every fork carries the bigger heap."""
    d = probe().get("guest_dir")
    if d and d not in _compiled:
        import compileall

        compileall.compile_dir(d, quiet=2, workers=1)
        _compiled.add(d)
    return d


def new_sandbox(policy: bytes) -> int:
    """A sandbox handle for a msgpack policy; raises the engine's error (a
    :class:`PolicyError` lists every problem)."""
    out, err = c_void_p(), c_void_p()
    rc = lib().sandtrap_sandbox_new(policy, len(policy), byref(out), byref(err))
    e = take_error(err)
    if rc != OK:
        if out.value:
            sandbox_free(out.value)
        raise e or status_error(rc)
    return out.value or 0


def sandbox_new(policy: bytes) -> tuple[int, int, str]:
    """(status, handle, error message): new_sandbox for callers that only need
    the message."""
    try:
        return OK, new_sandbox(policy), ""
    except SandtrapError as e:
        return e.code, 0, e.message


def sandbox_free(handle: int) -> None:
    lib().sandtrap_sandbox_free(handle)


def sandbox_id(handle: int) -> int:
    return int(lib().sandtrap_sandbox_id(handle))


def sandbox_exec(handle: int, req: bytes) -> tuple[int, dict[str, Any] | None]:
    """Run one request; blocks (without the GIL) until the operation ends."""
    out, n = c_void_p(), c_size_t()
    rc = lib().sandtrap_sandbox_exec(handle, req, len(req), byref(out), byref(n))
    return rc, take_buffer(out, n)


def sandbox_cancel(handle: int, tag: str | None) -> int:
    return int(lib().sandtrap_sandbox_cancel(handle, None if tag is None else tag.encode()))


def confine(handle: int, with_seccomp: bool) -> None:
    """Confine the calling process; raises the engine's error."""
    err = c_void_p()
    rc = lib().sandtrap_confine(handle, 1 if with_seccomp else 0, byref(err))
    e = take_error(err)
    if rc != OK:
        raise e or status_error(rc)


__all__ = ["lib", "lib_path", "candidates", "probe", "version", "ForkedChildError"]
