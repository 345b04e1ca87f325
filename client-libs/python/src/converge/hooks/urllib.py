"""``http.client`` and ``urllib.request`` checked by converge: :class:`ConvergeHTTPSConnection`
(the origin is the connection's host:port, or its ``set_tunnel`` target through a proxy),
:func:`https_handler` for ``build_opener`` and :func:`urlopen`."""

from __future__ import annotations

import functools
import http.client
import ssl
import urllib.request
from typing import Any

from ..client import Client, ConfigArg
from .context import ConvergeSSLContext, checked_context, converge_ssl_context, origin


class ConvergeHTTPSConnection(http.client.HTTPSConnection):
    """``http.client.HTTPSConnection`` checked by converge for the origin ``host:port``,
    also through a proxy (``set_tunnel``)."""

    def __init__(
        self,
        host: str,
        port: int | None = None,
        *,
        config: ConfigArg | Client = None,
        context: ssl.SSLContext | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(host, port, context=checked_context(config, context), **kw)

    def connect(self) -> None:
        tunnel_host: str | None = getattr(self, "_tunnel_host", None)
        if tunnel_host:
            where = (tunnel_host, int(getattr(self, "_tunnel_port", None) or 443))
        else:
            where = (self.host, int(self.port))
        with origin(*where):
            super().connect()


class ConvergeHTTPSHandler(urllib.request.HTTPSHandler):
    """A urllib HTTPS handler whose connections are :class:`ConvergeHTTPSConnection`."""

    def __init__(self, context: ConvergeSSLContext, debuglevel: int = 0) -> None:
        super().__init__(debuglevel=debuglevel, context=context)
        self._converge_context = context

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(
            functools.partial(ConvergeHTTPSConnection, context=self._converge_context), req
        )


def https_handler(config: ConfigArg | Client = None) -> ConvergeHTTPSHandler:
    """For ``urllib.request.build_opener(...)``: HTTPS checked by converge."""
    return ConvergeHTTPSHandler(converge_ssl_context(config))


def urlopen(
    url: str | urllib.request.Request,
    data: bytes | None = None,
    *,
    config: ConfigArg | Client = None,
    timeout: float = 30.0,
) -> Any:
    """``urllib.request.urlopen`` with converge instead of CA validation (proxies from the
    environment as urllib honours them)."""
    return urllib.request.build_opener(https_handler(config)).open(url, data, timeout)


__all__ = ["ConvergeHTTPSConnection", "ConvergeHTTPSHandler", "https_handler", "urlopen"]
