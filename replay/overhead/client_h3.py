"""The HTTP/3 page load: aioquic (a maintained QUIC and HTTP/3 stack on asyncio) over the
UDP path emulator (udppath.py), one QUIC connection per host with every request of the host
multiplexed on its streams, as a browser does over HTTP/3. The page's redirect hops come
first (each a new connection to its host), then the HTML, then every object, the hosts'
connections opened at once.

QUIC's handshake is transport and TLS 1.3 together: one round trip before the first
request, where TCP spends one on its own handshake and TLS 1.3 over it one more. With a
session ticket kept from an earlier load (per host, as a returning visitor's browser keeps
them) the requests go out in 0-RTT early data with the first flight, which aioquic supports
on both sides (its server accepts early data for tickets it issued; a ticket is used once).
Nothing is added at connect: the UDP emulator carries the handshake's datagrams.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from replay.errors import ReplayIOError
from replay.overhead.pages import MAX_REDIRECTS, Page, embedded

TIMEOUT = 30.0


def available() -> bool:
    try:
        import aioquic  # noqa: F401
    except ImportError:
        return False
    return True


Tickets = dict[str, Any]  # host -> aioquic's SessionTicket


def _protocol_class() -> Any:
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.events import ConnectionTerminated, QuicEvent

    class H3Client(QuicConnectionProtocol):
        """GET requests on an HTTP/3 connection, each on a stream of its own."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.h3 = H3Connection(self._quic)
            self.waiting: dict[int, asyncio.Future[tuple[int, dict[bytes, bytes], bytes]]] = {}
            self.headers: dict[int, dict[bytes, bytes]] = {}
            self.bodies: dict[int, bytearray] = defaultdict(bytearray)

        def quic_event_received(self, event: QuicEvent) -> None:
            if isinstance(event, ConnectionTerminated):
                for fut in self.waiting.values():
                    if not fut.done():
                        fut.set_exception(ReplayIOError(
                            f"HTTP/3 connection closed: {event.reason_phrase or event.error_code}"))
                self.waiting.clear()
            for e in self.h3.handle_event(event):
                if isinstance(e, HeadersReceived):
                    self.headers[e.stream_id] = dict(e.headers)
                elif isinstance(e, DataReceived):
                    self.bodies[e.stream_id] += e.data
                else:
                    continue
                if e.stream_ended:
                    w = self.waiting.pop(e.stream_id, None)
                    if w is not None and not w.done():
                        h = self.headers.pop(e.stream_id, {})
                        w.set_result((int(h.get(b":status", b"0")), h,
                                        bytes(self.bodies.pop(e.stream_id, b""))))

        async def get(self, host: str, path: str) -> tuple[int, dict[bytes, bytes], bytes]:
            sid = self._quic.get_next_available_stream_id()
            self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                       (b":authority", host.encode()),
                                       (b":path", path.encode()),
                                       (b"user-agent", b"converge-replay")], end_stream=True)
            fut: asyncio.Future[tuple[int, dict[bytes, bytes], bytes]] = \
                asyncio.get_running_loop().create_future()
            self.waiting[sid] = fut
            self.transmit()
            return await asyncio.wait_for(fut, TIMEOUT)

    return H3Client


async def _load(page: Page, ports: dict[str, int], cafile: str, tickets: Tickets | None,
                opened: Callable[[bool], None]) -> float:
    from aioquic.h3.connection import H3_ALPN
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection

    proto = _protocol_class()
    loop = asyncio.get_running_loop()
    conns: list[Any] = []
    t0 = time.perf_counter()
    try:
        async def conn(host: str) -> Any:
            """A new QUIC connection to ``host`` through its path; with a ticket, returned at
            once (the first requests go out as 0-RTT data with the Initial), else once the
            handshake is done."""
            cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=host)
            cfg.load_verify_locations(cafile)
            early = False
            handler = None
            if tickets is not None:
                ticket = tickets.pop(host, None)  # a ticket is good for one connection
                if ticket is not None:
                    cfg.session_ticket = ticket
                    early = ticket.max_early_data_size is not None

                def handler(t: Any, host: str = host) -> None:
                    tickets[host] = t
            quic = QuicConnection(configuration=cfg, session_ticket_handler=handler)
            _, c = await loop.create_datagram_endpoint(
                lambda: proto(quic), remote_addr=("127.0.0.1", ports[host]))
            conns.append(c)
            c.connect(("127.0.0.1", ports[host]), transmit=not early)
            if not early:
                await c.wait_connected()
            opened(early)
            return c

        async def hosts_objects(host: str, paths: list[str], c: Any) -> None:
            if c is None:
                c = await conn(host)
            for status, _, _ in await asyncio.gather(*(c.get(host, p) for p in paths)):
                if status != 200:
                    raise ReplayIOError(f"GET https://{host} over HTTP/3: HTTP {status}")

        host = page.first_host
        for _ in range(MAX_REDIRECTS):
            if host == page.host:
                break
            status, headers, _ = await (await conn(host)).get(host, "/")
            location = headers.get(b"location", b"").decode()
            nxt = urllib.parse.urlsplit(location)
            if status not in (301, 302, 303, 307, 308) or not nxt.hostname:
                raise ReplayIOError(f"GET https://{host}/ over HTTP/3: HTTP {status}, "
                                    f"Location {location!r}: not a redirect in the page")
            host = nxt.hostname
        if host != page.host:
            raise ReplayIOError(f"more than {MAX_REDIRECTS} redirects")
        main = await conn(page.host)
        status, _, doc = await main.get(page.host, "/")
        if status != 200:
            raise ReplayIOError(f"GET https://{page.host}/ over HTTP/3: HTTP {status}")
        by_host: dict[str, list[str]] = defaultdict(list)
        for h, p in embedded(doc):
            by_host[h].append(p)
        await asyncio.gather(*(hosts_objects(h, ps, main if h == page.host else None)
                               for h, ps in by_host.items()))
        elapsed = time.perf_counter() - t0
    finally:
        for c in conns:  # CONNECTION_CLOSE to the server; the closing period is not waited
            c.close()
            if c._transport is not None:
                c._transport.close()
    return elapsed


def load_h3(page: Page, ports: dict[str, int], cafile: str, tickets: Tickets | None,
            opened: Callable[[bool], None]) -> float:
    """Seconds from the page's request to the last byte of its last object over HTTP/3.
    ``ports``: host -> the UDP port of its emulated path; ``tickets``: a session ticket
    cache across loads (None: every connection a first visit, no ticket kept);
    ``opened(early)``: called per connection, ``early`` when it sent 0-RTT data."""
    from aioquic.h3.exceptions import H3Error
    from aioquic.quic.connection import QuicConnectionError

    try:
        return asyncio.run(asyncio.wait_for(_load(page, ports, cafile, tickets, opened),
                                            TIMEOUT * 2))
    except (OSError, TimeoutError, ConnectionError, H3Error, QuicConnectionError) as exc:
        raise ReplayIOError(f"page load over HTTP/3 failed: {exc or type(exc).__name__}") \
            from exc
