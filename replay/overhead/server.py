"""The page server: aiohttp (a maintained server, already the notary's) serving one
synthetic page and its objects over http and https (TLS 1.2 and 1.3, session tickets on:
OpenSSL's defaults) on two loopback ports. Run as
``python -m replay.overhead.server --page P --cert C --key K --http-port A --https-port B``.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
from pathlib import Path

from aiohttp import web

from replay.overhead.pages import html, load, object_size

CHUNK = b"\0" * 65536


def app(page_file: Path) -> web.Application:
    page = load(page_file)
    doc = html(page)

    async def index(request: web.Request) -> web.Response:
        return web.Response(body=doc, content_type="text/html")

    async def obj(request: web.Request) -> web.Response:
        size = object_size(request.match_info["name"])
        body = (CHUNK * (size // len(CHUNK) + 1))[:size]
        return web.Response(body=body, content_type="application/octet-stream")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("/")

    a = web.Application()
    a.router.add_get("/", index)
    a.router.add_get("/redirect", redirect)
    a.router.add_get("/obj/{name}", obj)
    return a


async def serve(args: argparse.Namespace) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(args.cert, args.key)
    runner = web.AppRunner(app(args.page), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.http_port).start()
    await web.TCPSite(runner, "127.0.0.1", args.https_port, ssl_context=ctx).start()
    await asyncio.sleep(args.seconds)
    await runner.cleanup()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m replay.overhead.server")
    p.add_argument("--page", type=Path, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--https-port", type=int, required=True)
    p.add_argument("--seconds", type=float, default=1800.0)
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
