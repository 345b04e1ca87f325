"""Fetching a server's certificate (no validation) and asking converge about it, also ahead of
a handshake (:func:`prefetch`, so that the check inside the handshake is a cache hit)."""

from __future__ import annotations

import asyncio
import socket
import ssl

from ..client import Client, ConfigArg, Verdict, get_client
from ..errors import TargetIOError
from ..fingerprint import fingerprint_of

MAX_CERT_FETCH_TIMEOUT = 60.0


def _plain_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def fetch_certificate(host: str, port: int, *, timeout: float = 5.0) -> bytes:
    """The DER leaf certificate ``host:port`` presents (no validation). Raises
    :class:`~converge.errors.TargetIOError`."""
    timeout = min(timeout, MAX_CERT_FETCH_TIMEOUT)
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            _plain_context().wrap_socket(raw, server_hostname=host) as s,
        ):
            der = s.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError) as e:
        raise TargetIOError(f"cannot fetch the certificate of {host}:{port}: {e}") from e
    if not der:
        raise TargetIOError(f"{host}:{port} presented no certificate")
    return der


async def afetch_certificate(host: str, port: int, *, timeout: float = 5.0) -> bytes:
    """Asynchronous :func:`fetch_certificate`."""
    writer = None
    try:
        async with asyncio.timeout(min(timeout, MAX_CERT_FETCH_TIMEOUT)):
            _, writer = await asyncio.open_connection(
                host, port, ssl=_plain_context(), server_hostname=host
            )
        sslobj = writer.get_extra_info("ssl_object")
        der: bytes | None = sslobj.getpeercert(binary_form=True) if sslobj else None
    except (OSError, ssl.SSLError, TimeoutError) as e:
        raise TargetIOError(f"cannot fetch the certificate of {host}:{port}: {e}") from e
    finally:
        if writer is not None:
            writer.transport.abort()
    if not der:
        raise TargetIOError(f"{host}:{port} presented no certificate")
    return der


def verify_server(
    host: str, port: int, *, config: ConfigArg | Client = None
) -> tuple[Verdict, bytes]:
    """Fetch ``host:port``'s certificate and ask converge about it."""
    der = fetch_certificate(host, port)
    verdict = get_client(config).check(host, port, fingerprint_of(der), certificate=der)
    return verdict, der


async def prefetch(host: str, port: int, *, config: ConfigArg | Client = None) -> Verdict:
    """Ask the notaries about ``host:port`` without blocking the event loop, so that a
    following handshake through :func:`converge_ssl_context` is answered by the cache."""
    der = await afetch_certificate(host, port)
    return await get_client(config).acheck(host, port, fingerprint_of(der), certificate=der)


__all__ = ["afetch_certificate", "fetch_certificate", "prefetch", "verify_server"]
