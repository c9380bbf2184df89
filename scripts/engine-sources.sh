#!/usr/bin/env bash
# Copies what building libsandtrap.so and the sandtrap command from source needs
# into DEST: the Makefile, VERSION, go.mod/go.sum, capi/, core/ (the Go and C sources
# and the embedded guest runtime), cmd/sandtrap/,
# include/, LICENSE, this script's sibling check-build-deps.sh, and the Go modules
# (vendor/, from `go mod vendor`) so that the build downloads nothing. Tests, test
# data and built files are left out. Used by the Python sdist and the npm package,
# whose source builds run `make -C DEST lib`.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DEST" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$(mkdir -p "$1" && cd "$1" && pwd)"
GO="${GO:-go}"
mkdir -p "$dest/scripts"
cd "$root"
cp Makefile VERSION go.mod go.sum LICENSE "$dest/"
cp scripts/check-build-deps.sh "$dest/scripts/"
find capi core include cmd/sandtrap -type f \
  ! -name '*_test.go' ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path '*/testdata/*' \
  ! -path 'core/guest/python/tests/*' ! -path '*/.pytest_cache/*' ! -path 'core/spawn/sandtrap-init' \
  -print0 | while IFS= read -r -d '' f; do
    mkdir -p "$dest/$(dirname "$f")"
    cp -p "$f" "$dest/$f"
  done
if [ -d vendor ]; then
  cp -a vendor "$dest/vendor"
else
  "$GO" mod vendor -o "$dest/vendor"
fi
