"""Build hook: compile libsandtrap.so with the Go toolchain and ship it in the wheel.

``pip install ./bindings/python`` runs ``make -C <repo root> lib`` (or, without make,
the same ``go build -buildmode=c-shared`` command as the Makefile's ``lib`` target)
and copies ``build/libsandtrap.so`` to ``sandtrap/_lib/``. It also copies the guest
runtime ``core/guest/python/sandtrap_guest`` into the wheel as the top-level package
``sandtrap_guest``.

Environment:
  SANDTRAP_PREBUILT_LIB  ship this already-built libsandtrap.so instead of building
  GO                     the go command (default: go)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # bindings/python -> repository root
LIBNAME = "libsandtrap.so"
GUEST = ROOT / "core" / "guest" / "python" / "sandtrap_guest"


def _is_repo_root(p: Path) -> bool:
    return (p / "go.mod").is_file() and (p / "capi").is_dir() and (p / "include" / "sandtrap.h").is_file()


def _log(msg: str) -> None:
    print(f"sandtrap build: {msg}", file=sys.stderr, flush=True)


def build_library() -> Path:
    """Build (or locate) libsandtrap.so; returns its path."""
    prebuilt = os.environ.get("SANDTRAP_PREBUILT_LIB")
    if prebuilt:
        p = Path(prebuilt)
        if not p.is_file():
            sys.exit(f"SANDTRAP_PREBUILT_LIB={prebuilt!r} is not a file")
        return p
    if not _is_repo_root(ROOT):
        sys.exit(
            "sandtrap: cannot build libsandtrap.so: this is not a sandtrap source tree "
            f"({ROOT} has no go.mod, capi/ and include/sandtrap.h). Install from the "
            "repository (pip install ./bindings/python) or set SANDTRAP_PREBUILT_LIB"
        )
    go = os.environ.get("GO", "go")
    if shutil.which(go) is None:
        sys.exit(
            "sandtrap: building libsandtrap.so needs the Go toolchain (`go` on PATH, with "
            "cgo and a C compiler) and libseccomp-dev; see the repository's Makefile (make deps)"
        )
    out = ROOT / "build" / LIBNAME
    if shutil.which("make"):
        cmd = ["make", "-C", str(ROOT), "lib", f"GO={go}"]
    else:  # the Makefile's lib target, spelled out
        out.parent.mkdir(parents=True, exist_ok=True)
        ldflags = f"-s -w -extldflags '-Wl,--version-script={ROOT / 'capi' / 'sandtrap.map'}'"
        cmd = [go, "build", "-trimpath", "-buildmode=c-shared", "-ldflags", ldflags, "-o", str(out), "./capi"]
    _log(" ".join(cmd))
    env = dict(os.environ, CGO_ENABLED="1")
    try:
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"sandtrap: building libsandtrap.so failed ({e}); see the compiler output above")
    stray = ROOT / "build" / "libsandtrap.h"  # go writes it; the hand-written header is the contract
    if stray.exists() and not shutil.which("make"):
        stray.unlink()
    if not out.is_file():
        sys.exit(f"sandtrap: the build did not produce {out}")
    return out


class build_py(_build_py):
    """build_py that also ships libsandtrap.so and the sandtrap_guest runtime."""

    def run(self) -> None:
        super().run()
        lib = build_library()
        if getattr(self, "editable_mode", False):
            # editable installs load the library from <repo>/build (see _native.py)
            return
        dest = Path(self.build_lib) / "sandtrap" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, dest / LIBNAME)
        _log(f"shipping {lib} as sandtrap/_lib/{LIBNAME}")
        if GUEST.is_dir():
            gdest = Path(self.build_lib) / "sandtrap_guest"
            if gdest.exists():
                shutil.rmtree(gdest)
            shutil.copytree(GUEST, gdest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "tests"))
            _log(f"shipping the guest runtime {GUEST} as sandtrap_guest")
        else:
            _log(f"warning: {GUEST} not found: the wheel has no sandtrap_guest")


class bdist_wheel(_bdist_wheel):
    """The wheel holds a native library: platform-specific, any Python 3."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(cmdclass={"build_py": build_py, "bdist_wheel": bdist_wheel})
