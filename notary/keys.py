"""The notary's key and certificate: generation on first run, loading, permission checks.

The legacy protocol uses one RSA-2048 key for TLS and for signing answers; clients pin the
SHA-1 of the certificate. Keys are written owner-only (0600) and the notary refuses to load a
key file that other users can read.

Whatever the process umask: the data directory is created 0700, keys 0600, the certificate
and other public files 0644, the database 0600. The notary refuses to start (like ssh) when
its data directory or any of its files is writable by group or others or owned by another
user: whoever can swap the database or the certificate decides what the notary signs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import NameOID

from notary.core import extended
from notary.core.fingerprint import colon_hex
from notary.errors import BadConfig

MAX_PEM = 1024 * 1024


@dataclass(frozen=True)
class Identity:
    key: rsa.RSAPrivateKey
    cert: x509.Certificate
    key_path: Path
    cert_path: Path

    @property
    def cert_der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    @property
    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode("ascii")

    @property
    def pin_sha1(self) -> str:
        return colon_hex(hashlib.sha1(self.cert_der).digest())

    @property
    def pin_sha256(self) -> str:
        return colon_hex(hashlib.sha256(self.cert_der).digest())


def check_guarded(path: Path, what: str) -> None:
    """Raise :class:`BadConfig` when ``path`` (if it exists) is writable by group or others
    or owned by another user (``chmod``/``chown`` advice in the message)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BadConfig(f"cannot inspect {what} {path}: {exc.strerror}") from exc
    if st.st_uid != os.geteuid():
        raise BadConfig(
            f"{what} {path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()});"
            f" run: chown {os.geteuid()} {path}"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(st.st_mode)
        fix = mode & ~(stat.S_IWGRP | stat.S_IWOTH)
        raise BadConfig(
            f"{what} {path} is writable by other users (mode {mode:o}); run: chmod {fix:o} {path}"
        )


def private_dir(path: Path, what: str = "data directory") -> None:
    """Create ``path`` mode 0700 if missing (whatever the umask); check it either way."""
    if not path.exists():
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
    check_guarded(path, what)


def create_file(path: Path, mode: int) -> None:
    """Create an empty file with exactly ``mode`` if it does not exist (umask ignored)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` atomically through a fresh 0600 temporary file.

    A stale temporary file (or a symlink planted in its place) is removed first and the new
    one is created exclusively without following links: reusing it would keep its mode
    (0644 leaked the key) or write the key wherever the symlink pointed. Failures (a
    directory without write permission, a full disk) are :class:`BadConfig` naming the file.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            os.fchmod(fd, mode)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        raise BadConfig(f"cannot write {path}: {exc.strerror or exc}") from exc


def generate(
    key_path: Path, cert_path: Path, hostname: str, *, now: dt.datetime, days: int = 3650
) -> Identity:
    """Create an RSA-2048 key and a self-signed certificate for ``hostname``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, hostname[:64]),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "converge notary"),
        ]
    )
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(hostname))
    except ValueError:
        alt = x509.DNSName(hostname)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write_private(
        key_path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    _write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return Identity(key, cert, key_path, cert_path)


def _read_limited(path: Path, what: str) -> bytes:
    try:
        if path.stat().st_size > MAX_PEM:
            raise BadConfig(f"{what} {path} is larger than {MAX_PEM} bytes")
        return path.read_bytes()
    except OSError as exc:
        raise BadConfig(f"cannot read {what} {path}: {exc.strerror}") from exc


def _load_private(path: Path, what: str) -> PrivateKeyTypes:
    """A PEM private key file, refused when group or others may access it."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise BadConfig(f"cannot read {what} {path}: {exc.strerror}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise BadConfig(
            f"{what} {path} is accessible by other users (mode {stat.S_IMODE(mode):o});"
            f" run: chmod 600 {path}"
        )
    check_guarded(path, what)
    try:
        return serialization.load_pem_private_key(_read_limited(path, what), password=None)
    except (ValueError, TypeError) as exc:
        raise BadConfig(f"{path} is not an unencrypted PEM private key: {exc}") from exc


def load(key_path: Path, cert_path: Path) -> Identity:
    """Load and check the identity. Refuses keys readable by group or others."""
    key = _load_private(key_path, "key")
    check_guarded(cert_path, "certificate")
    if not isinstance(key, rsa.RSAPrivateKey) or key.key_size < 2048:
        raise BadConfig(f"{key_path}: the legacy protocol needs an RSA key of 2048 bits or more")
    try:
        cert = x509.load_pem_x509_certificate(_read_limited(cert_path, "certificate"))
    except ValueError as exc:
        raise BadConfig(f"{cert_path} is not a PEM certificate: {exc}") from exc
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if cert.public_key().public_bytes(der, spki) != key.public_key().public_bytes(der, spki):
        raise BadConfig(f"{cert_path} does not belong to the key {key_path}")
    return Identity(key, cert, key_path, cert_path)


def ensure(key_path: Path, cert_path: Path, hostname: str, *, now: dt.datetime) -> Identity:
    """Load the identity, generating both files first if neither exists."""
    if not key_path.exists() and not cert_path.exists():
        generate(key_path, cert_path, hostname, now=now)
    return load(key_path, cert_path)



# -- the extended format's Ed25519 signing key ----------------------------------------------

RETIRED_FILE = "signing-retired.json"
DEFAULT_OVERLAP = 14 * 86_400  # seconds a retired key stays valid (bundles refresh in 24-36 h)


def _write_ed25519(path: Path, key: Ed25519PrivateKey) -> None:
    _write_private(
        path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """Load the Ed25519 signing key, refusing files accessible by other users."""
    key = _load_private(path, "signing key")
    if not isinstance(key, Ed25519PrivateKey):
        raise BadConfig(f"{path}: the extended format's signing key must be Ed25519")
    return key


def ensure_signing_key(path: Path) -> Ed25519PrivateKey:
    if not path.exists():
        _write_ed25519(path, Ed25519PrivateKey.generate())
    return load_signing_key(path)


def retired_keys(path: Path) -> list[dict[str, Any]]:
    """Retired public signing keys recorded beside ``path`` (the current key file)."""
    f = path.with_name(RETIRED_FILE)
    if not f.exists():
        return []
    try:
        doc = json.loads(_read_limited(f, "retired key list"))
    except (ValueError, RecursionError) as exc:
        raise BadConfig(f"{f} is not JSON: {exc}") from exc
    if not isinstance(doc, list):
        raise BadConfig(f"{f} must be a JSON list")
    for entry in doc:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("key_id"), str)
            and isinstance(entry.get("public_key"), str)
            and isinstance(entry.get("retired_at"), int)
            and not isinstance(entry.get("retired_at"), bool)
        ):
            raise BadConfig(f"{f}: each entry needs key_id, public_key and retired_at")
    return doc


def rotate_signing_key(path: Path, *, now: int) -> Ed25519PrivateKey:
    """Replace the signing key; the old public key is kept as retired at ``now``."""
    old = load_signing_key(path)
    retired = retired_keys(path)
    pub = old.public_key()
    retired.append(
        {"key_id": extended.key_id(pub), "public_key": extended.b64url(extended.raw_public(pub)),
         "retired_at": now}
    )
    _write_private(path.with_name(RETIRED_FILE), (json.dumps(retired, indent=2) + "\n").encode(),
                   0o644)
    new = Ed25519PrivateKey.generate()
    _write_ed25519(path, new)
    return new


def bundle_signing_keys(
    path: Path, *, now: int, overlap: int = DEFAULT_OVERLAP
) -> list[dict[str, Any]]:
    """The ``signing_keys`` bundle entries: the current key, then retired ones still valid."""
    current = load_signing_key(path).public_key()
    out: list[dict[str, Any]] = [
        {"alg": "ed25519", "key_id": extended.key_id(current),
         "public_key": extended.b64url(extended.raw_public(current)), "status": "current"}
    ]
    for r in retired_keys(path):
        until = int(r["retired_at"]) + overlap
        if until > now:
            out.append({"alg": "ed25519", "key_id": r["key_id"], "public_key": r["public_key"],
                        "status": "retired", "valid_until": until})
    return out


__all__ = [
    "Identity",
    "check_guarded",
    "create_file",
    "private_dir",
    "bundle_signing_keys",
    "ensure",
    "ensure_signing_key",
    "generate",
    "load",
    "load_signing_key",
    "rotate_signing_key",
]


# -- the transparency log's Ed25519 key ---------------------------------------------------


def ensure_log_identity(
    path: Path, hostname: str, origin: str | None = None
) -> tuple[Ed25519PrivateKey, str]:
    """The log's own key (never the TLS key, never the answer key) and its origin.

    Made on first use: the origin is ``origin`` when given, else
    ``<hostname>/converge-log/<first 4 bytes of SHA-256 of the public key, hex>`` (unique per
    key, so two notaries on one host never share an origin), and is kept beside the key
    (``<key>.origin``) so that every later start and ``notary log-key`` name the same log."""
    origin_file = path.with_name(path.name + ".origin")
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw)
        name = origin or f"{hostname}/converge-log/{hashlib.sha256(raw).digest()[:4].hex()}"
        _write_ed25519(path, key)
        _write_private(origin_file, name.encode() + b"\n", 0o644)
    loaded = _load_private(path, "log key")
    if not isinstance(loaded, Ed25519PrivateKey):
        raise BadConfig(f"{path}: the transparency log's key must be Ed25519")
    try:
        kept = _read_limited(origin_file, "log origin").decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadConfig(f"cannot read the log's origin {origin_file}: {exc}") from exc
    if origin and origin != kept:
        raise BadConfig(f"--log-origin {origin!r} differs from the origin of the log key "
                        f"({kept!r} in {origin_file}): a log keeps its origin for life")
    if not kept or any(c.isspace() or c == "+" for c in kept):
        raise BadConfig(f"{origin_file}: an origin is one word without '+'")
    return loaded, kept
