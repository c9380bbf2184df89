#!/usr/bin/env bash
# Checks, before anything is compiled, that this machine can build libsandtrap.so
# from source, and names everything that is missing at once:
#   - Go at least the version go.mod asks for (cgo is used),
#   - a C compiler ($CC, default cc),
#   - libseccomp's headers and link library (Debian: libseccomp-dev),
#   - make (with --make; the Python and Node source builds drive the Makefile).
# Exit 0 when all is there (with -v: says what it found), 1 otherwise.
# Used by the Makefile's lib target, the Python sdist build and the Node fallback.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
verbose=0 need_make=0
for a in "$@"; do
  case "$a" in
    -v|--verbose) verbose=1 ;;
    --make) need_make=1 ;;
    *) echo "check-build-deps: unknown argument $a" >&2; exit 2 ;;
  esac
done
GO="${GO:-go}"
CC="${CC:-cc}"
missing=()
found=()

want_go="$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$root/go.mod")"
if ! command -v "$GO" >/dev/null 2>&1; then
  missing+=("Go >= $want_go (\`$GO\` is not on PATH): install it from go.dev/dl and put its bin/ on PATH, or set GO=/path/to/go")
else
  have_go="$("$GO" env GOVERSION 2>/dev/null | sed 's/^go//')"
  if [ -z "$have_go" ]; then
    missing+=("Go >= $want_go (\`$GO env GOVERSION\` failed)")
  elif [ "$(printf '%s\n%s\n' "$want_go" "$have_go" | sort -V | head -n1)" != "$want_go" ]; then
    missing+=("Go >= $want_go (found go$have_go at $(command -v "$GO"); go.mod asks for $want_go)")
  else
    found+=("go$have_go ($(command -v "$GO"))")
  fi
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! command -v "$CC" >/dev/null 2>&1; then
  missing+=("a C compiler (\`$CC\` is not on PATH; Debian: apt-get install gcc, or set CC)")
  missing+=("libseccomp headers (not checked without a C compiler; Debian: apt-get install libseccomp-dev, Fedora: libseccomp-devel)")
else
  printf 'int main(void) { return 0; }\n' >"$tmp/cc.c"
  if ! "$CC" -o "$tmp/cc" "$tmp/cc.c" >"$tmp/cc.log" 2>&1; then
    missing+=("a working C compiler (\`$CC\` cannot compile a program: $(head -c 300 "$tmp/cc.log"))")
  else
    found+=("$CC ($("$CC" --version 2>/dev/null | head -n1))")
    seccomp_flags="$(pkg-config --cflags --libs libseccomp 2>/dev/null || echo -lseccomp)"
    printf '#include <seccomp.h>\nint main(void) { return seccomp_version() == 0; }\n' >"$tmp/sc.c"
    # shellcheck disable=SC2086
    if ! "$CC" -o "$tmp/sc" "$tmp/sc.c" $seccomp_flags >"$tmp/sc.log" 2>&1; then
      missing+=("libseccomp headers and library (seccomp.h / -lseccomp; Debian: apt-get install libseccomp-dev, Fedora: libseccomp-devel)")
    else
      found+=("libseccomp $(pkg-config --modversion libseccomp 2>/dev/null || echo '(headers found)')")
    fi
  fi
fi

if [ "$need_make" = 1 ]; then
  if command -v make >/dev/null 2>&1; then found+=("make"); else missing+=("make (Debian: apt-get install make)"); fi
fi

if [ ${#missing[@]} -gt 0 ]; then
  {
    echo "sandtrap: cannot build libsandtrap.so from source here; missing:"
    for m in "${missing[@]}"; do echo "  - $m"; done
  } >&2
  exit 1
fi
if [ "$verbose" = 1 ]; then
  (IFS=';'; echo "sandtrap: build tools found: ${found[*]}" | sed 's/;/; /g') >&2
fi
exit 0
