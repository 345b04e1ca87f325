"""``urllib3`` checked by converge: pool and proxy managers whose HTTPS connection pools use a
connection class that announces the origin (also inside a proxy's CONNECT tunnel). urllib3 is
imported only when one of these is called."""

from __future__ import annotations

import functools
import ssl
from typing import Any

from ..client import Client, ConfigArg
from .context import ConvergeSSLContext, converge_ssl_context, origin


@functools.cache
def _urllib3_classes() -> tuple[type, type]:
    import urllib3.connection
    import urllib3.connectionpool

    class ConvergeUrllib3Connection(urllib3.connection.HTTPSConnection):
        """urllib3 connection whose certificate check is converge's (in the handshake), for
        the origin host:port also inside a proxy tunnel."""

        def __init__(self, *args: Any, **kw: Any) -> None:
            ctx = kw.get("ssl_context")
            if not isinstance(ctx, ConvergeSSLContext):
                raise TypeError("ConvergeUrllib3Connection needs a converge_ssl_context()")
            # urllib3 sets the context's verify_mode from cert_reqs: keep converge's own
            kw["cert_reqs"] = ctx.verify_mode
            if ctx.verify_mode == ssl.CERT_NONE:
                kw["assert_hostname"] = False
                kw["ca_certs"] = None
                kw["ca_cert_dir"] = None
            super().__init__(*args, **kw)

        def connect(self) -> None:
            if self._tunnel_host is not None and self._tunnel_port is not None:
                where = (self._tunnel_host, int(self._tunnel_port))
            else:
                where = (self.host, int(self.port))
            with origin(*where):
                super().connect()
            # A negative verdict raised NotTrusted inside the handshake; reaching here means
            # converge trusted the peer.
            self.is_verified = True

    class ConvergeHTTPSConnectionPool(urllib3.connectionpool.HTTPSConnectionPool):
        ConnectionCls = ConvergeUrllib3Connection

    return ConvergeUrllib3Connection, ConvergeHTTPSConnectionPool


def converge_pools(manager: Any) -> Any:
    import urllib3

    _, pool_cls = _urllib3_classes()
    manager.pool_classes_by_scheme = {"http": urllib3.HTTPConnectionPool, "https": pool_cls}
    return manager


def urllib3_pool_manager(config: ConfigArg | Client = None, **kw: Any) -> Any:
    """A ``urllib3.PoolManager`` whose HTTPS connections are checked by converge."""
    import urllib3

    return converge_pools(urllib3.PoolManager(ssl_context=converge_ssl_context(config), **kw))


def urllib3_proxy_manager(proxy_url: str, config: ConfigArg | Client = None, **kw: Any) -> Any:
    """A ``urllib3.ProxyManager``: HTTPS through the proxy's CONNECT tunnel, the origin's
    certificate checked by converge."""
    import urllib3

    return converge_pools(
        urllib3.ProxyManager(proxy_url, ssl_context=converge_ssl_context(config), **kw)
    )


__all__ = ["urllib3_pool_manager", "urllib3_proxy_manager"]
