"""Test support for the restricted-root-store suite: a small web PKI, TLS servers on
loopback presenting chosen chains, and a notary app runner. Real sockets only."""

from __future__ import annotations

import datetime as dt
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from replay.farm import SiteFiles, SNIFarm
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


class ChainServer(SNIFarm):
    """The farm's TLS listener serving one site that presents exactly ``chain`` (DER, leaf
    first, however malformed) on 127.0.0.1, whatever name a client sends."""

    def __init__(self, chain: tuple[bytes, ...] | list[bytes], key_pem: bytes,
                 tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "chain.pem").write_text("".join(ssl.DER_cert_to_PEM_cert(c) for c in chain),
                                       encoding="ascii")
        (tmp / "key.pem").write_bytes(key_pem)
        super().__init__({"chain.test": SiteFiles((tmp / "chain.pem",), tmp / "key.pem",
                                                  "chain")})

    @property
    def handshakes(self) -> int:
        return self.stats.accepted

    async def start(self) -> ChainServer:  # type: ignore[override]
        await super().start()
        return self
