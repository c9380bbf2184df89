#!/usr/bin/env bash
# Installs what building and testing sandtrap needs on a fresh Debian machine:
# Debian packages (libseccomp-dev, a C compiler, bubblewrap for the benchmark,
# iproute2 and util-linux for the Ray tests' namespace),
# Go modules (from the module proxy), Python packages (pip) and Node packages (npm).
# Idempotent: a machine that has everything returns in a second.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
for p in libseccomp-dev gcc make pkg-config bubblewrap iproute2 util-linux; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "deps: apt-get install ${need_pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "deps: Go is required (https://go.dev/doc/install)" >&2; exit 1; }
go mod download
