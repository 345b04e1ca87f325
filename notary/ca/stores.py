"""Root stores from files: Mozilla's (the ``certifi`` package), PEM bundles, and the top-k.

Reading files happens here (the edge); :mod:`notary.ca.verify` stays pure. Bounds:
a PEM bundle is at most :data:`MAX_BUNDLE_BYTES`, a fingerprint list at most
:data:`MAX_FINGERPRINTS` lines.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import certifi
from cryptography import x509
from cryptography.utils import CryptographyDeprecationWarning

from notary.ca.verify import RootStore
from notary.errors import BadConfig, BadData

MAX_BUNDLE_BYTES = 8 * 1024 * 1024
MAX_FINGERPRINTS = 10_000
MOZILLA = "mozilla"


def read_pem_bundle(path: Path) -> list[x509.Certificate]:
    """Every certificate in a PEM file. Raises :class:`BadConfig` on a missing/bad file."""
    try:
        if path.stat().st_size > MAX_BUNDLE_BYTES:
            raise BadConfig(f"{path} is larger than {MAX_BUNDLE_BYTES} bytes")
        data = path.read_bytes()
    except OSError as exc:
        raise BadConfig(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        with warnings.catch_warnings():
            # Some long-lived roots in Mozilla's store carry non-positive serial numbers.
            warnings.simplefilter("ignore", CryptographyDeprecationWarning)
            certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise BadConfig(f"{path}: not a PEM certificate bundle ({exc})") from exc
    return certs


def mozilla_store() -> RootStore:
    """Mozilla's root store as shipped in the installed ``certifi`` package."""
    return RootStore(MOZILLA, read_pem_bundle(Path(certifi.where())))


def full_store(extra_roots: Sequence[Path] = (), *, mozilla: bool = True) -> RootStore:
    """Mozilla's roots (unless ``mozilla`` is false) plus the roots in ``extra_roots``."""
    extra = [c for p in extra_roots for c in read_pem_bundle(p)]
    if not mozilla:
        if not extra:
            raise BadConfig("a root store without Mozilla's roots needs --roots files")
        return RootStore("custom", extra)
    base = mozilla_store()
    return base.with_roots(extra, f"{MOZILLA}+{len(extra)}") if extra else base


def parse_fingerprint_list(text: str) -> list[bytes]:
    """SHA-256 fingerprints, one per line (hex, colons optional, ``#`` comments)."""
    out: list[bytes] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip().replace(":", "").lower()
        if not line:
            continue
        if len(out) >= MAX_FINGERPRINTS:
            raise BadData(f"more than {MAX_FINGERPRINTS} fingerprints")
        try:
            fp = bytes.fromhex(line)
        except ValueError:
            fp = b""
        if len(fp) != 32:
            raise BadData(f"line {n}: not a SHA-256 fingerprint")
        if fp not in out:
            out.append(fp)
    return out


def read_fingerprint_list(path: Path) -> list[bytes]:
    try:
        if path.stat().st_size > MAX_FINGERPRINTS * 200:
            raise BadConfig(f"{path} is too large for a fingerprint list")
        return parse_fingerprint_list(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadConfig(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise BadConfig(f"{path} is not UTF-8 text") from exc


def top_k(full: RootStore, ranking: Sequence[bytes], k: int) -> RootStore:
    """The restricted store of the first ``k`` roots of ``ranking`` (most popular first)."""
    if k < 1:
        raise BadData("k must be at least 1")
    return full.restrict(list(ranking[:k]), f"top-{k}")


__all__ = [
    "MOZILLA",
    "full_store",
    "mozilla_store",
    "parse_fingerprint_list",
    "read_fingerprint_list",
    "read_pem_bundle",
    "top_k",
]
