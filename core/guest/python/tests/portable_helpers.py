"""Module-level objects that a worker process could re-import by name (portability tests)."""


def double(x):
    return x * 2


class Counter:
    def __init__(self, start=0):
        self.value = start
        self._secret = "hidden"

    def incr(self):
        self.value += 1
        return self.value

    def get_value(self):
        return self.value

    def reset(self):
        self.value = 0


class Service:
    """Stands in for a live host object handed to sandboxed code."""

    def __init__(self):
        self.calls = []
        self.token = "t0ken"

    def query(self, q):
        self.calls.append(q)
        return [("row", q)]

    def describe(self):
        return "service"

    def _internal(self):
        return "internal"


def make_closure():
    y = 3

    def inner(x):
        return x + y

    return inner


def make_local_class():
    class Local:
        pass

    return Local
