"""Loopback helpers and fixtures: HTTPS targets with trustme certificates and small notaries
that speak the legacy protocol over real TLS, signing with the key of their pinned certificate.

These notaries are test servers for the client's IO layer (they can misbehave on purpose:
bad signatures, slow answers, odd statuses). The conformance runner in
``client-libs/conformance`` runs the client against the real ``notary serve``.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
from converge.bundle import NotaryBundle, parse_bundle
from converge.config import Config
from converge.policy import Policy
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def colon(d: bytes) -> str:
    return ":".join(f"{b:02X}" for b in d)


@dataclass
class TlsIdentity:
    cert_pem: str
    key_pem: bytes
    der: bytes

    @property
    def sha1(self) -> str:
        return colon(hashlib.sha1(self.der).digest())

    @property
    def sha256(self) -> str:
        return colon(hashlib.sha256(self.der).digest())

    def server_context(self, tmp: Path) -> ssl.SSLContext:
        c = tmp / f"id-{self.sha1[:8].replace(':', '')}.pem"
        c.write_bytes(self.cert_pem.encode() + self.key_pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(c))
        return ctx


def identity(ca: trustme.CA, *names: str, rsa_key: bool = False) -> TlsIdentity:
    key_type = trustme.KeyType.RSA if rsa_key else trustme.KeyType.ECDSA
    leaf = ca.issue_cert(*names, key_type=key_type)
    pem = leaf.cert_chain_pems[0].bytes().decode()
    der = ssl.PEM_cert_to_DER_cert(pem)
    return TlsIdentity(pem, leaf.private_key_pem.bytes(), der)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(server: socketserver.TCPServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    return t


def in_threads(work: Any, n: int, timeout: float) -> list[Exception]:
    """Run ``work()`` in ``n`` threads at once and wait up to ``timeout`` s for each; what
    they raised, for the test to assert on (not lost in the thread)."""
    errors: list[Exception] = []

    def run() -> None:
        try:
            work()
        except Exception as e:  # noqa: BLE001 - reported to the test
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return errors


@dataclass
class FakeNotary:
    """A legacy-protocol notary on 127.0.0.1. ``seen`` maps ``host:port`` to the SHA-1 it
    observes. ``mode``: ``normal``, ``bad-signature``, ``status:<n>``, ``slow:<s>``,
    ``garbage``, ``huge``."""

    ident: TlsIdentity
    tmp: Path
    seen: dict[str, TlsIdentity] = field(default_factory=dict)
    mode: str = "normal"
    requests: list[bytes] = field(default_factory=list)
    port: int = 0

    def start(self) -> FakeNotary:
        ctx = self.ident.server_context(self.tmp)
        key = serialization.load_pem_private_key(self.ident.key_pem, None)
        notary = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    with ctx.wrap_socket(self.request, server_side=True) as s:
                        s.settimeout(5)
                        notary._answer(s, key)
                except (OSError, ssl.SSLError):
                    pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        _serve(self._server)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _read_request(self, s: ssl.SSLSocket) -> tuple[bytes, bytes] | None:
        """The request's head and body (recorded in ``requests``); None if the peer left."""
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 8192:
            chunk = s.recv(4096)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        cl = 0
        for line in head.split(b"\r\n")[1:]:
            if line.lower().startswith(b"content-length:"):
                cl = int(line.split(b":")[1])
        while len(body) < cl:
            body += s.recv(4096)
        self.requests.append(head + b"\r\n\r\n" + body)
        return head, body

    def _answer(self, s: ssl.SSLSocket, key: Any) -> None:
        request = self._read_request(s)
        if request is None:
            return
        head, body = request
        target = head.split(b" ")[1].decode().removeprefix("/target/")
        host, _, port = target.partition("+")
        fp = body.decode().removeprefix("fingerprint=")
        mode = self.mode
        if mode.startswith("slow:"):
            time.sleep(float(mode[5:]))
            mode = "normal"
        if mode.startswith("status:"):
            s.sendall(f"HTTP/1.0 {mode[7:]} X\r\nContent-Length: 0\r\n\r\n".encode())
            return
        if mode == "garbage":
            s.sendall(b"HTTP/1.0 200 OK\r\n\r\nnot json")
            return
        if mode == "huge":
            s.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 300_000)
            return
        seen = self.seen.get(f"{host}:{port}")
        if seen is None:
            s.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            return
        observed = seen.sha1
        payload = (
            '{"fingerprintList": [{"timestamp": {"start": "1700000000", "finish": '
            f'"1700000100"}}, "fingerprint": "{observed}"}}]}}'
        ).encode()
        assert isinstance(key, rsa.RSAPrivateKey)
        sig = key.sign(payload, padding.PKCS1v15(), hashes.SHA1())
        if mode == "bad-signature":
            sig = bytes([sig[0] ^ 1]) + sig[1:]
        out = payload[:-1] + b', "signature": "' + base64.b64encode(sig) + b'"}'
        asked = fp.replace(":", "").upper()
        status = 200 if asked in (seen.sha1.replace(":", ""), seen.sha256.replace(":", "")) else 409
        s.sendall(
            f"HTTP/1.0 {status} X\r\nContent-Type: application/json\r\nContent-Length: "
            f"{len(out)}\r\nCache-Status: converge-notary; fwd=miss\r\n\r\n".encode()
            + out
        )

    def bundle(
        self,
        name: str,
        *,
        cert_pem: str | None = None,
        extra_hosts: list[dict[str, Any]] | None = None,
    ) -> NotaryBundle:
        hosts = list(extra_hosts or [])
        hosts.append(
            {
                "host": "127.0.0.1",
                "ssl_port": self.port,
                "http_port": 80,
                "certificate": cert_pem or self.ident.cert_pem,
            }
        )
        return parse_bundle({"version": 1, "name": name, "hosts": hosts})


@dataclass
class TlsTarget:
    """An HTTPS server on ``host`` (127.0.0.1) answering every request with ``body``; the
    request heads it received are in ``received`` (none when a client refused it first)."""

    ident: TlsIdentity
    tmp: Path
    port: int = 0
    host: str = "127.0.0.1"
    body: bytes = b"hello"
    received: list[bytes] = field(default_factory=list)

    def start(self) -> TlsTarget:
        ctx = self.ident.server_context(self.tmp)
        target = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    with ctx.wrap_socket(self.request, server_side=True) as s:
                        s.settimeout(5)
                        data = b""
                        while b"\r\n\r\n" not in data and len(data) < 65536:
                            chunk = s.recv(4096)
                            if not chunk:
                                return
                            data += chunk
                        target.received.append(data.split(b"\r\n\r\n")[0])
                        s.sendall(
                            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                            b"Content-Length: " + str(len(target.body)).encode()
                            + b"\r\nConnection: close\r\n\r\n" + target.body
                        )
                except (OSError, ssl.SSLError):
                    pass

        self._server = _Server((self.host, self.port), Handler)
        self.port = self._server.server_address[1]
        _serve(self._server)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def dead_port() -> int:
    """A loopback port with nothing listening (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def other_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def pki(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Identities: the genuine target, a forged target, and four notaries."""
    return {
        "target": identity(ca, "localhost", "127.0.0.1"),
        "forged": identity(ca, "localhost", "127.0.0.1"),
        # legacy notaries sign with the RSA key of their TLS certificate
        "notaries": [identity(ca, f"notary{i}.test", rsa_key=True) for i in range(4)],
        "tmp": tmp_path_factory.mktemp("pki"),
    }


@pytest.fixture()
def target(pki: dict[str, Any]) -> Iterator[TlsTarget]:
    t = TlsTarget(pki["target"], pki["tmp"]).start()
    yield t
    t.stop()


@pytest.fixture()
def notaries(pki: dict[str, Any], target: TlsTarget) -> Iterator[list[FakeNotary]]:
    """Three notaries that see the genuine target certificate."""
    ns = [
        FakeNotary(
            pki["notaries"][i], pki["tmp"], seen={f"127.0.0.1:{target.port}": pki["target"]}
        ).start()
        for i in range(3)
    ]
    yield ns
    for n in ns:
        n.stop()


def make_config(tmp: Path, bundles: list[NotaryBundle], **kw: Any) -> Config:
    kw.setdefault("agreement", Policy.MAJORITY)
    kw.setdefault("early_return", False)
    kw.setdefault("connect_timeout", 2.0)
    kw.setdefault("notary_timeout", 3.0)
    kw.setdefault("total_timeout", 5.0)
    return Config(directory=None, db=tmp / "cache.sqlite3", bundles=tuple(bundles), **kw)
