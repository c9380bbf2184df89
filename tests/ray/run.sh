#!/bin/sh
# make test-ray: pytest in a network and pid namespace of its own, loopback up
# (conftest.py says why). As root here; an unprivileged user gets a user namespace
# mapping only its own uid, keeps the namespace's capabilities just long enough to
# bring loopback up, and runs the tests with none (as itself, not as a mapped root).
set -e
if [ "$(id -u)" = 0 ]; then
  exec unshare --net --pid --fork --mount-proc sh -c '
    ip link set lo up
    SANDTRAP_RAY_NETNS=1 "$0" -m pytest -q -p no:cacheprovider "$@"
  ' "$@"
fi
exec unshare --user --map-user="$(id -u)" --map-group="$(id -g)" --keep-caps --net --pid --fork --mount-proc sh -c '
  ip link set lo up
  SANDTRAP_RAY_NETNS=1 exec setpriv --inh-caps=-all --ambient-caps=-all --bounding-set=-all "$0" -m pytest -q -p no:cacheprovider "$@"
' "$@"
