"""The page server: aiohttp (a maintained server, already the notary's) serving one
synthetic page and its objects over http and https (TLS 1.2 and 1.3, session tickets on:
OpenSSL's defaults) on two loopback ports, and with ``--h2-port`` hypercorn serving it over
HTTP/2 (TLS, ALPN h2) on a third. ``/`` on one of the page's redirect hosts (by the Host
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

from replay.overhead.pages import html, load, object_size

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
        size = object_size(request.match_info["name"])
        body = (CHUNK * (size // len(CHUNK) + 1))[:size]
        return web.Response(body=body, content_type="application/octet-stream")

    a = web.Application()
    a.router.add_get("/", index)
    a.router.add_get("/obj/{name}", obj)
    return a


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
        path = scope["path"]
        status, ctype, body = 404, b"text/plain", b"not found"
        extra: list[tuple[bytes, bytes]] = []
        host = dict(scope["headers"]).get(b"host", b"").decode().rsplit(":", 1)[0]
        to = page.redirect_target(host)
        if path == "/" and to is not None:
            status, ctype, body = 301, b"text/plain", b"moved"
            extra = [(b"location", f"{scope['scheme']}://{to}/".encode())]
        elif path == "/":
            status, ctype, body = 200, b"text/html", doc
        elif path.startswith("/obj/"):
            size = object_size(path[5:])
            status, ctype = 200, b"application/octet-stream"
            body = (CHUNK * (size // len(CHUNK) + 1))[:size]
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
    await asyncio.sleep(args.seconds)
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
    p.add_argument("--seconds", type=float, default=1800.0)
    p.add_argument("--tls13-tickets", type=int, default=2,
                   help="TLS 1.3 session tickets sent after each full handshake (default: "
                   "OpenSSL's %(default)s)")
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
