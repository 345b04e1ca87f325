"""The mechanism every integration shares: a client :class:`ssl.SSLContext` whose sockets and
memory-BIO objects ask converge about the peer's certificate right after the handshake, and
the *origin* (host:port asked about) that integrations announce per connection.

See :mod:`converge.tls` for the rules; the public names are importable from there.
"""

from __future__ import annotations

import contextlib
import contextvars
import ssl
from collections.abc import Iterator
from typing import Any

from ..client import Client, ConfigArg, Verdict, get_client
from ..errors import NotTrusted
from ..fingerprint import fingerprint_of

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
    """An :class:`ssl.SSLSocket` that asks converge after its client handshake.

    No byte goes either way before converge has answered: OpenSSL would complete a handshake
    not yet done inside the first read or write (``do_handshake_on_connect=False``), so every
    data method first does the handshake, and the check, itself. A connection converge does
    not trust raises :class:`NotTrusted` at each of them."""

    converge_verdict: Verdict | None = None

    # read, write and send are where every data method ends (recv and recv_into call read,
    # sendall and sendfile call send), so guarding them guards all, each once per call
    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # noqa: A002
        if self.converge_verdict is None and not self.server_side:
            self.do_handshake()
        return super().read(len, buffer)

    def write(self, data: Any) -> int:
        if self.converge_verdict is None and not self.server_side:
            self.do_handshake()
        return super().write(data)

    def send(self, data: Any, flags: int = 0) -> int:
        if self.converge_verdict is None and not self.server_side:
            self.do_handshake()
        return super().send(data, flags)

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
    (:func:`origin`) or the context's explicit ``converge_port``. As the socket does, it
    reads and writes nothing before converge has answered (a ``write`` before
    ``do_handshake`` does the handshake first, raising ``SSLWantReadError`` until the peer's
    bytes are in)."""

    converge_verdict: Verdict | None = None

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # noqa: A002
        if self.converge_verdict is None and not self.server_side:
            self.do_handshake()
        return super().read(len, buffer)

    def write(self, data: Any) -> int:
        if self.converge_verdict is None and not self.server_side:
            self.do_handshake()
        return super().write(data)

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


def checked_context(config: ConfigArg | Client, ctx: ssl.SSLContext | None) -> ConvergeSSLContext:
    """``ctx`` (which must come from :func:`converge_ssl_context`), or a new one."""
    if ctx is None:
        return converge_ssl_context(config)
    if not isinstance(ctx, ConvergeSSLContext):
        raise TypeError("the context must come from converge_ssl_context()")
    return ctx


def url_origin(scheme: str, host: str | None, port: int | None) -> tuple[str, int]:
    """The origin ``(host, port)`` of a URL's parts (default ports filled in)."""
    if not host:
        raise NotTrusted("converge needs the URL's host")
    return host, port or (443 if scheme == "https" else 80)


__all__ = [
    "ConvergeSSLContext",
    "ConvergeSSLObject",
    "ConvergeSSLSocket",
    "checked_context",
    "converge_ssl_context",
    "origin",
    "url_origin",
]
