"""The worker of the cooperative Python sandbox: ``python3 -m sandtrap_guest.worker``.

The engine runs it as a session (an ordinary sandboxed run — Landlock, seccomp and
limits in ``"kernel"`` isolation) and relays length-prefixed msgpack frames between
it and the host. Frames, host → worker:

    {"op": "init", "policy": <Policy.to_portable(host_fns=True)>, "filesystem_root": str|None, "echo": bool|str}
    {"op": "exec", "code": str, "namespace": {...}|None, "modules": {name: {...}}|None,
     "stdin": str|None, "argv": [str]|None}
    {"op": "return", "value": ...} / {"op": "raise", "type": str, "message": str}   (answers to "call")

worker → host:

    {"op": "ready"} / {"op": "error", "message": str}
    {"op": "call", "name": str, "args": [...], "kwargs": {...}}   (a policy.fn grant, run by the host)
    {"op": "result", "stdout", "stderr", "namespace", "error", "traceback", "ticks",
     "stdout_truncated", "duration"}

Values cross as msgpack data (None, bool, int, float, str, bytes, list, tuple, dict);
anything else becomes a described placeholder (``wire.to_wire``). Never pickle.
"""
import os
import sys

from . import mp
from .policy import Policy
from .session import GuestSession
from .wire import error_to_wire, to_wire


class HostError(Exception):
    """An exception raised by a host function, re-raised in the sandboxed code."""


def _read(stream):
    head = stream.read(4)
    if len(head) < 4:
        return None
    n = int.from_bytes(head, "big")
    data = stream.read(n)
    if len(data) < n:
        return None
    return mp.unpackb(data)


def _write(stream, obj):
    data = mp.packb(obj)
    stream.write(len(data).to_bytes(4, "big") + data)
    stream.flush()


def main() -> int:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # the sandboxed code's prints go to the capture, never to the protocol stream
    sys.stdout = sys.stderr
    session = None

    def host_call(name, args, kwargs):
        _write(out, {"op": "call", "name": name, "args": to_wire(list(args)), "kwargs": to_wire(dict(kwargs))})
        reply = _read(inp)
        if reply is None:
            raise SystemExit(0)
        if reply.get("op") == "return":
            return reply.get("value")
        raise HostError(f"{reply.get('type', 'Exception')}: {reply.get('message', '')}")

    while True:
        msg = _read(inp)
        if msg is None:
            return 0
        op = msg.get("op")
        if op == "init":
            try:
                policy = Policy.from_portable(msg["policy"], host_call=host_call)
                session = GuestSession(policy, filesystem_root=msg.get("filesystem_root"),
                                       echo=msg.get("echo", False))
                if msg.get("filesystem_root"):
                    os.chdir(msg["filesystem_root"])
                _write(out, {"op": "ready", "pid": os.getpid()})
            except Exception as e:  # noqa: BLE001 - reported to the host
                _write(out, {"op": "error", "message": f"{type(e).__name__}: {e}"})
        elif op == "exec" and session is not None:
            r = session.exec(msg.get("code", ""), namespace=msg.get("namespace"),
                             modules=msg.get("modules"), stdin=msg.get("stdin"), argv=msg.get("argv"))
            _write(out, {"op": "result", "stdout": r.stdout, "stderr": r.stderr,
                         "namespace": to_wire(r.namespace), "error": error_to_wire(r.error, r.traceback),
                         "traceback": r.traceback, "ticks": r.ticks,
                         "stdout_truncated": r.stdout_truncated, "duration": r.duration})
        else:
            _write(out, {"op": "error", "message": f"unexpected frame {op!r}"})


if __name__ == "__main__":
    sys.exit(main())
