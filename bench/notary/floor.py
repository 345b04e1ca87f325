"""The physical floor of one forced probe: what any notary must spend on it.

A forced probe (409) costs at least one client-side TLS handshake with the target and one
legacy signature over the new history. The handshake part is measured as the CPU time of
``openssl s_time -new`` (a C client, user + system) per handshake against the same target
(:func:`bench.notary.stime.s_time`); the signature part here, as the CPU time of signing
a one-observation legacy payload with the notary's own key, in this process.

``openssl s_time`` links the system's OpenSSL (3.0 here) while the notary's probe runs its
handshakes in pyOpenSSL on the OpenSSL that ``cryptography`` ships (4.0 here), which does the
same handshake for less CPU. So beside the floor each run also measures the probe library's
own handshake (:func:`library_handshake_cpu_us`: blocking sockets, the probe's client
context, nothing else in the loop): the notary's CPU over *that* plus the signature is its
own work around the handshake and the signature (Python, the event loop, the store, the
log), whatever the library costs.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from OpenSSL import SSL, crypto

from bench.notary.procs import BenchError
from notary.core import legacy
from notary.core.history import Observation
from notary.core.signing import LegacySigner
from notary.probe import client_context


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


_FIVE_SECONDS = struct.pack("ll", 5, 0)  # struct timeval


def library_handshake_cpu_us(host: str, port: int, seconds: float = 2.0,
                             most: int = 5000) -> float:
    """CPU microseconds (user + system of this process) per client handshake with the
    probe's own TLS library and context against ``host:port``: new TCP connection, full
    handshake, the leaf's DER, close. Bounded by ``seconds`` and ``most`` handshakes."""
    ctx = client_context()
    done = 0
    t0 = time.process_time()
    deadline = time.monotonic() + seconds
    try:
        while done < most and time.monotonic() < deadline:
            with socket.create_connection((host, port), timeout=5.0) as sock:
                # blocking for pyOpenSSL, a silent target still bounded (WantReadError)
                sock.settimeout(None)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _FIVE_SECONDS)
                conn = SSL.Connection(ctx, sock)
                conn.set_tlsext_host_name(b"site.test")
                conn.set_connect_state()
                conn.do_handshake()
                cert = conn.get_peer_certificate()
                if cert is None:
                    raise BenchError(f"{host}:{port} presented no certificate")
                crypto.dump_certificate(crypto.FILETYPE_ASN1, cert)
            done += 1
    except (OSError, SSL.Error) as exc:
        raise BenchError(f"handshake with {host}:{port} failed: {exc!r}") from exc
    if not done:
        raise BenchError(f"no handshake with {host}:{port} within {seconds:g} s")
    return (time.process_time() - t0) / done * 1e6


__all__ = ["library_handshake_cpu_us", "signature_cpu_us"]
