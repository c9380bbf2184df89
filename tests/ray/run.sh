#!/bin/sh
# make test-ray: pytest in a network and pid namespace of its own, loopback up
# (conftest.py says why). As root here; an unprivileged user gets a user namespace too.
set -e
if [ "$(id -u)" = 0 ]; then U=""; else U="--user --map-root-user"; fi
exec unshare $U --net --pid --fork --mount-proc sh -c '
  ip link set lo up
  SANDTRAP_RAY_NETNS=1 "$0" -m pytest -q -p no:cacheprovider "$@"
' "$@"
