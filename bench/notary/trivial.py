"""The baseline: a trivial aiohttp+uvloop app answering ``POST /target/...`` with a fixed body.

It does what any aiohttp handler must do (parse the request, read the body, send a response
with the same size and headers as a cached notary answer) and nothing else, so the ratio
notary/trivial is the share of the framework's rate the notary keeps.

    python -m bench.notary.trivial --listen 127.0.0.1:8080 --body-size 300 [--cert C --key K]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys
from collections.abc import Sequence

from aiohttp import web

CACHE_STATUS = "converge-notary; hit"


def make_app(body_size: int) -> web.Application:
    body = (b'{"fingerprintList": [], "signature": "' + b"A" * body_size)[:body_size]

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            body=body, content_type="application/json", headers={"Cache-Status": CACHE_STATUS}
        )

    async def info(request: web.Request) -> web.Response:
        return web.Response(text="trivial\n")

    app = web.Application(client_max_size=4096)
    app.router.add_route("*", "/target/{spec:.*}", answer)
    app.router.add_get("/", info)
    return app


async def serve(host: str, port: int, body_size: int, ssl_ctx: ssl.SSLContext | None) -> None:
    runner = web.AppRunner(make_app(body_size), handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_ctx, backlog=2048)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """The same TLS settings as the notary's listener."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.notary.trivial")
    p.add_argument("--listen", required=True, metavar="HOST:PORT")
    p.add_argument("--body-size", type=int, required=True)
    p.add_argument("--cert")
    p.add_argument("--key")
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if not 1 <= args.body_size <= 65536:
        p.error("--body-size must be between 1 and 65536")
    ctx = server_context(args.cert, args.key) if args.cert and args.key else None
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # as the notary does
    asyncio.run(serve(host, int(port), args.body_size, ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
