"""The log's read-only HTTP resources (c2sp.org/tlog-tiles) under ``/log/``.

``/log/checkpoint`` (text/plain, the latest signed checkpoint with its witnesses'
cosignatures, cacheable for a second) and ``/log/tile/<L>/<N>[.p/<W>]``,
``/log/tile/entries/<N>[.p/<W>]`` (octet-stream, immutable). A resource beyond the current
tree, a malformed path, or a notary run with ``--no-log`` is 404.
"""

from __future__ import annotations

from aiohttp import web

from .service import TransparencyLog
from .tiles import TileError, parse_path

TLOG = web.AppKey("transparency_log", TransparencyLog)
PREFIX = "/log"


async def handle_checkpoint(request: web.Request) -> web.Response:
    tlog = request.app.get(TLOG)
    note = await tlog.checkpoint() if tlog is not None else None
    if note is None:
        raise web.HTTPNotFound(text="this notary keeps no transparency log\n")
    return web.Response(body=note, content_type="text/plain", charset="utf-8",
                        headers={"Cache-Control": "public, max-age=1"})


async def handle_tile(request: web.Request) -> web.Response:
    tlog = request.app.get(TLOG)
    if tlog is None:
        raise web.HTTPNotFound(text="this notary keeps no transparency log\n")
    try:
        tp = parse_path("tile/" + request.match_info["path"])
    except TileError as exc:
        raise web.HTTPNotFound(text=f"{exc}\n") from exc
    data = await tlog.read(tp)
    if data is None:
        raise web.HTTPNotFound(text="no such tile in this log (yet)\n")
    resp = web.Response(body=data, content_type="application/octet-stream",
                        headers={"Cache-Control": "public, max-age=31536000, immutable"})
    resp.enable_compression()
    return resp


def add_routes(app: web.Application) -> None:
    app.router.add_get(PREFIX + "/checkpoint", handle_checkpoint)
    app.router.add_get(PREFIX + "/tile/{path:.+}", handle_tile)


__all__ = ["PREFIX", "TLOG", "add_routes"]
