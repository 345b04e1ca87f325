"""Loopback servers shared by the conformance runner's fakes and relays (and the Python
client's tests of them): a threaded TLS server calling ``handle(socket)`` per connection, and
a reader of one HTTP request (head and Content-Length body, each bounded)."""

from __future__ import annotations

import socketserver
import ssl
import threading
from typing import Any


class ThreadedServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def tls_server(addr: tuple[str, int], ctx: ssl.SSLContext, handle: Any) -> socketserver.TCPServer:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                with ctx.wrap_socket(self.request, server_side=True) as s:
                    s.settimeout(10)
                    handle(s)
            except (OSError, ssl.SSLError):
                pass

    server = ThreadedServer(addr, Handler)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server


def read_request(s: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 16384:
        chunk = s.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line.lower().startswith(b"content-length:"):
            length = min(int(line.split(b":", 1)[1]), 16384)
    while len(body) < length:
        chunk = s.recv(4096)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


__all__ = ["ThreadedServer", "read_request", "tls_server"]
