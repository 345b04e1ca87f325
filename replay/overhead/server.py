"""The page server: aiohttp (a maintained server, already the notary's) serving one
synthetic page and its objects over http and https (TLS 1.2 and 1.3, session tickets on:
OpenSSL's defaults) on two loopback ports, and with ``--h2-port`` hypercorn serving it over
HTTP/2 (TLS, ALPN h2) on a third, and with ``--h3-port`` aioquic serving it over HTTP/3
(QUIC) on a UDP port. ``/`` on one of the page's redirect hosts (by the Host
header or ``:authority``) is answered 301 to the next host, in the request's scheme. Run as
``python -m replay.overhead.server --page P --cert C --key K --http-port A --https-port B``.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web

from replay.errors import ReplayInputError
from replay.overhead.pages import Page, html, load, object_size

CHUNK = b"\0" * 65536


def app(page_file: Path) -> web.Application:
    page = load(page_file)
    doc = html(page)

    async def index(request: web.Request) -> web.Response:
        to = page.redirect_target(request.host.rsplit(":", 1)[0])
        if to is not None:  # a redirect hop (page.test -> www.page.test), in the same scheme
            raise web.HTTPMovedPermanently(f"{request.scheme}://{to}/")
        return web.Response(body=doc, content_type="text/html")

    async def obj(request: web.Request) -> web.Response:
        return web.Response(body=_body(object_size(request.match_info["name"])),
                            content_type="application/octet-stream")

    a = web.Application()
    a.router.add_get("/", index)
    a.router.add_get("/obj/{name}", obj)
    return a


def _body(size: int) -> bytes:
    return (CHUNK * (size // len(CHUNK) + 1))[:size]


def respond(page: Page, doc: bytes, host: str, path: str,
            scheme: str) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]:
    """(status, content type, body, more headers) of a GET of ``path`` on ``host`` (its
    ``:port`` ignored): a redirect hop's 301, the HTML, an object or 404."""
    to = page.redirect_target(host.rsplit(":", 1)[0])
    if path == "/" and to is not None:
        return 301, b"text/plain", b"moved", [(b"location", f"{scheme}://{to}/".encode())]
    if path == "/":
        return 200, b"text/html", doc, []
    if path.startswith("/obj/"):
        try:
            size = object_size(path[5:])
        except ReplayInputError:
            return 404, b"text/plain", b"not found", []
        return 200, b"application/octet-stream", _body(size), []
    return 404, b"text/plain", b"not found", []


def asgi(page_file: Path) -> Any:
    """The same page as an ASGI application, for hypercorn's HTTP/2 (h2 over TLS, ALPN)."""
    page = load(page_file)
    doc = html(page)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        host = dict(scope["headers"]).get(b"host", b"").decode()
        status, ctype, body, extra = respond(page, doc, host, scope["path"], scope["scheme"])
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", ctype),
                                (b"content-length", str(len(body)).encode()), *extra]})
        await send({"type": "http.response.body", "body": body})

    return app


async def _h2(args: argparse.Namespace, stop: asyncio.Event) -> None:
    from hypercorn.asyncio import serve as hserve
    from hypercorn.config import Config

    cfg = Config()
    cfg.bind = [f"127.0.0.1:{args.h2_port}"]
    cfg.certfile, cfg.keyfile = args.cert, args.key
    cfg.alpn_protocols = ["h2"]
    cfg.accesslog = None
    await hserve(asgi(args.page), cfg, shutdown_trigger=stop.wait)


def _h3_protocol(page: Page, doc: bytes) -> Any:
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import HeadersReceived
    from aioquic.quic.events import ProtocolNegotiated, QuicEvent

    class H3Server(QuicConnectionProtocol):
        """The page over HTTP/3: each request answered when its headers arrive."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.h3: H3Connection | None = None

        def quic_event_received(self, event: QuicEvent) -> None:
            if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
                self.h3 = H3Connection(self._quic)
            if self.h3 is None:
                return
            for e in self.h3.handle_event(event):
                if isinstance(e, HeadersReceived):
                    h = dict(e.headers)
                    status, ctype, body, extra = respond(
                        page, doc, h.get(b":authority", b"").decode(),
                        h.get(b":path", b"/").decode(), "https")
                    self.h3.send_headers(e.stream_id, [
                        (b":status", str(status).encode()), (b"content-type", ctype),
                        (b"content-length", str(len(body)).encode()), *extra])
                    self.h3.send_data(e.stream_id, body, end_stream=True)
            self.transmit()

    return H3Server


async def _h3(args: argparse.Namespace) -> Any:
    """aioquic's HTTP/3 server on UDP ``--h3-port``, session tickets kept for resumption
    and 0-RTT (each ticket taken once: early data is not replayable)."""
    from aioquic.asyncio.server import serve as qserve
    from aioquic.h3.connection import H3_ALPN
    from aioquic.quic.configuration import QuicConfiguration

    cfg = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN)
    cfg.load_cert_chain(args.cert, args.key)
    tickets: dict[bytes, Any] = {}

    def keep(t: Any) -> None:
        if len(tickets) >= 10_000:  # bounded: the oldest goes
            tickets.pop(next(iter(tickets)))
        tickets[t.ticket] = t

    page = load(args.page)
    return await qserve("127.0.0.1", args.h3_port, configuration=cfg,
                        create_protocol=_h3_protocol(page, html(page)),
                        session_ticket_fetcher=lambda k: tickets.pop(k, None),
                        session_ticket_handler=keep)


async def serve(args: argparse.Namespace) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(args.cert, args.key)
    ctx.num_tickets = args.tls13_tickets
    runner = web.AppRunner(app(args.page), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.http_port).start()
    await web.TCPSite(runner, "127.0.0.1", args.https_port, ssl_context=ctx).start()
    stop = asyncio.Event()
    h2 = asyncio.create_task(_h2(args, stop)) if args.h2_port else None
    h3 = await _h3(args) if args.h3_port else None
    await asyncio.sleep(args.seconds)
    if h3 is not None:
        h3.close()
    stop.set()
    if h2 is not None:
        await h2
    await runner.cleanup()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m replay.overhead.server")
    p.add_argument("--page", type=Path, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--https-port", type=int, required=True)
    p.add_argument("--h2-port", type=int, default=0,
                   help="also serve HTTP/2 over TLS with hypercorn on this port")
    p.add_argument("--h3-port", type=int, default=0,
                   help="also serve HTTP/3 (QUIC, aioquic) on this UDP port")
    p.add_argument("--seconds", type=float, default=1800.0)
    p.add_argument("--tls13-tickets", type=int, default=2,
                   help="TLS 1.3 session tickets sent after each full handshake (default: "
                   "OpenSSL's %(default)s)")
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
