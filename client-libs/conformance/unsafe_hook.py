"""Deliberately unsafe hooks, the must-fail twins of the runner's hook cases: a CLI with the
``hook`` command of CLIENT-CLI.md that the runner must catch.

    python unsafe_hook.py MODE hook --config-dir DIR [--proxy URL] [--ca-file PEM]
        [--path PATH] [--follow-redirects] [--first URL] [--unhooked-first] HOST PORT

MODE ``check-then-use``: checks the certificate on one connection (CA validation only, as a
stand-in for a check that passed) and sends the request on a second one, the mistake of a
hook that verifies its own handshake instead of the connection carrying the data.
MODE ``crash``: dies with a traceback when the server resets the connection.
MODE ``first-only``: asks the notaries (the Python client, for real) about the first
connection it makes and about no other: redirect hops, resumed TLS sessions and a keep-alive
socket opened without the hook are used unchecked, as the hooks of the part-2 report did.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import ssl
import sys
from urllib.parse import urlsplit


def _connect(
    host: str, port: int, proxy: str | None, ctx: ssl.SSLContext,
    session: ssl.SSLSession | None = None,
) -> ssl.SSLSocket:
    if proxy is None:
        raw = socket.create_connection((host, port), timeout=10)
    else:
        phost, _, pport = proxy.removeprefix("http://").rpartition(":")
        raw = socket.create_connection((phost, int(pport)), timeout=10)
        raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += raw.recv(1024)
    return ctx.wrap_socket(raw, server_hostname=host, session=session)


def _exchange(s: ssl.SSLSocket, host: str, path: str, keep: bool = False) -> tuple[int, dict[
        str, str], bytes]:
    """One request and its response (Content-Length bodies only, as the test servers send)."""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: "
              f"{'keep-alive' if keep else 'close'}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = s.recv(4096)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split(" ")[1]), headers, body


def _first_only(a: argparse.Namespace) -> int:
    from converge import Client

    ctx = ssl.create_default_context(cafile=a.ca_file)
    client = Client(a.config_dir)
    checked = False
    sessions: dict[str, ssl.SSLSession] = {}  # any session, whatever origin: resumption
    pool: dict[tuple[str, int], ssl.SSLSocket] = {}

    def get(host: str, port: int, path: str, hooked: bool, keep: bool = False) -> tuple[
            int, dict[str, str], bytes]:
        nonlocal checked
        s = pool.pop((host, port), None)
        if s is None:
            last = next(reversed(sessions.values()), None)
            s = _connect(host, port, a.proxy, ctx, last)
            if hooked and not checked:
                der = s.getpeercert(binary_form=True) or b""
                verdict = client.check(host, port, hashlib.sha1(der).hexdigest(),
                                       certificate=der)
                checked = True
                if not verdict:
                    raise PermissionError("untrusted")
            sessions[f"{host}:{port}"] = s.session  # type: ignore[assignment]
        status, headers, body = _exchange(s, host, path, keep)
        if keep:
            pool[(host, port)] = s
        return status, headers, body

    try:
        if a.unhooked_first:
            get(a.host, a.port, a.path, hooked=False, keep=True)
        if a.first:
            u = urlsplit(a.first)
            get(u.hostname or "", u.port or 443, u.path or "/", hooked=True)
        host, port, path = a.host, a.port, a.path
        for _ in range(6):
            status, headers, body = get(host, port, path, hooked=True)
            if not (a.follow_redirects and 300 <= status < 400 and "location" in headers):
                break
            u = urlsplit(headers["location"])
            host, port, path = u.hostname or "", u.port or 443, u.path or "/"
    except PermissionError:
        print(json.dumps({"connected": False, "error": "untrusted", "message": "refused"}))
        return 1
    except OSError as e:
        print(json.dumps({"connected": False, "error": "io", "message": str(e)}))
        return 1
    print(json.dumps({"connected": True, "status": status, "body": body.decode()}))
    return 0


def main(argv: list[str]) -> int:
    mode = argv[0]
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--config-dir")
    ap.add_argument("--proxy")
    ap.add_argument("--ca-file")
    ap.add_argument("--path", default="/")
    ap.add_argument("--follow-redirects", action="store_true")
    ap.add_argument("--first")
    ap.add_argument("--unhooked-first", action="store_true")
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    a = ap.parse_args(argv[1:])
    if mode == "first-only":
        return _first_only(a)
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
