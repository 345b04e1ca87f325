"""Use converge in place of (or on top of) CA validation in Python's TLS stacks.

One mechanism serves every stack: :func:`converge_ssl_context` returns an
:class:`ssl.SSLContext` whose sockets (``sslsocket_class``) and memory-BIO objects
(``sslobject_class``, used by asyncio, aiohttp and anyio/httpx) ask converge about the peer's
certificate as soon as the handshake completes, before any application data is written, and
raise :class:`~converge.errors.NotTrusted` (an :class:`ssl.SSLCertVerificationError`) when the
verdict is negative. By default no CA or host name check is made (converge replaces them);
``require_ca=True`` keeps both.

**Which host:port is asked about.** Always the *origin* the application wants to reach, never
a proxy in between. The host is the connection's ``server_hostname``. The port comes, in this
order, from the origin that the stack integrations below announce for the connection (a
context variable, see :func:`origin`: they know the URL even inside a proxy's CONNECT tunnel),
then from an explicit ``converge_ssl_context(port=...)``, then, for a plain socket, from the
peer address (right for a direct connection). A memory-BIO connection (asyncio) cannot see
its peer: with neither an announced origin nor an explicit port the handshake is refused,
never checked against a guessed port.

=====================  =========================================================
stack                  how (proxies honoured as the stack honours them)
=====================  =========================================================
ssl / socket           ``converge_ssl_context().wrap_socket(sock, server_hostname=h)``
http.client            :class:`ConvergeHTTPSConnection` (``set_tunnel`` for a proxy)
urllib.request         :func:`urlopen`, or ``build_opener(https_handler())``
requests               :func:`requests_session` (direct, ``HTTPS_PROXY``, ``proxies=``)
urllib3                :func:`urllib3_pool_manager`, :func:`urllib3_proxy_manager`
httpx                  :func:`httpx_client`, :func:`httpx_async_client`
aiohttp                ``aiohttp.ClientSession(connector=aiohttp_connector())``
asyncio streams        :func:`open_connection`
=====================  =========================================================

The check after a handshake is synchronous: a local-cache hit costs microseconds; a miss asks
the notaries (up to ``total-timeout``). Inside an event loop a miss therefore blocks that loop
while the notaries answer; ``await prefetch(host, port)`` beforehand asks them asynchronously
and fills the cache so the handshake check is a hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import http.client
import socket
import ssl
import urllib.request
from collections.abc import Iterator
from typing import Any

from .client import Client, ConfigArg, Verdict, get_client
from .errors import NotTrusted, TargetIOError
from .fingerprint import fingerprint_of

MAX_CERT_FETCH_TIMEOUT = 60.0

# --------------------------------------------------------------------- the origin

_ORIGIN: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
    "converge_origin", default=None
)


def _norm_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


@contextlib.contextmanager
def origin(host: str, port: int) -> Iterator[None]:
    """Announce that TLS handshakes in this block (thread or task) reach ``host:port``,
    whatever address the socket is connected to (a proxy, a tunnel). Every integration in
    this module uses it; use it around your own code that tunnels a connection."""
    token = _ORIGIN.set((_norm_host(host), int(port)))
    try:
        yield
    finally:
        _ORIGIN.reset(token)


def _announced_port(server_hostname: str | None) -> int | None:
    o = _ORIGIN.get()
    if o is None or server_hostname is None or _norm_host(server_hostname) != o[0]:
        return None
    return o[1]


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
        port = _announced_port(host)
        if port is None:
            explicit = getattr(self.context, "converge_port", None)
            port = int(explicit) if explicit is not None else int(peer[1])
        self.converge_verdict = _check_peer(
            self.context, self.getpeercert(binary_form=True), host, port
        )


class ConvergeSSLObject(ssl.SSLObject):
    """An :class:`ssl.SSLObject` (memory BIO: asyncio, anyio) that asks converge after its
    client handshake. It cannot see its peer: the port is the announced origin's
    (:func:`origin`) or the context's explicit ``converge_port``."""

    converge_verdict: Verdict | None = None

    def do_handshake(self) -> None:
        super().do_handshake()
        if self.server_side:
            return
        host = self.server_hostname
        if not host:
            raise NotTrusted("converge needs server_hostname on asyncio connections")
        port = _announced_port(host)
        if port is None:
            port = getattr(self.context, "converge_port", None)
        if port is None:
            raise NotTrusted(
                f"converge cannot tell which port of {host} this connection reaches: use "
                "converge.tls.open_connection/aiohttp_connector/httpx_async_client, "
                "converge_ssl_context(port=...), or converge.tls.origin(host, port)"
            )
        self.converge_verdict = _check_peer(
            self.context, self.getpeercert(binary_form=True), host, int(port)
        )


class ConvergeSSLContext(ssl.SSLContext):
    """An SSLContext whose client connections are checked by converge."""

    sslsocket_class = ConvergeSSLSocket
    sslobject_class = ConvergeSSLObject
    converge_config: ConfigArg | Client
    converge_port: int | None

    @property
    def converge_client(self) -> Client:
        """The client that decides: the one given, or the shared client of the configuration
        given (so that a changed configuration applies to contexts made before)."""
        return get_client(self.converge_config)


def converge_ssl_context(
    config: ConfigArg | Client = None,
    *,
    port: int | None = None,
    require_ca: bool = False,
    cafile: str | None = None,
) -> ConvergeSSLContext:
    """A client SSLContext that trusts what converge trusts.

    ``port``: ask about this port for every connection made with the context that has no
    announced origin (see the module docstring); leave it ``None`` with the integrations
    below. ``require_ca=True`` additionally demands ordinary CA and host name validation
    (default trust store, or ``cafile``).
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
    get_client(config)  # a bad configuration fails here, not in the first handshake
    ctx.converge_config = config
    ctx.converge_port = port
    return ctx


def _context(config: ConfigArg | Client, ctx: ssl.SSLContext | None) -> ConvergeSSLContext:
    if ctx is None:
        return converge_ssl_context(config)
    if not isinstance(ctx, ConvergeSSLContext):
        raise TypeError("the context must come from converge_ssl_context()")
    return ctx


def _url_origin(scheme: str, host: str | None, port: int | None) -> tuple[str, int]:
    if not host:
        raise NotTrusted("converge needs the URL's host")
    return host, port or (443 if scheme == "https" else 80)


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


# --------------------------------------------------------------------- http.client, urllib


class ConvergeHTTPSConnection(http.client.HTTPSConnection):
    """``http.client.HTTPSConnection`` checked by converge for the origin ``host:port``,
    also through a proxy (``set_tunnel``)."""

    def __init__(
        self,
        host: str,
        port: int | None = None,
        *,
        config: ConfigArg | Client = None,
        context: ssl.SSLContext | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(host, port, context=_context(config, context), **kw)

    def connect(self) -> None:
        tunnel_host: str | None = getattr(self, "_tunnel_host", None)
        if tunnel_host:
            where = (tunnel_host, int(getattr(self, "_tunnel_port", None) or 443))
        else:
            where = (self.host, int(self.port))
        with origin(*where):
            super().connect()


class ConvergeHTTPSHandler(urllib.request.HTTPSHandler):
    """A urllib HTTPS handler whose connections are :class:`ConvergeHTTPSConnection`."""

    def __init__(self, context: ConvergeSSLContext, debuglevel: int = 0) -> None:
        super().__init__(debuglevel=debuglevel, context=context)
        self._converge_context = context

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(
            functools.partial(ConvergeHTTPSConnection, context=self._converge_context), req
        )


def https_handler(config: ConfigArg | Client = None) -> ConvergeHTTPSHandler:
    """For ``urllib.request.build_opener(...)``: HTTPS checked by converge."""
    return ConvergeHTTPSHandler(converge_ssl_context(config))


def urlopen(
    url: str | urllib.request.Request,
    data: bytes | None = None,
    *,
    config: ConfigArg | Client = None,
    timeout: float = 30.0,
) -> Any:
    """``urllib.request.urlopen`` with converge instead of CA validation (proxies from the
    environment as urllib honours them)."""
    return urllib.request.build_opener(https_handler(config)).open(url, data, timeout)


# --------------------------------------------------------------------- urllib3 / requests


@functools.cache
def _urllib3_classes() -> tuple[type, type]:
    import urllib3.connection
    import urllib3.connectionpool

    class ConvergeUrllib3Connection(urllib3.connection.HTTPSConnection):
        """urllib3 connection whose certificate check is converge's (in the handshake), for
        the origin host:port also inside a proxy tunnel."""

        def __init__(self, *args: Any, **kw: Any) -> None:
            ctx = kw.get("ssl_context")
            if not isinstance(ctx, ConvergeSSLContext):
                raise TypeError("ConvergeUrllib3Connection needs a converge_ssl_context()")
            # urllib3 sets the context's verify_mode from cert_reqs: keep converge's own
            kw["cert_reqs"] = ctx.verify_mode
            if ctx.verify_mode == ssl.CERT_NONE:
                kw["assert_hostname"] = False
                kw["ca_certs"] = None
                kw["ca_cert_dir"] = None
            super().__init__(*args, **kw)

        def connect(self) -> None:
            if self._tunnel_host is not None and self._tunnel_port is not None:
                where = (self._tunnel_host, int(self._tunnel_port))
            else:
                where = (self.host, int(self.port))
            with origin(*where):
                super().connect()
            # A negative verdict raised NotTrusted inside the handshake; reaching here means
            # converge trusted the peer.
            self.is_verified = True

    class ConvergeHTTPSConnectionPool(urllib3.connectionpool.HTTPSConnectionPool):
        ConnectionCls = ConvergeUrllib3Connection

    return ConvergeUrllib3Connection, ConvergeHTTPSConnectionPool


def _converge_pools(manager: Any) -> Any:
    import urllib3

    _, pool_cls = _urllib3_classes()
    manager.pool_classes_by_scheme = {"http": urllib3.HTTPConnectionPool, "https": pool_cls}
    return manager


def urllib3_pool_manager(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """A ``urllib3.PoolManager`` whose HTTPS connections are checked by converge."""
    import urllib3

    return _converge_pools(urllib3.PoolManager(ssl_context=converge_ssl_context(config), **kw))


def urllib3_proxy_manager(proxy_url: str, config: ConfigArg | Client = None, **kw: Any) -> Any:
    """A ``urllib3.ProxyManager``: HTTPS through the proxy's CONNECT tunnel, the origin's
    certificate checked by converge."""
    import urllib3

    return _converge_pools(
        urllib3.ProxyManager(proxy_url, ssl_context=converge_ssl_context(config), **kw)
    )


def requests_adapter(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """A ``requests`` transport adapter checked by converge; mount it on ``https://``. Direct
    connections and HTTP proxies (``proxies=``, ``HTTPS_PROXY``) alike: the origin's
    certificate is checked for the request URL's host:port."""
    import requests.adapters

    ctx = converge_ssl_context(config)

    class ConvergeAdapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(
            self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
        ) -> None:
            pool_kwargs["ssl_context"] = ctx
            super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
            _converge_pools(self.poolmanager)

        def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
            if proxy not in self.proxy_manager:
                if not proxy.lower().startswith(("http://", "https://")):
                    raise requests.exceptions.InvalidProxyURL(
                        f"converge checks HTTPS through HTTP(S) proxies only, not {proxy!r}"
                    )
                proxy_kwargs["ssl_context"] = ctx
                _converge_pools(super().proxy_manager_for(proxy, **proxy_kwargs))
            return self.proxy_manager[proxy]

        def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            import urllib3.util

            u = urllib3.util.parse_url(request.url)
            if u.scheme != "https":
                return super().send(request, *args, **kwargs)
            with origin(*_url_origin("https", u.host, u.port)):
                return super().send(request, *args, **kwargs)

    return ConvergeAdapter(**kw)


def requests_session(config: ConfigArg | Client = None) -> Any:
    """A ``requests.Session`` whose ``https://`` requests are checked by converge."""
    import requests

    session = requests.Session()
    session.mount("https://", requests_adapter(config))
    return session


# --------------------------------------------------------------------- httpx


@functools.cache
def _httpx_classes() -> tuple[type, type]:
    import httpx

    class _OriginTransport(httpx.BaseTransport):
        def __init__(self, inner: httpx.BaseTransport) -> None:
            self._inner = inner

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            u = request.url
            if u.scheme != "https":
                return self._inner.handle_request(request)
            with origin(*_url_origin("https", u.host, u.port)):
                return self._inner.handle_request(request)

        def close(self) -> None:
            self._inner.close()

    class _AsyncOriginTransport(httpx.AsyncBaseTransport):
        def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
            self._inner = inner

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            u = request.url
            if u.scheme != "https":
                return await self._inner.handle_async_request(request)
            with origin(*_url_origin("https", u.host, u.port)):
                return await self._inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self._inner.aclose()

    class ConvergeHTTPXClient(httpx.Client):
        def _init_transport(self, *a: Any, **kw: Any) -> httpx.BaseTransport:
            return _OriginTransport(super()._init_transport(*a, **kw))

        def _init_proxy_transport(self, *a: Any, **kw: Any) -> httpx.BaseTransport:
            return _OriginTransport(super()._init_proxy_transport(*a, **kw))

    class ConvergeHTTPXAsyncClient(httpx.AsyncClient):
        def _init_transport(self, *a: Any, **kw: Any) -> httpx.AsyncBaseTransport:
            return _AsyncOriginTransport(super()._init_transport(*a, **kw))

        def _init_proxy_transport(self, *a: Any, **kw: Any) -> httpx.AsyncBaseTransport:
            return _AsyncOriginTransport(super()._init_proxy_transport(*a, **kw))

    return ConvergeHTTPXClient, ConvergeHTTPXAsyncClient


def httpx_client(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """An ``httpx.Client`` whose HTTPS connections (direct or through ``proxy=`` /
    environment proxies) are checked by converge for each request's host:port."""
    cls, _ = _httpx_classes()
    return cls(verify=converge_ssl_context(config), **kw)


def httpx_async_client(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """The ``httpx.AsyncClient`` of :func:`httpx_client`."""
    _, cls = _httpx_classes()
    return cls(verify=converge_ssl_context(config), **kw)


# --------------------------------------------------------------------- aiohttp, asyncio


def aiohttp_connector(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """An ``aiohttp.TCPConnector`` whose HTTPS connections (direct or through an HTTP proxy)
    are checked by converge for each request's host:port."""
    import aiohttp

    class ConvergeConnector(aiohttp.TCPConnector):
        async def connect(self, req: Any, *args: Any, **kwargs: Any) -> Any:
            if not req.is_ssl():
                return await super().connect(req, *args, **kwargs)
            with origin(*_url_origin("https", req.url.host, req.url.port)):
                return await super().connect(req, *args, **kwargs)

    return ConvergeConnector(ssl=converge_ssl_context(config), **kw)


async def open_connection(
    host: str, port: int, *, config: ConfigArg | Client = None, **kw: Any
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """``asyncio.open_connection`` over TLS checked by converge for ``host:port``."""
    kw.setdefault("server_hostname", host)
    with origin(host, port):
        return await asyncio.open_connection(host, port, ssl=converge_ssl_context(config), **kw)


__all__ = [
    "ConvergeHTTPSConnection",
    "ConvergeHTTPSHandler",
    "ConvergeSSLContext",
    "ConvergeSSLObject",
    "ConvergeSSLSocket",
    "afetch_certificate",
    "aiohttp_connector",
    "converge_ssl_context",
    "fetch_certificate",
    "https_handler",
    "httpx_async_client",
    "httpx_client",
    "open_connection",
    "origin",
    "prefetch",
    "requests_adapter",
    "requests_session",
    "urllib3_pool_manager",
    "urllib3_proxy_manager",
    "urlopen",
    "verify_server",
]
