"""Host classes and objects the escape corpus (escapes.json) grants or injects.

Each keeps something the grant means to keep from sandboxed code: a capability in a
private or filtered field, a constructor refused by ``constructable=False``, state
shared by the whole process. The corpus reaches for them the way an attacker would;
the plain-exec run of each attack shows it would succeed without the sandbox.
"""

import dataclasses
import os


@dataclasses.dataclass
class Service:
    """Granted with ``include=("name",)``: ``_runner`` is the host's (it is os.system)."""

    name: str
    _runner: object = dataclasses.field(default=os.system)


def make_service():
    return Service("mail")


@dataclasses.dataclass
class Ticket:
    """Granted with ``constructable=False``: only the host issues tickets."""

    id: int


def make_ticket():
    return Ticket(1)


class Vault:
    """Granted with ``constructable=False``: sandboxed code may use the instance the host
    hands it, never make (or clone) one."""

    def __init__(self, key):
        self._key = key

    def peek(self):
        return len(self._key)


def make_vault():
    return Vault("s3cret")


class Counter:
    """Granted with ``include=("value",)``: its private members stay private, also to a
    sandbox subclass."""

    _backend = os.posix_spawn  # a private class attribute (a capability)

    def __init__(self, value):
        self.value = value
        self._secret = os.posix_spawn  # a private attribute set by host code


def make_counter():
    return Counter(1)


class Rank:
    """A host class with one ordering method (for total_ordering)."""

    def __init__(self, n):
        self.n = n

    def __lt__(self, other):
        return self.n < other.n


class Settings:
    """A module-level object of a granted module: shared with the host process."""

    def __init__(self):
        self.debug = False


SETTINGS = Settings()


def reset():
    """Undo what the plain-exec runs of the corpus changed in this process."""
    SETTINGS.debug = False
