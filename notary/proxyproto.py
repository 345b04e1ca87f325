"""PROXY protocol version 2 from trusted balancers: the client's real address.

Rules (docs/operations.md, "Behind a balancer"):

* Only a connection whose peer is inside a ``--trusted-proxy`` network may announce an
  address, and it must: a trusted peer that does not start with a valid version-2 header is
  closed. A ``LOCAL`` header (a balancer's own health check) keeps the balancer's address.
* A connection from anywhere else that starts with a PROXY header (version 1 or 2) is closed:
  nobody else may choose the address they are charged to.
* The header is read before TLS and never beyond its announced length, bounded in size
  (:data:`MAX_TLVS`) and in time (the TLS handshake timeout); the socket is then handed to
  the TLS layer untouched.
* The announced source address replaces the peer address everywhere the notary reads it:
  rate limits, probe and tunnel shares, the access log.

The header layout is the one of the PROXY protocol specification (haproxy, 2010-2020):
12 signature bytes, version/command, family/transport, a 16-bit length, then the addresses.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import ssl
import struct
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from notary.errors import BadConfig, BadInput

SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V1_SIGNATURE = b"PROXY "
MAX_TLVS = 2048  # bytes of TLVs after the addresses (haproxy sends a few dozen)
MAX_PENDING = 1024  # connections still sending their header, per listener

log = logging.getLogger("notary")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ProxyHeaderError(BadInput):
    """A PROXY header is missing, malformed or sent by a peer that may not send one."""


def parse_trusted(specs: Sequence[str]) -> list[Network]:
    """``--trusted-proxy`` CIDRs (raises :class:`BadConfig` naming the bad one)."""
    out: list[Network] = []
    for spec in specs:
        try:
            out.append(ipaddress.ip_network(spec, strict=False))
        except ValueError:
            raise BadConfig(f"--trusted-proxy {spec!r} is not an address or CIDR") from None
    return out


def is_trusted(address: str, trusted: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == net.version and ip in net for net in trusted)


def header_length(first16: bytes) -> int:
    """Bytes that follow the 16-byte fixed part (raises :class:`ProxyHeaderError`)."""
    if len(first16) != 16 or not first16.startswith(SIGNATURE):
        raise ProxyHeaderError("no PROXY protocol v2 header from a trusted proxy")
    if first16[12] >> 4 != 2 or first16[12] & 0x0F not in (0, 1):
        raise ProxyHeaderError("PROXY header: unsupported version or command")
    length = struct.unpack("!H", first16[14:16])[0]
    if length > 36 + MAX_TLVS:
        raise ProxyHeaderError(f"PROXY header longer than {36 + MAX_TLVS} bytes")
    return int(length)


def announced_address(first16: bytes, rest: bytes) -> tuple[str, int] | None:
    """The source (address, port) of a v2 header; None for LOCAL or an unspecified family."""
    if first16[12] & 0x0F == 0:  # LOCAL: the proxy speaks for itself
        return None
    family = first16[13]
    if family in (0x11, 0x12):  # TCP or UDP over IPv4
        if len(rest) < 12:
            raise ProxyHeaderError("PROXY header: IPv4 addresses cut short")
        port = struct.unpack("!H", rest[8:10])[0]
        return str(ipaddress.IPv4Address(rest[0:4])), int(port)
    if family in (0x21, 0x22):
        if len(rest) < 36:
            raise ProxyHeaderError("PROXY header: IPv6 addresses cut short")
        port = struct.unpack("!H", rest[32:34])[0]
        return str(ipaddress.IPv6Address(rest[0:16])), int(port)
    if family == 0x00:
        return None
    raise ProxyHeaderError("PROXY header: unsupported address family")


async def _recv_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:  # bounded: every pass reads at least one byte or raises
        chunk = await loop.sock_recv(sock, n - len(data))
        if not chunk:
            raise ProxyHeaderError("connection closed inside the PROXY header")
        data += chunk
    return data


async def read_header(loop: asyncio.AbstractEventLoop, sock: socket.socket
                      ) -> tuple[str, int] | None:
    """Read exactly one v2 header from ``sock``; the announced source or None (LOCAL)."""
    first = await _recv_exactly(loop, sock, 16)
    rest = await _recv_exactly(loop, sock, header_length(first))
    return announced_address(first, rest)


async def read_header_stream(reader: asyncio.StreamReader) -> tuple[str, int] | None:
    """The same from a stream (the bounce relay)."""
    try:
        first = await reader.readexactly(16)
        rest = await reader.readexactly(header_length(first))
    except asyncio.IncompleteReadError:
        raise ProxyHeaderError("connection closed inside the PROXY header") from None
    return announced_address(first, rest)


async def starts_with_header(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bool:
    """Whether the first bytes (peeked, not consumed) are a PROXY v1 or v2 signature."""
    while True:  # bounded by the caller's timeout
        try:
            data = sock.recv(12, socket.MSG_PEEK)
        except BlockingIOError:
            data = None
        if data is not None:
            if data == b"":
                return False
            if data.startswith((SIGNATURE, V1_SIGNATURE)):
                return True
            if not (SIGNATURE.startswith(data) or V1_SIGNATURE.startswith(data)):
                return False
        await asyncio.sleep(0.005)  # nothing, or a signature's prefix so far: wait for more


def listen_sockets(host: str, port: int, reuse_port: bool, backlog: int) -> list[socket.socket]:
    """Listening, non-blocking sockets for ``host:port`` (every address it resolves to)."""
    out: list[socket.socket] = []
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    seen = set()
    try:
        for family, kind, proto, _, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            sock = socket.socket(family, kind, proto)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError:
        for sock in out:
            sock.close()
        raise
    return out


class _Listening:
    """What :class:`ProxySite` keeps as its ``_server`` (sockets, ``close``)."""

    def __init__(self, sockets: list[socket.socket], tasks: set[asyncio.Task[None]]) -> None:
        self.sockets = sockets
        self._tasks = tasks

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for sock in self.sockets:
            sock.close()


class ProxySite(web.BaseSite):
    """An aiohttp site that reads PROXY v2 headers from trusted peers (see module rules)."""

    __slots__ = ("_host", "_port", "_trusted", "_reuse_port", "_handshake_timeout",
                 "_tasks", "_on_refused")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *,
                 trusted: Sequence[Network], ssl_context: ssl.SSLContext | None,
                 reuse_port: bool, handshake_timeout: float, backlog: int = 2048,
                 on_refused: Callable[[], None] | None = None) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host, self._port = host, port
        self._trusted = list(trusted)
        self._reuse_port = reuse_port
        self._handshake_timeout = handshake_timeout
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_refused = on_refused

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port} (PROXY protocol)"

    async def start(self) -> None:
        await super().start()
        sockets = listen_sockets(self._host, self._port, self._reuse_port, self._backlog)
        self._server = _Listening(sockets, self._tasks)  # type: ignore[assignment]
        for sock in sockets:
            self._spawn(self._accept_loop(sock))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(self, lsock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(lsock)
            except OSError as exc:  # out of descriptors and the like: back off, go on
                log.warning("accept failed: %s", exc.strerror or exc)
                await asyncio.sleep(0.1)
                continue
            if len(self._tasks) > MAX_PENDING:
                conn.close()
                self._refused()
                continue
            conn.setblocking(False)
            self._spawn(self._admit(conn, str(addr[0])))

    def _refused(self) -> None:
        if self._on_refused is not None:
            self._on_refused()

    async def _admit(self, conn: socket.socket, peer: str) -> None:
        loop = asyncio.get_running_loop()
        announced: tuple[str, int] | None = None
        try:
            async with asyncio.timeout(self._handshake_timeout):
                if is_trusted(peer, self._trusted):
                    announced = await read_header(loop, conn)
                elif await starts_with_header(loop, conn):
                    raise ProxyHeaderError(f"PROXY header from {peer}, not a trusted proxy")
        except (ProxyHeaderError, OSError):
            conn.close()
            self._refused()
            return
        server = self._runner.server
        assert server is not None

        def factory() -> asyncio.Protocol:
            handler = server()
            if announced is not None:
                # aiohttp reads the peer from this cache (request.remote, the access log)
                handler._cache["peername"] = announced
            return handler

        try:
            await loop.connect_accepted_socket(
                factory, conn, ssl=self._ssl_context,
                ssl_handshake_timeout=self._handshake_timeout if self._ssl_context else None,
            )
        except (OSError, ssl.SSLError):  # a failed or slow TLS handshake
            with contextlib.suppress(OSError):
                conn.close()


__all__ = ["ProxyHeaderError", "ProxySite", "announced_address", "header_length",
           "is_trusted", "parse_trusted", "read_header", "read_header_stream"]
