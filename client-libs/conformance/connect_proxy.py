"""An HTTP CONNECT proxy on loopback for the TLS-hook tests (the conformance runner's and the
Python client's).

``CONNECT host:port`` opens a tunnel to ``routes.get(host, host):port``: a test routes a
name to the genuine server or to a forged one (a TLS-inspecting proxy, or a man-in-the-middle
with a mis-issued certificate). With ``later_routes``, every CONNECT after the first uses
those instead: an attacker who relays the connection a client checks to the genuine server
and the next one to his own. Every CONNECT target is recorded in ``connects``; any other
method gets 405. Tunnels are bounded in time (``idle_timeout`` without traffic) and bytes.

    python connect_proxy.py [--route NAME=ADDR ...]    # prints its port, serves until killed
"""

from __future__ import annotations

import argparse
import contextlib
import selectors
import socket
import socketserver
import sys
import threading
from dataclasses import dataclass, field

MAX_HEAD = 8192
MAX_TUNNEL_BYTES = 16 * 1024 * 1024


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@dataclass
class ConnectProxy:
    routes: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    idle_timeout: float = 30.0
    connects: list[tuple[str, int]] = field(default_factory=list)
    port: int = 0
    later_routes: dict[str, str] | None = None

    def start(self) -> ConnectProxy:
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with contextlib.suppress(OSError):
                    proxy._handle(self.request)

        self._server = _Server((self.host, 0), Handler)
        self.port = int(self._server.server_address[1])
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _handle(self, client: socket.socket) -> None:
        client.settimeout(self.idle_timeout)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(1024)
            if not chunk or len(head) > MAX_HEAD:
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        host, _, port_text = parts[1].rpartition(":")
        host = host.strip("[]")
        try:
            port = int(port_text)
        except ValueError:
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        self.connects.append((host, port))
        routes = self.routes
        if self.later_routes is not None and len(self.connects) > 1:
            routes = self.later_routes
        try:
            upstream = socket.create_connection((routes.get(host, host), port), timeout=10)
        except OSError:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        with upstream:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                upstream.sendall(rest)
            self._pipe(client, upstream)

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        moved = 0
        try:
            while moved < MAX_TUNNEL_BYTES:
                events = sel.select(self.idle_timeout)
                if not events:
                    return
                for key, _ in events:
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = src.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
                    moved += len(data)
        finally:
            sel.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--route", action="append", default=[], metavar="NAME=ADDR",
                    help="tunnel CONNECT NAME:port to ADDR:port")
    args = ap.parse_args(argv)
    routes = dict(r.split("=", 1) for r in args.route)
    proxy = ConnectProxy(routes).start()
    print(proxy.port, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
