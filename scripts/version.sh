#!/usr/bin/env bash
# One version for everything sandtrap ships: the file VERSION. Every other place that
# states it is written from it by this script, and `make lint` checks they agree:
#   capi/version.h                                  sandtrap_version() of the library
#   bindings/python/src/sandtrap/_version.py        the Python package (setuptools reads it)
#   core/guest/python/sandtrap_guest/__init__.py    the guest runtime
#   bindings/node/package.json, package-lock.json   the npm package
# (the Makefile reads VERSION itself: the library's file name and sandtrap.pc).
#
#   scripts/version.sh           write VERSION's version everywhere
#   scripts/version.sh X.Y.Z     set VERSION to X.Y.Z, then write it everywhere
#   scripts/version.sh --check   exit 1 naming every file that disagrees with VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
mode=write
case "${1:-}" in
  --check) mode=check ;;
  "") ;;
  *) printf '%s\n' "$1" > VERSION ;;
esac
exec python3 - "$mode" <<'PY'
import json
import re
import sys

mode = sys.argv[1]
version = open("VERSION").read().strip()
if not re.fullmatch(r"\d+\.\d+\.\d+(?:[-+.][0-9A-Za-z.+-]+)?", version):
    sys.exit(f"VERSION: {version!r} is not a version like 1.2.3")


def line(path, pattern, text):
    """The file with the one line matching pattern replaced by text."""
    src = open(path).read()
    new, n = re.subn(pattern, text, src, count=1, flags=re.M)
    if n != 1:
        sys.exit(f"{path}: no line matches {pattern!r}")
    return src, new


def package(path, lock):
    src = open(path).read()
    data = json.loads(src)
    data["version"] = version
    if lock:
        data["packages"][""]["version"] = version
    return src, json.dumps(data, indent=2, ensure_ascii=False) + "\n"


files = {
    "capi/version.h": line("capi/version.h", r'^#define SANDTRAP_VERSION_STRING ".*"$',
                           f'#define SANDTRAP_VERSION_STRING "{version}"'),
    "bindings/python/src/sandtrap/_version.py": line("bindings/python/src/sandtrap/_version.py",
                                                     r'^__version__ = ".*"$', f'__version__ = "{version}"'),
    "core/guest/python/sandtrap_guest/__init__.py": line("core/guest/python/sandtrap_guest/__init__.py",
                                                         r'^__version__ = ".*"$', f'__version__ = "{version}"'),
    "bindings/node/package.json": package("bindings/node/package.json", lock=False),
    "bindings/node/package-lock.json": package("bindings/node/package-lock.json", lock=True),
}
stale = [path for path, (old, new) in files.items() if old != new]
if mode == "check":
    if stale:
        sys.exit(f"version: these files disagree with VERSION ({version}); run scripts/version.sh: " + ", ".join(stale))
    print(f"version: {version} everywhere ({len(files)} files and VERSION)")
else:
    for path in stale:
        open(path, "w").write(files[path][1])
    print(f"version: {version}" + (f"; wrote {', '.join(stale)}" if stale else " (nothing to change)"))
PY
