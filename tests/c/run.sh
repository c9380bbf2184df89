#!/usr/bin/env bash
# C tests: the header compiles alone under -std=c99 -pedantic -Werror (and as C++),
# an example program drives the library through msgpack, typed.c through the typed
# run API, and the library carries its soname (clients record libsandtrap.so.0).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/ctest
mkdir -p "$out"
FLAGS="-std=c99 -pedantic -Wall -Wextra -Werror -Iinclude"
gcc $FLAGS -o "$out/header_only" tests/c/header_only.c
g++ -std=c++11 -pedantic -Wall -Wextra -Werror -Iinclude -x c++ -o "$out/header_only_cxx" tests/c/header_only.c
gcc -std=c99 -D_GNU_SOURCE -Wall -Wextra -Werror -Iinclude -o "$out/example" tests/c/example.c -Lbuild -lsandtrap -Wl,-rpath,"$PWD/build"
gcc $FLAGS -o "$out/typed" tests/c/typed.c -Lbuild -lsandtrap -Wl,-rpath,"$PWD/build"
gcc $FLAGS -D_DEFAULT_SOURCE -o "$out/workdir" tests/c/workdir.c -Lbuild -lsandtrap -Wl,-rpath,"$PWD/build"
gcc $FLAGS -D_GNU_SOURCE -o "$out/lifecycle" tests/c/lifecycle.c -Lbuild -lsandtrap -Wl,-rpath,"$PWD/build"
gcc $FLAGS -D_DEFAULT_SOURCE -o "$out/chroot" tests/c/chroot.c -Lbuild -lsandtrap -Wl,-rpath,"$PWD/build"
soname="$(readelf -d build/libsandtrap.so | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[ "$soname" = libsandtrap.so.0 ] || { echo "FAIL: build/libsandtrap.so has soname '$soname', want libsandtrap.so.0" >&2; exit 1; }
readelf -d "$out/typed" | grep -q 'NEEDED.*\[libsandtrap\.so\.0\]' || { echo "FAIL: a client does not record NEEDED libsandtrap.so.0" >&2; exit 1; }
"$out/header_only"
"$out/example"
"$out/typed"
"$out/workdir"
"$out/lifecycle"
"$out/chroot"
passed=6
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  chmod o+rx "$PWD" "$PWD/build" "$out" 2>/dev/null || true
  setpriv --reuid=65534 --regid=65534 --clear-groups "$out/example"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$out/typed"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$out/workdir"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$out/lifecycle"
  setpriv --reuid=65534 --regid=65534 --clear-groups "$out/chroot"
  passed=10
fi
echo "c: $passed passed, 0 failed"
