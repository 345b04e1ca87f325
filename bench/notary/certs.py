"""The local TLS target's certificates, shaped like a real site's: an RSA-2048 leaf for the
site and every name under it, issued by an intermediate under a root of its own (so a CA
verifier has a real chain to build and check)."""

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
    chain: Path | None = None  # the intermediate (PEM), sent after the leaf
    root: Path | None = None  # the root (PEM), for --ca-roots

    @property
    def wrong_sha1(self) -> str:
        """A fingerprint this certificate does not have (every byte flipped)."""
        raw = bytes.fromhex(self.sha1.replace(":", ""))
        return bytes(b ^ 0xFF for b in raw).hex(":").upper()


def _key(bits: int) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _ca(subject: str, key: rsa.RSAPrivateKey, issuer: x509.Name, signer: rsa.RSAPrivateKey,
        now: dt.datetime, path_length: int) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer if issuer.rdns else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                     False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(signer, hashes.SHA256())
    )


def make_rsa_cert(directory: Path, name: str = "site.test", *, bits: int = 2048) -> CertFiles:
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    root_key, inter_key, key = _key(bits), _key(bits), _key(bits)
    root = _ca("converge bench root", root_key, x509.Name([]), root_key, now, 1)
    inter = _ca("converge bench intermediate", inter_key, root.subject, root_key, now, 0)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(inter.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name),
                                                    x509.DNSName(f"*.{name}")]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            inter_key.public_key()), critical=False)
        .sign(inter_key, hashes.SHA256())
    )
    cert_path = directory / "cert.pem"
    key_path = directory / "key.pem"
    chain_path = directory / "chain.pem"
    root_path = directory / "root.pem"
    cert_path.write_bytes(_pem(cert))
    chain_path.write_bytes(_pem(inter))
    root_path.write_bytes(_pem(root))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    der = cert.public_bytes(serialization.Encoding.DER)
    return CertFiles(cert_path, key_path, hashlib.sha1(der).digest().hex(":").upper(),
                     chain_path, root_path)
