"""A trivial HTTP server standing in for a notary in replayer benchmarks.

Answers every request at once with a small 200 and a ``Cache-Status`` hit.
Usage: python trivial_server.py PORT [--raw]

Default: an aiohttp application. ``--raw``: a bare asyncio protocol (HTTP/1.1 keep-alive,
requests with ``Content-Length`` bodies), several times cheaper per request, so that on a
small machine the server is not what limits the measured rate.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from aiohttp import web

BODY = b'{"fingerprintList": [], "signature": "bench"}'
RAW_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Cache-Status: converge-notary; hit\r\nContent-Length: %d\r\n\r\n"
                % len(BODY)) + BODY
MAX_BUFFER = 1 << 20


async def target(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=BODY, content_type="application/json",
                        headers={"Cache-Status": "converge-notary; hit"})


class RawHTTP(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > MAX_BUFFER:
            self.transport.close()
            return
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in bytes(self.buf[:end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip() or b"0")
            if len(self.buf) < end + 4 + length:
                return
            del self.buf[:end + 4 + length]
            self.transport.write(RAW_RESPONSE)


async def raw_main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(RawHTTP, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    port = int(sys.argv[1])
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    if "--raw" in sys.argv[2:]:
        asyncio.run(raw_main(port))
        return
    app = web.Application()
    app.router.add_route("*", "/target/{t}", target)
    app.router.add_get("/", lambda r: web.json_response({"ok": True}))
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, backlog=4096)


if __name__ == "__main__":
    main()
