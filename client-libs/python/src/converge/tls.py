"""Use converge in place of (or on top of) CA validation in Python's TLS stacks.

One mechanism serves every stack: :func:`converge_ssl_context` returns an
:class:`ssl.SSLContext` whose sockets (``sslsocket_class``) and memory-BIO objects
(``sslobject_class``, used by asyncio, aiohttp and anyio/httpx) ask converge about the peer's
certificate as soon as the handshake completes, and raise :class:`~converge.errors.NotTrusted`
(an :class:`ssl.SSLCertVerificationError`) when the verdict is negative. By default no CA or
host name check is made (converge replaces them); ``require_ca=True`` keeps both.

=====================  =========================================================
stack                  how
=====================  =========================================================
ssl / socket           ``converge_ssl_context().wrap_socket(sock, server_hostname=h)``
http.client            ``http.client.HTTPSConnection(h, p, context=converge_ssl_context())``
urllib.request         :func:`urlopen` or ``HTTPSHandler(context=converge_ssl_context())``
requests               :func:`requests_session` (mounts :class:`ConvergeAdapter`)
urllib3                :func:`urllib3_pool_manager`
httpx                  ``httpx.Client(verify=converge_ssl_context())`` (also AsyncClient)
aiohttp                ``aiohttp.TCPConnector(ssl=converge_ssl_context())``
asyncio streams        ``asyncio.open_connection(h, p, ssl=converge_ssl_context())``
=====================  =========================================================

The check after a handshake is synchronous: a local-cache hit costs microseconds; a miss asks
the notaries (up to ``total-timeout``). Inside an event loop a miss therefore blocks that loop
while the notaries answer; ``await prefetch(host, port)`` beforehand asks them asynchronously
and fills the cache so the handshake check is a hit.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

from .client import Client, ConfigArg, Verdict, get_client
from .errors import NotTrusted, TargetIOError
from .fingerprint import fingerprint_of

MAX_CERT_FETCH_TIMEOUT = 60.0


def _check_peer(ctx: ssl.SSLContext, der: bytes | None, host: str, port: int) -> Verdict:
    client: Client | None = getattr(ctx, "converge_client", None)
    if client is None:
        raise NotTrusted("this SSLContext was not made by converge_ssl_context()")
    if not der:
        raise NotTrusted(f"{host}:{port} presented no certificate")
    verdict = client.check(host, port, fingerprint_of(der, "sha1"), certificate=der)
    if not verdict:
        raise NotTrusted(f"converge does not trust {host}:{port}: {verdict.reason}", verdict)
    return verdict


class ConvergeSSLSocket(ssl.SSLSocket):
    """An :class:`ssl.SSLSocket` that asks converge after its client handshake."""

    converge_verdict: Verdict | None = None

    def do_handshake(self, block: bool = False) -> None:
        super().do_handshake(block)
        if self.server_side:
            return
        peer = self.getpeername()
        host = self.server_hostname or peer[0]
        self.converge_verdict = _check_peer(
            self.context, self.getpeercert(binary_form=True), host, int(peer[1])
        )


class ConvergeSSLObject(ssl.SSLObject):
    """An :class:`ssl.SSLObject` (memory BIO, asyncio) that asks converge after its client
    handshake. The port is the context's ``converge_port`` (the object cannot see it)."""

    converge_verdict: Verdict | None = None

    def do_handshake(self) -> None:
        super().do_handshake()
        if self.server_side:
            return
        host = self.server_hostname
        if not host:
            raise NotTrusted("converge needs server_hostname on asyncio connections")
        port = int(getattr(self.context, "converge_port", 443))
        self.converge_verdict = _check_peer(
            self.context, self.getpeercert(binary_form=True), host, port
        )


class ConvergeSSLContext(ssl.SSLContext):
    """An SSLContext whose client connections are checked by converge."""

    sslsocket_class = ConvergeSSLSocket
    sslobject_class = ConvergeSSLObject
    converge_client: Client
    converge_port: int


def converge_ssl_context(
    config: ConfigArg | Client = None,
    *,
    port: int = 443,
    require_ca: bool = False,
    cafile: str | None = None,
) -> ConvergeSSLContext:
    """A client SSLContext that trusts what converge trusts.

    ``port`` is used only by memory-BIO connections (asyncio, aiohttp, httpx async), which
    cannot see the peer's port. ``require_ca=True`` additionally demands ordinary CA and host
    name validation (default trust store, or ``cafile``).
    """
    ctx = ConvergeSSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if require_ca:
        ctx.check_hostname = True
        ctx.verify_mode = ssl.CERT_REQUIRED
        if cafile:
            ctx.load_verify_locations(cafile)
        else:
            ctx.load_default_certs()
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.converge_client = config if isinstance(config, Client) else get_client(config)
    ctx.converge_port = port
    return ctx


# --------------------------------------------------------------------- fetching a cert


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


# --------------------------------------------------------------------- urllib


def urlopen(
    url: str, *, config: ConfigArg | Client = None, timeout: float = 30.0, **kw: Any
) -> Any:
    """``urllib.request.urlopen`` with converge instead of CA validation."""
    import urllib.request

    return urllib.request.urlopen(url, timeout=timeout, context=converge_ssl_context(config), **kw)


# --------------------------------------------------------------------- urllib3 / requests


def _urllib3_classes() -> tuple[type, type]:
    import urllib3.connection
    import urllib3.connectionpool

    class ConvergeHTTPSConnection(urllib3.connection.HTTPSConnection):
        """urllib3 connection whose certificate check is converge's (in the handshake)."""

        def __init__(self, *args: Any, **kw: Any) -> None:
            ctx = kw.get("ssl_context")
            if not isinstance(ctx, ConvergeSSLContext):
                raise TypeError("ConvergeHTTPSConnection needs a converge_ssl_context()")
            kw["cert_reqs"] = ctx.verify_mode
            if ctx.verify_mode == ssl.CERT_NONE:
                kw["assert_hostname"] = False
                kw["ca_certs"] = None
                kw["ca_cert_dir"] = None
            super().__init__(*args, **kw)

        def connect(self) -> None:
            super().connect()
            # A negative verdict raised NotTrusted inside the handshake; reaching here means
            # converge trusted the peer.
            self.is_verified = True

    class ConvergeHTTPSConnectionPool(urllib3.connectionpool.HTTPSConnectionPool):
        ConnectionCls = ConvergeHTTPSConnection

    return ConvergeHTTPSConnection, ConvergeHTTPSConnectionPool


def urllib3_pool_manager(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """A ``urllib3.PoolManager`` whose HTTPS connections are checked by converge."""
    import urllib3

    _, pool_cls = _urllib3_classes()
    pm = urllib3.PoolManager(ssl_context=converge_ssl_context(config), **kw)
    pm.pool_classes_by_scheme = {**pm.pool_classes_by_scheme, "https": pool_cls}
    return pm


def requests_adapter(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """A ``requests`` transport adapter checked by converge; mount it on ``https://``."""
    import requests.adapters
    import urllib3

    _, pool_cls = _urllib3_classes()
    ctx = converge_ssl_context(config)

    class ConvergeAdapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(
            self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
        ) -> None:
            pool_kwargs["ssl_context"] = ctx
            super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
            self.poolmanager.pool_classes_by_scheme = {
                "http": urllib3.HTTPConnectionPool,
                "https": pool_cls,
            }

    return ConvergeAdapter(**kw)


def requests_session(config: ConfigArg | Client = None) -> Any:
    """A ``requests.Session`` whose ``https://`` requests are checked by converge."""
    import requests

    session = requests.Session()
    session.mount("https://", requests_adapter(config))
    return session


__all__ = [
    "ConvergeSSLContext",
    "ConvergeSSLObject",
    "ConvergeSSLSocket",
    "afetch_certificate",
    "converge_ssl_context",
    "fetch_certificate",
    "prefetch",
    "requests_adapter",
    "requests_session",
    "urllib3_pool_manager",
    "urlopen",
    "verify_server",
]
