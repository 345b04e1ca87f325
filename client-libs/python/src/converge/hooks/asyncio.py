"""asyncio streams checked by converge: :func:`open_connection` announces ``host:port``."""

from __future__ import annotations

import asyncio
from typing import Any

from ..client import Client, ConfigArg
from .context import converge_ssl_context, origin


async def open_connection(
    host: str, port: int, *, config: ConfigArg | Client = None, **kw: Any
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """``asyncio.open_connection`` over TLS checked by converge for ``host:port``."""
    kw.setdefault("server_hostname", host)
    with origin(host, port):
        return await asyncio.open_connection(host, port, ssl=converge_ssl_context(config), **kw)


__all__ = ["open_connection"]
