"""``python -m sandtrap``: version and what this machine can enforce."""

from __future__ import annotations

import argparse
import json
import sys

from ._version import __version__


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandtrap", description="sandtrap process sandbox")
    ap.add_argument("--version", action="version", version=__version__)
    ap.add_argument("--probe", action="store_true", help="print what this kernel and process can enforce (JSON)")
    args = ap.parse_args(argv)
    if args.probe:
        from . import _native

        info = {"package": __version__, "library": _native.version(), "path": None, "probe": _native.probe()}
        info["path"] = _native.lib_path()
        json.dump(info, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
