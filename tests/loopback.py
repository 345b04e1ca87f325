"""Free loopback ports for the tests' servers.

A port is free when the kernel hands it out for ``bind(0)``; it is closed again at once, so
the kernel may hand the same port out on the next call, and two servers of one test would
then fight over it (a start-up failure that looks random). ``free_port`` never returns a port
it returned before in this process, nor one another pytest-xdist worker may return.
"""

from __future__ import annotations

import socket
import threading

from bench.notary.procs import xdist_share

_GIVEN: set[tuple[str, int]] = set()
_LOCK = threading.Lock()

__all__ = ["free_port", "xdist_share"]


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(1000):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        with _LOCK:
            if (host, port) not in _GIVEN and xdist_share(port):
                _GIVEN.add((host, port))
                return port
    raise RuntimeError(f"no fresh free port on {host}")
