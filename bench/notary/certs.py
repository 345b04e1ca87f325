"""An RSA-2048 self-signed certificate for the local TLS target (typical of real sites)."""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path
    sha1: str  # upper-case colon-separated, as the legacy protocol sends it

    @property
    def wrong_sha1(self) -> str:
        """A fingerprint this certificate does not have (every byte flipped)."""
        raw = bytes.fromhex(self.sha1.replace(":", ""))
        return bytes(b ^ 0xFF for b in raw).hex(":").upper()


def make_rsa_cert(directory: Path, name: str = "site.test", *, bits: int = 2048) -> CertFiles:
    directory.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "cert.pem"
    key_path = directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    der = cert.public_bytes(serialization.Encoding.DER)
    return CertFiles(cert_path, key_path, hashlib.sha1(der).digest().hex(":").upper())
