"""Granted to cooperative workers by test_coop_surface.py: library code that reaches
the network and the filesystem inside its own code."""

import socket


def fetch(port: int) -> str:
    """Connect to 127.0.0.1:port and read what the server says (or the error's name)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            return s.recv(100).decode()
    except OSError as e:
        return type(e).__name__


def read(path: str) -> str:
    """A host file read inside library code (or the error's name)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return type(e).__name__
