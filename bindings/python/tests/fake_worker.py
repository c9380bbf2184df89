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
    if mode == "fs_dotdot":  # a VirtualFS path out of the filesystem: the host keeps it inside
        send_raw(mp.packb({"op": "fs", "name": "read", "args": ["/../../../etc/hostname"]}))
        reply = read_frame()
        return result(namespace={"reply": [reply.get("op"), reply.get("type"), str(reply.get("value"))[:40]]})
    if mode == "rpc":  # a proxy's call the worker forges: the host must judge it
        import json

        frame = {"op": "rpc", "args": [], "kwargs": {}, **json.loads(rest)}
        send_raw(mp.packb(frame))
        reply = read_frame()
        return result(
            namespace={"reply": [reply.get("op"), reply.get("type"), reply.get("message"), reply.get("value")]}
        )
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
        "error_args_map": mp.packb(
            result(error={"type": "KeyError", "module": "builtins", "message": "x", "args": [{"a": 1}]})
        ),
        "error_args_not_list": mp.packb(
            result(error={"type": "KeyError", "module": "builtins", "message": "x", "args": 1})
        ),
        # VirtualFS operations (the host answers only those of a sandbox that serves one)
        "fs_unknown_op": mp.packb({"op": "fs", "name": "chmod", "args": ["/x"]}),
        "fs_args_count": mp.packb({"op": "fs", "name": "read", "args": ["/x", "/y"]}),
        "fs_path_bytes": mp.packb({"op": "fs", "name": "read", "args": [b"/x"]}),
        "fs_write_str": mp.packb({"op": "fs", "name": "write", "args": ["/x", "text", False]}),
        "fs_long_path": mp.packb({"op": "fs", "name": "stat", "args": ["/" + "a" * 5000]}),
        "fs_args_map": mp.packb({"op": "fs", "name": "read", "args": {"p": "/x"}}),
        # host objects' method calls (rpc): only public method names cross
        "rpc_private_method": mp.packb({"op": "rpc", "target": "h", "method": "__class__", "args": [], "kwargs": {}}),
        "rpc_underscore": mp.packb({"op": "rpc", "target": "h", "method": "_secret", "args": [], "kwargs": {}}),
        "rpc_dotted": mp.packb({"op": "rpc", "target": "h", "method": "a.b", "args": [], "kwargs": {}}),
        "rpc_method_int": mp.packb({"op": "rpc", "target": "h", "method": 1, "args": [], "kwargs": {}}),
        "rpc_kwargs_int_keys": mp.packb({"op": "rpc", "target": "h", "method": "q", "args": [], "kwargs": {1: 2}}),
        "rpc_long_target": mp.packb({"op": "rpc", "target": "h" * 300, "method": "q", "args": [], "kwargs": {}}),
        "fs_no_vfs": mp.packb({"op": "fs", "name": "read", "args": ["/x"]}),
    }[mode]
    send_raw(raw)
    read_frame()  # whatever the host does next (it should end us)
    time.sleep(3600)


worker.handle_exec = evil

if __name__ == "__main__":
    sys.exit(worker.main())
