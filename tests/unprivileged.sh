#!/usr/bin/env bash
# Runs the engine's Go tests (attack vectors included) and the supervisor's
# (core/supervise) again as an unprivileged user when the suite runs as root:
# behaviour differs (no cgroups, RLIMIT_NPROC counts, a user namespace for the pid
# namespace, no capabilities to drop; the supervisor reaches its children through
# ptrace-mode checks as their owner, not as root).
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
go test -tags sandtrap_testhook -c -o "$dir/engine.test" ./core/engine
go test -c -o "$dir/supervise.test" ./core/supervise
cp -r tests/vectors "$dir/vectors"
chmod -R a+rX "$dir"
cd "$dir"
run() { # name binary: run it as nobody, report, fail on a failure
  setpriv --reuid=65534 --regid=65534 --clear-groups env SANDTRAP_VECTORS="$dir/vectors" HOME="$dir" \
    "$dir/$2" -test.count=1 -test.timeout=300s -test.v 2>&1 | tee "$dir/$1.log" | grep -E '^(--- FAIL|ok|PASS|FAIL)' || true
  grep -q '^PASS$' "$dir/$1.log" || { grep -B2 -A10 -- '--- FAIL' "$dir/$1.log" | head -80; echo "unprivileged $1: FAILED"; exit 1; }
  echo "unprivileged $1: $(grep -c -- '--- PASS' "$dir/$1.log") passed, $(grep -c -- '--- FAIL' "$dir/$1.log") failed, $(grep -c -- '--- SKIP' "$dir/$1.log") skipped"
}
run engine engine.test
run supervise supervise.test
