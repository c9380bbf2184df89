"""The real worker on a kernel that refuses seccomp filters (for test_coop_protocol.py):
its process-creation filter cannot be installed."""

import errno
import sys

import fake_worker  # noqa: F401 - the fake exec handler ("ok\n..." runs the code)

from sandtrap_guest import worker


def no_seccomp(prog):
    raise OSError(errno.EINVAL, "seccomp(SECCOMP_SET_MODE_FILTER) (simulated)")


worker.install_seccomp = no_seccomp

if __name__ == "__main__":
    sys.exit(worker.main())
