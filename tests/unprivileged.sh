#!/usr/bin/env bash
# Runs the engine's Go tests (attack vectors included) again as an unprivileged user
# when the suite runs as root: behaviour differs (no cgroups, RLIMIT_NPROC counts,
# a user namespace for the pid namespace, no capabilities to drop).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "unprivileged: already running as $(id -un); nothing more to do"
  exit 0
fi
if ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
  echo "unprivileged: SKIP (setpriv or user nobody missing)"
  exit 0
fi
dir=$(mktemp -d /tmp/sandtrap-unpriv.XXXXXX)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/engine.test" ./core/engine
cp -r tests/vectors "$dir/vectors"
chmod -R a+rX "$dir"
cd "$dir"
setpriv --reuid=65534 --regid=65534 --clear-groups env SANDTRAP_VECTORS="$dir/vectors" HOME="$dir" \
  ./engine.test -test.count=1 -test.timeout=300s -test.v 2>&1 | tee "$dir/log" | grep -E '^(--- FAIL|ok|PASS|FAIL)' || true
grep -q '^PASS$' "$dir/log" || { grep -B2 -A10 -- '--- FAIL' "$dir/log" | head -80; echo "unprivileged: FAILED"; exit 1; }
echo "unprivileged: $(grep -c -- '--- PASS' "$dir/log") passed, $(grep -c -- '--- FAIL' "$dir/log") failed, $(grep -c -- '--- SKIP' "$dir/log") skipped"
