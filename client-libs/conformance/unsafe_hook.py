"""Deliberately unsafe hooks, the must-fail twins of the runner's hook cases: a CLI with the
``hook`` command of CLIENT-CLI.md that the runner must catch.

    python unsafe_hook.py MODE hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT

MODE ``check-then-use``: checks the certificate on one connection (CA validation only, as a
stand-in for a check that passed) and sends the request on a second one, the mistake of a
hook that verifies its own handshake instead of the connection carrying the data.
MODE ``crash``: dies with a traceback when the server resets the connection.
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import sys


def _connect(host: str, port: int, proxy: str | None, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    if proxy is None:
        raw = socket.create_connection((host, port), timeout=10)
    else:
        phost, _, pport = proxy.removeprefix("http://").rpartition(":")
        raw = socket.create_connection((phost, int(pport)), timeout=10)
        raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += raw.recv(1024)
    return ctx.wrap_socket(raw, server_hostname=host)


def main(argv: list[str]) -> int:
    mode = argv[0]
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--config-dir")
    ap.add_argument("--proxy")
    ap.add_argument("--ca-file")
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    a = ap.parse_args(argv[1:])
    ctx = ssl.create_default_context(cafile=a.ca_file)
    _connect(a.host, a.port, a.proxy, ctx).close()  # "checked"
    s = _connect(a.host, a.port, a.proxy, ctx) if mode == "check-then-use" else None
    if s is None:
        s = _connect(a.host, a.port, a.proxy, ctx)
        s.recv(1)  # the reset arrives here: an unhandled exception, as a crashing hook would
    s.sendall(f"GET / HTTP/1.1\r\nHost: {a.host}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    body = data.partition(b"\r\n\r\n")[2].decode()
    print(json.dumps({"connected": True, "status": 200, "body": body}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
