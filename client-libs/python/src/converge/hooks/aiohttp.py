"""``aiohttp`` checked by converge: a connector that announces each request's origin (direct or
through an HTTP proxy). aiohttp is imported only when it is called."""

from __future__ import annotations

from typing import Any

from ..client import Client, ConfigArg
from .context import converge_ssl_context, origin, url_origin


def aiohttp_connector(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """An ``aiohttp.TCPConnector`` whose HTTPS connections (direct or through an HTTP proxy)
    are checked by converge for each request's host:port."""
    import aiohttp

    class ConvergeConnector(aiohttp.TCPConnector):
        async def connect(self, req: Any, *args: Any, **kwargs: Any) -> Any:
            if not req.is_ssl():
                return await super().connect(req, *args, **kwargs)
            with origin(*url_origin("https", req.url.host, req.url.port)):
                return await super().connect(req, *args, **kwargs)

    return ConvergeConnector(ssl=converge_ssl_context(config), **kw)


__all__ = ["aiohttp_connector"]
