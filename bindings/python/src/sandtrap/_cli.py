"""The ``sandtrap`` and ``sandtrap-mcp`` console scripts: they run the ``sandtrap``
command (a Go binary, docs/cli.md) shipped beside the library, in the place of this
process (``exec``), so that its exit status, signals and terminal are the
command's own. ``sandtrap-mcp`` is ``sandtrap mcp``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

_PKG_DIR = Path(__file__).resolve().parent


def candidates() -> list[Path]:
    """Where the binary is looked for, in order: $SANDTRAP_CLI, beside the packaged
    library (sandtrap/_lib/sandtrap), beside $SANDTRAP_LIB, a checkout's build/."""
    out: list[Path] = []
    if os.environ.get("SANDTRAP_CLI"):
        out.append(Path(os.environ["SANDTRAP_CLI"]))
    out.append(_PKG_DIR / "_lib" / "sandtrap")
    if os.environ.get("SANDTRAP_LIB"):
        out.append(Path(os.environ["SANDTRAP_LIB"]).resolve().parent / "sandtrap")
    root = _PKG_DIR.parents[2] if len(_PKG_DIR.parents) > 2 else None
    if root is not None and (root / "include" / "sandtrap.h").is_file():
        out.append(root / "build" / "sandtrap")
    return out


def binary() -> str:
    """The path of the sandtrap command; raises FileNotFoundError naming where it looked."""
    for p in candidates():
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    raise FileNotFoundError(
        "the sandtrap command is not installed with this package; looked at: "
        + ", ".join(str(p) for p in candidates())
        + " (install the wheel, or `make cli` in a checkout, or set SANDTRAP_CLI)"
    )


def _exec(args: list[str]) -> None:
    try:
        path = binary()
    except FileNotFoundError as e:
        print(f"sandtrap: {e}", file=sys.stderr)
        sys.exit(125)
    os.execv(path, [path, *args])


def main() -> None:
    """``sandtrap ...``"""
    _exec(sys.argv[1:])


def mcp_main() -> None:
    """``sandtrap-mcp ...``: the MCP server (``sandtrap mcp ...``)."""
    _exec(["mcp", *sys.argv[1:]])


if __name__ == "__main__":
    main()
