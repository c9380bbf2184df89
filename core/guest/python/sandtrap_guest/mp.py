"""A small msgpack codec (the subset the worker protocol uses), standard library only.

The worker runs in interpreters that may not have the ``msgpack`` package; the host
side uses the real one. Types: None, bool, int (64-bit), float, str, bytes, list,
tuple (as array), dict. Anything else is a TypeError: convert with ``wire.to_wire``.
"""

import struct

__all__ = ["packb", "unpackb"]


def packb(obj) -> bytes:
    out = bytearray()
    _pack(obj, out, 0)
    return bytes(out)


def _pack(o, out: bytearray, depth: int) -> None:
    if depth > 100:
        raise ValueError("nested too deeply")
    if o is None:
        out.append(0xC0)
    elif o is True:
        out.append(0xC3)
    elif o is False:
        out.append(0xC2)
    elif isinstance(o, int):
        if 0 <= o < 0x80:
            out.append(o)
        elif -32 <= o < 0:
            out.append(o & 0xFF)
        elif 0 <= o < 1 << 64:
            out += b"\xcf" + struct.pack(">Q", o)
        elif -(1 << 63) <= o < 0:
            out += b"\xd3" + struct.pack(">q", o)
        else:
            raise OverflowError("integer out of msgpack range")
    elif isinstance(o, float):
        out += b"\xcb" + struct.pack(">d", o)
    elif isinstance(o, str):
        b = o.encode("utf-8", "surrogatepass")
        _head(out, len(b), 0xA0, 32, 0xD9, 0xDA, 0xDB)
        out += b
    elif isinstance(o, (bytes, bytearray, memoryview)):
        b = bytes(o)
        n = len(b)
        if n < 256:
            out += b"\xc4" + bytes([n])
        elif n < 65536:
            out += b"\xc5" + struct.pack(">H", n)
        else:
            out += b"\xc6" + struct.pack(">I", n)
        out += b
    elif isinstance(o, (list, tuple)):
        _head(out, len(o), 0x90, 16, None, 0xDC, 0xDD)
        for x in o:
            _pack(x, out, depth + 1)
    elif isinstance(o, dict):
        _head(out, len(o), 0x80, 16, None, 0xDE, 0xDF)
        for k, v in o.items():
            _pack(k, out, depth + 1)
            _pack(v, out, depth + 1)
    else:
        raise TypeError(f"cannot msgpack {type(o).__name__}")


def _head(out, n, fix, fixmax, c8, c16, c32):
    if n < fixmax:
        out.append(fix | n)
    elif c8 is not None and n < 256:
        out += bytes([c8, n])
    elif n < 65536:
        out += bytes([c16]) + struct.pack(">H", n)
    else:
        out += bytes([c32]) + struct.pack(">I", n)


def unpackb(data: bytes):
    obj, pos = _unpack(memoryview(data), 0, 0)
    if pos != len(data):
        raise ValueError("trailing bytes after msgpack value")
    return obj


def _need(buf, pos, n):
    if pos + n > len(buf):
        raise ValueError("truncated msgpack")


def _unpack(buf, pos, depth):
    if depth > 100:
        raise ValueError("nested too deeply")
    _need(buf, pos, 1)
    c = buf[pos]
    pos += 1
    if c < 0x80:
        return c, pos
    if c >= 0xE0:
        return c - 256, pos
    if 0x80 <= c <= 0x8F:
        return _map(buf, pos, c & 0x0F, depth)
    if 0x90 <= c <= 0x9F:
        return _arr(buf, pos, c & 0x0F, depth)
    if 0xA0 <= c <= 0xBF:
        return _str(buf, pos, c & 0x1F)
    if c == 0xC0:
        return None, pos
    if c == 0xC2:
        return False, pos
    if c == 0xC3:
        return True, pos
    fixed = {
        0xCC: ">B",
        0xCD: ">H",
        0xCE: ">I",
        0xCF: ">Q",
        0xD0: ">b",
        0xD1: ">h",
        0xD2: ">i",
        0xD3: ">q",
        0xCA: ">f",
        0xCB: ">d",
    }
    if c in fixed:
        fmt = fixed[c]
        n = struct.calcsize(fmt)
        _need(buf, pos, n)
        return struct.unpack_from(fmt, buf, pos)[0], pos + n
    lens = {
        0xC4: (">B", "bin"),
        0xC5: (">H", "bin"),
        0xC6: (">I", "bin"),
        0xD9: (">B", "str"),
        0xDA: (">H", "str"),
        0xDB: (">I", "str"),
        0xDC: (">H", "arr"),
        0xDD: (">I", "arr"),
        0xDE: (">H", "map"),
        0xDF: (">I", "map"),
    }
    if c in lens:
        fmt, kind = lens[c]
        n = struct.calcsize(fmt)
        _need(buf, pos, n)
        length = struct.unpack_from(fmt, buf, pos)[0]
        pos += n
        if kind == "bin":
            _need(buf, pos, length)
            return bytes(buf[pos : pos + length]), pos + length
        if kind == "str":
            return _str(buf, pos, length)
        if kind == "arr":
            return _arr(buf, pos, length, depth)
        return _map(buf, pos, length, depth)
    raise ValueError(f"unsupported msgpack byte 0x{c:02x}")


def _str(buf, pos, n):
    _need(buf, pos, n)
    return bytes(buf[pos : pos + n]).decode("utf-8", "surrogatepass"), pos + n


def _arr(buf, pos, n, depth):
    _need(buf, pos, n)  # each element takes at least a byte
    out = []
    for _ in range(n):
        v, pos = _unpack(buf, pos, depth + 1)
        out.append(v)
    return out, pos


def _map(buf, pos, n, depth):
    _need(buf, pos, n)
    out = {}
    for _ in range(n):
        k, pos = _unpack(buf, pos, depth + 1)
        v, pos = _unpack(buf, pos, depth + 1)
        out[k] = v
    return out, pos


def accelerate() -> bool:
    """Use the ``msgpack`` C extension for packb/unpackb when it is importable (the
    cooperative worker, once the host's sys.path is known): same types, same
    errors for what the protocol sends, ~10x faster. False: the pure codec stays."""
    global packb, unpackb
    try:
        import msgpack
        from msgpack import _cmsgpack  # noqa: F401 - the C extension, not the fallback
    except ImportError:
        return False
    pack, unpack = msgpack.packb, msgpack.unpackb

    def packb(obj) -> bytes:  # the accelerated codec
        return pack(obj, use_bin_type=True, datetime=False)

    def unpackb(data: bytes):
        return unpack(data, raw=False, strict_map_key=False, use_list=True, timestamp=0)

    return True
