"""Build hook: compile libsandtrap.so with Go and ship it in a binary wheel.

Where the engine's sources are:
  - a repository checkout: the repository root (bindings/python/../..);
  - an sdist: ``engine/`` beside this file (``sdist`` below puts the Go and C sources,
    go.mod/go.sum, the Go modules (vendor/), the Makefile and the guest runtime there).

The build first checks that Go (the version go.mod asks for), a C compiler,
libseccomp's headers and make are there, naming everything missing at once; then it
runs ``make -C <engine> lib cli`` and copies ``build/libsandtrap.so`` and the
``sandtrap`` command to ``sandtrap/_lib/``. The guest runtime ``sandtrap_guest`` is an ordinary package of
this distribution (src/sandtrap_guest links to core/guest/python/sandtrap_guest).

pip hides a build's output unless run with -v; a cold build compiles about 130 Go
packages (one to two minutes on two cores), so progress lines also go to the
terminal (/dev/tty) when there is one. SANDTRAP_BUILD_TTY=0 turns that off.

Environment:
  SANDTRAP_PREBUILT_LIB  ship this already-built libsandtrap.so instead of building
  SANDTRAP_PREBUILT_CLI  and this sandtrap command (default: the sandtrap beside it)
  GO, CC                 the go command and C compiler (defaults: go, cc)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py as _build_py
from setuptools.command.sdist import sdist as _sdist

try:
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
LIBNAME = "libsandtrap.so"
CLINAME = "sandtrap"  # the sandtrap command, built by `make cli` beside the library
SDIST_ENGINE = "engine"  # where the sdist keeps the engine's sources
# the licence of libseccomp (LGPL-2.1), which auditwheel copies into the wheel
SECCOMP_COPYRIGHT = Path("/usr/share/doc/libseccomp2/copyright")


def _is_engine_root(p: Path) -> bool:
    return (p / "go.mod").is_file() and (p / "capi").is_dir() and (p / "include" / "sandtrap.h").is_file()


def engine_root() -> Path | None:
    for p in (HERE / SDIST_ENGINE, HERE.parent.parent):
        if _is_engine_root(p):
            return p
    return None


_tty = None


def _log(msg: str) -> None:
    """Progress: to stderr (pip shows it with -v) and to the terminal if there is one."""
    global _tty
    line = f"sandtrap build: {msg}"
    print(line, file=sys.stderr, flush=True)
    if os.environ.get("SANDTRAP_BUILD_TTY", "1") == "0" or sys.stderr.isatty():
        return
    if _tty is None:
        try:
            _tty = open("/dev/tty", "w")  # noqa: SIM115 (kept for the whole build)
        except OSError:
            _tty = False
    if _tty:
        try:
            _tty.write(f"\n  {line}")
            _tty.flush()
        except OSError:
            pass


def _fail(msg: str) -> None:
    _log(msg)
    sys.exit(f"sandtrap: {msg}")


def check_tools(root: Path) -> None:
    """Go, a C compiler, libseccomp headers, make: all named at once when missing."""
    script = root / "scripts" / "check-build-deps.sh"
    if shutil.which("bash") is None:
        _fail("building libsandtrap.so needs bash (and Go, a C compiler, libseccomp headers, make)")
    r = subprocess.run(["bash", str(script), "-v", "--make"], capture_output=True, text=True)
    text = (r.stderr + r.stdout).strip()
    if r.returncode != 0:
        sys.exit(
            text + "\n(or install the prebuilt wheel instead: `make wheel` in the repository, see docs/install.md)"
        )
    _log(text.removeprefix("sandtrap: "))


def _go_packages(root: Path, env: dict[str, str]) -> int:
    """How many packages libsandtrap.so is made of (0 if go list fails)."""
    r = subprocess.run(
        [env.get("GO", "go"), "list", "-e", "-deps", "./capi"], cwd=root, env=env, capture_output=True, text=True
    )
    return len(r.stdout.split()) if r.returncode == 0 else 0


_PKG_LINE = re.compile(r"^[\w.\-]+(/[\w.\-]+)*$")


def _run_make(root: Path, env: dict[str, str]) -> None:
    """make lib, with `go build -v` counted into progress lines every few seconds."""
    total = _go_packages(root, env)
    cmd = ["make", "-C", str(root), "lib", "cli", f"GO={env.get('GO', 'go')}", "GOBUILDFLAGS=-v"]
    _log(" ".join(cmd))
    _log(
        f"compiling the engine ({total or 'about 130'} Go packages; a cold build takes one to two minutes "
        "on two cores, a warm one seconds)"
    )
    start = last = time.monotonic()
    done = 0
    current = ""
    tail: list[str] = []
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", file=sys.stderr, flush=True)
        line = line.strip()
        tail = (tail + [line])[-30:]
        if _PKG_LINE.match(line) and not line.startswith(("make", "CGO_ENABLED")):
            done, current = done + 1, line
        now = time.monotonic()
        if now - last >= 5:
            last = now
            of = f" of {total}" if total else ""
            _log(
                f"  {now - start:.0f}s: {done}{of} packages compiled" + (f" (last: {current[:60]})" if current else "")
            )
    rc = proc.wait()
    if rc != 0:
        _fail("make lib cli failed (exit %d); its last lines:\n%s" % (rc, "\n".join(tail)))
    _log(f"libsandtrap.so built in {time.monotonic() - start:.0f}s ({done} packages compiled, the rest cached)")


def build_library() -> Path:
    """Build (or locate) libsandtrap.so; returns its path."""
    prebuilt = os.environ.get("SANDTRAP_PREBUILT_LIB")
    if prebuilt:
        p = Path(prebuilt)
        if not p.is_file():
            _fail(f"SANDTRAP_PREBUILT_LIB={prebuilt!r} is not a file")
        _log(f"using the prebuilt library {p}")
        return p
    root = engine_root()
    if root is None:
        _fail(
            f"no engine sources to build libsandtrap.so from: neither {HERE / SDIST_ENGINE} (an sdist) nor "
            f"{HERE.parent.parent} (a repository checkout) holds go.mod, capi/ and include/sandtrap.h. "
            "Install a wheel, build from the repository (pip install ./bindings/python) or an sdist "
            "(make sdist), or set SANDTRAP_PREBUILT_LIB"
        )
    assert root is not None
    _log(f"building libsandtrap.so from {root}")
    check_tools(root)
    env = dict(os.environ, CGO_ENABLED="1")
    _run_make(root, env)
    out = root / "build" / LIBNAME
    if not out.is_file():
        _fail(f"the build did not produce {out}")
    return out


class BinaryDistribution(Distribution):
    """The wheel holds a native library: it is a platform wheel (platlib), which is
    what auditwheel needs to repair it into a manylinux one."""

    def has_ext_modules(self) -> bool:
        return True


class build_py(_build_py):
    """build_py that also ships libsandtrap.so (and libseccomp's licence)."""

    def run(self) -> None:
        lib = build_library()  # first: a machine that cannot build says so before anything else
        super().run()
        if getattr(self, "editable_mode", False):
            _log(f"editable install: the package loads {lib} (see sandtrap/_native.py)")
            return
        dest = Path(self.build_lib) / "sandtrap" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib, dest / LIBNAME)  # follows build/libsandtrap.so -> .so.0 -> .so.X.Y.Z
        os.chmod(dest / LIBNAME, 0o755)
        _log(f"shipping {lib.resolve()} as sandtrap/_lib/{LIBNAME}")
        # the sandtrap command (docs/cli.md), beside the library: the console scripts run it
        cli = Path(os.environ.get("SANDTRAP_PREBUILT_CLI") or lib.parent / CLINAME)
        if not cli.is_file():
            _fail(f"no sandtrap command at {cli} (make cli builds it; or set SANDTRAP_PREBUILT_CLI)")
        shutil.copyfile(cli, dest / CLINAME)
        os.chmod(dest / CLINAME, 0o755)
        _log(f"shipping {cli} as sandtrap/_lib/{CLINAME}")
        if SECCOMP_COPYRIGHT.is_file():
            shutil.copyfile(SECCOMP_COPYRIGHT, dest / "libseccomp.copyright")


class bdist_wheel(_bdist_wheel):
    """One wheel for every CPython >= 3.10: the library is loaded with ctypes."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class sdist(_sdist):
    """An sdist that builds anywhere Go, a C compiler and libseccomp-dev are: it
    carries the engine's sources and its Go modules (vendor/) under engine/
    (scripts/engine-sources.sh says what goes in)."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        dest = Path(base_dir) / SDIST_ENGINE
        if (HERE / SDIST_ENGINE).is_dir():  # an sdist made from an sdist
            shutil.copytree(HERE / SDIST_ENGINE, dest, ignore=shutil.ignore_patterns("build", "sandtrap-init"))
            return
        root = HERE.parent.parent
        if not _is_engine_root(root):
            _fail(f"{root} is not the repository root: cannot put the engine's sources into the sdist")
        _log(f"sdist: the engine's sources and Go modules into {SDIST_ENGINE}/ (scripts/engine-sources.sh)")
        subprocess.run(["bash", str(root / "scripts" / "engine-sources.sh"), str(dest)], check=True)


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": build_py, "bdist_wheel": bdist_wheel, "sdist": sdist},
)
