"""A deliberately malicious cooperative worker, for test_coop_protocol.py.

It is the real worker (template, forks, init) until an exec arrives; then the exec's
code names what it does to the host instead of running: flood the host with calls,
send frames that do not decode, are nested 100,000 deep, have the wrong shape or
types, say nothing, or die. ``ok`` runs the code after it for real.
"""

import os
import sys
import time

from sandtrap_guest import mp, worker

real = worker.handle_exec


def send_raw(data: bytes) -> None:
    os.write(1, len(data).to_bytes(4, "big") + data)


def read_frame():
    head = os.read(0, 4)
    n = int.from_bytes(head, "big")
    buf = b""
    while len(buf) < n:
        buf += os.read(0, n - len(buf))
    return mp.unpackb(buf)


def result(**over):
    r = {
        "op": "result",
        "stdout": "",
        "stderr": "",
        "namespace": {},
        "error": None,
        "traceback": None,
        "ticks": 0,
        "stdout_truncated": 0,
        "duration": 0.0,
    }
    r.update(over)
    return r


def evil(session, msg):
    mode, _, rest = msg.get("code", "").partition("\n")
    if mode == "ok":
        return real(session, dict(msg, code=rest))
    if mode == "flood":  # calls, forever: the host's deadline must still end it
        while True:
            send_raw(mp.packb({"op": "call", "name": "noop", "args": [], "kwargs": {}}))
            read_frame()
    if mode == "silent":
        time.sleep(3600)
    if mode == "exit":
        os._exit(3)
    raw = {
        "deep": b"\x91" * 100_000 + b"\xc0",
        "garbage": b"\xc1",
        "trailing": mp.packb(result()) + b"\x00",
        "bad_utf8": b"\x81\xa2op\xa2\xff\xfe",
        "not_map": mp.packb([1, 2, 3]),
        "no_op": mp.packb({"stdout": ""}),
        "ready": mp.packb({"op": "ready"}),
        "ticks_str": mp.packb(result(ticks="many")),
        "ticks_bool": mp.packb(result(ticks=True)),
        "namespace_list": mp.packb(result(namespace=[1, 2])),
        "namespace_int_name": mp.packb(result(namespace={1: "a"})),
        "error_type_int": mp.packb(result(error={"type": 1, "module": "builtins", "message": "x"})),
        "error_missing": mp.packb(result(error={"type": "ValueError"})),
        "stdout_bytes": mp.packb(result(stdout=b"x")),
        "call_name_int": mp.packb({"op": "call", "name": 1, "args": [], "kwargs": {}}),
        "call_kwargs_int_keys": mp.packb({"op": "call", "name": "noop", "args": [], "kwargs": {1: 2}}),
        "call_args_map": mp.packb({"op": "call", "name": "noop", "args": {}, "kwargs": {}}),
        "system_exit": mp.packb(result(error={"type": "SystemExit", "module": "builtins", "message": "0"})),
    }[mode]
    send_raw(raw)
    read_frame()  # whatever the host does next (it should end us)
    time.sleep(3600)


worker.handle_exec = evil

if __name__ == "__main__":
    sys.exit(worker.main())
