"""A trivial HTTP server standing in for a notary in replayer benchmarks.

Answers every ``/target/...`` request at once with a small 200 and a ``Cache-Status`` hit.
Usage: python trivial_server.py PORT
"""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web

BODY = b'{"fingerprintList": [], "signature": "bench"}'


async def target(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=BODY, content_type="application/json",
                        headers={"Cache-Status": "converge-notary; hit"})


def main() -> None:
    app = web.Application()
    app.router.add_route("*", "/target/{t}", target)
    app.router.add_get("/", lambda r: web.json_response({"ok": True}))
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None,
                backlog=4096)


if __name__ == "__main__":
    main()
