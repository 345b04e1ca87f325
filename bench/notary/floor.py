"""The physical floor of one forced probe: what any notary must spend on it.

A forced probe (409) costs at least one client-side TLS handshake with the target and one
legacy signature over the new history. The handshake part is measured as the CPU time of
``openssl s_time -new`` (a C client, user + system) per handshake against the same target
(:func:`bench.notary.stime.s_time`); the signature part here, as the CPU time of signing
a one-observation legacy payload with the notary's own key, in this process.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from bench.notary.procs import BenchError
from notary.core import legacy
from notary.core.history import Observation
from notary.core.signing import LegacySigner


def signature_cpu_us(key_path: Path, signatures: int = 200) -> float:
    """CPU microseconds per legacy signature with the key at ``key_path``."""
    try:
        key = load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot load the notary key {key_path}: {exc}") from exc
    if not isinstance(key, rsa.RSAPrivateKey):
        raise BenchError(f"{key_path} is not an RSA key")
    signer = LegacySigner(key)
    leaf = b"floor"
    now = int(time.time())
    payload = legacy.signed_payload(
        (Observation(hashlib.sha1(leaf).digest(), hashlib.sha256(leaf).digest(), now, now),)
    )
    t0 = time.process_time()
    for _ in range(signatures):
        signer.sign(payload)
    return (time.process_time() - t0) / signatures * 1e6


__all__ = ["signature_cpu_us"]
