"""TLS to notaries in pyOpenSSL over memory buffers, on any asyncio transport.

The client's connections to notaries (direct, or inside a relay's tunnel) run their TLS in
pyOpenSSL, PyCA's binding to the OpenSSL that ``cryptography`` ships, instead of the ``ssl``
module, which links the system's OpenSSL (3.0 on Debian 12). Measured on 2026-11-27 against a
local ``notary serve``, one new connection resuming the previous one's session, request and
answer read, 1,000 in a row: 555-617 us of the client's CPU against 822-943 us with the
``ssl`` module, whose every offered session is first copied through its DER form (a parse of
the notary's certificate, 170-190 us on OpenSSL 3.0); pyOpenSSL hands the session to OpenSSL
as it is.

What does not change: no CA or host name check (the caller pins the certificate), TLS 1.2 at
least, SNI for names and never for IP literals, OpenSSL's default ciphers and groups (with
OpenSSL 3.5+ that includes a post-quantum hybrid key share, which a notary on an older
OpenSSL ignores). Failures are :class:`TLSError` (an ``OSError``: the callers' unreachable
path), a close without TLS's ``close_notify`` after the handshake :class:`UnexpectedEOF`.

:class:`TLSStream` is what the callers use as the connection's writer; its reader is a plain
``asyncio.StreamReader`` fed with the decrypted bytes (its limit and flow control apply to
the TCP transport underneath).
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

from cryptography.hazmat.bindings.openssl.binding import Binding
from OpenSSL import SSL, crypto

_FLIGHT = 16384  # bytes taken from OpenSSL's outgoing buffer at a time (pyOpenSSL zeroes them)
_RECORD = 65536  # decrypted bytes read at a time


class TLSError(ConnectionError):
    """The TLS layer of a notary connection failed (handshake refused, a bad record, the
    connection closed during the handshake)."""


class UnexpectedEOF(TLSError):
    """The peer closed the connection after the handshake without TLS's ``close_notify``."""


def client_context() -> SSL.Context:
    """A client context for notary connections: no CA or name check (the pin replaces them),
    TLS 1.2 at least."""
    ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
    ctx.set_verify(SSL.VERIFY_NONE)
    return ctx


def _reason(exc: BaseException) -> str:
    """OpenSSL's reason for an error, in the ``ssl`` module's ``[lib] reason`` shape."""
    if isinstance(exc, SSL.SysCallError):
        return "connection closed during the TLS handshake"
    args = exc.args[0] if exc.args else None
    if isinstance(args, list) and args and isinstance(args[-1], tuple) and len(args[-1]) == 3:
        lib, _, reason = args[-1]
        return f"[{lib}] {reason}"
    return str(exc) or type(exc).__name__


def _sni(server_hostname: str | None) -> bytes | None:
    """The name to send as SNI: a host name, never an IP literal (RFC 6066)."""
    if not server_hostname:
        return None
    try:
        ipaddress.ip_address(server_hostname.strip("[]"))
    except ValueError:
        return server_hostname.encode("idna")
    return None


class _TLSProtocol(asyncio.Protocol):
    """One client TLS connection over a transport: the handshake, then application bytes
    both ways (decrypted ones fed to ``reader``)."""

    def __init__(self, ctx: SSL.Context, server_hostname: str | None,
                 session: SSL.Session | None, reader: asyncio.StreamReader,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.conn = SSL.Connection(ctx, None)
        name = _sni(server_hostname)
        if name is not None:
            self.conn.set_tlsext_host_name(name)
        if session is not None:
            self.conn.set_session(session)
        self.conn.set_connect_state()
        self.reader = reader
        self.handshake: asyncio.Future[None] = loop.create_future()
        self.transport: Any = None
        self.close_notify = False
        self.ended = False
        self.answered = 0  # decrypted bytes received since the last write

    # ----------------------------------------------------------------- transport events

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.reader.set_transport(transport)
        self._pump()

    def data_received(self, data: bytes) -> None:
        self.conn.bio_write(data)
        self._pump()

    def eof_received(self) -> bool:
        self._ended(None)
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        # OpenSSL makes the session of a connection freed without a shutdown unresumable
        # (it may have been cut short); its session is offered again only after an answer
        # read in full and pinned (notary_io), so the connection counts as shut down
        self.conn.set_shutdown(SSL.SENT_SHUTDOWN | SSL.RECEIVED_SHUTDOWN)
        self._ended(exc)

    def pause_writing(self) -> None:  # requests are small; nothing to pause
        pass

    def resume_writing(self) -> None:
        pass

    # ------------------------------------------------------------------------ internals

    def _ended(self, exc: Exception | None) -> None:
        """The TCP connection ended (``exc``: how, None for an orderly close)."""
        if self.ended:
            return
        self.ended = True
        if not self.handshake.done():
            err = TLSError(f"connection closed during the TLS handshake: {exc}" if exc
                           else "connection closed during the TLS handshake")
            self.handshake.set_exception(err)
            self.reader.set_exception(err)
            return
        if not self._reader_open():
            return
        if exc is not None:
            self.reader.set_exception(exc)
        elif self.close_notify or self.answered:
            # many servers (the 2011 notaries among them) close without close_notify once
            # their answer is sent: an orderly close after some of it is its end
            self.reader.feed_eof()
        else:
            # nothing since the request (a kept connection the notary closed meanwhile)
            self.reader.set_exception(UnexpectedEOF(
                "the notary closed the connection without an answer or close_notify"))

    def _reader_open(self) -> bool:
        """The reader takes more: neither ended nor failed."""
        return self.reader.exception() is None and not self.reader.at_eof()

    def _fail(self, err: TLSError) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(err)
        if self._reader_open():
            self.reader.set_exception(err)
        if self.transport is not None:
            self.transport.abort()

    def _pump(self) -> None:
        """Advance the handshake, hand over decrypted bytes, send what OpenSSL wrote."""
        if not self.handshake.done():
            try:
                self.conn.do_handshake()
            except SSL.WantReadError:
                self._flush()
                return
            except SSL.Error as e:
                self._flush()
                self._fail(TLSError(_reason(e)))
                return
            self.handshake.set_result(None)
        while not self.close_notify:
            try:
                data = self.conn.recv(_RECORD)
            except SSL.WantReadError:
                break
            except SSL.ZeroReturnError:
                self.close_notify = True
                if self._reader_open():
                    self.reader.feed_eof()
                break
            except SSL.Error as e:
                self._flush()
                self._fail(TLSError(_reason(e)))
                return
            self.answered += len(data)
            if self._reader_open():
                self.reader.feed_data(data)
        self._flush()

    def _flush(self) -> None:
        while True:
            try:
                out = self.conn.bio_read(_FLIGHT)
            except SSL.WantReadError:
                return
            if not out:
                return
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(out)

    def send(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the notary connection is closed")
        self.answered = 0
        view = memoryview(data)
        while view:
            try:
                n = self.conn.send(view)
            except SSL.Error as e:
                self._fail(TLSError(_reason(e)))
                raise TLSError(_reason(e)) from e
            view = view[n:]
        self._flush()


class TLSStream:
    """The writer side of a notary TLS connection, with what the callers ask of it: the
    peer's certificate, its session, whether it resumed one, and the context it was made
    with."""

    def __init__(self, protocol: _TLSProtocol, context: SSL.Context,
                 underlying: asyncio.StreamWriter | None = None) -> None:
        self._p = protocol
        self.context = context
        # what carried the connection before TLS (a relay's plain StreamWriter): kept alive,
        # since a StreamWriter closes its transport when it is collected
        self._underlying = underlying

    @property
    def transport(self) -> Any:
        return self._p.transport

    def write(self, data: bytes) -> None:
        self._p.send(data)

    async def drain(self) -> None:
        if self._p.transport is None or self._p.transport.is_closing():
            raise ConnectionResetError("the notary connection is closed")

    def is_closing(self) -> bool:
        return self._p.transport is None or bool(self._p.transport.is_closing())

    def peer_certificate(self) -> bytes | None:
        """The DER of the peer's certificate (a resumed session's is the first handshake's)."""
        cert = self._p.conn.get_peer_certificate()  # (DER straight from OpenSSL: no parse)
        return None if cert is None else crypto.dump_certificate(crypto.FILETYPE_ASN1, cert)

    def session(self) -> SSL.Session | None:
        return self._p.conn.get_session()

    def session_reused(self) -> bool:
        return bool(Binding.lib.SSL_session_reused(self._p.conn._ssl))


async def _handshake(protocol: _TLSProtocol) -> None:
    try:
        await protocol.handshake
    except BaseException:
        if protocol.transport is not None:
            protocol.transport.abort()
        raise


async def open_tls(host: str, port: int, ctx: SSL.Context, *, server_hostname: str | None,
                   session: SSL.Session | None = None, limit: int,
                   ) -> tuple[asyncio.StreamReader, TLSStream]:
    """A TCP connection to ``host:port`` and a completed TLS handshake over it (offering
    ``session``): ``(reader, writer)``. The certificate is not checked here."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    _, protocol = await loop.create_connection(
        lambda: _TLSProtocol(ctx, server_hostname, session, reader, loop), host, port)
    await _handshake(protocol)
    return reader, TLSStream(protocol, ctx)


async def start_tls(plain: asyncio.StreamWriter, ctx: SSL.Context, *,
                    server_hostname: str | None, limit: int,
                    ) -> tuple[asyncio.StreamReader, TLSStream]:
    """TLS over the open plain connection of ``plain`` (a relay's tunnel) from its next byte
    on; ``plain``'s reader gets nothing more."""
    loop = asyncio.get_running_loop()
    transport: Any = plain.transport
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = _TLSProtocol(ctx, server_hostname, None, reader, loop)
    transport.set_protocol(protocol)
    protocol.connection_made(transport)
    transport.resume_reading()
    await _handshake(protocol)
    return reader, TLSStream(protocol, ctx, plain)
