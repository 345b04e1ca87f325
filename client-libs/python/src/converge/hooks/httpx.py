"""``httpx`` checked by converge: clients whose transports (direct and proxy) announce each
request's origin. httpx is imported only when one of these is called."""

from __future__ import annotations

import functools
from typing import Any

from ..client import Client, ConfigArg
from .context import converge_ssl_context, origin, url_origin


@functools.cache
def _httpx_classes() -> tuple[type, type]:
    import httpx

    class _OriginTransport(httpx.BaseTransport):
        def __init__(self, inner: httpx.BaseTransport) -> None:
            self._inner = inner

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            u = request.url
            if u.scheme != "https":
                return self._inner.handle_request(request)
            with origin(*url_origin("https", u.host, u.port)):
                return self._inner.handle_request(request)

        def close(self) -> None:
            self._inner.close()

    class _AsyncOriginTransport(httpx.AsyncBaseTransport):
        def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
            self._inner = inner

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            u = request.url
            if u.scheme != "https":
                return await self._inner.handle_async_request(request)
            with origin(*url_origin("https", u.host, u.port)):
                return await self._inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self._inner.aclose()

    class ConvergeHTTPXClient(httpx.Client):
        def _init_transport(self, *a: Any, **kw: Any) -> httpx.BaseTransport:
            return _OriginTransport(super()._init_transport(*a, **kw))

        def _init_proxy_transport(self, *a: Any, **kw: Any) -> httpx.BaseTransport:
            return _OriginTransport(super()._init_proxy_transport(*a, **kw))

    class ConvergeHTTPXAsyncClient(httpx.AsyncClient):
        def _init_transport(self, *a: Any, **kw: Any) -> httpx.AsyncBaseTransport:
            return _AsyncOriginTransport(super()._init_transport(*a, **kw))

        def _init_proxy_transport(self, *a: Any, **kw: Any) -> httpx.AsyncBaseTransport:
            return _AsyncOriginTransport(super()._init_proxy_transport(*a, **kw))

    return ConvergeHTTPXClient, ConvergeHTTPXAsyncClient


def httpx_client(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """An ``httpx.Client`` whose HTTPS connections (direct or through ``proxy=`` /
    environment proxies) are checked by converge for each request's host:port."""
    cls, _ = _httpx_classes()
    return cls(verify=converge_ssl_context(config), **kw)


def httpx_async_client(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """The ``httpx.AsyncClient`` of :func:`httpx_client`."""
    _, cls = _httpx_classes()
    return cls(verify=converge_ssl_context(config), **kw)


__all__ = ["httpx_async_client", "httpx_client"]
