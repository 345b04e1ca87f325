"""Test support for the restricted-root-store suite: a small web PKI, TLS servers on
loopback presenting chosen chains, and a notary app runner. Real sockets only."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from replay.pki import CA, der, make_ca, make_leaf, pem

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
NOW_TS = int(NOW.timestamp())


@dataclass
class PKI:
    """Three public roots (A, B, C) with one intermediate each, a private root, a leaf key."""

    roots: list[CA]
    inters: list[CA]
    private: CA
    private_int: CA
    key: ec.EllipticCurvePrivateKey

    def leaf(self, host: str, root: int = 0, *, direct: bool = False,
             start: dt.datetime | None = None, days: int = 90) -> x509.Certificate:
        issuer = self.roots[root] if direct else self.inters[root]
        return make_leaf([host], issuer, self.key, start or NOW - dt.timedelta(days=1), days)

    def chain(self, host: str, root: int = 0, **kw: object) -> tuple[bytes, ...]:
        """Leaf + intermediate, DER (the usual server configuration)."""
        leaf = self.leaf(host, root, **kw)  # type: ignore[arg-type]
        return (der(leaf), der(self.inters[root].cert))

    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def make_pki(roots: int = 3) -> PKI:
    rs = [make_ca(f"Test Root {chr(65 + i)}", f"Test CA {chr(65 + i)}", NOW)
          for i in range(roots)]
    ints = [make_ca(f"Test Issuing {chr(65 + i)}", f"Test CA {chr(65 + i)}", NOW, r)
            for i, r in enumerate(rs)]
    private = make_ca("Private Root", "Private", NOW)
    return PKI(rs, ints, private, make_ca("Private Issuing", "Private", NOW, private),
               ec.generate_private_key(ec.SECP256R1()))


def roots_pem(pki: PKI, path: Path) -> Path:
    path.write_bytes(pem(*(r.cert for r in pki.roots)))
    return path


class ChainServer:
    """A TLS server on 127.0.0.1 that presents exactly ``chain`` (DER, leaf first)."""

    def __init__(self, chain: tuple[bytes, ...] | list[bytes], key_pem: bytes,
                 tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        cert_file = tmp / "chain.pem"
        key_file = tmp / "key.pem"
        cert_file.write_bytes(b"".join(
            x509.load_der_x509_certificate(c).public_bytes(serialization.Encoding.PEM)
            for c in chain))
        key_file.write_bytes(key_pem)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert_file, key_file)
        self.port = 0
        self.handshakes = 0
        self._server: asyncio.Server | None = None

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError, ConnectionError):
            await asyncio.wait_for(reader.read(100), 2.0)
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError, ConnectionError):
            await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def start(self) -> ChainServer:
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0, ssl=self.ctx,
                                                  ssl_handshake_timeout=5)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(OSError):
                await self._server.wait_closed()
