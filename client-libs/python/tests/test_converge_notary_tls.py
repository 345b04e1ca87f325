"""The client's TLS to notaries (``converge.notary_tls``: pyOpenSSL over memory buffers),
over real sockets on 127.0.0.1: SNI for names and never for IP literals, a server that does
not speak TLS, and a relay's tunnel (TLS from the byte after the relay's reply, and a relay
that sends bytes of its own there is refused)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from converge import notary_io, notary_tls
from converge.bundle import parse_bundle
from converge.fingerprint import parse_fingerprint
from converge_fixtures import FakeNotary, TlsIdentity, TlsTarget


@pytest.mark.parametrize("name,sent", [
    ("notary.example", b"notary.example"), ("Notary.Example", b"Notary.Example"),
    ("127.0.0.1", None), ("::1", None), ("[::1]", None), ("", None), (None, None),
])
def test_sni_names_a_host_and_never_an_address(name: str | None, sent: bytes | None) -> None:
    assert notary_tls._sni(name) == sent


@contextlib.contextmanager
def _sni_server(ident: TlsIdentity, tmp: Path) -> Iterator[tuple[int, list[str | None]]]:
    """A TLS server recording the SNI of each handshake."""
    names: list[str | None] = []
    ctx = ident.server_context(tmp)

    def record(_sock: Any, name: str | None, _ctx: Any) -> None:
        names.append(name)

    ctx.sni_callback = record

    class H(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError, ssl.SSLError), \
                    ctx.wrap_socket(self.request, server_side=True) as s:
                s.settimeout(5)
                s.recv(1)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), H)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], names
    finally:
        server.shutdown()
        server.server_close()


def test_the_handshake_sends_sni_for_a_name_only(pki: dict[str, Any]) -> None:
    ident = pki["notaries"][0]

    async def connect(port: int, name: str) -> bytes | None:
        reader, writer = await notary_tls.open_tls(
            "127.0.0.1", port, notary_tls.client_context(), server_hostname=name, limit=1024)
        der = writer.peer_certificate()
        writer.transport.abort()
        return der

    with _sni_server(ident, pki["tmp"]) as (port, names):
        assert asyncio.run(connect(port, "localhost")) == ident.der
        assert asyncio.run(connect(port, "127.0.0.1")) == ident.der
    assert names == ["localhost", None]


def _plain_server(reply: bytes) -> socketserver.ThreadingTCPServer:
    class H(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError):
                self.request.settimeout(5)
                self.request.recv(4096)
                self.request.sendall(reply)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), H)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _host(port: int, ident: TlsIdentity) -> Any:
    return parse_bundle({"version": 1, "name": "X", "hosts": [
        {"host": "127.0.0.1", "ssl_port": port, "http_port": port,
         "certificate": ident.cert_pem}]})


def _ask(nh: Any, target: TlsTarget, sha1: str, **kw: Any) -> Any:
    return asyncio.run(notary_io.query_host(
        nh, "127.0.0.1", target.port, [parse_fingerprint(sha1)], connect_timeout=3.0,
        max_bytes=65536, **kw)).outcome


@pytest.mark.parametrize("reply", [b"HTTP/1.0 400 Bad Request\r\n\r\n", b""])
def test_a_server_that_does_not_speak_tls_is_unreachable(
    pki: dict[str, Any], target: TlsTarget, reply: bytes
) -> None:
    server = _plain_server(reply)
    try:
        nh = _host(server.server_address[1], pki["notaries"][0]).hosts[0]
        o = _ask(nh, target, pki["target"].sha1)
    finally:
        server.shutdown()
        server.server_close()
    assert o.vote == "unreachable"
    assert "TLSError" in o.detail, o.detail


def _relay(upstream: int, extra: bytes) -> socketserver.ThreadingTCPServer:
    """A bounce relay stand-in: reads the CONNECT head, answers 200 (and ``extra``), then
    pipes bytes both ways to 127.0.0.1:``upstream``."""

    class H(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            down: socket.socket = self.request
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = down.recv(4096)
                if not chunk:
                    return
                head += chunk
            with socket.create_connection(("127.0.0.1", upstream), timeout=5) as up:
                down.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n" + extra)

                def pipe(a: socket.socket, b: socket.socket) -> None:
                    with contextlib.suppress(OSError):
                        while data := a.recv(65536):
                            b.sendall(data)
                    with contextlib.suppress(OSError):
                        b.shutdown(socket.SHUT_WR)

                t = threading.Thread(target=pipe, args=(up, down), daemon=True)
                t.start()
                pipe(down, up)
                t.join(5)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), H)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("extra,vote", [(b"", "success"), (b"\x16\x03\x03", "unreachable")])
def test_tls_through_a_relay_starts_at_the_byte_after_its_reply(
    pki: dict[str, Any], target: TlsTarget, extra: bytes, vote: str
) -> None:
    """Twin pair: a relay that only tunnels gives the voter's answer, pinned through the
    tunnel; one that adds bytes of its own after its reply is refused before TLS starts."""
    notary = FakeNotary(pki["notaries"][0], pki["tmp"],
                        seen={f"127.0.0.1:{target.port}": pki["target"]}).start()
    relay = _relay(notary.port, extra)
    try:
        nh = notary.bundle("Voter").hosts[0]
        via = _host(relay.server_address[1], pki["notaries"][1])
        o = _ask(nh, target, pki["target"].sha1, relay=via, relay_dests=(nh,),
                 bounce_port=notary.port)
    finally:
        relay.shutdown()
        relay.server_close()
        notary.stop()
    assert o.vote == vote, o.detail
    if vote == "unreachable":
        assert "relay sent bytes after its reply head" in o.detail
        assert notary.requests == []
    else:
        assert len(notary.requests) == 1
