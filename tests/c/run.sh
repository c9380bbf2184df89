#!/usr/bin/env bash
# C tests: the header compiles alone under -std=c99 -pedantic -Werror (and as C++),
# and an example program drives the library through it.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/ctest
mkdir -p "$out"
FLAGS="-std=c99 -pedantic -Wall -Wextra -Werror -Iinclude"
gcc $FLAGS -o "$out/header_only" tests/c/header_only.c
g++ -std=c++11 -pedantic -Wall -Wextra -Werror -Iinclude -x c++ -o "$out/header_only_cxx" tests/c/header_only.c
gcc -std=c99 -D_GNU_SOURCE -Wall -Wextra -Werror -Iinclude -o "$out/example" tests/c/example.c -Lbuild -lsandtrap -Wl,-rpath,"$PWD/build"
"$out/header_only"
"$out/example"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  chmod o+rx "$PWD" "$PWD/build" "$out" 2>/dev/null || true
  setpriv --reuid=65534 --regid=65534 --clear-groups "$out/example"
fi
echo "c: 1 passed, 0 failed"
