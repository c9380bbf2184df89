#!/usr/bin/env bash
# Packaging test (make test-packaging): the three packages, installed as a user
# would, away from the repository.
#
#  1. Here, with the repository at hand: build the wheel, the sdist and the npm
#     tarball (make packages), check that auditwheel gives the wheel a manylinux tag,
#     `make install PREFIX=<tmp>` the C library, check the development installs
#     (PYTHONPATH=bindings/python/src, pip install -e), extract the READMEs' code blocks
#     (tests/packaging/snippets.py) and copy the artifacts to a temporary directory.
#  2. In a mount namespace where the repository is hidden under an empty tmpfs (so
#     nothing can read it, not even root), tests/packaging/inside.sh then:
#     - installs the wheel into a fresh venv of ANOTHER Python version than the one
#       that built it and runs the READMEs' Python blocks;
#     - builds the sdist from source (Go modules from its vendor/ only) in another
#       fresh venv and runs a sandbox with it;
#     - installs the npm tarball into a fresh project whose PATH has node and npm and
#       nothing else (no compiler, no make), whose own Makefile must not run; checks
#       that npm ran no script and that the prebuilt addon is the one loaded; runs
#       the READMEs' JavaScript blocks and a CommonJS and an ES module program;
#     - compiles the README's C block and tests/c/typed.c with
#       `pkg-config --cflags --libs sandtrap` against the installed library.
# Needs root (the mount namespace): CI runs as root; otherwise it uses sudo.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
PYTHON="${PYTHON:-python3}"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
command -v unshare >/dev/null || { echo "packaging: FAIL: unshare (util-linux) is needed to hide the repository" >&2; exit 1; }

t0=$(date +%s)
# One version in every package: VERSION, written into each by scripts/version.sh.
v_lib="$(cat VERSION)"
bash scripts/version.sh --check >/dev/null \
  || { echo "packaging: FAIL: $(bash scripts/version.sh --check 2>&1)" >&2; exit 1; }
# One licence in every package.
lic_node="$(node -p "require('./bindings/node/package.json').license")"
lic_py="$(sed -n 's/^license = "\(.*\)"$/\1/p' bindings/python/pyproject.toml)"
[ "$lic_node" = MIT ] && [ "$lic_py" = MIT ] && head -n1 LICENSE | grep -qx 'MIT License' \
  || { echo "packaging: FAIL: licences: LICENSE '$(head -n1 LICENSE)', Python '$lic_py', Node '$lic_node'" >&2; exit 1; }
echo "packaging: ok   version $v_lib and the MIT licence in every package"
passed=1
make --no-print-directory packages PYTHON="$PYTHON"

# Each artifact carries the LICENSE and says MIT in its metadata.
lic_missing=""
whl="$(ls build/dist/sandtrap-*.whl)"
"$PYTHON" - "$whl" build/dist/sandtrap-"$v_lib".tar.gz build/dist/sandtrap-"$v_lib".tgz "$v_lib" <<'PY' || lic_missing=1
import sys, tarfile, zipfile
whl, sdist, npm, v = sys.argv[1:]
lic = open("LICENSE", "rb").read()
bad = []
with zipfile.ZipFile(whl) as z:
    if z.read(f"sandtrap-{v}.dist-info/licenses/LICENSE") != lic:
        bad.append("the wheel's LICENSE differs")
    if "License-Expression: MIT" not in z.read(f"sandtrap-{v}.dist-info/METADATA").decode().splitlines():
        bad.append("the wheel's METADATA has no License-Expression: MIT")
with tarfile.open(sdist) as t:
    if t.extractfile(f"sandtrap-{v}/LICENSE").read() != lic:
        bad.append("the sdist's LICENSE differs")
    if t.extractfile(f"sandtrap-{v}/engine/LICENSE").read() != lic:
        bad.append("the sdist's engine/LICENSE differs")
with tarfile.open(npm) as t:
    if t.extractfile("package/LICENSE").read() != lic:
        bad.append("the npm tarball's LICENSE differs")
    import json
    if json.load(t.extractfile("package/package.json"))["license"] != "MIT":
        bad.append("the npm tarball's package.json does not say MIT")
if bad:
    sys.exit("; ".join(bad))
PY
[ -z "$lic_missing" ] || { echo "packaging: FAIL: licences in the artifacts (above)" >&2; exit 1; }
echo "packaging: ok   the wheel, the sdist (and its engine/) and the npm tarball carry LICENSE and say MIT"
passed=$((passed + 1))

# The wheel is a manylinux one.
show="$(build/tools-venv/bin/auditwheel show build/dist/sandtrap-*.whl)"
tag="$(sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p' <<<"$(tr '\n' ' ' <<<"$show")")"
case "$tag" in
  manylinux_*_x86_64) echo "packaging: ok   auditwheel show: $tag"; passed=$((passed + 1)) ;;
  *) echo "packaging: FAIL: auditwheel show gives no manylinux tag:"; echo "$show"; exit 1 ;;
esac

# Another Python than the one that built the wheel.
built_by="$(build/tools-venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
other=""
pyenv_root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
for v in 3.13 3.12 3.10 3.11; do
  [ "$v" = "$built_by" ] && continue
  for cand in "$pyenv_root"/versions/"$v".*/bin/python"$v" "$(command -v python"$v" || true)"; do
    if [ -x "$cand" ] && "$cand" -c 'import venv, ensurepip' 2>/dev/null; then other="$cand"; break 2; fi
  done
done
[ -n "$other" ] || { echo "packaging: FAIL: no Python >= 3.10 other than $built_by (pyenv's 3.10/3.12/3.13 on these machines)" >&2; exit 1; }
echo "packaging: the wheel was built by Python $built_by; installing it with $other"

tmp="$(mktemp -d /tmp/sandtrap-packaging.XXXXXX)"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/dist" "$tmp/t"
cp build/dist/sandtrap-*.whl build/dist/sandtrap-*.tar.gz build/dist/sandtrap-*.tgz "$tmp/dist/"
cp tests/packaging/inside.sh tests/packaging/snippets.py tests/c/typed.c "$tmp/t/"
make --no-print-directory install PREFIX="$tmp/prefix" >/dev/null

# Development installs of the checkout: PYTHONPATH=bindings/python/src, then pip -e.
"$PYTHON" -m venv "$tmp/venv-dev"
"$tmp/venv-dev/bin/pip" install -q --disable-pip-version-check msgpack
dev_check='
import sys, sandtrap, sandtrap_guest
from sandtrap import Sandbox, _native
r = Sandbox(fs_readable=["/usr", "/lib"], clean_env=True).run(["echo", "dev"])
assert r.success and r.stdout == b"dev\n", r
assert sandtrap.__file__.startswith(sys.argv[1]) and sandtrap_guest.__file__.startswith(sys.argv[1]), (sandtrap.__file__, sandtrap_guest.__file__)
'
(cd "$tmp" && PYTHONPATH="$repo/bindings/python/src" "$tmp/venv-dev/bin/python" -c "$dev_check" "$repo/bindings/python/src/")
echo "packaging: ok   PYTHONPATH=bindings/python/src imports sandtrap and sandtrap_guest and runs"
passed=$((passed + 1))
"$tmp/venv-dev/bin/pip" install -q --disable-pip-version-check -e bindings/python
(cd "$tmp" && "$tmp/venv-dev/bin/python" -c "$dev_check" "$repo/bindings/python/src/")
echo "packaging: ok   pip install -e ./bindings/python imports sandtrap and sandtrap_guest and runs"
passed=$((passed + 1))
"$PYTHON" tests/packaging/snippets.py extract "$tmp/snippets" README.md bindings/python/README.md bindings/node/README.md

echo "packaging: hiding $repo (an empty tmpfs over it, in a mount namespace) for the installs"
$SUDO unshare --mount --propagation private bash -c '
  set -e
  mount -t tmpfs -o size=64k,mode=0 sandtrap-repo-hidden "$1"
  exec bash "$2/t/inside.sh" "$2" "$1" "$3" "$4"
' hide "$repo" "$tmp" "$other" "$passed"
echo "packaging: done in $(( $(date +%s) - t0 ))s"
