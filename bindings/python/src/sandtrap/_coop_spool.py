"""``sandbox(..., spool=)``: a result's large values as files, read when asked for.

With spooling on, each value of a result's namespace whose msgpack encoding is over
``INLINE_LIMIT`` (64 KiB, the seed's) is written to a file of its own in the
sandbox's spool directory and only its name and size cross; ``result.sizes`` has
every value's size before anything is read, and ``result.namespace`` (a
:class:`SpooledNamespace`) reads a file the first time its value is asked for, then
removes it. At ``"process"``/``"kernel"`` the worker writes the files (the engine
made the directory writable for it, and only it), at ``"none"`` this process does;
every level gives the same data (msgpack, never pickle: a file can hold nothing but
data, whoever wrote it).

The directory is made here, private (0700, ``tempfile.mkdtemp``), under the
system's temporary directory or the path given, never inside an ``IsolatedFS`` root,
and opened once: files are opened below that descriptor (a renamed or replaced
directory changes nothing), by a name of the one shape the writer makes (32 hex
digits + ``.msgpack``; the engine refuses any other, this module checks again),
never through a symbolic link (``O_NOFOLLOW``), only a regular file with one link,
this user's, of the size announced. So a worker cannot make the host read anything
but the files in that directory.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from sandtrap_guest import mp
from sandtrap_guest.spool import FILE_RE, INLINE_LIMIT, spool_namespace

from ._errors import InvalidArgument, SandtrapError

__all__ = ["INLINE_LIMIT", "SpoolClosedError", "SpoolDir", "SpooledNamespace"]


class SpoolClosedError(SandtrapError):
    """A spooled value was asked for after its sandbox closed (which removes the
    files of every value not yet read): read what you need before it closes."""

    kind = "spool_closed"


class SpoolDir:
    """A sandbox's private spool directory and a descriptor of it (removed on close)."""

    def __init__(self, spool: Any, root: str | None) -> None:
        if spool is True:
            base = None
        elif isinstance(spool, (str, os.PathLike)):
            base = os.fspath(spool)
            if not os.path.isdir(base):
                raise InvalidArgument(f"spool={base!r}: not a directory")
        else:
            raise InvalidArgument(f"spool must be False, True or a directory to spool under, got {spool!r}")
        where = os.path.realpath(base if base is not None else tempfile.gettempdir())
        if root is not None:
            r = os.path.realpath(root)
            if where == r or where.startswith(r.rstrip("/") + "/"):
                raise InvalidArgument(
                    f"spool directory under {where} is inside the IsolatedFS root {r}: sandboxed code could replace "
                    "a spooled value before the host reads it; pass spool= a directory outside the root"
                )
        mp.accelerate()  # the msgpack C extension where there is one (the files are read with it)
        self.path = os.path.realpath(tempfile.mkdtemp(prefix="sandtrap-spool-", dir=where))
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        self._finalizer = weakref.finalize(self, _remove_dir, self.path, self.fd)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        self._finalizer()

    def write(self, namespace: Mapping[str, Any]) -> SpooledNamespace:
        """Spool a namespace here (``isolation="none"``): as the worker does."""
        inline, spooled = spool_namespace(dict(namespace), self.path, self.fd)
        # inline values as they would have crossed: decoded from their encoding
        blobs = {k: mp.packb(v) for k, v in inline.items()}
        return SpooledNamespace(
            self, {k: mp.unpackb(b) for k, b in blobs.items()}, spooled, {k: len(b) for k, b in blobs.items()}
        )


def _remove_dir(path: str, fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
    shutil.rmtree(path, ignore_errors=True)


class SpooledNamespace(Mapping[str, Any]):
    """A result namespace whose spooled values are read on first access (the seed's
    ``SpooledNamespace``): indexing, ``get``, iteration, ``in`` and ``len`` work as on
    a dict; only reading a spooled value reads its file (then removes it; the value
    is kept). ``sizes``: each value's encoded size in bytes, read without reading
    it. ``spooled``: the names whose values are in files. Reading one after the
    sandbox closed raises :class:`SpoolClosedError`; a file that is not the one the
    writer made (a link, not a regular file, another size) raises ``ValueError``."""

    def __init__(
        self,
        spool: SpoolDir,
        inline: Mapping[str, Any],
        spooled: Mapping[str, Any],
        sizes: Mapping[str, int] | None = None,
    ) -> None:
        entries: dict[str, tuple[int, str]] = {}
        for name, e in spooled.items():
            f = e.get("file") if isinstance(e, Mapping) else None
            size = e.get("size") if isinstance(e, Mapping) else None
            # the engine checked this already; a bare name of the writer's shape only
            if not isinstance(f, str) or not FILE_RE.fullmatch(f) or type(size) is not int or size < 0:
                raise ValueError(f"unexpected spool entry for {name!r}: {e!r}")
            entries[name] = (size, f)
        self._spool = spool
        self._values: dict[str, Any] = dict(inline)
        self._sizes: dict[str, int] = {
            k: sizes[k] if sizes and k in sizes else len(mp.packb(v)) for k, v in inline.items()
        }
        self._sizes.update({k: s for k, (s, _) in entries.items()})
        self._entries = entries
        self._spooled = list(entries)
        self._order = list(inline) + [k for k in entries if k not in inline]
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _unlink_all, spool, [f for _, f in entries.values()])

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self._sizes)

    @property
    def spooled(self) -> list[str]:
        return list(self._spooled)

    def __getitem__(self, name: str) -> Any:
        with self._lock:
            if name in self._values:
                return self._values[name]
            size, fname = self._entries[name]  # KeyError for a name not returned
            value = self._read(name, size, fname)
            self._values[name] = value
            del self._entries[name]
            return value

    def _read(self, name: str, size: int, fname: str) -> Any:
        if self._spool.closed:
            raise SpoolClosedError(
                f"{name!r} was never read and its sandbox has closed, which removes the files of unread values: "
                "read what you need before the sandbox closes"
            )
        try:
            fd = os.open(fname, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self._spool.fd)
        except FileNotFoundError:
            raise ValueError(f"spool file for {name!r} is gone (removed by someone else)") from None
        except OSError as e:  # ELOOP: a symbolic link
            raise ValueError(f"spool file for {name!r} is not one the writer made: {e.strerror}") from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"spool file for {name!r} is not a regular file")
            if st.st_nlink != 1:
                raise ValueError(f"spool file for {name!r} has {st.st_nlink} links (a hard link to another file)")
            if st.st_uid != os.getuid():
                raise ValueError(f"spool file for {name!r} belongs to uid {st.st_uid}")
            if st.st_size != size:
                raise ValueError(f"spool file for {name!r} holds {st.st_size} bytes, {size} were announced")
            with os.fdopen(fd, "rb") as f:
                fd = -1
                blob = f.read(size + 1)
        finally:
            if fd >= 0:
                os.close(fd)
        if len(blob) != size:
            raise ValueError(f"spool file for {name!r} changed while it was read")
        value = mp.unpackb(blob)
        try:
            os.unlink(fname, dir_fd=self._spool.fd)
        except OSError:
            pass
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._values or name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{k!r}: <{self._sizes[k]} bytes{', spooled' if k in self._entries else ''}>" for k in self._order
        )
        return f"SpooledNamespace({{{shown}}})"


def _unlink_all(spool: SpoolDir, files: list[str]) -> None:
    if spool.closed:
        return
    for f in files:
        try:
            os.unlink(f, dir_fd=spool.fd)
        except OSError:
            pass
