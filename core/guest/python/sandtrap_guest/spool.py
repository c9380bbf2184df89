"""Spooling a result's values to files (the seed's ``spool=``): the writer.

With spooling on, each value of an exec's result namespace is converted to data
(``wire.to_wire``, each value on its own, so each may hold up to the conversion's cap)
and encoded as msgpack; an encoding of at most :data:`INLINE_LIMIT` bytes rides the
response as before, a larger one is written to a file of its own in the spool
directory, and only its name and size cross. At ``"process"``/``"kernel"`` the worker
writes them (the engine made the directory writable for it), at ``"none"`` the host
does; the host reads a file when the value is first asked for
(``sandtrap._coop_spool``). Never pickle: a file holds one msgpack value, data only.

File names are fresh random hex (``<32 hex>.msgpack``), created ``O_EXCL`` and 0600: the
host reads nothing else (a name of another shape is a protocol fault, and the host
opens the name below the directory it created, never through a link).
"""

from __future__ import annotations

import os
import re
from typing import Any

from . import mp
from .wire import placeholder, to_wire

INLINE_LIMIT = 64 * 1024
"""A value whose msgpack encoding is at most this many bytes rides the response."""

FILE_RE = re.compile(r"[0-9a-f]{32}\.msgpack")


def spool_namespace(
    ns: dict[str, Any], directory: str, dir_fd: int | None = None
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``(inline, spooled)``: ``inline`` maps a name to its value as data (small ones),
    ``spooled`` a name to ``{"size": bytes, "file": name in directory}``. A value that
    cannot be written (the directory full, gone) becomes a placeholder inline."""
    inline: dict[str, Any] = {}
    spooled: dict[str, dict[str, Any]] = {}
    for name, value in ns.items():
        data = to_wire(value)
        blob = mp.packb(data)
        if len(blob) <= INLINE_LIMIT:
            inline[name] = data
            continue
        fname = f"{os.urandom(16).hex()}.msgpack"
        try:
            if dir_fd is not None:
                fd = os.open(fname, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
            else:
                fd = os.open(
                    os.path.join(directory, fname), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
                )
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
        except OSError as e:
            inline[name] = placeholder(value, f"<not spooled: {e.strerror}>")
            continue
        spooled[name] = {"size": len(blob), "file": fname}
    return inline, spooled
